"""The few torch ops the iree-input rewrites (``row_products``, ``tiled_products``,
``kernels/``) build, and a walk that finds ops by name, in IR held by IREE's
bindings, where torch-mlir's generated op classes cannot build. The constants
they read are read by ``passes/torch_ir/constants.py``, whose readers take
either bindings' IR."""

from __future__ import annotations


def new_constant_int(ir, value: int):
    """A new ``torch.constant.int`` of ``value`` at the insertion point."""
    return ir.Operation.create(
        "torch.constant.int", results=[ir.Type.parse("!torch.int")],
        attributes={"value": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), value)}).result


def matches(ir, module, names, match) -> list:
    """[(op, what ``match(op)`` found)] for the ops named in ``names``, in the
    module's walk order, where ``match`` finds something (not None)."""
    found = []

    def visit(op):
        if op.name in names:
            result = match(op)
            if result is not None:
                found.append((op, result))
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


def call_with_builtin_tensors(ir, callee: str, operands, result_type):
    """``callee`` (a function on builtin tensors) called on torch tensors
    ``operands``: its result as a torch tensor of ``result_type``."""
    from anyshape.dialects import builtin_tensor_text

    builtins = [ir.Operation.create(
        "torch_c.to_builtin_tensor", results=[ir.Type.parse(builtin_tensor_text(v.type))],
        operands=[v]).result for v in operands]
    call = ir.Operation.create(
        "func.call", results=[ir.Type.parse(builtin_tensor_text(result_type))],
        operands=builtins, attributes={"callee": ir.FlatSymbolRefAttr.get(callee)})
    return ir.Operation.create("torch_c.from_builtin_tensor", results=[result_type],
                               operands=[call.result]).result
