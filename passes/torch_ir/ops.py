"""torch-dialect ops by family, one table each, and readers of their operands.

A pass that handles a family reads the table here rather than listing the
ops itself, so that an op added to a family reaches every pass that handles
it; where a pass handles only part of a family, the table next to it here
says which part, and why.
"""

from __future__ import annotations

import dataclasses

from anyshape.dialects import vtensor_shape
from anyshape.mlir import ir, torch_ops
from anyshape.passes.torch_ir.constants import (bool_constant, constant_bool, constant_int,
                                                int_constant, int_list_construct, int_or_int_list,
                                                is_none, none_constant)
from anyshape.passes.torch_ir.values import typed, vtensor_type

# -- elementwise --------------------------------------------------------------
# Ops computing each element of their result from the same element of their
# tensor operands (broadcast aside): what a selection of rows moves through
# (anyshape-hoist-slices) and what runs on token rows alone
# (anyshape-eliminate-padding).
ELEMENTWISE = frozenset({
    "torch.aten.add.Tensor", "torch.aten.sub.Tensor", "torch.aten.mul.Tensor", "torch.aten.div.Tensor",
    "torch.aten.add.Scalar", "torch.aten.sub.Scalar", "torch.aten.mul.Scalar", "torch.aten.div.Scalar",
    "torch.aten.rsub.Scalar", "torch.aten.where.self", "torch.aten.where.ScalarSelf",
    "torch.aten.where.ScalarOther", "torch.aten.gelu", "torch.aten.tanh", "torch.aten.relu",
    "torch.aten.erf", "torch.aten.pow.Tensor_Scalar", "torch.aten.pow.Tensor_Tensor",
    "torch.aten.neg", "torch.aten.rsqrt", "torch.aten.sqrt", "torch.aten.exp", "torch.aten.sigmoid",
    "torch.aten.silu", "torch.aten.to.dtype", "torch.aten._to_copy", "torch.prims.convert_element_type",
    "torch.aten.clone", "torch.aten.contiguous", "torch.aten.masked_fill.Scalar",
    "torch.aten.masked_fill.Tensor", "torch.aten.eq.Scalar", "torch.aten.ne.Scalar",
    "torch.aten.gt.Scalar", "torch.aten.lt.Scalar", "torch.aten.ge.Scalar", "torch.aten.le.Scalar",
    "torch.aten.eq.Tensor", "torch.aten.ne.Tensor", "torch.aten.gt.Tensor", "torch.aten.lt.Tensor",
    "torch.aten.ge.Tensor", "torch.aten.le.Tensor", "torch.aten.logical_not",
    "torch.aten.bitwise_and.Tensor", "torch.aten.bitwise_or.Tensor", "torch.aten.bitwise_not",
    "torch.aten.maximum", "torch.aten.minimum", "torch.aten.abs", "torch.aten.log",
    "torch.tensor_static_info_cast", "torch.aten.full_like", "torch.aten.zeros_like",
    "torch.aten.ones_like", "torch.aten.empty_like",
})

# Elementwise ops whose tensor operands broadcast against each other: the
# result's dims are the operands' broadcast (the shape analysis).
BROADCASTING = frozenset({
    "torch.aten.add.Tensor", "torch.aten.sub.Tensor", "torch.aten.mul.Tensor",
    "torch.aten.div.Tensor", "torch.aten.pow.Tensor_Tensor", "torch.aten.where.self",
    "torch.aten.maximum", "torch.aten.minimum", "torch.aten.eq.Tensor", "torch.aten.ne.Tensor",
    "torch.aten.lt.Tensor", "torch.aten.gt.Tensor", "torch.aten.le.Tensor", "torch.aten.ge.Tensor",
    "torch.aten.bitwise_and.Tensor", "torch.aten.bitwise_or.Tensor", "torch.aten.masked_fill.Scalar",
    "torch.aten.masked_fill.Tensor", "torch.aten.where.ScalarOther", "torch.aten.where.ScalarSelf",
    "torch.aten.logical_and", "torch.aten.logical_or",
})

# The part of BROADCASTING that anyshape-canonicalize-shapes' expand rewrites
# match (broadcasts.py: an expand the op implies is dropped, one beside 0-d
# operands sinks below the op): the ops masks and scores are built with, which
# the rewrites were written and tested for. pow of two tensors, masked_fill and
# where with a scalar are left out: not reviewed for them, no test.
SYMMETRIC_BROADCASTING = BROADCASTING - {
    "torch.aten.pow.Tensor_Tensor", "torch.aten.masked_fill.Scalar",
    "torch.aten.masked_fill.Tensor", "torch.aten.where.ScalarOther", "torch.aten.where.ScalarSelf"}

# Ops whose result has the shape of their first operand (the shape analysis;
# BROADCASTING ops are not among them). The cast ``torch.tensor_static_info_cast``
# is not: the dims of its result are those its type states or a binding names.
SAME_SHAPE = frozenset({
    "torch.aten.tanh", "torch.aten.relu", "torch.aten.gelu", "torch.aten.erf", "torch.aten.neg",
    "torch.aten.rsqrt", "torch.aten.sqrt", "torch.aten.exp", "torch.aten.sigmoid",
    "torch.aten.clone", "torch.aten.contiguous", "torch.aten.to.dtype", "torch.aten._to_copy",
    "torch.aten.add.Scalar", "torch.aten.sub.Scalar", "torch.aten.mul.Scalar",
    "torch.aten.div.Scalar", "torch.aten.pow.Tensor_Scalar", "torch.aten.softmax.int",
    "torch.aten._softmax", "torch.aten.log_softmax.int", "torch.aten.layer_norm",
    "torch.aten.dropout", "torch.aten.ne.Scalar", "torch.aten.eq.Scalar", "torch.aten.ge.Scalar",
    "torch.aten.gt.Scalar", "torch.aten.lt.Scalar", "torch.aten.le.Scalar",
    "torch.aten.cumsum", "torch.aten.logical_not",
    "torch.aten.bitwise_not", "torch.aten.abs", "torch.aten.log", "torch.aten.sin",
    "torch.aten.cos", "torch.aten.silu", "torch.aten.ones_like", "torch.aten.zeros_like",
    "torch.aten.full_like", "torch.aten.empty_like", "torch.aten.type_as",
    "torch.aten.to.dtype_layout",
    "torch.aten.detach", "torch.aten.alias", "torch.aten._log_softmax", "torch.aten.rsub.Scalar",
    "torch.prims.convert_element_type", "torch.aten.native_layer_norm",
})


def dropout_in_eval(op: ir.Operation) -> bool:
    """``aten.dropout(x, p, train)`` with ``train`` a constant false: the identity."""
    return constant_bool(typed(op).train) is False


# -- reductions ---------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Reduction:
    """A reduction form. Its operands read by name (``typed``), the same in
    every form here: ``self_`` (the input), ``dim`` (the reduced dims: an int
    list, one int, or none: every dim) and ``keepdim`` (a bool);
    ``test_reduction_operands_read_by_name`` holds every form to that."""

    results: int = 1  # results, all shaped alike (values and indices, var and mean)


# Every pass that handles reductions handles every op here:
# - the shape analysis: the result's dims (the input's, reduced ones dropped
#   or kept as 1);
# - anyshape-hoist-slices: a selection of an axis that is not reduced moves to
#   the input; an op with several results moves when every used result carries
#   the same selection (``_Hoister.move_every_result``);
# - the padding proof (padding_safety.py): a reduction over a position axis of
#   a value with padded positions is refused;
# - anyshape-eliminate-padding: one over feature axes only runs on token rows.
# Dims that are not constants (or none: every dim) stop all four.
REDUCTIONS: dict[str, Reduction] = {
    "torch.aten.sum.dim_IntList": Reduction(),
    "torch.aten.mean.dim": Reduction(),
    "torch.aten.amax": Reduction(),
    "torch.aten.amin": Reduction(),
    "torch.aten.any.dim": Reduction(),
    "torch.aten.all.dim": Reduction(),
    # Hoisting: values and indices differ in dtype, so the selections of the
    # two are compared by their sizes, not their types.
    "torch.aten.max.dim": Reduction(results=2),
    "torch.aten.min.dim": Reduction(results=2),
    # Hoisting through these three was missing: each result row is computed
    # from the same input row, as for sum; now moved, lit-tested.
    "torch.aten.argmax": Reduction(),
    "torch.aten.argmin": Reduction(),
    "torch.aten.logsumexp": Reduction(),
    "torch.aten.prod.dim_int": Reduction(),
    "torch.aten.var.correction": Reduction(),
    "torch.aten.std.correction": Reduction(),
    "torch.aten.var_mean.correction": Reduction(results=2),
    # The shape analysis (and so the padding proof and padding elimination)
    # missed the .dim forms (unbiased where the .correction forms have the
    # correction); now derived, lit-tested.
    "torch.aten.var.dim": Reduction(),
    "torch.aten.std.dim": Reduction(),
    "torch.aten.var_mean.dim": Reduction(results=2),
}


def reduced_axes(op: ir.Operation, rank: int) -> set[int] | None:
    """The axes of its ``rank``-d input a REDUCTIONS op reduces (non-negative;
    every axis for an empty dims list, as torch reads it); None when its dims
    are not constants."""
    dims = int_or_int_list(typed(op).dim)
    if dims is None:
        return None
    if rank == 0:
        return set()  # torch takes dim 0 or -1 of a 0-d tensor as the tensor itself
    return {d % rank for d in dims} if dims else set(range(rank))


def keepdim(op: ir.Operation) -> bool | None:
    """A REDUCTIONS op's keepdim; None when it is not a constant."""
    return constant_bool(typed(op).keepdim)


# -- softmax ------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Softmax:
    """A softmax form. Its operands read by name (``typed``): ``self_``, ``dim``
    (the axis), and ``dtype`` (none: the input's) or, in the ``_softmax`` forms,
    ``half_to_float`` (false: the input's)."""

    log: bool  # log_softmax


SOFTMAXES: dict[str, Softmax] = {
    "torch.aten.softmax.int": Softmax(log=False),
    "torch.aten._softmax": Softmax(log=False),
    "torch.aten.log_softmax.int": Softmax(log=True),
    "torch.aten._log_softmax": Softmax(log=True),
}
# The forms that compute probabilities (not their logarithms).
PROBABILITY_SOFTMAXES = tuple(n for n, s in SOFTMAXES.items() if not s.log)

_FLOAT_DTYPES = ("f16", "bf16", "f32", "f64")


# torch's ScalarType codes of the float dtypes, as a softmax's dtype argument gives them.
SCALAR_TYPE_CODES = {5: "f16", 6: "f32", 7: "f64", 15: "bf16"}
SCALAR_TYPE_OF = {name: code for code, name in SCALAR_TYPE_CODES.items()}


def softmax_computation(op: ir.Operation) -> tuple[int, str] | None:
    """(reduced axis, non-negative; the float dtype it computes in) of a
    SOFTMAXES op over a float input: the input's dtype, or the one its dtype
    argument (``softmax(x, dtype=torch.float32)``) or ``half_to_float``
    converts the input to first, as torch does; None otherwise."""
    softmax = typed(op)
    shape = vtensor_shape(softmax.self_.type)
    if shape is None or shape[1] not in _FLOAT_DTYPES:
        return None
    sizes, dtype = shape
    if hasattr(softmax, "half_to_float"):
        to_float = constant_bool(softmax.half_to_float)
        if to_float is None or (to_float and dtype != "f16"):
            return None
        computed = "f32" if to_float else dtype
    elif is_none(softmax.dtype):
        computed = dtype
    else:
        code = constant_int(softmax.dtype)
        computed = SCALAR_TYPE_CODES.get(code) if code is not None else None
        if computed is None:
            return None
    axis = constant_int(softmax.dim)
    if axis is None:
        return None
    axis = axis + len(sizes) if axis < 0 else axis
    if not 0 <= axis < len(sizes):
        return None
    return axis, computed


def softmax_axis(op: ir.Operation) -> int | None:
    """The reduced axis (non-negative) of a SOFTMAXES op that computes in its
    input's (float) dtype, with no dtype given or its input's given (BLOOM's
    ``softmax(x, dim=-1, dtype=torch.float32)`` of float32 scores); None
    otherwise."""
    computation = softmax_computation(op)
    if computation is None:
        return None
    axis, dtype = computation
    return axis if dtype == vtensor_shape(op.operands[0].type)[1] else None


@dataclasses.dataclass
class ShiftedExponentials:
    """The parts of a softmax up to its normalization (shared by the two passes
    that rewrite softmaxes)."""

    row_max: ir.Value       # max over the axis, kept as a size-1 dim
    shifted: ir.Value       # x - row_max
    exponentials: ir.Value  # exp(x - row_max)
    total: ir.Value         # their sum over the axis, kept as a size-1 dim


def shifted_exponentials(x: ir.Value, axis: int) -> ShiftedExponentials:
    """The softmax's parts up to its sum, at the current insertion point."""
    sizes, dtype = vtensor_shape(x.type)
    reduced = vtensor_type([1 if i == axis else s for i, s in enumerate(sizes)], dtype)
    axes = int_list_construct([int_constant(axis)])
    keepdim = bool_constant(True)
    row_max = torch_ops.AtenAmaxOp(reduced, x, axes, keepdim).result
    shifted = torch_ops.AtenSubTensorOp(x.type, x, row_max, int_constant(1)).result
    exponentials = torch_ops.AtenExpOp(x.type, shifted).result
    total = torch_ops.AtenSumDimIntListOp(reduced, exponentials, axes, keepdim,
                                          none_constant()).result
    return ShiftedExponentials(row_max, shifted, exponentials, total)


# -- normalizations -----------------------------------------------------------
# Layer norms: ``typed(op).normalized_shape`` lists the trailing dims normalized
# over; ``weight`` and ``bias`` have those dims.
LAYER_NORMS = frozenset({"torch.aten.layer_norm", "torch.aten.native_layer_norm"})

# -- reshapes -----------------------------------------------------------------
# Reshapes by a size list (operand 1).
VIEWS = frozenset({"torch.aten.view", "torch.aten.reshape", "torch.aten._unsafe_view"})
# Reshapes that keep the elements' order: VIEWS, and the ones by structure.
RESHAPES = VIEWS | {"torch.aten.flatten.using_ints", "torch.aten.unflatten.int"}
