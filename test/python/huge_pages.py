"""What this host does with a file's pages, for the tests of a parameter
archive's mapping (runtime/archive_pages.py)."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

_MADV_POPULATE_READ = 22


def mapping_fields(path: Path) -> dict[str, str]:
    """This process's first mapping of ``path`` as /proc/self/smaps lists it
    (field -> value, ``Rss``, ``FilePmdMapped``, ``VmFlags``...); {} where
    it has none."""
    name, mine, fields = str(Path(path).resolve()), False, {}
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            parts = line.split()
            if not parts:
                continue
            if "-" in parts[0]:
                if mine:
                    break
                mine = line.rstrip("\n").endswith(" " + name)
            elif mine:
                fields[parts[0].rstrip(":")] = " ".join(parts[1:])
    return fields


def huge_mapped_bytes(path: Path) -> int:
    """The bytes of this process's first mapping of ``path`` mapped by 2 MiB pages."""
    return int(mapping_fields(path).get("FilePmdMapped", "0 kB").split()[0]) * 1024


def written_in_small_pieces(path: Path, size: int) -> bytes:
    """``size`` random bytes written to ``path`` 64 KiB at a time, which the
    page cache then holds in pieces of at most that; the bytes."""
    import numpy as np

    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    with open(path, "wb", buffering=0) as file:
        for start in range(0, size, 64 << 10):
            file.write(data[start:start + (64 << 10)])
    return data


def host_maps_files_on_huge_pages(directory: Path) -> bool:
    """Whether a file of ``directory``'s file system, read anew under
    MADV_HUGEPAGE, is mapped by 2 MiB pages here (a kernel and a file
    system with large folios, transparent huge pages not ``never``)."""
    probe = directory / "huge-pages-probe"
    probe.write_bytes(bytes(8 << 20))
    try:
        with open(probe, "rb") as file:
            os.fdatasync(file.fileno())
            os.posix_fadvise(file.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            pages = mmap.mmap(file.fileno(), 0, prot=mmap.PROT_READ)
        try:
            pages.madvise(mmap.MADV_HUGEPAGE)
            pages.madvise(_MADV_POPULATE_READ)
            return huge_mapped_bytes(probe) > 0
        except (OSError, AttributeError):
            return False
        finally:
            pages.close()
    finally:
        probe.unlink()
