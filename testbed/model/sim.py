"""An event simulation of the loader's readers over one path: each reader opens a
sample's file (one round trip per meta_rtts), reads it in read() calls of read_bytes
through the kernel's read-ahead (readahead.py), and waits page by page; every READ is
split at rsize and its reply crosses the path's rate in first-come-first-served order
after half a round trip. Returns the steady read rate (bytes/s) of all readers together.

Checked against the lab kernel (user-mode Linux 7.2; captures of one reader of 8 MiB files
at 3,000 km, READ by READ, 2026-12-03): read-ahead 128 KiB to 16 MiB x read() sizes of 128
KiB and 1 MiB, file time in round trips: seven settings within 5 %, one (16 MiB, 128 KiB
reads) 10 % fast. The one change from mm/readahead.c as written for order-0 pages: the
async window's io_pages allowance is sized by the whole read() request, not by what is
left of it at the marker (with the latter the default mount's 1 MiB reads came out 20 %
slow: the kernel issues two 1 MiB READs at the first marker, not one 512 KiB READ).

What it leaves out, on purpose: TCP slow start (the measured window starts after it),
loss (bounds.loss covers it), server time (the training set is in the server's memory)
and CPU time (the emulator's headroom is judged from measurements instead).
"""

from __future__ import annotations

import bisect
import functools
import heapq
import itertools
import math
from dataclasses import dataclass, field
from typing import Protocol

from testbed.model.readahead import ReadAhead

PAGE = 4096
FILES, WARM = 12, 3  # samples each reader reads; the rate is taken past the first WARM
# What estimating one point may cost (work() before running it): its steps take 1-3 us
# of CPU each and its pages ~10 ns (2026-12-05, a loaded 2-core host), so at most about
# a second. The MLPerf unet3d preset takes 14,560 steps and 1.9 million pages.
MAX_STEPS = 200_000
MAX_PAGES = 50_000_000


@dataclass
class _Link:
    """The path's reply direction: one-way delay and a FIFO at the path's rate."""

    owd: float
    rate: float
    free: float = 0.0

    def reply(self, sent: float, nbytes: int) -> float:
        """When the last byte of a reply to a request sent at `sent` arrives."""
        start = max(sent + self.owd, self.free)
        self.free = start + nbytes / self.rate
        return self.free + self.owd

    def replies(self, sent: float, pages: int, chunk: int) -> list[float]:
        """reply() for each of `pages` pages requested at once in READs of `chunk` pages
        (the last one shorter), page by page: the same additions in the same order,
        done by itertools (a window of 4 KiB READs is a million calls otherwise). After
        the first, each READ waits for the one before it: its start is the link's free."""
        if pages <= chunk:  # one READ: the usual window
            return [self.reply(sent, pages * PAGE)] * pages
        full, rest = divmod(pages, chunk)
        steps = [chunk * PAGE / self.rate] * full + ([rest * PAGE / self.rate] if rest else [])
        frees = list(itertools.accumulate(steps, initial=max(sent + self.owd, self.free)))
        self.free = frees[-1]
        arrivals = [f + self.owd for f in frees[1:]]
        if chunk == 1:
            return arrivals
        pages_of = [chunk] * full + [rest]
        return list(itertools.chain.from_iterable(map(itertools.repeat, arrivals, pages_of)))


class Link(Protocol):
    """The reply direction as the readers see it: when the last byte of a reply of
    nbytes to a request sent at `sent` arrives (reply), and each page's of `pages`
    requested at once in READs of `chunk` pages (replies). _Link is one FIFO at the
    path's rate; read_back.Connections adds nconnect connections' congestion windows."""

    def reply(self, sent: float, nbytes: int) -> float:
        """When the last byte of the reply to a request sent at `sent` arrives."""
        ...

    def replies(self, sent: float, pages: int, chunk: int) -> list[float]:
        """Each page's arrival, of `pages` requested at once in READs of `chunk` pages."""
        ...


@dataclass
class _Reader:
    pages: int
    read_pages: int
    ra: ReadAhead
    t: float = 0.0
    pos: int = 0
    read_start: int = 0
    read_end: int = 0
    marker: int = -1
    ready: list[float] = field(default_factory=list)
    done: list[float] = field(default_factory=list)
    requested: int = 0      # pages [0, requested) are requested, the rest not ...
    prefix: bool = True     # ... while this holds (then `ready` is non-decreasing)


# Round trips before a file's first READ, by NFS version: NFSv4's OPEN compound looks the
# name up, checks access and opens at once (CLOSE goes asynchronously); NFSv3 sends LOOKUP,
# then ACCESS. 16 KiB files read whole at 3,000 km took 2.0 round trips each over v4.2
# and 3.2 over v3 (user-mode Linux 7.2.7, 2026-12-06; tests/system/test_model.py).
OPEN_RTTS = {"3": 2, "4.1": 1, "4.2": 1}


def open_rtts(vers: str) -> int:
    """Round trips an NFS client of version `vers` spends opening a file (OPEN_RTTS)."""
    return OPEN_RTTS.get(vers, 1)


@dataclass(frozen=True)
class Reading:
    """How the loader reads: readers in parallel, samples of sample_bytes (whole files or
    records) read in read_bytes requests; NFS rsize and the mount's read-ahead; round
    trips per file besides its data (open_rtts: NFSv4 1, NFSv3 2)."""

    readers: int
    sample_bytes: int
    read_bytes: int
    rsize: int
    ra_bytes: int
    meta_rtts: int = 1


@dataclass(frozen=True)
class Setting:
    """What the simulation needs: the path (round trip, rate) and how the loader reads."""

    rtt_s: float
    rate_Bps: float
    reading: Reading


class Simulation:
    """Readers sharing one link (see the module docstring)."""

    def __init__(self, s: Setting, fast: bool = True, link: Link | None = None) -> None:
        self.s, self.r, self.fast = s, s.reading, fast
        self.link: Link = link if link is not None else _Link(s.rtt_s / 2, s.rate_Bps)
        pages = max(1, math.ceil(self.r.sample_bytes / PAGE))
        self.readers = [_Reader(pages, max(1, self.r.read_bytes // PAGE), self._ra())
                        for _ in range(self.r.readers)]
        for r in self.readers:
            self._open(r)

    def _ra(self) -> ReadAhead:
        return ReadAhead(ra_pages=self.r.ra_bytes // PAGE, io_pages=max(1, self.r.rsize // PAGE))

    def _open(self, r: _Reader) -> None:
        r.t += self.r.meta_rtts * self.s.rtt_s
        r.pos = r.read_end = 0
        r.marker = -1
        r.ready = [math.inf] * r.pages
        r.ra = self._ra()
        r.requested, r.prefix = 0, self.fast

    def _issue(self, r: _Reader, window: tuple[int, int, int] | None) -> None:
        """Request the window's pages not yet requested, in READs of at most rsize."""
        if window is None or window[0] >= r.pages:  # nothing, or all past the end of file
            return
        start, size, mark = window
        end = min(start + size, r.pages)
        if r.prefix and start <= r.requested:  # read-ahead's usual case: O(1) per READ
            new_mark = 0 <= mark < r.pages and r.requested <= mark < end
            if end > r.requested:
                r.ready[r.requested:end] = self.link.replies(
                    r.t, end - r.requested, max(1, self.r.rsize // PAGE))
            r.requested = max(r.requested, end)
            if new_mark:
                r.marker = mark
            return
        r.prefix = False  # a gap: the page-by-page way from now on (for this file)
        self._issue_pages(r, start, end, mark)

    def _issue_pages(self, r: _Reader, start: int, end: int, mark: int) -> None:
        """_issue page by page: any pattern of requested pages."""
        todo = [p for p in range(start, end) if r.ready[p] == math.inf]
        chunk = max(1, self.r.rsize // PAGE)
        i = 0
        while i < len(todo):
            run = [todo[i]]
            while i + len(run) < len(todo) and len(run) < chunk and \
                    todo[i + len(run)] == run[-1] + 1:
                run.append(todo[i + len(run)])
            arrival = self.link.reply(r.t, len(run) * PAGE)
            for p in run:
                r.ready[p] = arrival
            i += len(run)
        if 0 <= mark < r.pages and mark in todo:
            r.marker = mark

    def _advance(self, r: _Reader) -> None:
        """Move a reader on until it must wait for a page (or opens the next file)."""
        while r.pos < r.pages:
            if r.pos == r.read_end:
                r.read_start, r.read_end = r.pos, min(r.pages, r.pos + r.read_pages)
            if r.ready[r.pos] == math.inf:
                self._issue(r, r.ra.ondemand(r.pos, r.read_end - r.pos, hit_marker=False))
            if r.pos == r.marker:
                r.marker = -1
                self._issue(r, r.ra.ondemand(r.pos, r.read_end - r.read_start,
                                             hit_marker=True))
            if r.prefix and r.pos < r.requested:
                end = min(self._stop(r), r.requested)  # pages to take as they come
                need, r.pos = r.ready[end - 1], end
            else:
                need = r.ready[r.pos]
                if need <= r.t:
                    r.pos = self._next_stop(r)
            if r.pos == r.read_end:
                r.ra.prev = r.pos - 1
            if need > r.t:
                r.t = need
                return
        r.done.append(r.t)
        self._open(r)

    @staticmethod
    def _stop(r: _Reader) -> int:
        """The next page where the reader acts: the end of the read() call or the
        read-ahead marker."""
        return r.read_end if not r.pos < r.marker < r.read_end else r.marker

    def _next_stop(self, r: _Reader) -> int:
        """The next page where something happens: the end of the read() call, the
        read-ahead marker, or the first page not there yet (pages between are taken
        as they are; `ready` is non-decreasing while requests stay a prefix)."""
        if not r.prefix:
            return r.pos + 1
        stop = self._stop(r)
        return bisect.bisect_right(r.ready, r.t, r.pos + 1, stop) if stop > r.pos + 1 \
            else stop

    def read_one(self, start_s: float) -> float:
        """The first reader opens its file at start_s and reads it through alone; the
        time its last page arrived (read_back.py times a rank's files this way)."""
        r = self.readers[0]
        r.t += start_s
        while not r.done:
            self._advance(r)
        return r.done[0]

    def run(self, files: int = FILES, warm: int = WARM) -> float:
        """Simulate until every reader has read `files` samples; the read rate (bytes/s)
        between the last reader's `warm`-th and the first reader's last completion."""
        heap = [(r.t, i) for i, r in enumerate(self.readers)]
        while heap:
            _, i = heapq.heappop(heap)
            r = self.readers[i]
            self._advance(r)
            if len(r.done) < files:
                heapq.heappush(heap, (r.t, i))
        t_a = max(r.done[warm - 1] for r in self.readers)
        t_b = min(r.done[-1] for r in self.readers)
        n = sum(1 for r in self.readers for t in r.done if t_a < t <= t_b)
        if t_b <= t_a or n == 0:
            total = sum(len(r.done) for r in self.readers)
            return total * self.r.sample_bytes / max(r.done[-1] for r in self.readers)
        return n * self.r.sample_bytes / (t_b - t_a)


def work(r: Reading) -> tuple[int, int]:
    """What simulating `r` costs, known before running it: its steps (every reader's
    read() calls and read-ahead windows, at their largest, over its samples and the one
    it opens last) and the pages it tracks. Compare with MAX_STEPS and MAX_PAGES."""
    pages = max(1, math.ceil(r.sample_bytes / PAGE))
    read_pages = max(1, r.read_bytes // PAGE)
    window = ReadAhead(r.ra_bytes // PAGE, max(1, r.rsize // PAGE)).largest(read_pages)
    per_sample = math.ceil(pages / read_pages) + (math.ceil(pages / window) if window else 0)
    samples = r.readers * (FILES + 1)
    return samples * per_sample, samples * pages


@functools.lru_cache(maxsize=4096)
def read_rate_Bps(s: Setting, fast: bool = True) -> float:
    """The steady read rate of the loader's readers over the path (bytes/s); fast=False
    steps page by page (the reference the fast way is tested against). Remembered per
    setting: a search (advise) meets the same setting more than once."""
    if s.rtt_s <= 0 and not math.isfinite(s.rate_Bps):
        return math.inf
    return Simulation(s, fast).run()
