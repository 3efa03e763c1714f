"""A module's parameter archive mapped in full when it loads, with the load's
progress shown for a big one.

A CPU module reads its weights where the archive is mapped. Left to fault in
page by page, the first call paid for them (docs/benchmarks.md, "sixth
session"); mapped at load, it does not. From the page cache that takes a
fraction of a second; from a cold disk, as long as reading the archive.
"""

from __future__ import annotations

import mmap
from pathlib import Path
from typing import Callable

from anyshape.stages import on_terminal, progress_printer

_MADV_POPULATE_READ = 22  # Linux 5.14; not in Python 3.11's mmap module
# Mapped in runs of this many bytes, each reported (a multiple of any page size).
RUN_BYTES = 256 << 20
# Without a ``progress`` given, a bar is shown on a terminal for an archive of
# at least this many bytes.
BIG_ARCHIVE_BYTES = 1 << 30


def check_progress(progress) -> None:
    """Refuse a ``progress`` that ``anyshape.load`` does not take, naming it."""
    if progress is not None:
        progress_printer(progress)


def map_every_page(pages: mmap.mmap, advanced: Callable[[int], None] | None = None) -> None:
    """Read in and map every page of ``pages`` now (``MADV_POPULATE_READ``;
    ``MADV_WILLNEED``, a read-ahead only, on kernels before 5.14), calling
    ``advanced(bytes mapped so far)`` after each run of ``RUN_BYTES``."""
    total = len(pages)
    option = _MADV_POPULATE_READ
    try:
        for start in range(0, total, RUN_BYTES):
            length = min(RUN_BYTES, total - start)
            try:
                pages.madvise(option, start, length)
            except OSError:  # EINVAL: a kernel without it
                option = mmap.MADV_WILLNEED
                pages.madvise(option, start, length)
            if advanced is not None:
                advanced(start + length)
    finally:  # a bar's line closed, however the mapping ended
        close = getattr(advanced, "close", None)
        if close is not None:
            close()


def mapping_progress(progress, archive: Path, total: int) -> Callable[[int], None] | None:
    """What ``map_every_page`` calls to show the mapping of ``archive``
    (``total`` bytes) as ``progress`` asks: None (the default) a bar on a
    terminal for a big archive, else nothing; otherwise as
    ``anyshape.compile`` takes it (True, False, "bars", "lines", or a
    function of a message). None where nothing is shown."""
    if progress is None:
        if total < BIG_ARCHIVE_BYTES or not on_terminal():
            return None
        progress = "bars"
    if progress is False:
        return None
    if progress is True:
        progress = "bars" if on_terminal() else "lines"
    if progress == "bars":
        return _Bar(archive, total)
    report = progress_printer(progress, prefix="anyshape.load")
    quarter = [0]

    def tell(mapped: int) -> None:
        # A line at each quarter of the archive, and one when it is all mapped.
        reached = 4 * mapped // total if total else 4
        if reached > quarter[0] or mapped >= total:
            quarter[0] = reached
            report(f"mapping {archive.name}: {mapped / 1e9:.2f} of {total / 1e9:.2f} GB")

    return tell


class _Bar:
    """A tqdm bar of the bytes mapped; ``close`` ends its line."""

    def __init__(self, archive: Path, total: int):
        from tqdm import tqdm

        self._bar = tqdm(total=total, unit="B", unit_scale=True,
                         desc=f"mapping {archive.name}", leave=True)
        self._done = 0

    def __call__(self, mapped: int) -> None:
        self._bar.update(mapped - self._done)
        self._done = mapped

    def close(self) -> None:
        self._bar.close()
