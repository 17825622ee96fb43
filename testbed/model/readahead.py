"""Linux's on-demand read-ahead for one open file, page by page (mm/readahead.c,
order-0 pages): the sizes of the initial and following windows, the async marker page
whose reading triggers the next window, and the bdi's io_pages allowance (NFS sets it to
rsize) that lets a large read ask for more than read_ahead_kb. Pure state machine: it
says which pages to request when; sim.py adds the time."""

from __future__ import annotations

from dataclasses import dataclass


def init_size(req: int, max_pages: int) -> int:
    """get_init_ra_size(): the first window for a request of req pages."""
    new = 1 << max(0, (req - 1).bit_length())
    if new <= max_pages // 32:
        return new * 4
    if new <= max_pages // 4:
        return new * 2
    return max_pages


def next_size(cur: int, max_pages: int) -> int:
    """get_next_ra_size(): the window after one of cur pages."""
    if cur < max_pages // 16:
        return 4 * cur
    if cur <= max_pages // 2:
        return 2 * cur
    return max_pages


@dataclass
class ReadAhead:
    """file_ra_state of one open file: the current window [start, start + size) and its
    async tail; ra_pages is the bdi's read_ahead_kb in pages, io_pages its io_pages."""

    ra_pages: int
    io_pages: int
    start: int = 0
    size: int = 0
    async_size: int = 0
    prev: int = -1

    def largest(self, req: int) -> int:
        """The largest window for a read() of req pages: read_ahead_kb, or up to io_pages
        for a read() larger than it."""
        if req > self.ra_pages and self.io_pages > self.ra_pages:
            return min(req, self.io_pages)
        return self.ra_pages

    def _initial(self, index: int, req: int, max_pages: int) -> None:
        self.start = index
        self.size = init_size(req, max_pages)
        self.async_size = self.size - req if self.size > req else self.size

    def _readit(self, index: int, max_pages: int) -> tuple[int, int, int]:
        """Merge the next window when the read hits its own marker; -> (first page,
        pages, marker page)."""
        if index == self.start and self.size == self.async_size:
            add = next_size(self.size, max_pages)
            if self.size + add <= max_pages:
                self.async_size, self.size = add, self.size + add
            else:
                self.size, self.async_size = max_pages, max_pages >> 1
        return self.start, self.size, self.start + self.size - self.async_size

    def ondemand(self, index: int, req: int, hit_marker: bool) -> tuple[int, int, int] | None:
        """ondemand_readahead(): the window to read for a miss (or a marker hit) at
        `index` with req pages of the read() left; None for no read-ahead."""
        if not self.ra_pages:
            return None
        max_pages = self.largest(req)
        if index == 0:
            self._initial(index, req, max_pages)
        elif index in (self.start + self.size - self.async_size, self.start + self.size):
            self.start += self.size
            self.size = next_size(self.size, max_pages)
            self.async_size = self.size
        elif hit_marker or req > max_pages or index - self.prev <= 1:
            self._initial(index, req, max_pages)
        else:
            return index, req, -1  # a small random read: just what was asked
        return self._readit(index, max_pages)
