"""Regenerate (or check) the generated blocks of README.md and docs/*.md.

Why: a results table in the documentation is only as good as the folder it came from. A
block such as

    <!-- generated: testbed report docs/results/demo --markdown -->
    ...
    <!-- end generated -->

holds exactly what that command prints, so `testbed docs` rewrites every block from its
results folder and `testbed docs --check` fails when a block no longer matches (a table
edited by hand, or a results folder replaced without regenerating). Two commands are
allowed in a marker: `testbed report DIR --markdown [--by-event]`, with DIR relative to the
checkout, and `testbed docs --tests`, the suite's test counts as pytest collects them
(testbed.suite). Returns what changed; never prints.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from testbed import atomic, suite
from testbed.errors import SpecError
from testbed.experiment.report import markdown
from testbed.paths import REPO

BLOCK = re.compile(r"(?P<open><!-- generated: (?P<command>[^\n]*?) -->\n)"
                   r"(?P<body>.*?)(?P<close><!-- end generated -->)", re.S)


@dataclass(frozen=True)
class Block:
    """One generated block: the file it is in, its command, and whether it was stale."""

    file: Path
    command: str
    stale: bool


def pages(root: Path = REPO) -> list[Path]:
    """The pages that may hold generated blocks: README.md and docs/*.md."""
    return [p for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))]
            if p.is_file()]


TESTS_COMMAND = ["testbed", "docs", "--tests"]


def run_marker(command: str, root: Path) -> str:
    """What a marker's command prints: `testbed report DIR --markdown` (DIR under root)
    or `testbed docs --tests`."""
    words = shlex.split(command)
    if words == TESTS_COMMAND:
        return suite.render(root)
    if len(words) not in (4, 5) or words[:2] != ["testbed", "report"] or \
            words[3] != "--markdown" or words[4:] not in ([], ["--by-event"]):
        raise SpecError(f"docs: marker command {command!r}: only "
                        "`testbed report DIR --markdown [--by-event]` or `testbed docs "
                        "--tests` can generate a block")
    return markdown.render(root / words[2], command, by_event=words[4:] == ["--by-event"])


def regenerate(text: str, path: Path, root: Path) -> tuple[str, list[Block]]:
    """A page's text with every block rewritten, and each block's staleness."""
    blocks: list[Block] = []

    def fill(m: re.Match[str]) -> str:
        body = run_marker(m["command"], root)
        blocks.append(Block(path, m["command"], body != m["body"]))
        return m["open"] + body + m["close"]

    return BLOCK.sub(fill, text), blocks


def update(root: Path = REPO, check: bool = False) -> list[Block]:
    """Regenerate every block of every page (write the pages unless check); the blocks,
    with the ones that were stale marked."""
    found: list[Block] = []
    for page in pages(root):
        text = page.read_text()
        new, blocks = regenerate(text, page.relative_to(root), root)
        found += blocks
        if new != text and not check:
            atomic.write_text(page, new)
    return found
