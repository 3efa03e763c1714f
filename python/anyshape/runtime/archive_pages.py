"""A module's parameter archive mapped in full when it loads, with the load's
progress shown for a big one.

A CPU module reads its weights where the archive is mapped. Left to fault in
page by page, the first call paid for them (docs/benchmarks.md, "sixth
session"); mapped at load, it does not. From the page cache that takes a
fraction of a second; from a cold disk, as long as reading the archive.

A big archive is mapped on huge pages (2 MiB on x86-64, the size the
kernel gives) where the host allows it (``mapped_archive``): a decode step
reads every weight once, and the products read them faster so
(docs/benchmarks.md, "eleventh session"). The page cache holds a file in
huge pieces only where it read them so: an archive written or copied since
it was last read is held in small ones, and is read again from the disk,
its first 64 MiB (at least two huge pages) first: a file system without
large folios reads them into small ones again, and the rest is left as it
is.
"""

from __future__ import annotations

import errno
import mmap
import os
from pathlib import Path
from typing import Callable

import numpy as np

from anyshape.stages import on_terminal, progress_printer

_MADV_POPULATE_READ = 22  # Linux 5.14; not in Python 3.11's mmap module
# Mapped in runs of this many bytes, each reported (a multiple of any page size).
RUN_BYTES = 256 << 20
# Without a ``progress`` given, a bar is shown on a terminal for an archive of
# at least this many bytes.
BIG_ARCHIVE_BYTES = 1 << 30
# An archive of at least this many bytes is asked onto huge pages.
HUGE_PAGES_FROM_BYTES = 1 << 30
# The huge page's size where the kernel does not say (x86-64's, and arm64's
# with 4 KiB pages; arm64 with 16 or 64 KiB pages has 32 or 512 MiB ones).
DEFAULT_HUGE_PAGE_BYTES = 2 << 20
# What a load reads again first, to see whether the file system holds a file
# in huge pages at all.
PROBE_BYTES = 64 << 20
_TRANSPARENT_HUGE_PAGES = Path("/sys/kernel/mm/transparent_hugepage/enabled")
_HUGE_PAGE_SIZE = Path("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size")


def check_progress(progress) -> None:
    """Refuse a ``progress`` that ``anyshape.load`` does not take, naming it."""
    if progress is not None:
        progress_printer(progress)


def mapped_archive(path: Path, advanced: Callable[[int], None] | None = None) -> mmap.mmap:
    """``path`` mapped read-only with every page of it mapped
    (``map_every_page``, which calls ``advanced``), on huge pages where it
    is big (``HUGE_PAGES_FROM_BYTES``) and the host has them
    (``_onto_huge_pages``)."""
    with open(path, "rb") as file:
        pages = mmap.mmap(file.fileno(), 0, prot=mmap.PROT_READ)
        try:
            if len(pages) >= HUGE_PAGES_FROM_BYTES and _huge_pages_allowed(pages):
                _onto_huge_pages(pages, file.fileno())
            map_every_page(pages, advanced)
        except BaseException:  # an interrupted load keeps no mapping open
            pages.close()
            raise
        return pages


def _onto_huge_pages(pages: mmap.mmap, descriptor: int) -> None:
    """Map the first ``PROBE_BYTES`` of ``pages``; where the page cache holds
    them in small pieces, drop them and read them again, and where they
    then come back on huge pages, drop the rest of the file too, for
    ``map_every_page`` to read again (a file system without large folios
    reads them into small ones again: the rest is left). Best effort: a
    file that cannot be written out or dropped (a read-only image's, a
    locked mapping) stays as it is."""
    # At least two huge pages, for one to be mapped whole wherever it starts.
    probe = min(max(PROBE_BYTES, 2 * huge_page_bytes()), len(pages))
    _populate(pages, 0, probe)
    if huge_mapped_bytes(pages) >= probe // 2:
        return  # held in huge pieces already
    try:
        # Only pages written to the disk leave the page cache (a fresh
        # archive's are dirty); the kernel's writeback would write them soon.
        os.fdatasync(descriptor)
        pages.madvise(mmap.MADV_DONTNEED, 0, probe)  # the mapping lets go of them
        os.posix_fadvise(descriptor, 0, probe, os.POSIX_FADV_DONTNEED)
        _populate(pages, 0, probe)
        if huge_mapped_bytes(pages) >= probe // 2:
            os.posix_fadvise(descriptor, probe, 0, os.POSIX_FADV_DONTNEED)  # 0: to its end
    except OSError:
        pass


def _huge_pages_allowed(pages: mmap.mmap) -> bool:
    """Ask for ``pages`` on huge pages (``MADV_HUGEPAGE``); whether they may
    be: the host's transparent huge pages not ``never``, its kernel taking
    the advice, and the mapping's start on a huge page's boundary (the
    file's offset 0 there; else no huge piece lines up with one)."""
    try:
        if "[never]" in _TRANSPARENT_HUGE_PAGES.read_text():
            return False
        pages.madvise(mmap.MADV_HUGEPAGE)
    except (OSError, AttributeError):  # no such file; EINVAL: a kernel without them
        return False
    return _address(pages) % huge_page_bytes() == 0


def huge_page_bytes() -> int:
    """The host's transparent huge page size, as its kernel gives it
    (``hpage_pmd_size``), else ``DEFAULT_HUGE_PAGE_BYTES``."""
    try:
        size = int(_HUGE_PAGE_SIZE.read_text())
    except (OSError, ValueError):
        return DEFAULT_HUGE_PAGE_BYTES
    return size if size > 0 and size % mmap.PAGESIZE == 0 else DEFAULT_HUGE_PAGE_BYTES


def huge_mapped_bytes(pages: mmap.mmap) -> int:
    """The bytes of the file mapping ``pages`` mapped by huge pages
    (/proc/self/smaps: ``FilePmdMapped``, ``ShmemPmdMapped`` on tmpfs); 0
    where unknown."""
    start, found, total = f"{_address(pages):08x}-", False, 0
    try:
        with open("/proc/self/smaps") as smaps:
            for line in smaps:
                fields = line.split()
                if not fields:
                    continue
                if not found:
                    found = line.startswith(start)
                elif "-" in fields[0]:  # the next mapping's header
                    break
                elif fields[0] in ("FilePmdMapped:", "ShmemPmdMapped:"):
                    total += int(fields[1]) * 1024
    except (OSError, ValueError, IndexError):
        return 0
    return total


def _address(pages: mmap.mmap) -> int:
    """Where ``pages`` is mapped (a read-only mapping: ctypes takes only
    writable buffers)."""
    view = np.frombuffer(pages, np.uint8)
    try:
        return view.ctypes.data
    finally:
        del view  # the mapping can close only once no view of it is left


def map_every_page(pages: mmap.mmap, advanced: Callable[[int], None] | None = None) -> None:
    """Read in and map every page of ``pages`` now (``MADV_POPULATE_READ``;
    ``MADV_WILLNEED`` on kernels before 5.14), and read a byte of each,
    calling ``advanced(bytes mapped so far)`` after each run of
    ``RUN_BYTES``."""
    total = len(pages)
    try:
        for start in range(0, total, RUN_BYTES):
            length = min(RUN_BYTES, total - start)
            _populate(pages, start, length)
            if advanced is not None:
                advanced(start + length)
    finally:  # a bar's line closed, however the mapping ended
        close = getattr(advanced, "close", None)
        if close is not None:
            close()


def _populate(pages: mmap.mmap, start: int, length: int) -> None:
    try:
        pages.madvise(_MADV_POPULATE_READ, start, length)
    except OSError as error:
        if error.errno != errno.EINVAL:  # EIO, EFAULT: the file could not be read
            raise
        pages.madvise(mmap.MADV_WILLNEED, start, length)  # a kernel without it
    # A byte of each page read: in a virtual machine, the first read of a
    # page the disk has just filled costs the host a fault of its own,
    # which the first call would pay (docs/benchmarks.md, eleventh session).
    view = np.frombuffer(pages, np.uint8, count=length, offset=start)
    try:
        view[::mmap.PAGESIZE].max()
    finally:
        del view


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
