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
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from torch_mlir import ir, passmanager, rewrite
from torch_mlir.dialects import ext
from torch_mlir.dialects import torch as torch_dialect
from anyshape.stages import Workaround

# torch-mlir's op classes generated from the ODS definitions: typed builders
# (``torch_ops.AtenUnsqueezeOp(result_type, x, dim)``) and operands by name
# (``op.opview.is_causal``). Passes build torch ops through these.
torch_ops = torch_dialect

__all__ = [
    "ir",
    "passmanager",
    "rewrite",
    "ext",
    "torch_ops",
    "load_torch_conversion_dialect",
    "Diagnostic",
    "diagnostics_of",
    "format_location",
    "parse_module",
    "parse_source",
    "module_to_bytecode",
    "iree_tool",
    "iree_bindings",
    "MLIRError",
]

MLIRError = ir.MLIRError


def load_torch_conversion_dialect() -> None:
    """Load ``torch_c`` (the torch <-> builtin tensor bridge) into the current context.

    torch-mlir's bindings register only the ``torch`` dialect; ``torch_c`` is
    loaded as a dependent dialect of the passes that use it. Running one such
    pass on an empty function loads it, so IR holding ``torch_c`` ops parses and
    anyshape's lowering can create them.
    """
    scratch = ir.Module.parse("func.func private @load_torch_c() { return }")
    passmanager.PassManager.parse(
        "builtin.module(torch-func-backend-type-conversion)").run(scratch.operation)


_stablehlo_passes_registered = False


def load_reference_dialects(ctx: ir.Context) -> None:
    """Make ``ctx`` know every dialect torch-mlir-opt registers: the bindings
    register MLIR's own and ``torch``; ``stablehlo`` has its own registration;
    ``chlo``, ``tm_tensor`` and ``vhlo`` are loaded as dependencies of passes
    that produce them (as ``torch_c`` is in ``load_torch_conversion_dialect``). Registers
    StableHLO's passes too (torch-mlir-opt has some of them)."""
    global _stablehlo_passes_registered
    from torch_mlir._mlir_libs import _stablehlo

    if not _stablehlo_passes_registered:
        _stablehlo.register_stablehlo_passes()
        _stablehlo_passes_registered = True
    _stablehlo.register_dialect(ctx)
    with ctx, ir.Location.unknown():
        scratch = ir.Module.parse("func.func private @load_dialects() { return }")
        passmanager.PassManager.parse(
            "builtin.module(func.func(convert-torch-to-tmtensor, convert-torch-to-stablehlo), "
            "stablehlo-legalize-to-vhlo)").run(scratch.operation)


def dialect_names(ctx: ir.Context) -> list[str]:
    """The dialects ``ctx`` knows (registered or loaded), sorted.

    The bindings have no call that lists them; MLIR's parser names them all
    in the note it attaches to an op of an unknown dialect, so a silenced parse
    of one asks it."""
    import re

    notes: list[str] = []
    allowed, emitted = ctx.allow_unregistered_dialects, ctx.emit_error_diagnostics
    ctx.allow_unregistered_dialects, ctx.emit_error_diagnostics = False, False
    try:
        with ctx, ir.Location.unknown():
            ir.Module.parse("anyshape_no_such_dialect.op")
    except MLIRError as error:
        notes = [n.message for d in error.error_diagnostics for n in d.notes]
    finally:
        ctx.allow_unregistered_dialects, ctx.emit_error_diagnostics = allowed, emitted
    for note in notes:
        listed = re.match(r"Available dialects: (.*?)(?: \(\* corresponding[^)]*\))?;", note)
        if listed:
            names = (name.replace("(*)", "").strip() for name in listed.group(1).split(","))
            return sorted(name for name in names if name)
    raise RuntimeError("MLIR's parser no longer lists the available dialects in its note "
                       f"on an unknown dialect; got: {notes}")


def parse_module(text: str | bytes, ctx: ir.Context) -> ir.Module:
    """Parse MLIR text or bytecode into ``ctx`` (raises MLIRError with diagnostics)."""
    with ctx:
        return ir.Module.parse(text)


def parse_source(data: str | bytes, ctx: ir.Context, source_name: str, *,
                 implicit_module: bool = True, start: tuple[int, int] = (0, 0)) -> ir.Operation:
    """Parse a tool's input as mlir-opt does: locations name ``source_name``, and
    top-level operations other than one ``builtin.module`` get a module around
    them at ``source_name:0:0`` (unless ``implicit_module`` is False).

    ``Module.parse`` names every location "-"; ``Operation.parse`` takes the
    name but wants a single top-level op, so several are parsed inside a
    ``module {`` written over the first line before them that holds only a
    comment or nothing (no op's line or column moves). Where no such line
    works (the file starts with an op, or with attribute aliases, which cannot
    sit inside a module) it falls back to ``Module.parse``: callers map the
    location name "-" back to ``source_name``. Only the parse that counts
    emits diagnostics; the tentative ones are silenced. ``start``: where the
    text starts in the file (line, column), the implicit module's location
    (mlir-opt's for a ``--split-input-file`` chunk: just after its marker).
    Bytecode holds its own locations.
    """
    with ctx:
        if isinstance(data, bytes):
            return ir.Module.parse(data).operation
        if not implicit_module:
            return ir.Operation.parse(data, source_name=source_name).operation
        messages = []
        with _silenced(ctx, messages):
            try:
                top = ir.Operation.parse(data, source_name=source_name).operation
            except MLIRError:
                top = None
        if top is not None:
            return top if top.name == "builtin.module" else \
                _implicit_module([top], source_name, start)
        if not any("source must contain a single top-level operation" in m for m in messages):
            # A genuine error: parse again for its diagnostics.
            return ir.Operation.parse(data, source_name=source_name).operation
        with _silenced(ctx, []):
            try:
                return _parse_wrapped(data, source_name, start)
            except (MLIRError, LookupError):
                pass
        return ir.Module.parse(data).operation


@contextmanager
def _silenced(ctx: ir.Context, messages: list[str]):
    """Diagnostics emitted inside go to ``messages``, not to ``ctx``'s other handlers."""
    handler = ctx.attach_diagnostic_handler(lambda d: messages.append(d.message) or True)
    try:
        yield
    finally:
        handler.detach()


def _parse_wrapped(text: str, source_name: str, start: tuple[int, int]) -> ir.Operation:
    lines = text.split("\n")
    wrapper_line = None     # a comment or blank line after any alias, before the first op
    for index, line in enumerate(lines):
        stripped = line.strip()
        if not stripped or stripped.startswith("//"):
            wrapper_line = index if wrapper_line is None else wrapper_line
        elif line[0] in "#!":   # an attribute or type alias: the module must follow it
            wrapper_line = None
        else:
            break
    if wrapper_line is None:
        raise LookupError("no line to write `module {` over")
    wrapped = "\n".join(lines[:wrapper_line] + ["module {"] + lines[wrapper_line + 1:]) + "\n}"
    parsed = ir.Operation.parse(wrapped, source_name=source_name).operation
    return _implicit_module([op.operation for op in parsed.regions[0].blocks[0].operations],
                            source_name, start)


def _implicit_module(ops: list[ir.Operation], source_name: str,
                     start: tuple[int, int]) -> ir.Operation:
    module = ir.Module.create(ir.Location.file(source_name, *start))
    for op in ops:
        try:
            op.detach_from_parent()
        except ValueError:  # Operation.parse's result has no parent
            pass
        module.body.append(op)
    return module.operation


def write_bytecode(module, path) -> None:
    """``module`` (either bindings' module or operation) as bytecode into the
    file ``path``, streamed (no copy in memory). Written beside it, then
    renamed over it: ``path`` may be the very file ``module`` was parsed from
    with ``parseFile``, whose blobs borrow its mapping; truncating that file
    in place would pull the pages from under them (SIGBUS), where a rename
    leaves the mapped file whole until it is unmapped."""
    op = module.operation if hasattr(module, "operation") else module
    path = Path(path)
    partial = path.with_name(f".{path.name}.partial")
    try:
        with open(partial, "wb") as f:
            op.write_bytecode(f)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


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


def operations_in(op):
    """Every operation nested in ``op`` (either bindings'), outer before inner."""
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                yield child.operation
                yield from operations_in(child.operation)


def rewrite_with_iree_bindings(in_file, out_file, text_file, rewrite) -> int:
    """``rewrite(iree_ir, module)`` (which returns a count) on ``in_file`` (IR
    that holds IREE's own ops, bytecode or text), written to ``out_file`` as
    bytecode and to ``text_file`` as text when given. Returns the count;
    ValueError when IREE cannot read the file."""
    iree_ir = iree_bindings()
    with iree_ir.Context():
        try:
            module = iree_ir.Module.parseFile(str(in_file))  # mapped, not copied
        except iree_ir.MLIRError as error:
            raise ValueError(f"IREE's bindings cannot read {in_file}: {error}") from None
        count = rewrite(iree_ir, module)
        write_bytecode(module, out_file)
        if text_file is not None:
            with open(text_file, "w") as f:
                module.operation.print(file=f)
    return count


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


# -- diagnostics ------------------------------------------------------------
@dataclass
class Diagnostic:
    location: str   # file:line:col, or "" when the IR had none
    message: str
    notes: list[str]

    def render(self, severity: str = "error") -> str:
        head = f"{self.location}: {severity}: {self.message}" if self.location else \
            f"{severity}: {self.message}"
        return "\n".join([head] + [f"  note: {n}" for n in self.notes])


_FILE_LINE_COL = re.compile(r'"([^"]*)":(\d+):(\d+)')


def format_location(location, filename: str | None = None) -> str:
    """The first file:line:col inside an MLIR location (callsite and fused included)."""
    match = _FILE_LINE_COL.search(str(location))
    if not match:
        return ""
    file = match.group(1)
    if filename is not None and file in ("-", ""):
        file = filename
    return f"{file}:{match.group(2)}:{match.group(3)}"


def diagnostics_of(error: MLIRError, filename: str | None = None) -> list[Diagnostic]:
    out = [Diagnostic(format_location(d.location, filename), d.message,
                      [n.message for n in d.notes]) for d in error.error_diagnostics]
    if not out:
        out.append(Diagnostic("", str(error), []))
    return out



# Workarounds of upstream bugs here (docs/workarounds.md, anyshape/stages.py).
WORKAROUNDS = (
    Workaround(
        name='torch_c_loaded_by_dummy_pass', stage='torch-ir',
        where='load_torch_conversion_dialect (and load_reference_dialects)',
        upstream="torch-mlir's Python bindings register only the torch dialect; torch_c (and "
                 'chlo/tm_tensor/vhlo) load only as dependent dialects of passes, so a pass is '
                 'run on an empty function to load them.',
        guard=('test/passes/lower.mlir',
               'test/python/tools/test_opt_compat.py::test_show_dialects_lists_every_dialect_of_torch_mlir_opt'),
        remove_when="(inferred) when torch-mlir's bindings register torch_c"),
)
