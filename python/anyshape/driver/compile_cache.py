"""The compile cache: one saved artifact per exported program and options.

``anyshape.compile`` looks here after ``torch.export`` and before import: a hit
is an artifact loaded from disk instead of import, passes and IREE (the
minutes of a compile). The key is a SHA-256 of everything the artifact
depends on:

- the exported program: its graph as torch prints it, its signature and dim
  ranges, and every weight's name, dtype, shape and bytes;
- every compile option (target and its CPU with the features it resolves to,
  passes, data tiling, parameters, padding) and the signature with its dims'
  labels;
- the versions of torch, torch-mlir and IREE, and anyshape's own source (a
  change to a pass must not be served an artifact the old pass made).

Entries are immutable. One is written into a temporary directory beside the
entries and renamed into place, so a reader sees all of it or none. A process
compiling an entry holds a lock on it (``filling``): another process that
needs the same entry meanwhile (pytest-xdist's workers, replicas of a server
starting at once) waits, then reads it, instead of compiling it too. The lock
is the OS's (``flock``), released when its holder exits, however it exits.
Where it cannot be taken, two processes filling the same entry at once both
end with a whole one (the second rename loses, its copy is dropped). Each entry lists its files'
SHA-256s; an entry that does not match them, or does not load, is removed and
compiled again, never run.

Where: ``ANYSHAPE_CACHE_DIR``, else ``$XDG_CACHE_HOME/anyshape``, else
``~/.cache/anyshape``. ``anyshape.compile(..., cache=False)`` neither reads
nor writes it.

Its size is bounded: ``ANYSHAPE_CACHE_SIZE`` ("20G", the default; "500M",
a count of bytes; "0" keeps nothing). Once a new entry takes the cache past
the bound, the entries used least recently (a hit or a store is a use, kept
as the mtime of the entry's record) are removed until it is within it. An
artifact larger than the bound is not kept, with a warning.
``anyshape-compile --cache-info`` lists what it holds (``held``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable

from anyshape.options import CACHE_ENV, cache_root  # noqa: F401  (CACHE_ENV: read here by callers)
from anyshape.stages import file_digest

LAYOUT = "v1"  # the entries' layout; bump it when what an entry holds changes
RECORD = "cache-entry.json"
SIZE_ENV = "ANYSHAPE_CACHE_SIZE"
DEFAULT_SIZE = "20G"
_UNITS = {"": 1, "K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30, "T": 2 ** 40}
# A staging directory older than this was left by a writer that died.
_STALE_SECONDS = 24 * 3600


LOCKS = "locks"  # beside LAYOUT: one empty file per key being or once compiled


def size_bound() -> int:
    """The cache's bound in bytes, from ``ANYSHAPE_CACHE_SIZE`` (or the
    default); a ValueError naming the variable where it is not a size."""
    text = os.environ.get(SIZE_ENV, "").strip() or DEFAULT_SIZE
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?", text, flags=re.IGNORECASE)
    if match is None:
        raise ValueError(f"{SIZE_ENV}: expected a size such as 20G, 500M or a count of bytes "
                         f"(0 keeps nothing), got {text!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


@dataclasses.dataclass(frozen=True)
class HeldEntry:
    """One entry of the cache: its key, directory, bytes, and when it was
    last used and written (seconds since the epoch)."""
    key: str
    path: Path
    bytes: int
    last_used: float
    written: float


def held(root: Path | None = None) -> list[HeldEntry]:
    """The cache's entries, the most recently used first."""
    root = cache_root() if root is None else root
    found = []
    for path in (root / LAYOUT).glob("*/*"):
        if not path.is_dir() or path.name.startswith("."):
            continue
        try:
            record = path / RECORD
            last_used = record.stat().st_mtime
            written = float(json.loads(record.read_text()).get("written", last_used))
            size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
        except (OSError, ValueError):
            continue  # being written, moved or discarded by another process
        found.append(HeldEntry(path.name, path, size, last_used, written))
    return sorted(found, key=lambda entry: (-entry.last_used, entry.key))


def trim(bound: int, keep: Path | None = None, root: Path | None = None) -> list[HeldEntry]:
    """Remove the entries used least recently until the cache holds at most
    ``bound`` bytes (never ``keep``), and staging directories their writers
    left a day ago or more; returns the entries removed."""
    root = cache_root() if root is None else root
    now = time.time()
    for leftover in (root / LAYOUT).glob("*/.*"):
        try:
            if leftover.is_dir() and now - leftover.stat().st_mtime > _STALE_SECONDS:
                shutil.rmtree(leftover, ignore_errors=True)
        except OSError:
            continue
    _stale_locks(root, now)
    entries = held(root)
    total = sum(entry.bytes for entry in entries)
    removed = []
    for entry in reversed(entries):
        if total <= bound:
            break
        if keep is not None and entry.path == keep:
            continue
        _discard(entry.path)
        total -= entry.bytes
        removed.append(entry)
    return removed


# The files whose bytes decide what a compile emits: the kernels' C sources
# and headers too, since a module links the kernels' code into itself.
SOURCE_SUFFIXES = (".py", ".json", ".mlir", ".pdll", ".c", ".h")


@functools.lru_cache(maxsize=1)
def source_digest() -> str:
    """SHA-256 of anyshape's own files (the package, its passes and dialects)."""
    import anyshape
    import anyshape.dialects
    import anyshape.passes

    digest = hashlib.sha256()
    roots = sorted({Path(m.__file__).resolve().parent
                    for m in (anyshape, anyshape.passes, anyshape.dialects)})
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_file() and path.suffix in SOURCE_SUFFIXES \
                    and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(root)).encode() + b"\0")
                digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def program_digest(program) -> str:
    """SHA-256 of an ExportedProgram: graph, input shapes, signature, dim
    ranges, weights."""
    import torch

    digest = hashlib.sha256()
    digest.update(str(program.graph).encode())
    # The graph's text has no shapes: programs derived from one graph at
    # other sizes (frontend/derived_programs.py) differ only in these.
    digest.update(repr([(node.name, tuple(map(str, node.meta["val"].shape)))
                        for node in program.graph.nodes if node.op == "placeholder"
                        and isinstance(node.meta.get("val"), torch.Tensor)]).encode())
    digest.update(str(program.graph_signature).encode())
    digest.update(repr(sorted((str(k), str(v)) for k, v in program.range_constraints.items()))
                  .encode())
    state = {**program.state_dict, **program.constants}
    for name in sorted(state):
        value = state[name]
        digest.update(name.encode() + b"\0")
        if not isinstance(value, torch.Tensor):
            digest.update(repr(value).encode())
            continue
        tensor = value.detach().cpu().contiguous()
        digest.update(f"{tensor.dtype}{tuple(tensor.shape)}".encode())
        if tensor.numel():
            digest.update(tensor.reshape(-1).view(torch.uint8).numpy().data)
    return digest.hexdigest()


def cache_key(program, options: dict[str, Any]) -> str:
    """The entry name for ``program`` compiled with ``options`` (JSON-able)."""
    from anyshape.mlir import versions

    material = {"layout": LAYOUT, "program": program_digest(program), "options": options,
                "versions": versions(), "anyshape": source_digest()}
    return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()


def _entry(root: Path, key: str) -> Path:
    return root / LAYOUT / key[:2] / key


def lookup(key: str, *, threads: int | None):
    """(module, warnings it was compiled with) from the entry for ``key``, or None.
    An entry that is incomplete, altered or does not load is removed."""
    from anyshape.runtime.compiled_module import load

    entry = _entry(cache_root(), key)
    if not entry.is_dir():
        return None
    try:
        record = json.loads((entry / RECORD).read_text())
        files = record["files"]
        if not files or any(file_digest(entry / name) != digest for name, digest in files.items()):
            raise ValueError("its files are not the ones it was written with")
        module = load(entry, threads=threads, progress=False)  # silent, as a compile's own is
        _mark_used(entry)
        return module, list(record.get("warnings", []))
    except Exception:  # noqa: BLE001 - any damage: compiled again, never run
        _discard(entry)
        return None


def store(key: str, module, warnings_text: list[str]) -> Path | None:
    """Save ``module`` as the entry for ``key``; returns the entry, or None when
    the cache directory cannot be written (the compile itself stands)."""
    root = cache_root()
    bound = size_bound()
    entry = _entry(root, key)
    if entry.is_dir():
        _mark_used(entry)
        return entry
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{key[:16]}-", dir=entry.parent))
    except OSError:
        return None
    try:
        module.save(staging)
        files = {path.name: file_digest(path) for path in sorted(staging.iterdir())}
        record = {"files": files, "warnings": warnings_text, "written": time.time()}
        (staging / RECORD).write_text(json.dumps(record, indent=1) + "\n")
        os.rename(staging, entry)  # atomic; fails when another process got there first
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        return entry if entry.is_dir() else None
    size = sum(path.stat().st_size for path in entry.iterdir())
    if size > bound:
        _discard(entry)
        warnings.warn(f"compile cache: the artifact ({size / 2 ** 20:.1f} MiB) is larger than "
                      f"the cache's bound ({bound / 2 ** 20:.1f} MiB, {SIZE_ENV}); not kept",
                      stacklevel=3)
        return None
    trim(bound, keep=entry, root=root)
    return entry


@contextlib.contextmanager
def filling(key: str, report: Callable[[str], None]):
    """Held while this process looks up, compiles and stores the entry for
    ``key``: a second process asking for the same key waits here until the
    first is done (``report`` says so), then finds the entry. No lock where
    the cache cannot be written or the platform has no ``flock``."""
    try:
        import fcntl

        locks = cache_root() / LOCKS
        locks.mkdir(parents=True, exist_ok=True)
        handle = open(locks / f"{key}.lock", "a")  # noqa: SIM115  (held across the yield)
    except (ImportError, OSError):
        yield
        return
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            report("waiting for another process that is compiling the same program "
                   f"(compile cache lock {handle.name})")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _stale_locks(root: Path, now: float) -> None:
    """Remove lock files untouched for a day that no process holds. (One
    removed while another process opens it lets two compiles run at once:
    as without the lock, both end with a whole entry.)"""
    try:
        import fcntl
    except ImportError:
        return
    for lock in (root / LOCKS).glob("*.lock"):
        try:
            if now - lock.stat().st_mtime <= _STALE_SECONDS:
                continue
            with open(lock, "a") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                lock.unlink()
        except OSError:
            continue  # held, or gone already


def _mark_used(entry: Path) -> None:
    try:
        os.utime(entry / RECORD)
    except OSError:
        pass  # a cache on a read-only disk still serves hits


def _discard(entry: Path) -> None:
    """Move ``entry`` out of the way (atomic), then delete it."""
    trash = entry.with_name(f".discarded-{entry.name[:16]}-{os.getpid()}-{time.monotonic_ns()}")
    try:
        os.rename(entry, trash)
    except OSError:
        return
    shutil.rmtree(trash, ignore_errors=True)
