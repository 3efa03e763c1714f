"""The names of the compile stages that the compiler and the runtime share, the
reproducer a failing stage keeps (``driver/compile.py`` and ``iree/invocation.py``),
and the record of a workaround of an upstream bug (``Workaround``), by the stage
it acts in.

A module of its own, importing nothing of anyshape, so that every layer (the
runtime, which needs only torch, numpy and iree-base-runtime, included) reads
them without importing the compiler.

A module that works around torch.export, torch-mlir or IREE declares it at
module level, in ``WORKAROUNDS``, a tuple of ``Workaround``: the stage it acts
in, the upstream bug or behaviour, the test that guards it (fails when it is
removed, or when upstream changes so that it can go), and when it can go.
``anyshape.tools.workaround_index`` collects them, and
``tools/dev/gen_workarounds_doc.py`` writes ``docs/workarounds.md`` from them
(``test_docs.py`` fails when that page is stale, and when a declared guard
names a test that does not exist). It is the page the next IREE or
torch-mlir upgrade starts from.
"""

import dataclasses
import shutil
import tempfile
from pathlib import Path

IMPORT_STAGE = "import"          # the torch dialect as imported
IREE_INPUT_STAGE = "iree-input"  # exactly what IREE receives (IREE's own ops included)
IREE_COMPILE_STAGE = "iree-compile"


# A reproducer outside dump_ir_dir gets a temporary directory of its own.
REPRO_PREFIX = "anyshape-repro-"


def keep_reproducer(stage_file: Path, dump_ir_dir, stem: str) -> Path:
    """A copy of ``stage_file`` (the input of a failing stage), named ``stem``, in
    ``dump_ir_dir`` or else in a temporary directory of its own."""
    directory = Path(dump_ir_dir) if dump_ir_dir else Path(tempfile.mkdtemp(prefix=REPRO_PREFIX))
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"{stem}.mlirbc"
    target.write_bytes(stage_file.read_bytes())
    return target


def discard_reproducer(reproducer: str, dump_ir_dir) -> None:
    """Remove the reproducer of a failure a fallback recovered from and nothing
    reports: outside ``dump_ir_dir`` it is a directory of its own that would
    otherwise stay in the temporary directory after every such compile."""
    path = Path(reproducer)
    if dump_ir_dir is None and path.parent.name.startswith(REPRO_PREFIX):
        shutil.rmtree(path.parent, ignore_errors=True)


# Where in the pipeline a workaround acts, in pipeline order.
WORKAROUND_STAGES = {
    "export": "torch.export and the decomposition table",
    "import": "rewrites and refusals on the exported graph, before torch-mlir imports it",
    "torch-ir": "anyshape passes on the torch dialect",
    "iree-input": "rewrites of what IREE receives",
    "iree-flags": "iree-compile flags",
    "iree-fallback": "compiled again another way when iree-compile fails",
    "generation": "what compile_generator exports and compiles for generate",
    "runtime": "running a compiled module",
}


@dataclasses.dataclass(frozen=True)
class Workaround:
    name: str
    stage: str          # a key of WORKAROUND_STAGES
    upstream: str       # the component, the bug or behaviour (its message, its issue)
    guard: tuple[str, ...]  # pytest node ids or lit files, from the repository root
    remove_when: str
    where: str = ""     # module (and function) implementing it; filled in by all_workarounds
    unguarded: str = ""  # with no guard: why no test shows the upstream failure

    def __post_init__(self):
        if self.stage not in WORKAROUND_STAGES:
            raise ValueError(f"workaround {self.name!r}: stage {self.stage!r} is not one of "
                             f"{', '.join(WORKAROUND_STAGES)}")
        if isinstance(self.guard, str):
            object.__setattr__(self, "guard", (self.guard,))
        if not self.guard and not self.unguarded:
            raise ValueError(f"workaround {self.name!r}: no guard, and no word on why")
