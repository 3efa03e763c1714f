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
entries and renamed into place, so a reader sees all of it or none, and two
processes filling the same entry at once both end with a whole one (the
second rename loses, its copy is dropped). Each entry lists its files'
SHA-256s; an entry that does not match them, or does not load, is removed and
compiled again, never run.

Where: ``ANYSHAPE_CACHE_DIR``, else ``$XDG_CACHE_HOME/anyshape``, else
``~/.cache/anyshape``. ``anyshape.compile(..., cache=False)`` neither reads
nor writes it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from anyshape.options import CACHE_ENV, cache_root  # noqa: F401  (CACHE_ENV: read here by callers)

LAYOUT = "v1"  # the entries' layout; bump it when what an entry holds changes
RECORD = "cache-entry.json"


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
    """SHA-256 of an ExportedProgram: graph, signature, dim ranges, weights."""
    import torch

    digest = hashlib.sha256()
    digest.update(str(program.graph).encode())
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


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


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
        if not files or any(_file_digest(entry / name) != digest for name, digest in files.items()):
            raise ValueError("its files are not the ones it was written with")
        module = load(entry, threads=threads)
        return module, list(record.get("warnings", []))
    except Exception:  # noqa: BLE001 - any damage: compiled again, never run
        _discard(entry)
        return None


def store(key: str, module, warnings_text: list[str]) -> Path | None:
    """Save ``module`` as the entry for ``key``; returns the entry, or None when
    the cache directory cannot be written (the compile itself stands)."""
    root = cache_root()
    entry = _entry(root, key)
    if entry.is_dir():
        return entry
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{key[:16]}-", dir=entry.parent))
    except OSError:
        return None
    try:
        module.save(staging)
        files = {path.name: _file_digest(path) for path in sorted(staging.iterdir())}
        record = {"files": files, "warnings": warnings_text, "written": time.time()}
        (staging / RECORD).write_text(json.dumps(record, indent=1) + "\n")
        os.rename(staging, entry)  # atomic; fails when another process got there first
        return entry
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        return entry if entry.is_dir() else None


def _discard(entry: Path) -> None:
    """Move ``entry`` out of the way (atomic), then delete it."""
    trash = entry.with_name(f".discarded-{entry.name[:16]}-{os.getpid()}-{time.monotonic_ns()}")
    try:
        os.rename(entry, trash)
    except OSError:
        return
    shutil.rmtree(trash, ignore_errors=True)
