"""``anyshape-canonicalize-shapes``: shape facts explicit and cheap in torch-dialect IR.

Rewrites, in this order:
- **dim rooting**: every shape query (``aten.size.int``, ``aten.size`` +
  ``__getitem__``, ``aten.numel``, ``aten.dim``) of any value becomes the same
  fact over function-argument dims (see ``torch_ir/shape_analysis.py``): static dims
  fold to constants, derived dims (``2*s0``, ``s0*s1``, ``s0//2``) become scalar
  arithmetic, and dims equal by a shared symbol read one SSA value, the
  ``aten.size.int`` of the first argument dim bound to it, placed at the entry.
  Views by computed sizes become structural reshapes (``structural_reshapes.py``)
  and expands name only the dims that broadcast (``broadcasts.py``).
- **dynamic iota**: ``aten.arange(end)``, ``arange.start(0, end)`` and
  ``arange.start_step(0, end, 1)`` with an integer dtype, where ``end`` is
  ``aten.size.int x, d``, become ``anyshape.iota_like x {dim = d}``: the
  length is read from ``x`` where the values are produced, not carried as a
  scalar into a generic arange (Gluon-NLP's ``arange_like``). Other aranges
  keep their exact semantics. So does a slice of a constant arange buffer.
- **iota-indexed lookups** become slices, and expanded lookups and operands
  are broadcast by the ops that use them (``iota_lookups.py``, ``broadcasts.py``).
- **always-true mask terms**: an and with a term that is provably true
  everywhere (``arange(L) >= 0``, which transformers' mask functions and
  with the padding mask) is the other term, broadcast; the broadcast moves
  below ops whose other operands are 0-d (the mask's ``where(m, 0, -inf)``)
  into the op that broadcasts anyway (the scores' addition), so the scores
  get a ``[B, 1, 1, L]`` mask, not a ``[B, 1, L, L]`` one
  (``broadcasts.py``).
- ops left unused but for their own ``torch.bind_symbolic_shape`` are erased.
"""

import dataclasses
from functools import partial

import sympy

from anyshape.dialects import iota_like, vtensor_shape
from anyshape.mlir import ir, torch_ops
from anyshape.passes import ModulePass, apply_patterns, register
from anyshape.passes.canonicalize_shapes.broadcasts import (and_with_all_true, drop_implied_expand,
                                       gather_from_expanded_table, rewrite_expand,
                                       sink_expand_below_embedding, sink_expand_below_scalars)
from anyshape.passes.canonicalize_shapes.iota_lookups import (rewrite_arange_constant_slice,
                                                              rewrite_iota_gather,
                                                              rewrite_iota_index,
                                                              rewrite_iota_lookup)
from anyshape.passes.canonicalize_shapes.structural_reshapes import rewrite_view
from anyshape.passes.torch_ir.constants import constant_int, is_none
from anyshape.passes.torch_ir.ops import SYMMETRIC_BROADCASTING
from anyshape.passes.torch_ir.scalar_builder import ScalarBuilder
from anyshape.passes.torch_ir.shape_analysis import ShapeAnalysis, size_query
from anyshape.passes.torch_ir.values import (defining_op, dtype_code, erase_unused, functions,
                                             hoist_argument_bindings, is_a, static_info_cast, typed,
                                             vtensor_type)

# arange overload -> (index of start or None for 0, index of end, index of step or
# None for 1, index of dtype)
_ARANGE_OPERANDS = {
    "torch.aten.arange": (None, 0, None, 1),
    "torch.aten.arange.start": (0, 1, None, 2),
    "torch.aten.arange.start_step": (0, 1, 2, 3),
}


def arange_to_iota(op, rewriter) -> bool:
    """``arange(0, size(x, d), 1)`` with an integer dtype -> ``iota_like(x, d)``."""
    start_at, end_at, step_at, dtype_at = _ARANGE_OPERANDS[op.operation.name]
    operands = op.operands
    if start_at is not None and constant_int(operands[start_at]) != 0:
        return False
    if step_at is not None and constant_int(operands[step_at]) != 1:
        return False
    query = size_query(operands[end_at])
    result = vtensor_shape(op.results[0].type)
    if query is None or result is None or len(result[0]) != 1:
        return False
    code = dtype_code(result[1])
    dtype = operands[dtype_at]
    if code is None or not (is_none(dtype) or constant_int(dtype) == code):
        return False  # a float arange, or a dtype that disagrees with the result
    ref, dim = query
    length = vtensor_shape(ref.type)[0][dim]
    with ir.InsertionPoint(op), op.location:
        iota = iota_like(ref, dim, vtensor_type([length], result[1]))
        replacement = static_info_cast(iota, op.results[0].type)
    rewriter.replace_op(op, [replacement])
    return True


def _replace_with(op, rewriter, builder: ScalarBuilder, expr) -> bool:
    if expr is None:
        return False
    with ir.InsertionPoint(op), op.location:
        value = builder.build(expr)
    if value is None or value == op.results[0]:
        return False
    rewriter.replace_op(op, [value])
    return True


def root_size_query(op, rewriter, builder: ScalarBuilder) -> bool:
    """``size(x, d)`` -> its dim as scalar ops over the argument dims: a
    constant, arithmetic on roots, or the one root query of its symbol."""
    query = size_query(op.results[0])
    if query is None:
        return False
    expr = builder.analysis.dim(*query)
    if isinstance(expr, sympy.Symbol):
        root = builder.root(expr)
        # No root: a size no argument dim gives (nonzero's row count, an
        # unbacked symbol); already the root: canonical as it is.
        if root is None or root == op.results[0]:
            return False
    return _replace_with(op, rewriter, builder, expr)


def root_size_list_item(op, rewriter, builder: ScalarBuilder) -> bool:
    """``size(x)[i]`` (an item of the size list) -> as ``size(x, i)``."""
    producer = defining_op(typed(op).list)
    index = constant_int(typed(op).idx)
    if not is_a(producer, torch_ops.AtenSizeOp) or index is None:
        return False
    tensor = producer.operands[0]
    shape = vtensor_shape(tensor.type)
    if shape is None:
        return False
    index = index + len(shape[0]) if index < 0 else index
    return _replace_with(op, rewriter, builder, builder.analysis.dim(tensor, index))


def root_numel(op, rewriter, builder: ScalarBuilder) -> bool:
    """``numel(x)`` -> the product of x's dims over the argument dims."""
    dims = builder.analysis.dims.get(op.operands[0])
    if dims is None or any(d is None for d in dims):
        return False
    return _replace_with(op, rewriter, builder,
                         sympy.Mul(*dims) if dims else sympy.Integer(1))


def fold_rank(op, rewriter, builder: ScalarBuilder) -> bool:
    """``dim(x)`` -> x's rank, a constant."""
    shape = vtensor_shape(op.operands[0].type)
    return shape is not None and _replace_with(op, rewriter, builder,
                                               sympy.Integer(len(shape[0])))


def _root_patterns(builder: ScalarBuilder):
    analysis = builder.analysis
    view = partial(rewrite_view, analysis=analysis, builder=builder)
    expand = partial(rewrite_expand, analysis=analysis)
    return [(torch_ops.AtenSizeIntOp, partial(root_size_query, builder=builder)),
            (torch_ops.Aten__Getitem__TOp, partial(root_size_list_item, builder=builder)),
            (torch_ops.AtenNumelOp, partial(root_numel, builder=builder)),
            (torch_ops.AtenDimOp, partial(fold_rank, builder=builder)),
            (torch_ops.AtenViewOp, view), (torch_ops.AtenReshapeOp, view),
            (torch_ops.AtenExpandOp, expand), (torch_ops.AtenBroadcastToOp, expand)]


def _iota_patterns(builder: ScalarBuilder):
    return [(name, arange_to_iota) for name in _ARANGE_OPERANDS] + [
        (torch_ops.AtenSliceTensorOp,
         partial(rewrite_arange_constant_slice, analysis=builder.analysis))]


_CONJUNCTIONS = ("torch.aten.bitwise_and.Tensor", "torch.aten.logical_and")


def _lookup_patterns(builder: ScalarBuilder):
    """Patterns on one root are tried in the order listed (equal benefit)."""
    analysis = builder.analysis
    lookup = partial(rewrite_iota_lookup, analysis=analysis, builder=builder)
    index = partial(rewrite_iota_index, analysis=analysis)
    expand = partial(rewrite_expand, analysis=analysis)
    broadcasts = [partial(drop_implied_expand, analysis=analysis),
                  partial(sink_expand_below_scalars, analysis=analysis)]
    all_true = partial(and_with_all_true, analysis=analysis, builder=builder)
    return [
        (torch_ops.AtenEmbeddingOp, lookup),
        (torch_ops.AtenEmbeddingOp, partial(sink_expand_below_embedding, analysis=analysis)),
        (torch_ops.AtenIndexSelectOp, lookup),
        (torch_ops.AtenIndexTensorOp, index), (torch_ops.AtenIndexTensorHackedTwinOp, index),
        (torch_ops.AtenGatherOp, partial(rewrite_iota_gather, analysis=analysis, builder=builder)),
        (torch_ops.AtenGatherOp, partial(gather_from_expanded_table, analysis=analysis)),
        (torch_ops.AtenExpandOp, expand), (torch_ops.AtenBroadcastToOp, expand),
    ] + [(name, pattern)
         for name in sorted(SYMMETRIC_BROADCASTING)
         for pattern in ([all_true] if name in _CONJUNCTIONS else []) + broadcasts]


@register
@dataclasses.dataclass
class CanonicalizeShapesPass(ModulePass):
    argument = "anyshape-canonicalize-shapes"
    description = ("Make shape facts explicit: shape queries rooted at argument dims, "
                   "aranges over a tensor's size as anyshape.iota_like")

    def apply(self, module_op):
        funcs = list(functions(module_op))
        for func in funcs:
            hoist_argument_bindings(func)
        builders = [ScalarBuilder(ShapeAnalysis(func)) for func in funcs]
        for func, builder in zip(funcs, builders):
            apply_patterns(func, _root_patterns(builder))
        for func, builder in zip(funcs, builders):
            apply_patterns(func, _iota_patterns(builder))
            builder.analysis.refresh()  # the iotas' dims, for the lookups and broadcasts
            apply_patterns(func, _lookup_patterns(builder))
            erase_unused(func)
            # A rewrite that returns an argument itself (an identity expand) leaves
            # that value's binding on the argument, further down: deduplicated here.
            hoist_argument_bindings(func)
