"""Readers of torch constants in IR held by IREE's bindings (the iree-input
rewrites), where ``passes/torch_ir/constants.py``, written against
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
