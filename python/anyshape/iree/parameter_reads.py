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


def parameters_read(stream_file: Path) -> list[tuple[str, str]]:
    """(scope, key) of every parameter ``stream_file`` (the main module at
    IREE's stream phase) loads or reads, in the order first read; ValueError
    where IREE's bindings cannot read it."""
    ir = iree_bindings()
    found: dict[tuple[str, str], None] = {}
    with ir.Context():
        try:
            module = ir.Module.parseFile(str(stream_file))
        except ir.MLIRError as error:
            raise ValueError(f"IREE's bindings cannot read {stream_file}: {error}") from None

        def visit(op):
            op = op.operation
            if op.name.startswith("stream.") and ".parameter." in op.name:
                # The scope, then the keys: the op's util.buffer operands, in
                # order (stream.cmd.parameter.load, .read, .gather).
                names = [_buffer_constant(ir, operand) for operand in op.operands]
                names = [name for name in names if name is not None]
                if len(names) >= 2:
                    for key in names[1:]:
                        found.setdefault((names[0], key))
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit)
    return list(found)


def _buffer_constant(ir, value) -> str | None:
    owner = value.owner
    if isinstance(owner, ir.Block) or owner.operation.name != "util.buffer.constant":
        return None
    return ir.StringAttr(owner.operation.attributes["value"]).value
