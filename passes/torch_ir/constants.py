"""torch-dialect constants and lists: one reader per kind, and their builders.

A reader returns the Python value a ``torch.constant.*`` (or a
``torch.prim.ListConstruct`` of them) holds, or None when the value is not
such a constant: a pass that needs the value to decide leaves the op alone.
"""

from anyshape.mlir import ir, torch_ops
from anyshape.passes.torch_ir.values import defining_op, is_a


def _constant(value: ir.Value, name: str) -> ir.Attribute | None:
    op = defining_op(value)
    return op.attributes["value"] if op is not None and op.name == name else None


# -- readers ----------------------------------------------------------------
def constant_int(value: ir.Value) -> int | None:
    """``torch.constant.int``."""
    attr = _constant(value, "torch.constant.int")
    return None if attr is None else ir.IntegerAttr(attr).value


def constant_float(value: ir.Value) -> float | None:
    """``torch.constant.float``."""
    attr = _constant(value, "torch.constant.float")
    return None if attr is None else ir.FloatAttr(attr).value


def constant_number(value: ir.Value) -> float | None:
    """``torch.constant.int`` or ``torch.constant.float`` (a ``!torch.number``'s
    possible producers), as a Python number."""
    number = constant_int(value)
    return number if number is not None else constant_float(value)


def constant_bool(value: ir.Value) -> bool | None:
    """``torch.constant.bool``."""
    attr = _constant(value, "torch.constant.bool")
    return None if attr is None else ir.BoolAttr(attr).value


def is_none(value: ir.Value) -> bool:
    """``torch.constant.none``."""
    op = defining_op(value)
    return is_a(op, torch_ops.ConstantNoneOp)


def list_items(value: ir.Value) -> list[ir.Value] | None:
    """The elements of a ``torch.prim.ListConstruct``; None for any other list."""
    op = defining_op(value)
    if not is_a(op, torch_ops.PrimListConstructOp):
        return None
    return list(op.operands)


def int_list(value: ir.Value) -> list[int] | None:
    """A ``torch.prim.ListConstruct`` of ``torch.constant.int``."""
    items = list_items(value)
    numbers = None if items is None else [constant_int(v) for v in items]
    return None if numbers is None or None in numbers else numbers


def int_or_int_list(value: ir.Value) -> list[int] | None:
    """An int list, or one ``torch.constant.int`` as a list of one (the dims of a
    reduction are either, by overload)."""
    numbers = int_list(value)
    if numbers is None and constant_int(value) is not None:
        numbers = [constant_int(value)]
    return numbers


# -- builders (at the current insertion point) ------------------------------
def int_constant(value: int) -> ir.Value:
    """``torch.constant.int value``."""
    return torch_ops.ConstantIntOp(value).result


def float_constant(value: float) -> ir.Value:
    """``torch.constant.float value``."""
    return torch_ops.ConstantFloatOp(value).result


def bool_constant(value: bool) -> ir.Value:
    """``torch.constant.bool value``."""
    return torch_ops.ConstantBoolOp(value).result


def none_constant() -> ir.Value:
    """``torch.constant.none``."""
    return torch_ops.ConstantNoneOp().result


def int_list_construct(items: list[ir.Value]) -> ir.Value:
    """``torch.prim.ListConstruct`` of ``!torch.int`` values: a ``!torch.list<int>``."""
    return torch_ops.PrimListConstructOp(ir.Type.parse("!torch.list<int>"), list(items)).result
