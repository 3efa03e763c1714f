"""The names of the compile stages that the compiler and the runtime share, and
the reproducer a failing stage keeps (``compiler.py`` and ``iree/invocation.py``).

A module of its own so that ``runtime/compiled_module.py`` (which needs only torch, numpy and
iree-base-runtime) reads them without importing ``compiler.py``.
"""

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
