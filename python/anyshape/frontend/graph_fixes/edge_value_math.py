"""``pow`` and ``atan2`` at the inputs where IREE's float math returns wrong values.

IREE 3.13 expands ``math.powf`` as ``exp(y * log(x))`` and ``math.atan2``
with a polynomial, both for finite positive inputs only. Through torch-mlir,
on anyshape and on the plain stack alike:

- ``(-2.0) ** x`` gave 0 at every x (eager: -8 at x = 3, NaN at 0.5);
  ``pow(a, b)`` NaN for every negative ``a`` (eager: ``a ** 3`` negative)
  and for ``0 ** 0`` (eager: 1); ``0.0 ** x`` NaN at x = 0;
- ``x ** -1`` at +0 gave -inf (eager: +inf);
- ``atan2(0, 0)`` gave NaN (eager: 0, or +-pi from -0);
- the variance of fewer elements than its correction (an empty dim) gave
  -0.0, ``0 / (0 - 1)``, where eager divides by ``max(0, N - correction)``
  and gives NaN.

``rewrite_edge_value_math`` rewrites each such op of a float dtype, before
the import, into the magnitude ``|a| ** b`` (where IREE is right) and the
IEEE rules eager follows for signs, zeros and non-integral exponents of
negative bases; a variance is NaN where its element count is below the
correction. ``x ** k`` for a constant integer k >= 0 is left alone (it
is right, and the common case: ``x.pow(2)`` in T5's layer norm). The
guarding test is ``test_edge_value_math.py``; remove this when IREE's
expansions handle these inputs.
"""

from __future__ import annotations

import math
import operator
from numbers import Number

import torch
from torch.fx import Graph, Node

from anyshape.frontend.graph_fixes.fx_emit import Emitter
from anyshape.stages import Workaround

aten = torch.ops.aten


class _Emit(Emitter):
    """An ``Emitter`` with the constants and predicates the rules below use."""

    def constant(self, value: float, dtype: torch.dtype) -> Node:
        return self(aten.scalar_tensor.default, value, dtype=dtype)

    def where(self, condition, x, y, dtype) -> Node:
        pick = [self.constant(v, dtype) if isinstance(v, Number) else v for v in (x, y)]
        return self(aten.where.self, condition, *pick)

    def signbit(self, a: Node) -> Node:
        """``a < 0``, or ``a`` is -0.0 (whose reciprocal is -inf)."""
        negative = self(aten.lt.Scalar, a, 0)
        negative_zero = self(aten.logical_and.default, self(aten.eq.Scalar, a, 0),
                             self(aten.lt.Scalar, self(aten.reciprocal.default, a), 0))
        return self(aten.logical_or.default, negative, negative_zero)


def _float_dtype(node: Node) -> torch.dtype | None:
    val = node.meta.get("val")
    return val.dtype if isinstance(val, torch.Tensor) and val.is_floating_point() else None


def _pow_tensor_scalar(e: _Emit, a: Node, exponent: float, dtype) -> Node:
    """IEEE ``a ** exponent`` for a constant exponent other than an integer >= 0."""
    magnitude = e(aten.pow.Tensor_Scalar, e(aten.abs.default, a), exponent)
    at_zero = math.inf if exponent < 0 else 0.0
    magnitude = e.where(e(aten.eq.Scalar, a, 0), at_zero, magnitude, dtype)
    if not float(exponent).is_integer():
        # A finite negative base to a non-integral power is NaN (-0.0 is not negative
        # here); eager's ** -0.5 is a reciprocal square root, NaN for -inf too.
        negative = e(aten.lt.Scalar, a, 0)
        if exponent != -0.5:
            negative = e(aten.logical_and.default, negative, e(aten.ne.Scalar, a, -math.inf))
        return e.where(negative, math.nan, magnitude, dtype)
    if int(exponent) % 2 == 0:
        return magnitude
    return e.where(e.signbit(a), e(aten.neg.default, magnitude), magnitude, dtype)


def _pow_general(e: _Emit, a: Node, b: Node, dtype) -> Node:
    """IEEE pow for tensors ``a`` and ``b`` of ``dtype``."""
    magnitude = e(aten.pow.Tensor_Tensor, e(aten.abs.default, a), b)
    # 0 ** b: inf for b < 0, 0 for b > 0, NaN for NaN b (b = 0 is 1, below).
    at_zero = e.where(e(aten.lt.Scalar, b, 0), math.inf,
                      e.where(e(aten.gt.Scalar, b, 0), 0.0, math.nan, dtype), dtype)
    magnitude = e(aten.where.self, e(aten.eq.Scalar, a, 0), at_zero, magnitude)
    integral = e(aten.eq.Tensor, b, e(aten.trunc.default, b))
    finite = e(aten.ne.Scalar, e(aten.abs.default, b), math.inf)
    half = e(aten.mul.Scalar, b, 0.5)  # exact; torch-mlir has no fmod.Scalar lowering
    odd = e(aten.logical_and.default, e(aten.logical_and.default, integral, finite),
            e(aten.ne.Tensor, half, e(aten.trunc.default, half)))
    signed = e.where(e(aten.logical_and.default, e.signbit(a), odd),
                     e(aten.neg.default, magnitude), magnitude, dtype)
    # A finite negative base to a non-integral power is NaN; -inf's is +-inf or 0.
    finite_negative = e(aten.logical_and.default, e(aten.lt.Scalar, a, 0),
                        e(aten.ne.Scalar, a, -math.inf))
    undefined = e(aten.logical_and.default, finite_negative, e(aten.logical_not.default, integral))
    signed = e.where(undefined, math.nan, signed, dtype)
    # x ** 0 and 1 ** y are 1 even for NaN; (-1) ** +-inf is 1.
    one = e(aten.logical_or.default, e(aten.eq.Scalar, b, 0), e(aten.eq.Scalar, a, 1))
    one = e(aten.logical_or.default, one, e(aten.logical_and.default,
                                            e(aten.eq.Scalar, a, -1), e(aten.logical_not.default, finite)))
    return e.where(one, 1.0, signed, dtype)


def _as_dtype(e: _Emit, value, like: Node, dtype) -> Node:
    if isinstance(value, Node):
        if value.meta["val"].dtype == dtype:
            return value
        return e(aten._to_copy.default, value, dtype=dtype)
    return e(aten.full_like.default, like, value, dtype=dtype)


def _atan2(e: _Emit, y: Node, x: Node, dtype) -> Node:
    y, x = _as_dtype(e, y, x, dtype), _as_dtype(e, x, y, dtype)

    def signed_like_y(value):
        return e.where(e.signbit(y), -value, value, dtype) if isinstance(value, float) else \
            e.where(e.signbit(y), e(aten.neg.default, value), value, dtype)

    # atan2(+-0, x) is +-0 for x > 0 or +0, +-pi for x < 0 or -0 (NaN x aside).
    on_axis = e(aten.logical_and.default, e(aten.eq.Scalar, y, 0), e(aten.eq.Tensor, x, x))
    axis_value = e(aten.where.self, e.signbit(x), signed_like_y(math.pi), y)
    # atan2(+-inf, +-inf) is +-pi/4 or +-3pi/4.
    both_infinite = e(aten.logical_and.default,
                      e(aten.eq.Scalar, e(aten.abs.default, y), math.inf),
                      e(aten.eq.Scalar, e(aten.abs.default, x), math.inf))
    corner = signed_like_y(e.where(e(aten.gt.Scalar, x, 0), math.pi / 4, 3 * math.pi / 4, dtype))
    # atan2(y, -inf) is +-pi for finite y (IREE: +pi whatever y's sign).
    from_left = e(aten.logical_and.default, e(aten.eq.Scalar, x, -math.inf), e(aten.eq.Tensor, y, y))
    left = e(aten.where.self, from_left, signed_like_y(math.pi),
             e(aten.atan2.default, y, x))
    inner = e(aten.where.self, both_infinite, corner, left)
    return e(aten.where.self, on_axis, axis_value, inner)


_REWRITTEN = (aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, aten.pow.Scalar, aten.atan2.default)
_VARIANCES = (aten.var.correction, aten.std.correction,
              aten.var_mean.correction, aten.std_mean.correction)


def _guard_variance(graph: Graph, node: Node) -> bool:
    """NaN where the reduced element count N < correction, after ``node``."""
    source = node.args[0]
    shape = source.meta["val"].shape
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    dims = range(len(shape)) if dims is None else [d % max(len(shape), 1) for d in dims]
    correction = node.kwargs.get("correction", node.args[2] if len(node.args) > 2 else 1)
    correction = 1 if correction is None else correction
    if not isinstance(correction, Number) or correction <= 0:
        return False
    sizes = [shape[d] for d in dims]
    if all(isinstance(size, int) for size in sizes) and math.prod(sizes) >= correction:
        return False
    first = node.next
    e = _Emit(graph, first)
    count = 1
    for d, size in zip(dims, sizes):
        size = size if isinstance(size, int) else e(aten.sym_size.int, source, d)
        count = size if isinstance(count, int) and count == 1 else (
            count * size if isinstance(count, int) and isinstance(size, int)
            else e(operator.mul, count, size))
    count_tensor = e(aten.scalar_tensor.default, count, dtype=torch.float64)
    too_few = e(aten.lt.Scalar, count_tensor, correction)
    if node.target in (aten.var.correction, aten.std.correction):
        outputs = [node]
    else:  # a (variance, mean) pair: only the variance
        outputs = [user for user in node.users
                   if user.target is operator.getitem and user.args[1] == 0]
    for output in outputs:
        # After the output and the count (emitted before node.next, at or before it).
        e = _Emit(graph, first if output is node else output.next)
        users = list(output.users)
        guarded = e.where(too_few, math.nan, output, output.meta["val"].dtype)
        for user in users:
            user.replace_input_with(output, guarded)
    return True


def rewrite_edge_value_math(graph: Graph) -> int:
    """Rewrite float ``pow``, ``atan2`` and variances as above; returns how many ops."""
    rewritten = 0
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if node.target in _VARIANCES:
            rewritten += _guard_variance(graph, node)
            continue
        dtype = _float_dtype(node)
        if dtype is None or node.target not in _REWRITTEN:
            continue
        e = _Emit(graph, node)
        args = node.args
        if node.target is aten.pow.Tensor_Scalar and isinstance(args[1], Number):
            # Right as they are: integers >= 0 (repeated products) and 0.5 (a square
            # root, as eager computes it: -0.0 ** 0.5 is -0.0).
            if (float(args[1]).is_integer() and args[1] >= 0) or args[1] == 0.5:
                continue
            a = _as_dtype(e, args[0], node, dtype)
            replacement = _pow_tensor_scalar(e, a, float(args[1]), dtype)
        elif node.target is aten.pow.Tensor_Tensor and all(isinstance(a, Node) for a in args):
            a, b = (_as_dtype(e, v, node, dtype) for v in args)
            replacement = _pow_general(e, a, b, dtype)
        elif node.target is aten.pow.Scalar and isinstance(args[0], Number):
            b = _as_dtype(e, args[1], node, dtype)
            replacement = _pow_general(e, _as_dtype(e, args[0], b, dtype), b, dtype)
        elif node.target is aten.atan2.default and all(isinstance(a, Node) for a in args):
            replacement = _atan2(e, args[0], args[1], dtype)
        else:
            continue
        node.replace_all_uses_with(replacement)
        graph.erase_node(node)
        rewritten += 1
    return rewritten


# Workarounds of upstream bugs here (docs/workarounds.md, anyshape/stages.py).
WORKAROUNDS = (
    Workaround(
        name='edge_value_pow_atan2', stage='import',
        where='rewrite_edge_value_math (_pow_tensor_scalar, _pow_general, _atan2)',
        upstream='IREE 3.13 expands math.powf as exp(y * log(x)) and math.atan2 with a '
                 'polynomial, right for finite positive inputs only: (-2.0) ** x gave 0, pow of a'
                 ' negative base NaN, 0 ** 0 NaN, x ** -1 at +0 -inf, atan2(0, 0) NaN, atan2(y, '
                 "-inf) +pi whatever y's sign.",
        guard=('test/python/frontend/test_edge_value_math.py::test_pow_and_atan2_at_edge_values_as_eager',
               'test/python/frontend/test_edge_value_math.py::test_atan2_of_integers_at_the_origin',
               'test/python/test_opinfo_floor.py::test_floor[atan2-int64-5]'),
        remove_when="when IREE's expansions handle these inputs"),
    Workaround(
        name='variance_below_correction_is_nan', stage='import',
        where='rewrite_edge_value_math (_guard_variance)',
        upstream='Through torch-mlir/IREE the variance of fewer elements than its correction (an '
                 'empty dim) gave -0.0, 0 / (0 - 1), where eager divides by max(0, N - '
                 'correction) and gives NaN.',
        guard=('test/python/frontend/test_edge_value_math.py::test_variance_of_fewer_elements_than_the_correction_is_nan',
               'test/python/test_opinfo_floor.py::test_floor[var-float32-14]'),
        remove_when="when the lowering gives NaN there (the module docstring's 'remove this when "
                    "IREE's expansions handle these inputs' covers the whole module)"),
)
