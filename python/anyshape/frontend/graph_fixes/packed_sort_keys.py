"""Sorts in eager's order, written as sorts of packed keys.

Three things go wrong with a sort lowered as it comes (torch-mlir lowers each
to ``iree_linalg_ext.sort`` over the values and an iota of indices, sorted in
place):
- IREE 3.13 gave wrong indices when a program has two sorts of one shape (two
  MoE routers' ``topk``): the two iotas became one buffer that both sorted
  (the plain stack too; MoE families with ``experts_implementation=
  "batched_mm"`` were 0.05-0.6 off; iree-org/iree#24665, #24658). The cause
  is stream's CSE of fills after copy-on-write, now also undone for every
  in-place op at the flow level (``iree/distinct_fills.py``);
- IREE's sort compares floats as floats: NaN lands anywhere (``[nan, 1,
  -0.0, 0.0, -nan, inf]`` sorted to ``[nan, -0.0, 0.0, 1, nan, inf]``), where
  eager puts NaN above +inf;
- torch-mlir has no lowering for ``aten.sort.stable``.
Guarded by ``test_sorts.py``; remove when IREE sorts NaN as eager does and
torch-mlir lowers the stable sort.

So no sort's indices are used: each value becomes an order-preserving integer
key, packed with its position into one int64 (key * 2**32 + position, all
distinct, so the order is total and ties keep their positions: a stable
sort), the packed keys are sorted, and the positions read back from the low
32 bits. The values are gathered from the input with those positions, so
they keep their bits (-0.0, NaN payloads). Keys of 64-bit values do not fit
beside a position: those are sorted twice, by the low half and then stably
by the high half (a two-digit radix order).

The order is eager's: NaN above +inf whatever its sign, -0.0 equal to 0.0,
ties in position order (eager's stable sort; its unstable sort and ``topk``
promise no order among ties).
"""

from __future__ import annotations

import operator

import torch
from torch.fx import Graph, Node

from anyshape.frontend.graph_fixes.fx_emit import Emitter
from anyshape.stages import Workaround

WORKAROUNDS = (Workaround(
    name="sorts_as_packed_keys", stage="import", where="rewrite_sorts_as_packed_keys",
    upstream="IREE 3.13's sort puts NaN anywhere (eager: above +inf), torch-mlir has no "
             "lowering for aten.sort.stable, and two sorts of one shape in a module gave wrong "
             "indices (iree-org/iree#24665, #24658; the cause, stream's CSE of the two iotas "
             "after copy-on-write, is now also undone by iree/distinct_fills.py).",
    guard=("test/python/frontend/test_sorts.py::test_two_topk_routed_layers_as_eager",
           "test/python/frontend/test_sorts.py::test_many_sorts_in_one_module_as_eager"),
    remove_when="IREE sorts NaN as eager does and torch-mlir lowers aten.sort.stable (the "
                "guards pass without it)"),)

aten = torch.ops.aten

_NARROW_INTS = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32)
_NARROW_FLOATS = (torch.float16, torch.bfloat16, torch.float32)
_POSITION_BITS = 32


def _sort_args(node: Node):
    """(input, dim, descending, k or None) of a sort or topk node, else None."""
    args, kwargs = node.args, node.kwargs
    if node.target is aten.sort.default:
        names = ("self", "dim", "descending")
        values = dict(zip(names, args), **kwargs)
        return values["self"], values.get("dim", -1), values.get("descending", False), None
    if node.target is aten.sort.stable:
        values = dict(zip(("self",), args), **kwargs)
        return values["self"], values.get("dim", -1), values.get("descending", False), None
    if node.target is aten.topk.default:
        names = ("self", "k", "dim", "largest", "sorted")
        values = dict(zip(names, args), **kwargs)
        return values["self"], values.get("dim", -1), values.get("largest", True), values["k"]
    return None


def rewrite_sorts_as_packed_keys(graph: Graph) -> int:
    """Rewrite every sort and topk as above; returns how many."""
    rewritten = 0
    for node in list(graph.nodes):
        parsed = _sort_args(node) if node.op == "call_function" else None
        if parsed is None:
            continue
        source, dim, descending, k = parsed
        val = source.meta.get("val") if isinstance(source, Node) else None
        if not isinstance(val, torch.Tensor) or val.dim() == 0 \
                or val.dtype not in _NARROW_INTS + _NARROW_FLOATS + (torch.int64, torch.float64):
            continue
        users = list(node.users)
        if not all(u.op == "call_function" and u.target is operator.getitem for u in users):
            continue
        emit = Emitter(graph, node)
        dim = dim % val.dim()
        order = _sorted_positions(emit, source, val, dim, descending)
        if k is not None:
            order = emit(aten.slice.Tensor, order, dim, 0, k)
        values = emit(aten.gather.default, source, dim, order)
        for user in users:
            user.replace_all_uses_with(values if user.args[1] == 0 else order)
            graph.erase_node(user)
        graph.erase_node(node)
        rewritten += 1
    return rewritten


def _sorted_positions(emit: Emitter, x: Node, val: torch.Tensor, dim: int,
                      descending: bool) -> Node:
    """int64 positions along ``dim`` that put ``x`` in eager's order."""
    key = _ordered_key(emit, x, val)
    if descending:
        key = emit(aten.bitwise_not.default, key)
    positions = _positions(emit, x, val, dim)
    if key.meta["val"].dtype == torch.int32:
        return _packed_argsort(emit, key, positions, dim)
    # 64-bit keys: the low half as signed int32 order (unsigned minus 2**31), then the high.
    low = emit(aten.sub.Scalar, emit(aten.bitwise_and.Scalar, key, 0xFFFFFFFF), 2 ** 31)
    high = emit(aten.bitwise_right_shift.Tensor, key, _constant(emit, 32, torch.int64))
    by_low = _packed_argsort(emit, low, positions, dim)
    by_high = _packed_argsort(emit, emit(aten.gather.default, high, dim, by_low), positions, dim)
    return emit(aten.gather.default, by_low, dim, by_high)


def _ordered_key(emit: Emitter, x: Node, val: torch.Tensor) -> Node:
    """An int32 (int64 for 64-bit input) whose signed order is eager's order of ``x``."""
    if val.dtype in _NARROW_INTS:
        return emit(aten._to_copy.default, x, dtype=torch.int32)
    if val.dtype is torch.int64:
        return x
    float_type, int_type = ((torch.float64, torch.int64) if val.dtype is torch.float64
                            else (torch.float32, torch.int32))
    if val.dtype is not float_type:  # float16 and bfloat16 widen exactly
        x = emit(aten._to_copy.default, x, dtype=float_type)
    # One NaN (positive: above +inf) and one zero (+0.0), as eager compares them.
    x = emit(aten.where.self, emit(aten.isnan.default, x), _constant(emit, float("nan"), float_type), x)
    x = emit(aten.where.self, emit(aten.eq.Scalar, x, 0.0), _constant(emit, 0.0, float_type), x)
    bits = emit(aten.view.dtype, x, int_type)
    # A negative float's magnitude bits count the wrong way for a signed compare.
    magnitude = (1 << (torch.iinfo(int_type).bits - 1)) - 1
    flipped = emit(aten.bitwise_xor.Tensor, bits, _constant(emit, magnitude, int_type))
    return emit(aten.where.self, emit(aten.lt.Scalar, bits, 0), flipped, bits)


def _positions(emit: Emitter, x: Node, val: torch.Tensor, dim: int) -> Node:
    """0, 1, ... along ``dim`` (int64), with unit dims elsewhere to broadcast."""
    size = val.shape[dim]
    if not isinstance(size, int):
        size = emit(aten.sym_size.int, x, dim)
    positions = emit(aten.arange.default, size, dtype=torch.int64, device=val.device)
    for axis in range(val.dim()):
        if axis != dim:
            positions = emit(aten.unsqueeze.default, positions, axis)
    return positions


def _packed_argsort(emit: Emitter, key: Node, positions: Node, dim: int) -> Node:
    """The positions in ascending order of int32-ranged ``key``, ties by position."""
    wide = emit(aten._to_copy.default, key, dtype=torch.int64)
    packed = emit(aten.add.Tensor, emit(aten.mul.Scalar, wide, 1 << _POSITION_BITS), positions)
    ordered = emit(operator.getitem, emit(aten.sort.default, packed, dim), 0)
    return emit(aten.bitwise_and.Scalar, ordered, (1 << _POSITION_BITS) - 1)


def _constant(emit: Emitter, value, dtype: torch.dtype) -> Node:
    return emit(aten.scalar_tensor.default, value, dtype=dtype)
