"""torch-dialect constants and lists: one reader per kind, and their builders.

A reader returns the Python value a ``torch.constant.*`` (or a
``torch.prim.ListConstruct`` of them) holds, or None when the value is not
such a constant: a pass that needs the value to decide leaves the op alone.
The readers take IR in torch-mlir's bindings or in IREE's (the iree-input
rewrites read the same constants); the builders, torch-mlir's.
"""

import struct

from anyshape.mlir import ir, torch_ops


def _op_named(value, name: str):
    """The op that defines ``value`` when it is named ``name``, else None (a
    block argument, another op). By name, so that the same reader serves
    torch-mlir's bindings and IREE's."""
    owner = value.owner  # a block for a block argument: it has no name
    return owner if getattr(owner, "name", None) == name else None


def _constant(value, name: str):
    op = _op_named(value, name)
    return None if op is None else op.attributes["value"]


# -- readers ----------------------------------------------------------------
def constant_int(value: ir.Value) -> int | None:
    """``torch.constant.int``."""
    attr = _constant(value, "torch.constant.int")
    return None if attr is None else int(attr.value)


def constant_float(value: ir.Value) -> float | None:
    """``torch.constant.float``."""
    attr = _constant(value, "torch.constant.float")
    return None if attr is None else float(attr.value)


def constant_number(value: ir.Value) -> float | None:
    """``torch.constant.int`` or ``torch.constant.float`` (a ``!torch.number``'s
    possible producers), as a Python number."""
    number = constant_int(value)
    return number if number is not None else constant_float(value)


def constant_as_float(value: ir.Value) -> float | None:
    """``torch.constant.int`` or ``torch.constant.float`` as a Python float
    (``-inf`` included): a scale or fill written either way."""
    number = constant_number(value)
    return None if number is None else float(number)


def constant_float32_bits(value: ir.Value) -> str | None:
    """A ``torch.constant.float`` as the float32 torch multiplies a float32
    tensor by (the double rounded once), written as its bits (``0x3F800000``)."""
    double = constant_float(value)
    if double is None:
        return None
    return f"0x{struct.unpack('<I', struct.pack('<f', double))[0]:08X}"


def constant_bool(value: ir.Value) -> bool | None:
    """``torch.constant.bool``."""
    attr = _constant(value, "torch.constant.bool")
    return None if attr is None else bool(attr.value)


def is_none(value: ir.Value) -> bool:
    """``torch.constant.none``."""
    return _op_named(value, "torch.constant.none") is not None


def list_items(value: ir.Value) -> list[ir.Value] | None:
    """The elements of a ``torch.prim.ListConstruct``; None for any other list."""
    op = _op_named(value, "torch.prim.ListConstruct")
    return None if op is None else list(op.operands)


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
