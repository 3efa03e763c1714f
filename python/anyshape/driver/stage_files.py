"""The compile's stage files: the IR after each stage, as bytecode in a working
directory, written as text under ``dump_ir_dir`` when one is given, and read
back as text for ``CompiledModule.ir(stage)``.

Every stage holds the weights (a pass stage of the Qwen2-0.5B shape is 2 GB),
so a pass stage's file lives only until the next stage is written, and the
last one until the compile is done. The import and ``iree-input`` stages stay.
A pass stage asked for later is made again: its passes run once more on the
nearest stage kept before it (the passes are deterministic), and its file then
stays."""

from __future__ import annotations

import errno
import shutil
import time
from collections.abc import Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from anyshape.dialects import new_context
from anyshape.driver.pipeline import run_pipeline
from anyshape.mlir import ir, iree_bindings, module_to_bytecode, parse_module
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
        # pass stage -> (the stage before it, the pipeline element that made it
        # from that one): how a released stage is made again
        self.made_from: dict[str, tuple[str, str]] = {}
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

    @property
    def last_pass_stage(self) -> str | None:
        """The last stage a pass made (None: no pass ran)."""
        return next((stage for stage in reversed(self.files) if stage in self.made_from), None)

    def forget_last(self) -> None:
        """Drop the last stage, and its dumped text (an abandoned attempt's)."""
        self.files.pop(self.last_stage)
        if self.dump_dir and self.dumped:
            self.dumped.pop().unlink(missing_ok=True)

    def write(self, stage: str, module: ir.Module, same_as: Path | None = None,
              element: str | None = None) -> Path:
        """Record ``module`` as ``stage``; ``same_as``: the stage file it is the same
        module as, whose bytecode (500 MB for roberta-base) is reused, not rewritten.
        ``element``: the pipeline element that made it from the stage before (a
        pass stage), whose file is then released."""
        before = self.last_stage if self.files else None
        stage, stem = self._name(stage)
        if same_as is not None:
            path = same_as
        else:
            path = self.workdir / f"{stem}.mlirbc"
            path.write_bytes(module_to_bytecode(module))
        self.files[stage] = path
        if element is not None:
            self.made_from[stage] = (before, element)
            self.release(before)
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

    def release(self, stage: str | None) -> None:
        """Delete the file of pass stage ``stage`` (made again when asked for),
        unless another stage is the same file; other stages are kept."""
        if stage not in self.made_from:
            return
        path = self.files[stage]
        if any(other != stage and kept == path for other, kept in self.files.items()):
            return
        path.unlink(missing_ok=True)

    def release_after_import(self) -> None:
        """Delete every stage file but the import's (an abandoned attempt's)."""
        imported = self.files[IMPORT_STAGE]
        for path in dict.fromkeys(self.files.values()):
            if path != imported:
                path.unlink(missing_ok=True)

    def path(self, stage: str) -> Path:
        """The file of ``stage``, made again first if it was released."""
        path = self.files[stage]
        if path.exists():
            return path
        elements = []
        base = stage
        while not self.files[base].exists():
            base, element = self.made_from[base]
            elements.insert(0, element)
        module = parse_module(self.files[base].read_bytes(), new_context())
        for element in elements:
            run_pipeline(module, [element])
        with space_named(self.workdir):
            path.write_bytes(module_to_bytecode(module))
        return path

    def _name(self, stage: str) -> tuple[str, str]:
        if stage in self.files:  # a pass that runs twice gets a numbered stage
            stage = f"{stage}#{sum(s.split('#')[0] == stage for s in self.files) + 1}"
        return stage, f"{len(self.files):02d}-{stage.replace('#', '-')}"


class KeptStages(Mapping):
    """Stage -> its file, in stage order, for ``CompiledModule``: a released
    pass stage is made again when it is looked up."""

    def __init__(self, stages: StageFiles):
        self._stages = stages

    def __getitem__(self, stage: str) -> Path:
        return self._stages.path(stage)

    def __iter__(self) -> Iterator[str]:
        return iter(self._stages.files)

    def __len__(self) -> int:
        return len(self._stages.files)


@contextmanager
def space_named(workdir: Path):
    """A full disk under the compile's working directory ``workdir`` raises an
    OSError (ENOSPC) that names it, what fills it and where else it can be,
    not the bare one of the write that failed."""
    try:
        yield
    except OSError as error:
        if error.errno != errno.ENOSPC:
            raise
        free = shutil.disk_usage(workdir.parent).free if workdir.parent.exists() else 0
        raise OSError(errno.ENOSPC, (
            f"no space left on the device of the compile's working directory {workdir} "
            f"({free / 1e9:.1f} GB free there): the import and iree-input stages and the "
            f"module each hold the model's weights (docs/api.md, stages); free space there, "
            f"or set TMPDIR to a directory on a larger disk"), str(workdir)) from error


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
