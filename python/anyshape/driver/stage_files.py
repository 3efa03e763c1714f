"""The compile's stage files: the IR after each stage, as bytecode in a working
directory, written as text under ``dump_ir_dir`` when one is given, and read
back as text for ``CompiledModule.ir(stage)``.

Up to the ``iree-input`` stage the IR holds no weights (``iree/detached_weights.py``):
a stage file costs the IR's bytes, not the weights', so every stage's file is
kept for the module's life. The ``iree-input`` stage holds the weights where
they are inline (``params="inline"``)."""

from __future__ import annotations

import errno
import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from anyshape.dialects import new_context
from anyshape.mlir import ir, iree_bindings, write_bytecode
from anyshape.runtime.compiled_module import PARAMETER_SCOPE, write_archive
from anyshape.runtime.parameter_encoding import encode_parameters
from anyshape.stages import IMPORT_STAGE, IREE_INPUT_STAGE


class StageFiles:
    """The IR after each compile stage, as bytecode in a working directory (and as
    text under ``dump_dir`` when one is given), in stage order."""

    def __init__(self, workdir: Path, dump_dir: Path | None):
        self.workdir = workdir
        self.dump_dir = dump_dir
        self.files: dict[str, Path] = {}
        self.dumped: list[Path] = []
        self.seconds: dict[str, float] = {}  # stage -> seconds since the stage before it
        self.parameter_specs: dict[str, dict] | None = None  # params="external": name -> spec
        self._archive: tuple[Path, dict] | None = None
        self._written_by_name = False  # the archive holds the arrays by name
        self._since = time.monotonic()
        if dump_dir:
            dump_dir.mkdir(parents=True, exist_ok=True)

    def remove_dumps_after_import(self) -> None:
        """Delete the stage texts dumped after the import (an abandoned attempt's)."""
        for path in self.dumped[1:]:
            path.unlink(missing_ok=True)
        del self.dumped[1:]

    @property
    def last_file(self) -> Path:
        return list(self.files.values())[-1]

    @property
    def last_stage(self) -> str:
        return list(self.files)[-1]

    def forget_last(self) -> None:
        """Drop the last stage, and its dumped text (an abandoned attempt's)."""
        self.files.pop(self.last_stage)
        if self.dump_dir and self.dumped:
            self.dumped.pop().unlink(missing_ok=True)

    def write(self, stage: str, module: ir.Module, same_as: Path | None = None) -> Path:
        """Record ``module`` as ``stage``; ``same_as``: the stage file it is the same
        module as, whose bytecode (with the weights, where inline) is reused, not
        rewritten."""
        stage, stem = self._name(stage)
        if same_as is not None:
            path = same_as
        else:
            path = self.workdir / f"{stem}.mlirbc"
            write_bytecode(module, path)
        self.files[stage] = path
        if self.dump_dir:
            with open(self.dump_dir / f"{stem}.mlir", "w") as f:
                module.operation.print(file=f)
            self.dumped.append(self.dump_dir / f"{stem}.mlir")
        self._clock(stage)
        return path

    def _clock(self, stage: str) -> None:
        now = time.monotonic()
        self.seconds[stage] = now - self._since
        self._since = now

    def record(self, stage: str, produce: Callable[[Path, Path | None], object]) -> Path:
        """Record ``stage`` as the bytecode that ``produce(bytecode_path, text_path)``
        writes, with its text when dumping (text_path None otherwise): for IR held
        in IREE's bindings, which ``write`` cannot serialize."""
        stage, stem = self._name(stage)
        path = self.workdir / f"{stem}.mlirbc"
        produce(path, self.dump_dir / f"{stem}.mlir" if self.dump_dir else None)
        if self.dump_dir:
            self.dumped.append(self.dump_dir / f"{stem}.mlir")
        self.files[stage] = path
        self._clock(stage)
        return path

    def defer_archive(self, path: Path, arrays: dict) -> None:
        """Keep the parameter archive's arrays to write while ``iree-compile``
        runs (``write_deferred_archive``): iree-compile never reads it (the
        module reads its parameters when it loads), and IREE's writer holds
        the GIL, so it is written on the compile's thread once the compiler's
        process has started (docs/benchmarks.md, "fourth session")."""
        self._archive = (path, arrays)

    def write_deferred_archive(self) -> None:
        """Write the archive ``defer_archive`` kept, if any, by name (once)."""
        if self._archive is not None and not self._written_by_name:
            write_archive(*self._archive)
            self._written_by_name = True

    def encode_deferred_archive(self, encoder: Path, layout: str, device,
                                by_name: list[str]) -> None:
        """Write the archive ``defer_archive`` kept as ``encoder`` packs it
        in ``layout`` (``runtime/parameter_encoding.py``), with the arrays
        named in ``by_name`` as they are."""
        path, arrays = self._archive
        self._written_by_name = False
        encode_parameters(encoder, arrays, PARAMETER_SCOPE, path, layout, device, by_name)

    def release_after_import(self) -> None:
        """Delete every stage file but the import's (an abandoned attempt's)."""
        imported = self.files[IMPORT_STAGE]
        for path in dict.fromkeys(self.files.values()):
            if path != imported:
                path.unlink(missing_ok=True)

    def _name(self, stage: str) -> tuple[str, str]:
        if stage in self.files:  # a pass that runs twice gets a numbered stage
            stage = f"{stage}#{sum(s.split('#')[0] == stage for s in self.files) + 1}"
        return stage, f"{len(self.files):02d}-{stage.replace('#', '-')}"


@contextmanager
def space_named(workdir: Path, needed: int | None = None):
    """A full disk under the compile's working directory ``workdir`` raises an
    OSError (ENOSPC) that names it, the bytes the compile needs there
    (``needed``, where known), what fills it and where else it can be, not
    the bare one of the write that failed."""
    try:
        yield
    except OSError as error:
        if error.errno != errno.ENOSPC:
            raise
        free = shutil.disk_usage(workdir.parent).free if workdir.parent.exists() else 0
        needs = f"; the compile needs about {_size(needed)} there" if needed else ""
        raise OSError(errno.ENOSPC, (
            f"no space left on the device of the compile's working directory {workdir} "
            f"({_size(free)} free there{needs}): the weights are written once to the "
            f"iree-input stage and once to the module where they are inline, once to "
            f"params.irpa where external (docs/api.md, stages); free space there, or set "
            f"TMPDIR to a directory on a larger disk"), str(workdir)) from error


def _size(count: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} bytes"


def stage_text(path: Path, stage: str) -> str:
    """The text of the stage file ``path``. What IREE receives (``iree-input``)
    is read the way IREE reads it: it may hold IREE's own ops (``util``,
    ``flow``), which torch-mlir's context cannot parse."""
    if stage == IREE_INPUT_STAGE:
        iree_ir = iree_bindings()
        with iree_ir.Context():
            return str(iree_ir.Module.parse(Path(path).read_bytes()))
    with new_context():
        return str(ir.Module.parse(Path(path).read_bytes()))
