"""FLOP counts of torch-dialect IR, as sympy expressions over the dynamic dims.

``count_flops(module)`` returns a :class:`FlopReport` for one function;
``count_module_flops`` one per function. Dims come from
:class:`~anyshape.passes.torch_ir.shape_analysis.ShapeAnalysis`, so a count is a
polynomial over the symbols rooted at argument dims (the
``torch.symbolic_int`` names where the import bound them, ``arg{i}_dim{j}``
for dynamic argument dims nothing binds); ``report.symbols`` says which
argument dim each symbol is, and ``evaluate``/``at_shapes`` turn a count
into a number.

Conventions (what one FLOP is here):

- **Matmul family**, exact: ``2*M*N*K`` per output batch element, i.e.
  ``2 * numel(out) * K`` for ``mm``, ``bmm``, ``matmul``, ``mv``, ``dot``
  and ``linear`` (K is the contracted size). This part is also summed alone
  as ``report.matmul``; it is what ``torch.utils.flop_counter.FlopCounterMode``
  counts for ``mm``/``addmm``/``bmm``/``baddbmm`` (its ``2*M*N*K``, no
  ``2K - 1`` correction). On top of it: ``linear``'s bias add is one FLOP per
  output element; ``addmm``/``baddbmm`` add one per output element for
  ``+ self`` (none when ``beta`` is the constant 0) and one more for each of
  ``beta``, ``alpha`` that is not the constant 1. FlopCounterMode ignores
  those adds, so compare it with ``report.matmul``, not ``report.total``;
  it also counts CPU's fused attention kernel
  (``_scaled_dot_product_flash_attention_for_cpu``) as 0, where the import
  has decomposed attention into counted ``bmm``s: compare eager attention.
- **Elementwise** (arithmetic, comparisons, selects such as ``where`` and
  ``masked_fill``, activations): one FLOP per *output* element, so a
  broadcasting add counts the broadcast result. An activation or
  transcendental (``tanh``, ``exp``, ``erf``, ``gelu``, ``silu``) is one op per
  element, as a single scalar function; ``add``/``sub`` with an ``alpha``
  that is not the constant 1 count 2 (scale, then add).
- **Normalizations and softmax** count each pass their decomposition makes
  over the data, per element of the output; terms per row (the divide by N,
  ``+ eps``, ``rsqrt``) are left out:
  ``layer_norm`` 5 (sum for the mean, subtract the mean, square, sum for the
  variance, multiply by the reciprocal deviation) + 1 with a weight + 1 with a
  bias, so 7 for ``nn.LayerNorm``; ``rms_norm`` 3 (square, sum, scale) + 1
  with a weight; ``softmax``/``_softmax``/``log_softmax`` 5 (max, subtract,
  exp, sum, divide or subtract).
- **Reductions**: one FLOP per *input* element (``sum``, ``mean``, ``amax``,
  ``max.dim``, ``argmax``, ``any``, ``prod``, ``cumsum``, ...); ``var``/``std``
  4 (sum, subtract, square, sum) and ``logsumexp`` 4 (max, subtract, exp, sum).
- **Free (zero)**: ops that only move, view or create data, listed in
  ``FREE``: views and reshapes, permutes and transposes, (un)squeeze,
  expand, slice/select, cat/split, clone/contiguous, dtype conversions
  (``_to_copy``, ``to.dtype``), gathers and lookups (``embedding``,
  ``index_select``, ``gather``, ``index.Tensor``), constructors (``arange``,
  ``full``, ``zeros_like``, ``scalar_tensor``, literals), ``dropout``
  (identity at inference) and ``anyshape.iota_like``. Ops with no tensor
  result (constants, lists, scalar ``!torch.int`` arithmetic, size queries,
  symbolic-shape bookkeeping, ``return``) are free too and not listed.
- **Unknown**: an op with a tensor result and no rule here (``nonzero``,
  ``convolution``, ``scaled_dot_product_attention``, ``func.call``), an op
  holding regions, or a counted op whose dims the analysis cannot tell, is
  listed in ``report.unknown`` with the reason and contributes nothing to the
  totals: never a silent 0.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Callable, Iterable, Sequence

import sympy

from anyshape.dialects import new_context, vtensor_shape
from anyshape.mlir import ir, parse_module, torch_ops
from anyshape.passes.torch_ir.constants import constant_number, is_none
from anyshape.passes.torch_ir.shape_analysis import ShapeAnalysis
from anyshape.passes.torch_ir.values import forget_identities, is_a

__all__ = ["FlopReport", "UnknownOp", "count_flops", "count_module_flops", "FREE",
           "PER_OUTPUT_ELEMENT", "PER_INPUT_ELEMENT", "MATMULS"]

Expr = sympy.Expr

# FLOPs per output element of elementwise ops (add/sub with alpha, and the
# normalizations, have rules of their own below).
PER_OUTPUT_ELEMENT: dict[str, int] = {
    **{f"torch.aten.{name}": 1 for name in (
        "mul.Tensor", "mul.Scalar", "div.Tensor", "div.Scalar", "div.Tensor_mode",
        "div.Scalar_mode", "floor_divide", "floor_divide.Scalar", "remainder.Tensor",
        "remainder.Scalar", "fmod.Tensor", "fmod.Scalar", "pow.Tensor_Scalar",
        "pow.Tensor_Tensor", "pow.Scalar", "square", "neg", "abs", "reciprocal", "sign",
        "sqrt", "rsqrt", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin",
        "cos", "tan", "tanh", "sigmoid", "erf", "gelu", "relu", "relu6", "leaky_relu", "elu",
        "silu", "mish", "hardswish", "hardsigmoid", "hardtanh", "softplus", "clamp",
        "clamp.Tensor", "clamp_min", "clamp_max", "maximum", "minimum", "floor", "ceil",
        "round", "trunc", "isnan", "isinf", "eq.Tensor", "eq.Scalar", "ne.Tensor",
        "ne.Scalar", "lt.Tensor", "lt.Scalar", "gt.Tensor", "gt.Scalar", "le.Tensor",
        "le.Scalar", "ge.Tensor", "ge.Scalar", "logical_not", "logical_and", "logical_or",
        "logical_xor", "bitwise_not", "bitwise_and.Tensor", "bitwise_and.Scalar",
        "bitwise_or.Tensor", "bitwise_xor.Tensor", "where.self", "where.Scalar",
        "where.ScalarSelf", "where.ScalarOther", "masked_fill.Scalar", "masked_fill.Tensor",
        "tril", "triu")},
    **{f"torch.aten.{name}": 5 for name in (
        "softmax.int", "_softmax", "log_softmax.int", "_log_softmax")},
}

# FLOPs per input element of reductions and scans (operand 0 is the input).
PER_INPUT_ELEMENT: dict[str, int] = {
    **{f"torch.aten.{name}": 1 for name in (
        "sum", "sum.dim_IntList", "mean", "mean.dim", "amax", "amin", "max", "min",
        "max.dim", "min.dim", "argmax", "argmin", "any", "any.dim", "any.dims", "all",
        "all.dim", "prod", "prod.dim_int", "cumsum", "cumprod")},
    **{f"torch.aten.{name}": 4 for name in (
        "var.correction", "var.dim", "std.correction", "std.dim", "var_mean.correction",
        "logsumexp")},
}

# Matmul-family ops: (operand index of the left matrix, of the right one).
MATMULS: dict[str, tuple[int, int]] = {
    "torch.aten.mm": (0, 1), "torch.aten.bmm": (0, 1), "torch.aten.matmul": (0, 1),
    "torch.aten.mv": (0, 1), "torch.aten.dot": (0, 1), "torch.aten.linear": (0, 1),
    "torch.aten.addmm": (1, 2), "torch.aten.baddbmm": (1, 2),
}

# Ops with tensor results that do no arithmetic.
FREE: frozenset[str] = frozenset({
    *(f"torch.aten.{name}" for name in (
        "view", "reshape", "_reshape_alias", "_unsafe_view", "flatten.using_ints",
        "unflatten.int", "permute", "transpose.int", "t", "numpy_T", "unsqueeze", "squeeze",
        "squeeze.dim", "expand", "expand_as", "broadcast_to", "repeat", "slice.Tensor",
        "select.int", "narrow", "as_strided", "contiguous", "clone", "detach", "alias",
        "lift_fresh_copy", "_to_copy", "to.dtype", "to.dtype_layout", "to.device", "type_as",
        "cat", "stack", "split.Tensor", "split_with_sizes", "chunk", "unbind.int",
        "index_select", "gather", "index.Tensor", "index.Tensor_hacked_twin", "embedding",
        "dropout", "arange", "arange.start", "arange.start_step", "full", "full_like", "zeros",
        "ones", "empty.memory_format", "zeros_like", "ones_like", "empty_like", "new_zeros",
        "new_ones", "new_full", "new_empty", "scalar_tensor", "tensor", "tensor.int",
        "tensor.float", "fill.Scalar", "fill.Tensor")),
    "torch.vtensor.literal", "torch.tensor_static_info_cast", "torch.prim.ListUnpack",
    "torch.prim.TupleUnpack", "torch.copy.to_vtensor", "torch.copy.to_tensor",
    "torch_c.to_builtin_tensor", "torch_c.from_builtin_tensor", "anyshape.iota_like",
})


@dataclasses.dataclass(frozen=True)
class UnknownOp:
    """An op not counted, where it is and why."""

    name: str
    location: str
    reason: str

    def __str__(self) -> str:
        where = f" at {self.location}" if self.location else ""
        return f"{self.name}{where}: {self.reason}"


@dataclasses.dataclass
class FlopReport:
    """FLOPs of one function, as expressions over its dim symbols.

    ``total`` and ``by_op`` leave out the ops in ``unknown``; ``matmul`` is
    the ``2*M*N*K`` part of the matmul-family ops alone (no bias or
    ``beta``/``alpha`` terms); ``symbols`` maps each symbol rooted at an
    argument dim to ``(argument index, axis)``; ``arguments`` holds each
    argument's dims (None for non-tensor arguments, a None dim where unknown);
    ``ranges`` each symbol's (min, max) where the import bounded it.
    """

    function: str
    total: Expr
    matmul: Expr
    by_op: dict[str, Expr]
    op_counts: dict[str, int]
    free: dict[str, int]
    unknown: list[UnknownOp]
    symbols: dict[sympy.Symbol, tuple[int, int]]
    ranges: dict[sympy.Symbol, tuple[int | None, int | None]]
    arguments: list[tuple[Expr | None, ...] | None]

    @property
    def complete(self) -> bool:
        """Whether every op was counted (``unknown`` is empty)."""
        return not self.unknown

    def evaluate(self, **symbol_values: int) -> int:
        """``total`` with each symbol, by name, set to a size: ``evaluate(s0=2, s1=128)``."""
        return self._number(self.total, symbol_values)

    def evaluate_by_op(self, **symbol_values: int) -> dict[str, int]:
        return {name: self._number(expr, symbol_values) for name, expr in self.by_op.items()}

    def evaluate_matmul(self, **symbol_values: int) -> int:
        return self._number(self.matmul, symbol_values)

    def bindings_at(self, shapes: Sequence) -> dict[str, int]:
        """Symbol values from one shape per function argument (a tuple of ints,
        a ``torch.Size``, anything with ``.shape``; None for a non-tensor
        argument), checked against the argument's static and derived dims."""
        shapes = list(shapes)
        if len(shapes) != len(self.arguments):
            raise ValueError(f"@{self.function} has {len(self.arguments)} arguments: expected "
                             f"{len(self.arguments)} shapes, got {len(shapes)}")
        checked = []
        values: dict[str, int] = {}
        origin: dict[str, tuple[int, int]] = {}
        for index, (dims, shape) in enumerate(zip(self.arguments, shapes)):
            if dims is None:
                if shape is not None:
                    raise ValueError(f"@{self.function} argument {index} is not a tensor: "
                                     f"expected None for its shape, got {shape!r}")
                continue
            if shape is None:
                raise ValueError(f"@{self.function} argument {index} is a rank-{len(dims)} "
                                 f"tensor: expected its shape, got None")
            sizes = tuple(int(s) for s in getattr(shape, "shape", shape))
            if len(sizes) != len(dims):
                raise ValueError(f"@{self.function} argument {index}: expected rank "
                                 f"{len(dims)}, got shape {sizes}")
            for axis, (expr, size) in enumerate(zip(dims, sizes)):
                if isinstance(expr, sympy.Symbol):
                    name = expr.name
                    if name in values and values[name] != size:
                        first = origin[name]
                        raise ValueError(
                            f"@{self.function} argument {index} dim {axis} is {name}, which "
                            f"argument {first[0]} dim {first[1]} set to {values[name]}; got {size}")
                    values.setdefault(name, size)
                    origin.setdefault(name, (index, axis))
                elif expr is not None:
                    checked.append((index, axis, expr, size))
        for index, axis, expr, size in checked:
            value = expr.subs({s: values[s.name] for s in expr.free_symbols if s.name in values})
            if not value.free_symbols and int(value) != size:
                raise ValueError(f"@{self.function} argument {index} dim {axis} is {expr} = "
                                 f"{int(value)} for these shapes; got {size}")
        return values

    def at_shapes(self, shapes: Sequence) -> int:
        """``total`` for arguments of these shapes: ``at_shapes([(1, 128), (1, 128)])``."""
        return self.evaluate(**self.bindings_at(shapes))

    def all_symbols(self) -> dict[str, sympy.Symbol]:
        exprs = [self.total, self.matmul, *self.by_op.values()]
        found = set(self.symbols).union(*(e.free_symbols for e in exprs))
        return {s.name: s for s in sorted(found, key=lambda s: s.name)}

    def _number(self, expr: Expr, symbol_values: dict[str, int]) -> int:
        known = self.all_symbols()
        extra = sorted(set(symbol_values) - set(known))
        if extra:
            raise ValueError(f"@{self.function} has no symbol {', '.join(extra)} (its symbols: "
                             f"{', '.join(known) or 'none'})")
        value = expr.subs({known[n]: int(v) for n, v in symbol_values.items()})
        missing = sorted(s.name for s in value.free_symbols)
        if missing:
            raise ValueError(f"@{self.function}: {expr} needs a value for {', '.join(missing)}")
        return int(value)

    def format(self, symbol_values: dict[str, int] | None = None) -> str:
        """The report as text; with ``symbol_values``, each count also as a number."""

        def show(expr: Expr) -> str:
            if symbol_values is None:
                return str(expr)
            return f"{expr} = {self._number(expr, symbol_values)}"

        symbols = ", ".join(f"{s} = arg{a} dim {d}" for s, (a, d) in
                            sorted(self.symbols.items(), key=lambda item: item[1]))
        lines = [f"flops @{self.function}"]
        if symbol_values is not None:
            given = ", ".join(f"{k}={v}" for k, v in sorted(symbol_values.items()))
            lines.append(f"  at {given or '(no symbols)'}")
        lines += [f"  total: {show(self.total)}",
                  f"  matmul: {show(self.matmul)}",
                  f"  symbols: {symbols or 'none'}",
                  "  by op:"]
        lines += [f"    {name} x{self.op_counts[name]}: {show(expr)}"
                  for name, expr in sorted(self.by_op.items())]
        free = ", ".join(f"{name} x{n}" for name, n in sorted(self.free.items()))
        lines.append(f"  free: {free or 'none'}")
        lines.append(f"  unknown: {len(self.unknown) or 'none'}")
        lines += [f"    {u}" for u in self.unknown]
        return "\n".join(lines) + "\n"

    def __str__(self) -> str:
        return self.format()


class _NotCounted(Exception):
    """An op this module cannot count; the message says why."""


def count_module_flops(source) -> dict[str, FlopReport]:
    """A report per function with a body, by name. ``source``: an ``ir.Module``, a
    module or ``func.func`` ``ir.Operation``, MLIR text or bytecode, or a path."""
    return _with_root(source, lambda root: {
        name: _count_function(func, name) for name, func in _functions(root)})


def count_flops(source, function: str | None = None) -> FlopReport:
    """The report of ``function``, or of the module's only function."""

    def count(root: ir.Operation) -> FlopReport:
        functions = dict(_functions(root))
        if function is not None:
            if function not in functions:
                raise ValueError(f"no function @{function} with a body (functions: "
                                 f"{', '.join(functions) or 'none'})")
            return _count_function(functions[function], function)
        if len(functions) != 1:
            raise ValueError(f"the module has {len(functions)} functions with a body "
                             f"({', '.join(functions) or 'none'}): name one with function=")
        (name, func), = functions.items()
        return _count_function(func, name)

    return _with_root(source, count)


def _with_root(source, fn: Callable[[ir.Operation], object]):
    if isinstance(source, ir.Module):
        source = source.operation
    if isinstance(source, ir.OpView):
        source = source.operation
    if isinstance(source, ir.Operation):
        with source.context:
            return fn(source)
    if isinstance(source, os.PathLike):
        data = Path(source).read_bytes()
    elif isinstance(source, str) and "\n" not in source and os.path.isfile(source):
        data = Path(source).read_bytes()
    elif isinstance(source, (str, bytes)):
        data = source
    else:
        raise TypeError(f"expected an ir.Module, ir.Operation, MLIR text or bytecode, or a "
                        f"path; got {type(source).__name__}")
    ctx = new_context()
    module = parse_module(data, ctx)
    with ctx:
        return fn(module.operation)


def _functions(root: ir.Operation) -> Iterable[tuple[str, ir.Operation]]:
    if root.name == "func.func":
        candidates = [root]
    elif root.name == "builtin.module":
        candidates = [op.operation for op in root.regions[0].blocks[0].operations
                      if op.operation.name == "func.func"]
    else:
        raise ValueError(f"expected a builtin.module or func.func, got {root.name}")
    for func in candidates:
        if len(func.regions[0].blocks) > 0:  # declarations do no work
            yield ir.StringAttr(func.attributes["sym_name"]).value, func


_FILE_LINE_COL = re.compile(r'"([^"]*)":(\d+):(\d+)')


def _location(op: ir.Operation) -> str:
    """The first file:line:col in the op's location (text parsed from a string has file '-')."""
    match = _FILE_LINE_COL.search(str(op.location))
    if not match:
        return ""
    file, line, col = match.groups()
    return f"{line}:{col}" if file in ("", "-") else f"{file}:{line}:{col}"


def _is_tensor_type(type_: ir.Type) -> bool:
    text = str(type_)
    return text.startswith(("!torch.vtensor", "!torch.tensor", "tensor<"))


class _FunctionCounter:
    def __init__(self, func: ir.Operation):
        self.analysis = ShapeAnalysis(func)

    def dims(self, value: ir.Value) -> list[Expr | None] | None:
        dims = self.analysis.dims.get(value)
        if dims is not None:
            return list(dims)
        shape = vtensor_shape(value.type)
        if shape is not None:
            return [None if s is None else sympy.Integer(s) for s in shape[0]]
        if isinstance(value.type, ir.RankedTensorType):
            ranked = ir.RankedTensorType(value.type)
            return [None if ranked.is_dynamic_dim(i) else sympy.Integer(ranked.get_dim_size(i))
                    for i in range(ranked.rank)]
        return None

    def numel(self, value: ir.Value, what: str) -> Expr:
        dims = self.dims(value)
        if dims is None:
            raise _NotCounted(f"{what} is not a ranked tensor ({value.type})")
        if any(d is None for d in dims):
            shown = ", ".join("?" if d is None else str(d) for d in dims)
            raise _NotCounted(f"dims of {what} unknown: [{shown}]")
        return sympy.Mul(*dims)

    def contracted(self, op: ir.Operation, lhs_at: int, rhs_at: int) -> Expr:
        """K: the left operand's last dim, else the right one's contracted dim."""
        lhs, rhs = self.dims(op.operands[lhs_at]), self.dims(op.operands[rhs_at])
        candidates = []
        if lhs:
            candidates.append(lhs[-1])
        if rhs:
            # linear's weight is [out, in]; matrices are [..., K, N]; a vector is [K].
            axis = -1 if is_a(op, torch_ops.AtenLinearOp) else (0 if len(rhs) == 1 else -2)
            candidates.append(rhs[axis])
        known = [c for c in candidates if c is not None]
        if not known:
            raise _NotCounted("contracted dim unknown")
        return known[0]

    def count(self, op: ir.Operation) -> tuple[Expr, Expr]:
        """(FLOPs, of which matmul ``2*M*N*K``) of one op; raises _NotCounted."""
        name = op.name
        if name in MATMULS:
            return self._matmul(op)
        if name in PER_OUTPUT_ELEMENT:
            return PER_OUTPUT_ELEMENT[name] * self.numel(op.results[0], "the result"), 0
        if name in PER_INPUT_ELEMENT:
            return PER_INPUT_ELEMENT[name] * self.numel(op.operands[0], "the input"), 0
        if name in ("torch.aten.add.Tensor", "torch.aten.sub.Tensor", "torch.aten.add.Scalar",
                    "torch.aten.sub.Scalar", "torch.aten.rsub.Scalar", "torch.aten.rsub.Tensor"):
            alpha = constant_number(op.operands[2]) if len(op.operands) > 2 else 1
            per_element = 1 if alpha == 1 else 2
            return per_element * self.numel(op.results[0], "the result"), 0
        if name in ("torch.aten.layer_norm", "torch.aten.native_layer_norm"):
            affine = sum(1 for at in (2, 3) if not is_none(op.operands[at]))
            return (5 + affine) * self.numel(op.results[0], "the result"), 0
        if name == "torch.aten.rms_norm":
            weighted = 0 if is_none(op.operands[2]) else 1
            return (3 + weighted) * self.numel(op.results[0], "the result"), 0
        raise _NotCounted("no FLOP rule for this op")

    def _matmul(self, op: ir.Operation) -> tuple[Expr, Expr]:
        lhs_at, rhs_at = MATMULS[op.name]
        out = self.numel(op.results[0], "the result")
        contraction = 2 * out * self.contracted(op, lhs_at, rhs_at)
        extra = 0
        if is_a(op, torch_ops.AtenLinearOp):
            has_bias = len(op.operands) > 2 and not is_none(op.operands[2])
            extra = out if has_bias else 0
        elif is_a(op, torch_ops.AtenAddmmOp, torch_ops.AtenBaddbmmOp):
            beta, alpha = (constant_number(v) for v in op.operands[3:5])
            if beta != 0:
                extra += out  # + self
                extra += 0 if beta == 1 else out
            extra += 0 if alpha == 1 else out
        return contraction + extra, contraction


def _count_function(func: ir.Operation, name: str) -> FlopReport:
    counter = _FunctionCounter(func)
    block = func.regions[0].blocks[0]
    by_op: dict[str, Expr] = {}
    op_counts: dict[str, int] = {}
    free: dict[str, int] = {}
    unknown: list[UnknownOp] = []
    matmul: Expr = sympy.Integer(0)
    for op in block.operations:
        op = op.operation
        if len(op.regions) > 0:
            unknown.append(UnknownOp(op.name, _location(op),
                                     "holds regions; the ops inside are not counted"))
            continue
        if not any(_is_tensor_type(r.type) for r in op.results):
            continue  # scalars, constants, lists, bookkeeping: no tensor work
        if op.name in FREE:
            free[op.name] = free.get(op.name, 0) + 1
            continue
        try:
            flops, contraction = counter.count(op)
        except _NotCounted as why:
            unknown.append(UnknownOp(op.name, _location(op), str(why)))
            continue
        by_op[op.name] = by_op.get(op.name, sympy.Integer(0)) + flops
        op_counts[op.name] = op_counts.get(op.name, 0) + 1
        matmul += contraction
    by_op = {k: sympy.expand(v) for k, v in by_op.items()}
    arguments = []
    for arg in block.arguments:
        dims = counter.dims(arg)
        arguments.append(None if dims is None else tuple(dims))
    analysis = counter.analysis
    forget_identities(func)  # the analysis' marks: the module is the caller's
    return FlopReport(function=name, total=sympy.expand(sympy.Add(*by_op.values())),
                      matmul=sympy.expand(matmul), by_op=by_op, op_counts=op_counts, free=free,
                      unknown=unknown, symbols=dict(analysis.roots),
                      ranges=dict(analysis.ranges), arguments=arguments)
