"""Shape-derived Python scalars of an exported graph, in forms torch-mlir imports and IREE lowers.

torch.export records arithmetic on sizes (``x.shape[-1] ** 0.5``, ``L % 8``,
``torch.sym_max(L, 4)``, ``math.floor(L / 2)``) as calls of Python builtins and
``torch.sym_*`` functions. torch-mlir's FX importer knows + - * / // neg and
the comparisons, refuses ``sym_float``, ``sym_max``, ``floor``, ``pow`` and the
``torch._sym_*`` math ("Unimplemented call_function"), and imports ``%`` as
``aten.fmod.int``: truncating where Python rounds toward -inf, and an op IREE
cannot lower. ``lower_symbolic_scalars`` rewrites each such node, before the
import, into torch ops that IREE's torch input turns into arith on
``tensor.dim`` values (torch-mlir's TorchToArith): a scalar op where one
exists (``aten.Float.Scalar``, ``aten.sqrt.int``, ``prim.max.int``,
``aten.floordiv.int``), otherwise the same math on a 0-d float64/int64
tensor read back with ``aten.Float.Tensor``/``aten.Int.Tensor`` (exact too;
IREE computes it in a dispatch of its own): so are floats rounded to ints.
"""

from __future__ import annotations

import math
import operator
from typing import Any, Callable

import torch
from torch.fx import Graph, Node
from anyshape.stages import Workaround

aten, prim = torch.ops.aten, torch.ops.prim

_INT, _FLOAT, _BOOL = "int", "float", "bool"
_DTYPES = {_INT: torch.int64, _FLOAT: torch.float64, _BOOL: torch.bool}
_READ_BACK = {_INT: aten.Int.Tensor, _FLOAT: aten.Float.Tensor, _BOOL: aten.Bool.Tensor}
# Placeholder values that give the importer an intermediate node's scalar type.
_TYPE_OF = {_INT: 0, _FLOAT: 0.0, _BOOL: False}


def kind(value: Any) -> str | None:
    """'int', 'float' or 'bool' for a scalar (symbolic or not), else None."""
    if isinstance(value, (bool, torch.SymBool)):
        return _BOOL
    if isinstance(value, (int, torch.SymInt)):
        return _INT
    if isinstance(value, (float, torch.SymFloat)):
        return _FLOAT
    return None


def _arg_kind(arg) -> str | None:
    return kind(arg.meta.get("val")) if isinstance(arg, Node) else kind(arg)


class _Builder:
    """Inserts the replacement of one node, before it, with its source location."""

    def __init__(self, graph: Graph, node: Node, fake_mode):
        self.graph, self.node, self.fake_mode = graph, node, fake_mode

    def call(self, op, *args, result: str | None = None, **kwargs) -> Node:
        """A scalar op; ``result`` its kind (None: the replaced node's own value)."""
        new = self.graph.call_function(op, args, kwargs)
        new.meta.update({k: v for k, v in self.node.meta.items() if k != "val"})
        new.meta["val"] = self.node.meta["val"] if result is None else _TYPE_OF[result]
        return new

    def tensor(self, op, *args, **kwargs) -> Node:
        """A tensor op, its value computed on fake tensors (the importer types it)."""
        new = self.call(op, *args, result=_INT, **kwargs)

        def value(arg):
            if isinstance(arg, Node):
                val = arg.meta["val"]
                return _TYPE_OF[kind(val)] if kind(val) is not None else val
            return arg

        with self.fake_mode:
            new.meta["val"] = op(*map(value, args), **kwargs)
        return new

    def as_float(self, arg):
        if _arg_kind(arg) == _FLOAT:
            return arg
        if not isinstance(arg, Node):
            return float(arg)
        return self.call(aten.Float.Scalar, arg, result=_FLOAT)

    def via_tensor(self, op, *args, **kwargs) -> Node:
        """``op`` on 0-d tensors of the scalar arguments (float64 if any is a
        float, else int64, else bool), read back as the replaced node's kind."""
        kinds = {_arg_kind(a) for a in args} - {None}
        dtype = _DTYPES[_FLOAT if _FLOAT in kinds else (_INT if _INT in kinds else _BOOL)]
        tensors = [self.tensor(aten.scalar_tensor.default, a, dtype=dtype)
                   if _arg_kind(a) is not None else a for a in args]
        value = self.tensor(op, *tensors, **kwargs)
        out_kind = kind(self.node.meta["val"])
        if value.meta["val"].dtype != _DTYPES[out_kind]:
            value = self.tensor(aten._to_copy.default, value, dtype=_DTYPES[out_kind])
        return self.call(_READ_BACK[out_kind], value)


def _all(kind_: str, *args) -> bool:
    return all(_arg_kind(a) == kind_ for a in args)


def _sym_float(b: _Builder, x):
    return x if _arg_kind(x) == _FLOAT else b.call(aten.Float.Scalar, x)


# A float size rounded to an int (``math.floor(L * 1.7)``, interpolation's
# output size) often sizes a tensor, so IREE computes it on the host, where its
# VM has no float64 -> int conversion (arith.fptosi "explicitly marked
# illegal"); a 0-d tensor op converts it in a dispatch, and the int is read back.
def _trunc(b: _Builder, x):
    return x if _arg_kind(x) == _INT else b.via_tensor(aten.trunc.default, b.as_float(x))


def _floor(b: _Builder, x):
    return x if _arg_kind(x) == _INT else b.via_tensor(aten.floor.default, b.as_float(x))


def _ceil(b: _Builder, x):
    return x if _arg_kind(x) == _INT else b.via_tensor(aten.ceil.default, b.as_float(x))


def _integer_under_float(x):
    """The int node a float node converts, if it is one (``sym_float(L)``)."""
    if isinstance(x, Node) and x.op == "call_function" and \
            x.target in (torch.sym_float, aten.Float.Scalar) and _arg_kind(x.args[0]) == _INT:
        return x.args[0]
    return None


def _sqrt(b: _Builder, x):
    integer = x if _arg_kind(x) == _INT else _integer_under_float(x)
    if integer is not None:
        return b.call(aten.sqrt.int, integer)
    return b.via_tensor(aten.sqrt.default, x)


# Powers by a small constant integer exponent are repeated products.
_MAX_UNROLLED_POWER = 8


def _pow(b: _Builder, base, exponent):
    if exponent == 0.5 and not isinstance(exponent, Node):
        return _sqrt(b, base)
    if exponent == 1 and not isinstance(exponent, Node):
        return base
    if isinstance(exponent, int) and not isinstance(exponent, bool) and \
            2 <= exponent <= _MAX_UNROLLED_POWER and _arg_kind(base) in (_INT, _FLOAT):
        mul = aten.mul.int if _arg_kind(base) == _INT else aten.mul.float
        product = base
        for _ in range(exponent - 1):
            product = b.call(mul, product, base, result=_arg_kind(base))
        product.meta["val"] = b.node.meta["val"]
        return product
    if _arg_kind(base) == _INT and _arg_kind(exponent) == _INT:
        return b.via_tensor(aten.pow.Tensor_Tensor, base, exponent)
    return b.via_tensor(aten.pow.Tensor_Tensor, b.as_float(base), b.as_float(exponent))


def _mod(b: _Builder, x, y):
    if _all(_INT, x, y):
        # Python's x % y = x - y * (x // y), with floordiv rounding toward -inf as
        # Python's does (arith.floordivsi); torch-mlir's remainder.int truncates.
        quotient = b.call(aten.floordiv.int, x, y, result=_INT)
        return b.call(aten.sub.int, x, b.call(aten.mul.int, y, quotient, result=_INT))
    return b.via_tensor(aten.remainder.Tensor, x, y)


def _extremum(int_op, tensor_op):
    def rule(b: _Builder, x, y):
        if _all(_INT, x, y):
            return b.call(int_op, x, y)
        return b.via_tensor(tensor_op, b.as_float(x), b.as_float(y))
    return rule


def _comparison(float_op, swap: bool):
    """A comparison with a float operand: TorchToArith lowers gt, ge and eq of
    floats only, so lt and le swap their operands."""
    def rule(b: _Builder, x, y):
        if _all(_INT, x, y):
            return None  # the importer's own int comparison lowers
        x, y = b.as_float(x), b.as_float(y)
        return b.call(float_op, *((y, x) if swap else (x, y)))
    return rule


def _not_equal(b: _Builder, x, y):
    return None if _all(_INT, x, y) else b.via_tensor(aten.ne.Tensor, x, y)


def _floordiv(b: _Builder, x, y):
    return None if _all(_INT, x, y) else b.via_tensor(aten.floor_divide.default, x, y)


def _sym_not(b: _Builder, x):
    return b.call(aten.eq.int, b.call(aten.Int.bool, x, result=_INT), 0)


def _logical(bool_op, tensor_op):
    def rule(b: _Builder, x, y):
        return b.call(bool_op, x, y) if _all(_BOOL, x, y) else b.via_tensor(tensor_op, x, y)
    return rule


def _shift(int_op, tensor_op):
    """x << k is x * 2**k and x >> k is x // 2**k (rounding toward -inf, as
    Python's >> does) for a constant k."""
    def rule(b: _Builder, x, k):
        if _arg_kind(x) == _INT and isinstance(k, int) and not isinstance(k, bool) and k >= 0:
            return b.call(int_op, x, 2 ** k)
        return b.via_tensor(tensor_op, x, k)
    return rule


def _sym_ite(b: _Builder, condition, x, y):
    mask = b.tensor(aten.scalar_tensor.default, condition, dtype=torch.bool)
    return b.via_tensor(aten.where.self, mask, x, y)


def _abs(b: _Builder, x):
    if _arg_kind(x) == _INT:
        return b.call(prim.max.int, x, b.call(aten.neg.int, x, result=_INT))
    return b.via_tensor(aten.abs.default, x)


def _round(b: _Builder, x, ndigits=None):
    if ndigits is not None:
        return b.via_tensor(aten.round.decimals, b.as_float(x), decimals=ndigits)
    return x if _arg_kind(x) == _INT else b.via_tensor(aten.round.default, x)


def _sym_sum(b: _Builder, terms):
    add = aten.add.int if all(_arg_kind(t) == _INT for t in terms) else aten.add.float
    total = terms[0] if add is aten.add.int else b.as_float(terms[0])
    for term in terms[1:]:
        total = b.call(add, total, term if add is aten.add.int else b.as_float(term),
                       result=_INT if add is aten.add.int else _FLOAT)
    total.meta["val"] = b.node.meta["val"]
    return total


def _unary_math(tensor_op):
    return lambda b, x: b.via_tensor(tensor_op, b.as_float(x))


RULES: dict[Callable, Callable] = {
    torch.sym_float: _sym_float,
    torch.sym_int: _trunc,
    math.trunc: _trunc,
    math.floor: _floor,
    math.ceil: _ceil,
    torch._sym_sqrt: _sqrt,
    operator.pow: _pow,
    operator.mod: _mod,
    torch.sym_max: _extremum(prim.max.int, aten.maximum.default),
    torch.sym_min: _extremum(prim.min.int, aten.minimum.default),
    operator.lt: _comparison(aten.gt.float, swap=True),
    operator.le: _comparison(aten.ge.float, swap=True),
    operator.gt: _comparison(aten.gt.float, swap=False),
    operator.ge: _comparison(aten.ge.float, swap=False),
    operator.eq: _comparison(aten.eq.float, swap=False),
    operator.ne: _not_equal,
    operator.floordiv: _floordiv,
    torch.sym_not: _sym_not,
    operator.and_: _logical(aten.__and__.bool, aten.bitwise_and.Tensor),
    operator.or_: _logical(aten.__or__.bool, aten.bitwise_or.Tensor),
    operator.lshift: _shift(aten.mul.int, aten.bitwise_left_shift.Tensor),
    operator.rshift: _shift(aten.floordiv.int, aten.bitwise_right_shift.Tensor),
    torch.sym_ite: _sym_ite,
    operator.abs: _abs,
    round: _round,
    torch.sym_sum: _sym_sum,
    **{getattr(torch, f"_sym_{name}"): _unary_math(getattr(aten, name).default)
       for name in ("cos", "sin", "tan", "cosh", "sinh", "tanh", "asin", "acos", "atan", "exp",
                    "log2")
       if hasattr(torch, f"_sym_{name}")},
}


def lower_symbolic_scalars(graph: Graph) -> int:
    """Rewrite the graph's scalar nodes as above; returns how many were rewritten."""
    from torch._guards import detect_fake_mode

    fake_mode = detect_fake_mode([n.meta.get("val") for n in graph.nodes])
    rewritten = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or kind(node.meta.get("val")) is None:
            continue
        rule = RULES.get(node.target)
        if rule is None:
            continue
        with graph.inserting_before(node):
            replacement = rule(_Builder(graph, node, fake_mode), *node.args, **node.kwargs)
        if not isinstance(replacement, Node) or replacement is node:
            continue
        node.replace_all_uses_with(replacement)
        graph.erase_node(node)
        rewritten += 1
    return rewritten


def wrap_scalars_at_tensor_operands(graph: Graph) -> int:
    """Give each aten op a 0-d tensor where its schema takes a Tensor and the
    graph passes a shape-derived scalar; returns how many were wrapped.

    torch.export keeps ``aten.sub.Tensor(L - 1, index)`` (reflection padding's
    decomposition) with the SymInt where the schema says Tensor, which eager
    accepts as a wrapped number; torch-mlir imports it as is, an op its
    verifier then rejects ("operand #0 must be Any Torch tensor type"). The
    0-d tensor takes the dtype eager computes in (``torch.result_type`` of the
    scalar with the op's tensor operands), so the result's dtype is eager's.
    """
    from torch._guards import detect_fake_mode

    fake_mode = detect_fake_mode([n.meta.get("val") for n in graph.nodes])
    wrapped = 0
    for node in list(graph.nodes):
        schema = getattr(node.target, "_schema", None)
        if node.op != "call_function" or schema is None:
            continue
        tensors = [a.meta["val"] for a in node.args
                   if isinstance(a, Node) and isinstance(a.meta.get("val"), torch.Tensor)]
        if not tensors:
            continue
        for position, (arg, formal) in enumerate(zip(node.args, schema.arguments)):
            if (not isinstance(arg, Node) or _arg_kind(arg) is None
                    or not isinstance(formal.type, torch.TensorType)):
                continue
            dtype = torch.result_type(tensors[0], _TYPE_OF[_arg_kind(arg)])
            with graph.inserting_before(node):
                tensor = graph.call_function(aten.scalar_tensor.default, (arg,), {"dtype": dtype})
            # The op's location, not its type: the importer reads tensor_meta first.
            tensor.meta.update({k: v for k, v in node.meta.items()
                                if k not in ("val", "tensor_meta")})
            with fake_mode:
                tensor.meta["val"] = torch.empty((), dtype=dtype)
            node.update_arg(position, tensor)
            wrapped += 1
    return wrapped


def scalar_as_tensor(graph: Graph, node: Node, before: Node) -> Node:
    """A 0-d tensor of the scalar ``node`` (int64, float64 or bool), inserted
    before ``before``: how a Python scalar the model returns leaves the module."""
    from torch._guards import detect_fake_mode

    dtype = _DTYPES[kind(node.meta["val"])]
    with graph.inserting_before(before):
        tensor = graph.call_function(aten.scalar_tensor.default, (node,), {"dtype": dtype})
    tensor.meta.update({k: v for k, v in node.meta.items() if k != "val"})
    with detect_fake_mode([n.meta.get("val") for n in graph.nodes]):
        tensor.meta["val"] = torch.empty((), dtype=dtype)
    return tensor


# Workarounds of upstream bugs here (docs/workarounds.md, anyshape/stages.py).
WORKAROUNDS = (
    Workaround(
        name='symbolic_scalars_lowered', stage='import',
        where='lower_symbolic_scalars (RULES)',
        upstream="torch-mlir's FX importer refuses sym_float, sym_max/min, floor/ceil/trunc, pow "
                 'and the torch._sym_* math ("FIX ME: Unimplemented call_function"), and imports '
                 'Python % as aten.fmod.int (truncating, and an op IREE cannot lower); each is '
                 'rewritten into torch scalar ops or 0-d tensor math that IREE lowers.',
        guard=('test/python/frontend/test_symbolic_scalars.py::test_scalar_from_sizes_is_exact_at_every_size',
               'test/python/frontend/test_symbolic_scalars.py::test_import_leaves_no_python_scalar_call_to_torch_mlir',
               'test/python/frontend/test_symbolic_scalars.py::test_length_scaled_positions_at_odd_lengths',
               'test/python/test_op_coverage.py::test_matches_eager[pad-to-multiple]'),
        remove_when="(inferred) when torch-mlir's importer imports these calls (and % with "
                    "Python's rounding) and IREE lowers them"),
    Workaround(
        name='float_size_rounding_in_dispatch', stage='import',
        where='_trunc, _floor, _ceil (via_tensor)',
        upstream="A float size rounded to an int (math.floor(L * 1.7), interpolation's output "
                 "size) is computed on IREE's host, whose VM has no float64 -> int conversion "
                 '(arith.fptosi "explicitly marked illegal"); done on a 0-d tensor in a dispatch '
                 'and read back.',
        guard=('test/python/frontend/test_symbolic_scalars.py::test_interpolation_by_a_fractional_scale_at_odd_lengths',
               'test/python/test_opinfo_floor.py::test_floor[nn.functional.interpolate.nearest-float32-2]'),
        remove_when="(inferred) when IREE's host VM converts float64 to int"),
    Workaround(
        name='float_scalar_comparisons_swapped', stage='import',
        where='_comparison',
        upstream="torch-mlir's TorchToArith lowers only gt, ge and eq of floats, so lt and le of "
                 'a float scalar swap their operands.',
        guard='test/python/frontend/test_symbolic_scalars.py::test_scalar_from_sizes_is_exact_at_every_size[less-than-float]',
        remove_when='(inferred) when TorchToArith lowers lt/le of floats'),
    Workaround(
        name='scalar_at_tensor_operand_wrapped', stage='import',
        where='wrap_scalars_at_tensor_operands',
        upstream="torch.export keeps aten.sub.Tensor(L - 1, index) (reflection padding's "
                 'decomposition) with a SymInt where the schema says Tensor; torch-mlir imports '
                 'it as is and its verifier rejects it ("operand #0 must be Any Torch tensor '
                 'type").',
        guard=('test/python/frontend/test_symbolic_scalars.py::test_reflection_padding_at_odd_sizes',
               'test/python/frontend/test_symbolic_scalars.py::test_size_at_a_tensor_operand_keeps_eagers_dtype',
               'test/python/test_op_coverage.py::test_matches_eager[pad-reflect]',
               'test/python/test_opinfo_floor.py::test_floor[nn.functional.pad.reflect-float32-0]'),
        remove_when="(inferred) when torch.export or torch-mlir's importer wraps such scalars as "
                    'tensors'),
)
