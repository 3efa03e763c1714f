"""Readers of torch constants, and the few ops the iree-input rewrites
(``linear_rows``, ``row_products``, ``attention``) build, in IR held by
IREE's bindings, where ``passes/torch_ir/constants.py``, written against
torch-mlir's bindings, cannot be called."""

from __future__ import annotations

import struct


def constant_int(value):
    op = value.owner
    if getattr(op, "name", None) != "torch.constant.int":
        return None
    return int(str(op.attributes["value"]).split(":")[0])


def int_list(value):
    op = value.owner
    if getattr(op, "name", None) != "torch.prim.ListConstruct":
        return None
    items = [constant_int(v) for v in op.operands]
    return None if None in items else items


def constant_bool(value):
    op = value.owner
    if getattr(op, "name", None) != "torch.constant.bool":
        return None
    return str(op.attributes["value"]) == "true"


def constant_float_bits(value):
    """A ``torch.constant.float`` as the float32 torch multiplies a float32
    tensor by (the double rounded once), written as its bits; else None."""
    op = value.owner
    if getattr(op, "name", None) != "torch.constant.float":
        return None
    double = float(str(op.attributes["value"]).split(":")[0])
    bits = struct.unpack("<I", struct.pack("<f", double))[0]
    return f"0x{bits:08X}"


def constant_float(value) -> float | None:
    """A ``torch.constant.float`` or ``torch.constant.int`` as a Python float
    (``-inf`` included); else None."""
    op = value.owner
    name = getattr(op, "name", None)
    if name == "torch.constant.float":
        return float(op.attributes["value"].value)
    if name == "torch.constant.int":
        return float(constant_int(value))
    return None


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
