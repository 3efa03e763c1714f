"""The one place that imports MLIR bindings.

torch-mlir and IREE each bundle their own copy of the upstream MLIR Python
bindings, as separate native libraries with separate contexts. anyshape's
passes run in torch-mlir's copy (it knows the ``torch`` dialect); IREE is
driven through its ``iree-compile`` tool, and its own copy only rewrites IR
around those runs (it knows IREE's ``util`` and ``flow`` dialects, and
``torch`` too). IR crosses between the two as bytecode. Every other module
imports what it needs from here, so a binding quirk or an upstream rename is
fixed in one file.
"""

from __future__ import annotations

import io
from torch_mlir import ir, passmanager, rewrite
from torch_mlir.dialects import ext
from torch_mlir.dialects import torch as torch_dialect

__all__ = [
    "ir",
    "passmanager",
    "rewrite",
    "ext",
    "new_context",
    "parse_module",
    "module_to_bytecode",
    "iree_tool",
    "iree_bindings",
    "MLIRError",
]

MLIRError = ir.MLIRError


def new_context() -> ir.Context:
    """A context with every dialect anyshape's IR can hold.

    Upstream dialects come from the bindings' registry; ``torch`` must be
    registered by hand; the anyshape dialect is IRDL-defined and loaded per
    context.
    """
    # Imported here: the dialect module imports this one for `ext`.
    from anyshape.dialects import load_anyshape_dialect

    ctx = ir.Context()
    torch_dialect.register_dialect(ctx)
    ctx.allow_unregistered_dialects = False
    with ctx, ir.Location.unknown():
        load_anyshape_dialect()
        _load_torch_conversion_dialect()
    return ctx


def _load_torch_conversion_dialect() -> None:
    """Load ``torch_c`` (the torch <-> builtin tensor bridge) into the current context.

    torch-mlir's bindings register only the ``torch`` dialect; ``torch_c`` is
    loaded as a dependent dialect of the passes that use it. Running one such
    pass on an empty function loads it, so IR holding ``torch_c`` ops parses and
    anyshape's lowering can create them.
    """
    scratch = ir.Module.parse("func.func private @load_torch_c() { return }")
    passmanager.PassManager.parse(
        "builtin.module(torch-func-backend-type-conversion)").run(scratch.operation)


def parse_module(text: str | bytes, ctx: ir.Context) -> ir.Module:
    """Parse MLIR text or bytecode into ``ctx`` (raises MLIRError with diagnostics)."""
    with ctx:
        return ir.Module.parse(text)


def module_to_bytecode(module: ir.Module | ir.Operation) -> bytes:
    op = module.operation if isinstance(module, ir.Module) else module
    buf = io.BytesIO()
    op.write_bytecode(buf)
    return buf.getvalue()


def iree_bindings():
    """IREE's own copy of the MLIR bindings (``iree.compiler.ir``): its context knows
    IREE's dialects (flow, util, ...), which torch-mlir's does not."""
    from iree.compiler import ir as iree_ir

    return iree_ir


def iree_tool(name: str) -> str:
    """Path of a tool shipped in the iree-base-compiler wheel (``iree-compile``)."""
    from iree.compiler.tools.binaries import find_tool

    return find_tool(name)


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in ("torch", "torch-mlir", "iree-base-compiler", "iree-base-runtime"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            pass
    return out
