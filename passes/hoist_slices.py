"""``anyshape-hoist-slices``: compute only the rows a model returns.

A classification head reads ``features[:, 0, :]``, generation prefill reads
``logits[:, -1, :]``: the model computed every row and keeps one. This pass
moves such selections up the graph, as early as they can go, so the ops above
them run on the rows kept (ONNX Runtime's training "compute optimizer",
generalized: through attention, through reshapes that merge the sliced axis,
and past producers other users still need whole).

Where it starts (the patterns, functions of this module):
- ``select_as_row_slice``: ``aten.select.int`` (negative indices normalized
  with the rooted dim) becomes a keep-dim slice of one row plus a squeeze, so
  every op above keeps its rank and its axis numbers: only the sliced axis
  changes size;
- ``move_selection``: ``aten.slice.Tensor`` on one axis (any start, end,
  step) and ``aten.index_select`` move above their producer, one producer at
  a time;
- ``gather_as_index_select``: ``aten.gather`` whose index is one 1-D index
  expanded over the other axes becomes an ``index_select`` (a gather whose
  index differs per batch row is a per-row selection and stays);
- ``split_into_slices`` (a fused projection's ``split_with_sizes`` as one
  slice per part) and ``squeeze_of_unsqueeze`` tidy what the moves leave, and
  ``merge_duplicate_slices`` runs between rounds.

How a selection moves through a producer: ``_RULES`` maps op names to a rule,
which returns a ``Plan`` (the operands that take the selection, on which
axis) or None to stop:
- ``through_elementwise`` (elementwise ops and casts): operands aligned from
  the right; an operand with the full size on the axis is selected too, one
  with size 1 or without the axis is left alone (it broadcasts); an operand
  whose size cannot be proven either stops the move. ``through_dropout``:
  dropout in eval mode only;
- ``through_layer_norm``, ``through_softmax``, ``through_reduction``: only
  when the axis is not reduced (a reduction with several results moves when
  every used result carries the same selection);
- ``through_matmul``, ``through_matmul_with_bias``, ``through_linear``: a row
  axis goes to the left operand, a column axis to the right operand (with the
  bias), a batch axis to both;
- shape ops remap the axis (``through_transpose``, ``through_permute``,
  ``through_unsqueeze``, ``through_squeeze``, ``through_expand``). Through a
  ``flatten``/``unflatten`` that merges the sliced axis with the one before it
  ([B, L, H] <-> [B*L, H], what ``linear`` decomposes into), one row per
  group is the strided slice ``start::L`` of the merged axis
  (``through_flatten``, ``through_unflatten``);
- attention, decomposed, needs no rule of its own: a row selection of
  ``softmax(Q Kᵀ s + mask) V`` goes to the left operand of each matmul and
  through the softmax over the other axis, so it reaches Q and the mask rows,
  never K or V. ``scaled_dot_product_attention`` (non-causal) selects Q and
  the mask rows (``through_attention``).

It stops at function arguments, at ops without a rule, at a value that
other users need whole: there the selection stays, below the shared producer,
on the branch that leads to it (in an encoder's last layer, only the K and V
projections and the residual input still see every token); and at the
float32 cast of a float16 or bfloat16 weight kept as stored
(``widened_literal``), which runs once.

The lit cases (``test/passes/hoist-slices-*.mlir``) are grouped under
``/// [Pattern: <name>]`` headers naming the rules and patterns above that
each exercises (``test_pattern_headers.py`` and ``test_hoist_slices_rules.py``
check the names).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import sympy

from anyshape.dialects import vtensor_shape, widened_literal
from anyshape.mlir import ir, torch_ops
from anyshape.passes import ModulePass, apply_patterns, register
from anyshape.passes.torch_ir.constants import (constant_bool, constant_int, int_constant,
                                                int_list, int_list_construct, is_none,
                                                list_items)
from anyshape.passes.torch_ir.ops import (ELEMENTWISE, LAYER_NORMS, REDUCTIONS, SOFTMAXES,
                                          dropout_in_eval, keepdim, reduced_axes)
from anyshape.passes.torch_ir.scalar_builder import ScalarBuilder
from anyshape.passes.torch_ir.shape_analysis import ShapeAnalysis, same_size
from anyshape.passes.torch_ir.values import (defining_op, erase_unused, functions,
                                             hoist_argument_bindings, is_a, rebuilt,
                                             static_info_cast, typed, users, vtensor_type)

_INT64_MAX = 2**63 - 1
_MAX_ROUNDS = 1000

# Reductions with several results (all shaped alike): they move when every
# result that is used is used only by the same selection. A select of one
# result while another is still read stays where it is (the plan of a
# producer requires its other results unused): the move happens when the
# selections reach every used result from below, as slices.
_MULTI_RESULT = frozenset(n for n, r in REDUCTIONS.items() if r.results > 1)


@dataclasses.dataclass
class _Cut:
    """A keep-dim selection along one axis: ``slice(start, end, step)`` or
    ``index_select(index)``; ``size`` is the selected axis' static size (or None).
    ``operands`` is None for the stand-in a select is planned with before its
    one-row slice exists."""

    kind: str
    operands: list | None
    size: int | None

    def apply(self, value: ir.Value, axis: int) -> ir.Value:
        sizes, dtype = vtensor_shape(value.type)
        sizes = list(sizes)
        sizes[axis] = self.size
        if self.kind == "slice":
            return torch_ops.AtenSliceTensorOp(vtensor_type(sizes, dtype), value,
                                               int_constant(axis), *self.operands).result
        return torch_ops.AtenIndexSelectOp(vtensor_type(sizes, dtype), value, int_constant(axis),
                                           *self.operands).result

    def is_one_row(self) -> bool:
        """A one-row, step-1 slice (``x[i:i+1]``)."""
        return (self.kind == "slice" and self.size == 1
                and (self.operands is None or constant_int(self.operands[2]) == 1))


@dataclasses.dataclass(frozen=True)
class Recut:
    """Another selection for one operand: ``make()`` builds it, for ``axis`` of
    the operand (one row per group, above a flatten or unflatten)."""

    axis: int
    make: Callable[[], _Cut]


@dataclasses.dataclass(frozen=True)
class Plan:
    """How a selection moves above one producer.

    ``moves``: operand position -> the axis of that operand that takes the same
    selection, or a ``Recut``. ``replaced``: operand position -> a builder of
    a new operand (an expand's size list). ``build``: a builder of the result
    from the new operands and the selection's type; None re-creates the
    producer with them."""

    moves: dict[int, int | Recut]
    replaced: dict[int, Callable[[], ir.Value]] = dataclasses.field(default_factory=dict)
    build: Callable[[list, ir.Type], ir.Value] | None = None


# A rule: (hoister, producer, result axis selected, selection) -> Plan or None.
Rule = Callable[["_Hoister", ir.Operation, int, _Cut], "Plan | None"]


def _rank(producer: ir.Operation) -> int:
    return len(vtensor_shape(producer.results[0].type)[0])


def _operand_rank(producer: ir.Operation, position: int) -> int:
    return len(vtensor_shape(producer.operands[position].type)[0])


# -- rules ----------------------------------------------------------------------
def _broadcast(h: _Hoister, producer, axis: int, positions) -> Plan | None:
    """The selection for each operand at ``positions`` that has the result's
    full size on the axis (aligned from the right); None where one's size
    cannot be proven equal or 1, or where no operand takes it."""
    rank, result_dims = _rank(producer), h.dims(producer.results[0])
    if result_dims is None or result_dims[axis] is None or result_dims[axis] == 1:
        return None  # nothing to save on a unit axis; unknown sizes: cannot align
    moves = {}
    for i in positions:
        operand = producer.operands[i]
        shape = vtensor_shape(operand.type)
        if shape is None:
            continue
        aligned = axis - (rank - len(shape[0]))
        if aligned < 0 or shape[0][aligned] == 1:
            continue  # broadcast along the axis: left whole
        dims = h.dims(operand)
        if dims is None or not same_size(dims[aligned], result_dims[axis]):
            return None  # may be 1 at run time, or differ: cannot tell
        moves[i] = aligned
    return Plan(moves) if moves else None


def through_elementwise(h, producer, axis, cut) -> Plan | None:
    """Elementwise ops and casts: every operand with the full axis is selected,
    the ones that broadcast along it are left whole."""
    return _broadcast(h, producer, axis, range(len(producer.operands)))


def through_dropout(h, producer, axis, cut) -> Plan | None:
    """Dropout in eval mode is its input; in training it draws a mask per element."""
    return Plan({0: axis}) if dropout_in_eval(producer) else None


def through_layer_norm(h, producer, axis, cut) -> Plan | None:
    """An axis before the normalized ones moves to the input; weight and bias
    stay whole."""
    normalized = list_items(typed(producer).normalized_shape)
    if normalized is None or axis >= _rank(producer) - len(normalized):
        return None
    return Plan({0: axis})


def through_softmax(h, producer, axis, cut) -> Plan | None:
    """A softmax over another axis."""
    dim = constant_int(typed(producer).dim)
    return None if dim is None or dim % _rank(producer) == axis else Plan({0: axis})


def through_reduction(h, producer, axis, cut) -> Plan | None:
    """A reduction over other axes: the result's axis is renumbered to the
    input's (without keepdim, the reduced axes are gone from the result)."""
    in_rank = _operand_rank(producer, 0)
    reduced, keep = reduced_axes(producer, in_rank), keepdim(producer)
    if not reduced or keep is None:
        return None
    if keep:
        return None if axis in reduced else Plan({0: axis})
    kept = [i for i in range(in_rank) if i not in reduced]
    return Plan({0: kept[axis]}) if axis < len(kept) else None


def _matmul(h, producer, axis, lhs: int, rhs: int, bias: int | None) -> Plan | None:
    rank = _rank(producer)
    lhs_rank, rhs_rank = _operand_rank(producer, lhs), _operand_rank(producer, rhs)
    if lhs_rank < 2 or rhs_rank < 2:
        return None
    if axis == rank - 2:
        moves = {lhs: lhs_rank - 2}
    elif axis == rank - 1:
        moves = {rhs: rhs_rank - 1}
    else:
        batch = _broadcast(h, producer, axis, [lhs, rhs])
        if batch is None:
            return None
        moves = dict(batch.moves)
    if bias is not None:
        extra = _broadcast(h, producer, axis, [bias])
        if extra is None:
            bias_shape = vtensor_shape(producer.operands[bias].type)[0]
            aligned = axis - (rank - len(bias_shape))
            if aligned >= 0 and bias_shape[aligned] != 1:
                return None
        else:
            moves.update(extra.moves)
    return Plan(moves)


def through_matmul(h, producer, axis, cut) -> Plan | None:
    """mm, bmm, matmul: rows to the left operand, columns to the right one,
    batch axes to both."""
    return _matmul(h, producer, axis, lhs=0, rhs=1, bias=None)


def through_matmul_with_bias(h, producer, axis, cut) -> Plan | None:
    """addmm, baddbmm: as a matmul, and the bias where it has the axis."""
    return _matmul(h, producer, axis, lhs=1, rhs=2, bias=0)


def through_linear(h, producer, axis, cut) -> Plan | None:
    """Rows to the input; a column (an output feature) to the weight's rows and
    the bias."""
    if axis < _rank(producer) - 1:
        return Plan({0: axis})
    return Plan({1: 0} if is_none(typed(producer).bias) else {1: 0, 2: 0})


def through_transpose(h, producer, axis, cut) -> Plan | None:
    """The axis, swapped."""
    a, b = constant_int(typed(producer).dim0), constant_int(typed(producer).dim1)
    if a is None or b is None:
        return None
    rank = _rank(producer)
    a, b = a % rank, b % rank
    return Plan({0: b if axis == a else a if axis == b else axis})


def through_permute(h, producer, axis, cut) -> Plan | None:
    """The input axis the permutation puts at the selected one."""
    order = int_list(typed(producer).dims)
    return None if order is None else Plan({0: order[axis] % _rank(producer)})


def through_unsqueeze(h, producer, axis, cut) -> Plan | None:
    """Any axis but the inserted one, renumbered."""
    dim = constant_int(typed(producer).dim)
    rank = _rank(producer)
    if dim is None or dim % rank == axis:
        return None
    return Plan({0: axis - (axis > dim % rank)})


def through_squeeze(h, producer, axis, cut) -> Plan | None:
    """The axis, renumbered around the removed one."""
    dim = constant_int(typed(producer).dim)
    if dim is None:
        return None
    dim %= _operand_rank(producer, 0)
    return Plan({0: axis + (axis >= dim)})


def through_expand(h, producer, axis, cut) -> Plan | None:
    """An expanded axis keeps its size 1 in the input and names the selected
    size in the size list; any other axis moves to the input, its size kept
    (-1)."""
    sizes = list_items(typed(producer).size)
    shape = vtensor_shape(typed(producer).self_.type)[0]
    aligned = axis - (_rank(producer) - len(shape))
    if sizes is None or aligned < 0:
        return None
    if shape[aligned] == 1:
        if cut.size is None:
            return None  # the new size would have to be computed
        moves = {}
    else:
        moves = {0: aligned}

    def new_sizes():
        items = list(sizes)
        items[axis] = int_constant(cut.size if shape[aligned] == 1 else -1)
        return int_list_construct(items)

    return Plan(moves, {1: new_sizes})


def through_flatten(h, producer, axis, cut) -> Plan | None:
    """Axes outside the merged ones, renumbered. On the merged [outer, inner]
    axis, the strided slice ``i::inner`` (one row per group) is row ``i`` of
    the inner axis."""
    flatten = typed(producer)
    source = flatten.self_
    start, end = constant_int(flatten.start_dim), constant_int(flatten.end_dim)
    in_rank = _operand_rank(producer, 0)
    if start is None or end is None:
        return None
    start, end = start % in_rank, end % in_rank
    if axis < start:
        return Plan({0: axis})
    if axis > start:
        return Plan({0: axis + end - start})
    # One row per group of the merged [outer, inner] axis: rows i, i + inner, ...
    if end != start + 1 or cut.kind != "slice" or cut.operands is None:
        return None
    first, last, step = cut.operands
    dims = h.dims(source)
    inner = dims[end] if dims else None
    step_expr = h.analysis.scalar(step)
    first_expr = h.analysis.scalar(first)
    last_value = constant_int(last)
    if inner is None or not same_size(step_expr, inner) or last_value is None or \
            last_value < _INT64_MAX // 2:
        return None
    if not h.inside(first_expr, inner):
        return None  # the start must be a row inside the group

    def one_row():
        return _Cut("slice", [first, h.plus_one(first), int_constant(1)], 1)

    return Plan({0: Recut(end, one_row)})


def through_unflatten(h, producer, axis, cut) -> Plan | None:
    """Axes outside the split ones, renumbered. Row ``i`` of the inner of two
    split axes is the strided slice ``i::inner`` of the input's axis, then
    unsqueezed."""
    dim = constant_int(typed(producer).dim)
    sizes = list_items(typed(producer).sizes)
    in_rank = _operand_rank(producer, 0)
    if dim is None or sizes is None:
        return None
    dim %= in_rank
    if axis < dim:
        return Plan({0: axis})
    if axis >= dim + len(sizes):
        return Plan({0: axis - len(sizes) + 1})
    if len(sizes) != 2 or axis != dim + 1 or not cut.is_one_row():
        return None
    inner = sizes[1]
    if cut.operands is not None and not h.inside(h.analysis.scalar(cut.operands[0]),
                                                 h.analysis.scalar(inner)):
        return None

    def strided():  # one row per group: as many rows as groups (static if known)
        return _Cut("slice", [cut.operands[0], int_constant(_INT64_MAX), inner],
                    constant_int(sizes[0]))

    def unsqueezed(operands, result_type):
        # The type the unsqueeze of its operand has (torch-mlir's lowering
        # builds that one), then cast to the selection's type.
        sizes_in, dtype = vtensor_shape(operands[0].type)
        natural = vtensor_type(sizes_in[:axis] + [1] + sizes_in[axis:], dtype)
        value = torch_ops.AtenUnsqueezeOp(natural, operands[0], int_constant(axis)).result
        return static_info_cast(value, result_type)

    return Plan({0: Recut(dim, strided)}, build=unsqueezed)


def through_attention(h, producer, axis, cut) -> Plan | None:
    """``scaled_dot_product_attention`` without a causal mask: query rows to Q
    and the mask's rows (where it has them), batch and head axes to Q, K, V and
    the mask; never a value column."""
    sdpa = typed(producer)
    if constant_bool(sdpa.is_causal) is not False:
        return None  # a causal mask depends on the row's position
    rank = _rank(producer)
    if axis == rank - 1:
        return None
    if axis == rank - 2:
        moves = {_QUERY: len(vtensor_shape(sdpa.query.type)[0]) - 2}
        mask = sdpa.attn_mask
        if vtensor_shape(mask.type) is not None:
            extra = _broadcast(h, producer, axis, [_MASK])
            mask_shape = vtensor_shape(mask.type)[0]
            if extra is None and mask_shape[axis - (rank - len(mask_shape))] != 1:
                return None
            moves.update(extra.moves if extra else {})
        return Plan(moves)
    return _broadcast(h, producer, axis, [_QUERY, _KEY, _VALUE, _MASK])


# The positions of scaled_dot_product_attention's query, key, value and
# attn_mask, in its definition's order: a Plan names the operands of the op it
# re-creates by position (test_hoist_slices_rules.py checks them against the
# generated class).
_QUERY, _KEY, _VALUE, _MASK = range(4)


def _by_op(*groups: tuple) -> dict[str, Rule]:
    """(op names, rule) pairs as one table; an op in two groups is an error."""
    table: dict[str, Rule] = {}
    for names, rule in groups:
        for name in ([names] if isinstance(names, str) else sorted(names)):
            if name in table:
                raise ValueError(f"{name}: both {table[name].__name__} and {rule.__name__}")
            table[name] = rule
    return table


# The moves, by op: what the producer of a selected value must be for the
# selection to move above it.
_RULES: dict[str, Rule] = _by_op(
    (ELEMENTWISE, through_elementwise),
    ("torch.aten.dropout", through_dropout),
    (LAYER_NORMS, through_layer_norm),
    (SOFTMAXES, through_softmax),
    (REDUCTIONS, through_reduction),
    (("torch.aten.mm", "torch.aten.bmm", "torch.aten.matmul"), through_matmul),
    (("torch.aten.addmm", "torch.aten.baddbmm"), through_matmul_with_bias),
    ("torch.aten.linear", through_linear),
    ("torch.aten.transpose.int", through_transpose),
    ("torch.aten.permute", through_permute),
    ("torch.aten.unsqueeze", through_unsqueeze),
    ("torch.aten.squeeze.dim", through_squeeze),
    ("torch.aten.expand", through_expand),
    ("torch.aten.flatten.using_ints", through_flatten),
    ("torch.aten.unflatten.int", through_unflatten),
    ("torch.aten.scaled_dot_product_attention", through_attention),
)


class _Hoister:
    """One function's shape facts and the moves that keep them current."""

    def __init__(self, func: ir.Operation):
        self.analysis = ShapeAnalysis(func)
        self.builder = ScalarBuilder(self.analysis)

    # -- dims -----------------------------------------------------------------
    def dims(self, value: ir.Value) -> list | None:
        known = self.analysis.dims.get(value)
        if known is not None:
            return known
        shape = vtensor_shape(value.type)
        return None if shape is None else [None if s is None else sympy.Integer(s) for s in shape[0]]

    def inside(self, row, size) -> bool:
        """0 <= row < size, provably (a row index inside an axis of ``size``)."""
        if row is None or size is None:
            return False
        if same_size(row, size - 1):
            return True
        low = self.analysis.min_of(row)
        return low is not None and low >= 0 and row.is_Integer and (
            self.analysis.min_of(size) or 0) > int(row)

    def plus_one(self, value: ir.Value) -> ir.Value:
        """value + 1, built from the rooted dims where it is a dim expression, so
        that equal selections read equal values (and merge)."""
        expr = self.analysis.scalar(value)
        built = None if expr is None else self.builder.build(sympy.expand(expr + 1))
        if built is not None:
            return built
        return torch_ops.AtenAddIntOp(value, int_constant(1)).result

    # -- moving -----------------------------------------------------------------
    def plan(self, producer: ir.Operation, axis: int, cut: _Cut) -> Plan | None:
        """The rule's plan for ``producer``; None without a rule, or while a
        result other than the first is still read (native_layer_norm's mean)."""
        rule = _RULES.get(producer.name)
        if rule is None or any(_has_real_users(r) for r in list(producer.results)[1:]):
            return None
        return rule(self, producer, axis, cut)

    def producer_if_movable(self, source, axis, cut):
        producer = defining_op(source)
        if producer is None:
            return None  # a function argument
        if widened_literal(source) is not None:
            # A weight kept as stored, read through its cast: the cast runs
            # once (IREE hoists it), and the compile quantizes the weight
            # from the cast of the blob (iree/constant_values.py).
            return None
        if not _only_real_user(source) and not _disjoint_slices(users(source), axis):
            return None  # other users need the whole tensor: the producer stays for them
        if self.plan(producer, axis, cut) is None:
            return None
        return producer

    def movable(self, source, axis, cut) -> bool:
        return self.producer_if_movable(source, axis, cut) is not None

    def move(self, producer, axis, cut, result_type) -> ir.Value | None:
        """``producer`` re-created on its operands' selected rows (at the current
        insertion point): its result, which is the selection of the old one."""
        plan = self.plan(producer, axis, cut)
        if plan is None:
            return None
        operands = list(producer.operands)
        for position, target in plan.moves.items():
            if isinstance(target, Recut):
                operands[position] = self.cut(target.make(), operands[position], target.axis)
            else:
                operands[position] = self.cut(cut, operands[position], target)
        for position, make in plan.replaced.items():
            operands[position] = make()
        if plan.build is not None:
            return self.record(plan.build(operands, result_type), producer.results[0], axis, cut)
        results = [result_type]
        for extra in list(producer.results)[1:]:
            sizes, dtype = vtensor_shape(extra.type)
            sizes = list(sizes)
            if axis < len(sizes):
                sizes[axis] = cut.size
            results.append(vtensor_type(sizes, dtype))
        moved = rebuilt(producer, operands, results)
        return self.record(moved.results[0], producer.results[0], axis, cut)

    def move_every_result(self, op, rewriter, producer, axis, cut) -> bool:
        """One selection of every used result of a multi-result reduction
        (``var, mean = var_mean(x)``, each reaching the selection through its own
        branch): the reduction runs on the selected rows, once."""
        same = _selection_key(op)
        selections = []
        for result in producer.results:
            readers = users(result)
            if any(_selection_key(u) != same for u in readers):
                return False  # a result is still used whole, or selected otherwise
            selections.append(readers)
        plan = through_reduction(self, producer, axis, cut)
        if plan is None:
            return False
        (position, operand_axis), = plan.moves.items()
        with ir.InsertionPoint(op), op.location:
            operands = list(producer.operands)
            operands[position] = self.cut(cut, operands[position], operand_axis)
            types = []
            for result in producer.results:
                sizes, dtype = vtensor_shape(result.type)
                sizes = list(sizes)
                sizes[axis] = cut.size
                types.append(vtensor_type(sizes, dtype))
            moved = rebuilt(producer, operands, types)
        for old, new, readers in zip(producer.results, moved.results, selections, strict=True):
            self.record(new, old, axis, cut)
            for user in readers:
                rewriter.replace_op(user, [new])
        for user in [use.owner for r in producer.results for use in r.uses]:
            rewriter.erase_op(user)  # the bindings of the whole results
        rewriter.erase_op(producer)
        return True

    def cut(self, cut: _Cut, value: ir.Value, axis: int) -> ir.Value:
        return self.record(cut.apply(value, axis), value, axis, cut)

    def record(self, new: ir.Value, old: ir.Value, axis: int, cut: _Cut) -> ir.Value:
        """``new`` has ``old``'s dims but the cut axis: later moves (and the range
        checks of selects above them) read it from the analysis."""
        dims = self.analysis.dims.get(old)
        if dims is not None and len(dims) == len(vtensor_shape(new.type)[0]):
            dims = list(dims)
            dims[axis] = None if cut.size is None else sympy.Integer(cut.size)
            self.analysis.dims[new] = dims
        return new


# -- patterns -------------------------------------------------------------------
def select_as_row_slice(h: _Hoister, op, rewriter) -> bool:
    """select(v, a, i) -> squeeze(slice(v, a, i, i + 1), a), when the slice can
    move (and row i provably exists: otherwise the select must keep raising
    its index error)."""
    select = typed(op)
    source, axis, index = select.self_, constant_int(select.dim), constant_int(select.index)
    shape = vtensor_shape(source.type)
    if axis is None or index is None or shape is None:
        return False
    axis %= len(shape[0])
    size = h.dims(source)[axis]
    row = sympy.Integer(index) if index >= 0 else None if size is None else size + index
    if not h.inside(row, size):
        return False  # may be out of range: the select must keep raising its error
    if not h.movable(source, axis, _Cut("slice", None, 1)):
        return False
    with ir.InsertionPoint(op), op.location:
        if index >= 0:
            start, end = int_constant(index), int_constant(index + 1)
        else:
            start = h.builder.build(size + index) if size is not None else None
            end = h.builder.build(size + index + 1) if size is not None else None
            if start is None or end is None:
                return False
        cut = _Cut("slice", [start, end, int_constant(1)], 1)
        row = h.cut(cut, source, axis)
        value = torch_ops.AtenSqueezeDimOp(op.results[0].type, row, int_constant(axis)).result
    rewriter.replace_op(op, [value])
    return True


def move_selection(h: _Hoister, op, rewriter) -> bool:
    """slice(producer(...)) or index_select(producer(...)) -> producer(selected
    operands), by the producer's rule; the producer goes when nothing else
    reads it."""
    selection = typed(op)  # slice(self_, dim, start, end, step), index_select(self_, dim, index)
    source, axis = selection.self_, constant_int(selection.dim)
    shape, result = vtensor_shape(source.type), vtensor_shape(op.results[0].type)
    if axis is None or shape is None or result is None:
        return False
    axis %= len(shape[0])
    kind = "slice" if is_a(op, torch_ops.AtenSliceTensorOp) else "index"
    if kind == "index" and len(vtensor_shape(selection.index.type)[0]) != 1:
        return False
    cut = _Cut(kind, list(op.operands[2:]), result[0][axis])
    multi = defining_op(source)
    if multi is not None and multi.name in _MULTI_RESULT:
        return h.move_every_result(op, rewriter, multi, axis, cut)
    producer = h.producer_if_movable(source, axis, cut)
    if producer is None:
        return False
    with ir.InsertionPoint(op), op.location:
        value = h.move(producer, axis, cut, op.results[0].type)
    if value is None:
        return False
    rewriter.replace_op(op, [value])
    if not any(_has_real_users(r) for r in producer.results):
        # Dead but for its bindings: erased here so that the next selection
        # up sees its own producer with one user.
        for user in [use.owner for r in producer.results for use in r.uses]:
            rewriter.erase_op(user)
        rewriter.erase_op(producer)
    return True


def gather_as_index_select(h: _Hoister, op, rewriter) -> bool:
    """gather(x, d, expand(idx)) with one index for every position of the other
    axes (idx of size 1 on them, expanded to x's sizes) is index_select(x, d,
    idx as 1-D): then it moves like one."""
    gather = typed(op)
    source, axis, index = gather.self_, constant_int(gather.dim), gather.index
    expand = defining_op(index)
    shape = vtensor_shape(source.type)
    if axis is None or shape is None or not is_a(expand, torch_ops.AtenExpandOp):
        return False
    rank = len(shape[0])
    axis %= rank
    base = expand.operands[0]
    base_shape = vtensor_shape(base.type)
    if base_shape is None or len(base_shape[0]) != rank:
        return False
    if any(n != 1 for i, n in enumerate(base_shape[0]) if i != axis):
        return False  # the index differs along another axis: a per-row gather
    index_dims, source_dims = h.dims(index), h.dims(source)
    if index_dims is None or source_dims is None or any(
            not same_size(index_dims[i], source_dims[i]) for i in range(rank) if i != axis):
        return False  # gather would read only a corner of x there
    result = vtensor_shape(op.results[0].type)[0]
    if not h.movable(source, axis, _Cut("index", None, result[axis])):
        return False
    with ir.InsertionPoint(op), op.location:
        flat = base
        if rank > 1:
            flat = torch_ops.AtenFlattenUsingIntsOp(vtensor_type([base_shape[0][axis]], base_shape[1]),
                                                    base, int_constant(0), int_constant(rank - 1)).result
        value = torch_ops.AtenIndexSelectOp(op.results[0].type, source, int_constant(axis), flat).result
    rewriter.replace_op(op, [value])
    return True


# -- selections compared, and the patterns that tidy up -------------------------
def _selection_key(op) -> tuple | None:
    """What a slice/index_select selects (kind, axis, bounds or index, the
    result's sizes), without its source or dtype (the results of ``max.dim``
    differ in dtype); None for other ops."""
    if not is_a(op, torch_ops.AtenSliceTensorOp, torch_ops.AtenIndexSelectOp):
        return None
    rank = len(vtensor_shape(typed(op).self_.type)[0])
    axis = constant_int(typed(op).dim)
    if axis is None:
        return None
    return (op.name, axis % rank, tuple(vtensor_shape(op.results[0].type)[0])) + tuple(
        _value_key(v) for v in list(op.operands)[2:])


def _has_real_users(value: ir.Value) -> bool:
    return bool(users(value))


def _only_real_user(value: ir.Value) -> bool:
    return len(users(value)) == 1


def _disjoint_slices(readers: list, axis: int) -> bool:
    """Every user a step-1 slice of constant, pairwise disjoint rows along ``axis``:
    each can take its own copy of the producer, and the copies together do the
    producer's work once (a fused QKV projection split into Q, K and V)."""
    ranges = []
    for user in readers:
        if not is_a(user, torch_ops.AtenSliceTensorOp):
            return False
        user_axis, start, end, step = (constant_int(v) for v in list(user.operands)[1:5])
        rank = len(vtensor_shape(user.operands[0].type)[0])
        if None in (user_axis, start, end, step) or step != 1 or start < 0 or end < start:
            return False
        if user_axis % rank != axis:
            return False
        ranges.append((start, end))
    ranges.sort()
    return all(a[1] <= b[0] for a, b in zip(ranges, ranges[1:]))


def split_into_slices(op, rewriter) -> bool:
    """ListUnpack(split_with_sizes(x, sizes, d)) -> one slice of x per part, so a
    selection of one part (Q of a fused QKV) can move on without the others."""
    split = defining_op(op.operands[0])
    if not is_a(split, torch_ops.AtenSplitWithSizesOp):
        return False
    sizes, axis = int_list(typed(split).split_sizes), constant_int(typed(split).dim)
    if sizes is None or axis is None or len(sizes) != len(op.results):
        return False
    with ir.InsertionPoint(op), op.location:
        parts, start = [], 0
        for size, result in zip(sizes, op.results):
            parts.append(torch_ops.AtenSliceTensorOp(result.type, split.operands[0],
                                                     int_constant(axis), int_constant(start),
                                                     int_constant(start + size), int_constant(1)).result)
            start += size
    rewriter.replace_op(op, parts)
    if not list(split.results[0].uses):
        rewriter.erase_op(split)  # so the slices are the value's only users
    return True


def squeeze_of_unsqueeze(op, rewriter) -> bool:
    """squeeze(unsqueeze(x, d), d) is x: what a moved row leaves below a reshape."""
    squeeze = typed(op)
    inner = defining_op(squeeze.self_)
    if not is_a(inner, torch_ops.AtenUnsqueezeOp):
        return False
    unsqueeze = typed(inner)
    rank = len(vtensor_shape(squeeze.self_.type)[0])
    a, b = constant_int(squeeze.dim), constant_int(unsqueeze.dim)
    if a is None or b is None or a % rank != b % rank or unsqueeze.self_.type != op.results[0].type:
        return False
    rewriter.replace_op(op, [unsqueeze.self_])
    return True


def merge_duplicate_slices(func: ir.Operation) -> int:
    """Identical selections of one value become one: the first, which dominates
    the rest. Returns how many were merged."""
    seen: dict[tuple, ir.Value] = {}
    merged = 0
    for op in list(func.regions[0].blocks[0].operations):
        op = op.operation
        if not is_a(op, torch_ops.AtenSliceTensorOp, torch_ops.AtenIndexSelectOp):
            continue
        key = (op.name, str(op.results[0].type)) + tuple(_value_key(v) for v in op.operands)
        if key in seen:
            op.results[0].replace_all_uses_with(seen[key])
            op.erase()
            merged += 1
        else:
            seen[key] = op.results[0]
    return merged


def _value_key(value: ir.Value):
    constant = constant_int(value)
    return ("int", constant) if constant is not None else ("value", value)


@register
@dataclasses.dataclass
class HoistSlicesPass(ModulePass):
    argument = "anyshape-hoist-slices"
    description = ("Move selections (select, slice, index_select) up the graph so the "
                   "ops above them compute only the rows kept")

    def apply(self, module_op):
        for func in functions(module_op):
            hoist_argument_bindings(func)  # root queries go after them
            hoister = _Hoister(func)
            patterns = [(torch_ops.AtenSelectIntOp, functools.partial(select_as_row_slice, hoister)),
                        (torch_ops.AtenSliceTensorOp, functools.partial(move_selection, hoister)),
                        (torch_ops.AtenIndexSelectOp, functools.partial(move_selection, hoister)),
                        (torch_ops.AtenGatherOp, functools.partial(gather_as_index_select, hoister)),
                        (torch_ops.AtenSqueezeDimOp, squeeze_of_unsqueeze),
                        (torch_ops.PrimListUnpackOp, split_into_slices)]
            # Branches that rejoin (x used by both halves of x * tanh(x)) each bring
            # their own copy of a selection up to x: once merged, x has one user
            # again and the selection can go on.
            for _ in range(_MAX_ROUNDS):
                apply_patterns(func, patterns)
                if not merge_duplicate_slices(func):
                    break
            erase_unused(func)
