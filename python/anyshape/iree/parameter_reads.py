"""The parameters a stream-phase module reads, by scope and key.

IREE's parameter encoder (``--iree-parameter-encoder-output-file``) moves a
weight's packing out of the module only where the packed weight is at most
``max-encoding-growth-factor`` times its size (the pass option; iree-compile
has no flag for it). A weight that padding grows past that (a classifier
head's 2 x 768, padded to panels of 16 rows) stays packed in the module's
initializer, which reads it by its own name from the original scope.
``runtime/parameter_encoding.py`` writes those weights into the packed
archive as they are, under their names; this finds them.
"""

from __future__ import annotations

from pathlib import Path

from anyshape.mlir import iree_bindings


# The stream ops that read parameters (stream.cmd.* and stream.async.*).
_READS = (".parameter.load", ".parameter.read", ".parameter.gather")


def parameters_read(stream_file: Path, scopes: tuple[str, ...]) -> list[tuple[str, str]]:
    """(scope, key) of every parameter ``stream_file`` (the main module at
    IREE's stream phase) loads or reads, in the order first read. ValueError
    where IREE's bindings cannot read it, or where a read's scope is not one
    of ``scopes`` or its scope and keys are not constants: a weight the
    archive then lacked would fail the module's load."""
    ir = iree_bindings()
    found: dict[tuple[str, str], None] = {}
    unnamed: list[str] = []
    with ir.Context():
        try:
            module = ir.Module.parseFile(str(stream_file))
        except ir.MLIRError as error:
            raise ValueError(f"IREE's bindings cannot read {stream_file}: {error}") from None

        def visit(op):
            op = op.operation
            if op.name.startswith("stream.") and op.name.endswith(_READS):
                # The scope, then the keys: the op's only util.buffer operands.
                names = [_buffer_constant(ir, operand) for operand in op.operands
                         if str(operand.type) == "!util.buffer"]
                if len(names) < 2 or None in names or names[0] not in scopes:
                    unnamed.append(f"{op.name} of {names}")
                else:
                    for key in names[1:]:
                        found.setdefault((names[0], key))
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit)
    if unnamed:
        raise ValueError(f"{stream_file}: expected each parameter read to name a scope among "
                         f"{list(scopes)} and its keys as constants, got {unnamed[0]}")
    return list(found)


def _buffer_constant(ir, value) -> str | None:
    owner = value.owner
    if isinstance(owner, ir.Block) or owner.operation.name != "util.buffer.constant":
        return None
    return ir.StringAttr(owner.operation.attributes["value"]).value
