"""A failure's stage and cause, from the exception and where it was raised.

Causes: ``ours`` (anyshape's code raised it, an anyshape pass or the facts it
hands IREE failed, or anyshape alone computed a wrong answer), ``torch.export``
(export or its decompositions refused the program), ``torch-mlir`` (the FX
importer failed, or IREE's torch input could not legalize a torch op: that
lowering is torch-mlir's), ``IREE`` (IREE's compiler or runtime failed, or both
stacks computed the same wrong answer past torch-mlir's import), and, from the
pool, ``crash`` and ``timeout``.
"""

from __future__ import annotations

import os
import traceback

OURS, EXPORT, TORCH_MLIR, IREE, CRASH, TIMEOUT = (
    "ours", "torch.export", "torch-mlir", "IREE", "crash", "timeout")

# IREE's torch input conversion is torch-mlir's torch-to-linalg (and friends)
# run inside iree-compile: an op left unconverted there is a torch-mlir gap.
_TORCH_MLIR_IN_IREE = ("failed to legalize operation 'torch.", "'torch.", "torch.operator",
                      "unsupported by backend contract", "torch-backend")


def _anyshape_dirs() -> tuple[str, ...]:
    import anyshape
    import anyshape.dialects
    import anyshape.passes

    return tuple(os.path.dirname(m.__file__) + os.sep
                 for m in (anyshape, anyshape.passes, anyshape.dialects))


def frames(error: BaseException) -> list[tuple[str, str]]:
    """(file, function) of each frame from the catch down to the raise."""
    return [(f.filename, f.name) for f in traceback.extract_tb(error.__traceback__)]


def raised_in_anyshape(error: BaseException) -> bool:
    stack = frames(error)
    return bool(stack) and stack[-1][0].startswith(_anyshape_dirs())


def first_line(error: BaseException | str, limit: int = 300) -> str:
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    line = next((l for l in text.splitlines() if l.strip()), text)
    return line.strip()[:limit]


def is_clear(error: BaseException) -> bool:
    """What a user of ``anyshape.compile`` should get for a module it cannot
    compile or an input it cannot run: its CompileError or RunError (what IREE
    said when the module ran, with the call), or a ValueError or TypeError
    that says something."""
    from anyshape.errors import CompileError, RunError

    if isinstance(error, (CompileError, RunError)):
        return True
    return type(error) in (ValueError, TypeError) and bool(str(error).strip())


def iree_compile_cause(diagnostic: str) -> str:
    return TORCH_MLIR if any(s in diagnostic for s in _TORCH_MLIR_IN_IREE) else IREE


def anyshape_compile_failure(error: BaseException) -> tuple[str, str]:
    """(stage, cause) of an exception out of ``anyshape.compile``."""
    from anyshape.errors import CompileError
    from anyshape.stages import IREE_COMPILE_STAGE

    if isinstance(error, CompileError):
        if error.stage == IREE_COMPILE_STAGE:
            return error.stage, iree_compile_cause(error.diagnostic)
        # torch.export's and torch-mlir's importer's failures, in anyshape's words
        upstream = {"export": EXPORT, "import": TORCH_MLIR}
        return error.stage, upstream.get(error.stage, OURS)  # else an anyshape pass
    names = [name for _, name in frames(error)]
    ours = raised_in_anyshape(error)
    if "export_program" in names:
        if "run_decompositions" not in names:
            return "export", OURS if ours else EXPORT
        # anyshape's own decompositions run inside torch's machinery
        below = frames(error)[names.index("run_decompositions"):]
        ours = ours or any(file.startswith(_anyshape_dirs()) for file, _ in below)
        return "decompose", OURS if ours else EXPORT
    if "import_program" in names:
        return "import", OURS if ours else TORCH_MLIR
    if "signature_from_program" in names:
        return "signature", OURS
    return "compile", OURS if ours else IREE


def call_failure(error: BaseException) -> str:
    """Cause of an exception out of calling a compiled module: a RunError is
    IREE's failure, reported by anyshape."""
    from anyshape.errors import RunError

    message = str(error)
    if isinstance(error, ValueError) and (message.startswith("arguments: expected sizes with")
                                          or "(static), got" in message.split(";")[0]):
        # A guard torch.export recorded, or a dim it specialized to the traced
        # size: its program is not valid at those sizes.
        return EXPORT
    return IREE if isinstance(error, RunError) or not raised_in_anyshape(error) else OURS


def across_stacks(record: dict) -> dict:
    """Causes that only the two stacks together tell (idempotent): anyshape's
    wrong answer is upstream's (IREE, or torch-mlir's lowering inside it) when
    the plain stack gives a wrong answer at the same size too; anyshape's IREE
    compile failure is ours when IREE compiled the plain stack's module with
    the flags anyshape tried (anyshape's passes made IR IREE cannot compile)."""
    ours, floor = record.get("anyshape"), record.get("plain")
    if not ours or not floor:
        return record
    if ours.get("stage") == "numerics":
        shared = [size for size, outcome in ours.get("runs", {}).items()
                  if outcome.startswith("wrong")
                  and floor.get("runs", {}).get(size, "").startswith("wrong")]
        ours["cause"] = IREE if shared else OURS
    elif ours.get("stage") == "iree-compile" and "compile_seconds" in floor:
        ours["cause"] = OURS
    return record
