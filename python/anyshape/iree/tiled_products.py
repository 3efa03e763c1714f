"""CUDA: products padded to whole tiles, so that IREE tiles them (and uses tensor cores).

IREE 3.13's GPU configuration gives a matrix product whose innermost M, N or
K is dynamic its reduction strategy (``VectorDistribute`` with
``partial_reduction``): one workgroup per output element, each reading a
whole column of the other operand. That is a matrix-vector strategy, and it
ran prefills and encoders 1.5x to 61x slower than eager on an H200
(``bench/results/cuda-h200``). Where a dynamic dim is split ``[?, tile]``,
IREE gives the product ``TileAndFuse``, and in float16 an MMA intrinsic
(``NV_MMA_SYNC_*``: tensor cores). What was measured, form by form:
docs/iree-notes.md, "CUDA: products with a dynamic row count".

This rewrite (``target="cuda"``, on the iree-input stage) computes each
``linear``, ``mm``, ``addmm`` and ``bmm`` whose rows (``M``) are dynamic, and
each 16-bit one of more than one static row that is not a multiple of 16, in
a helper function:

- the rows padded with zeros to a multiple of ``ROW_TILE`` and split
  ``[M / ROW_TILE, ROW_TILE]``; a dynamic ``N`` (the keys of ``Q K^T``)
  padded to a multiple of ``SPAN_TILE`` and split the same way;
- a dynamic ``K`` (the keys of ``P V``) padded to a multiple of
  ``KEY_CHUNK`` and cut into chunks: each chunk's product is a parallel
  dim, and an outer reduction sums them (IREE gives no MMA to a dynamic
  reduced dim). The zeros in both operands add only zero terms;
- static rows (in 16 bits) padded to a multiple of 16, behind a compute
  barrier that keeps IREE from folding the padding away, and a static ``N``
  or ``K`` of a 16-bit product to a multiple of 16;
- one ``linalg.generic`` over the split dims, summing in float32, the bias
  added in float32 and the result rounded to its dtype once, on the whole
  tiles (fused into the product's dispatch);
- the padded rows and columns sliced off: they are never read.

A float32 product of float16 data (torch's SDPA decomposition casts Q, K
and V to float32 on the way in) is computed from float16 operands with
float32 sums, as eager CUDA's fused attention does: an operand that is
float16 data cast up (through views and a scale of at most 1) is exact or
rounded once, and a softmax's probabilities (``exp(S - amax(S))``, at most
1) are rounded to float16 once, as FlashAttention rounds them. Other
float32 products (RoPE's ``inv_freq @ positions``) stay float32.

Products of one row (a decode step of batch 1, the one query row a hoisted
slice leaves against the keys) are matrix-vector products and keep IREE's
own configuration.

``python -m anyshape.iree.tiled_products IN`` prints the rewrite of an
iree-input file (test/iree/tiled-products.mlir).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

from anyshape.dialects import vtensor_shape
from anyshape.iree.rewrite_cli import rewrite_main
from anyshape.mlir import rewrite_with_iree_bindings
from anyshape.stages import Workaround
from anyshape.iree.torch_ir_builders import call_with_builtin_tensors, matches
from anyshape.passes.torch_ir.constants import constant_as_float, constant_bool

WORKAROUNDS = (
    Workaround(
        name="dynamic_rows_padded_to_tiles", stage="iree-input",
        where="anyshape.iree.tiled_products.tile_products",
        upstream="IREE 3.13's GPU configuration (KernelConfig.cpp, ConfigUtils.cpp: \"TODO: add "
                 "dynamic shape support for inner most dims\") gives a product whose innermost "
                 "M, N or K is dynamic no MMA schedule and falls through to its reduction "
                 "strategy (VectorDistribute, partial_reduction: one workgroup per output "
                 "element): 1.5x to 61x eager's time on an H200. Its BlockDynamicDimensions "
                 "splits a dynamic dim only where util.assume.int states a divisor. Rows (and "
                 "a dynamic N) are padded and split [? , tile] here.",
        guard=("test/python/iree/test_cuda_census.py::"
               "test_iree_still_gives_dynamic_rows_the_reduction_strategy",
               "test/iree/tiled-products.mlir"),
        remove_when="when IREE configures a product with dynamic rows with MMA tiles on its "
                    "own (the guard then fails)"),
    Workaround(
        name="dynamic_reduced_dim_in_chunks", stage="iree-input",
        where="anyshape.iree.tiled_products._function_text (KEY_CHUNK)",
        upstream="IREE 3.13 gives no MMA intrinsic to a product whose reduced dim is dynamic, "
                 "even padded and stated divisible (util.assume.int udiv: BlockDynamicDimensions "
                 "does not split a reduced dim), folds a reduced dim split [?, 256] back into "
                 "one, and fails to bufferize (\"op was not bufferized\") when an MMA "
                 "configuration is forced on one. P V's keys are cut into chunks whose products "
                 "are a parallel dim, summed after.",
        guard=("test/python/iree/test_cuda_census.py::"
               "test_iree_still_gives_a_dynamic_reduced_dim_no_mma",
               "test/iree/tiled-products.mlir"),
        remove_when="when IREE gives a product with a dynamic reduced dim an MMA schedule"),
    Workaround(
        name="few_static_rows_padded", stage="iree-input",
        where="anyshape.iree.tiled_products._tiled_rows, _function_text (compute_barrier)",
        upstream="IREE 3.13 gives a 16-bit product of 2 to 7 static rows its reduction "
                 "strategy (8 and more get MMA), and folds a slice of a product of padded "
                 "static rows back into the product; the rows are padded to 16 behind an "
                 "iree_tensor_ext.compute_barrier.",
        guard=("test/python/iree/test_cuda_census.py::test_census[roberta-seq-float16]",
               "test/iree/tiled-products.mlir"),
        remove_when="when IREE gives 2 to 7 static rows an MMA schedule"),
)

# Rows are padded to a multiple of ROW_TILE: IREE then picks 64 x 64 MMA
# tiles in float16 (64 x 32 at 64, 16 x 32 at 16; docs/iree-notes.md).
ROW_TILE = 128
# A dynamic N (an attention's keys in Q K^T) is padded to a multiple of SPAN_TILE.
SPAN_TILE = 64
# A dynamic K (the keys in P V) is padded to a multiple of KEY_CHUNK and cut
# into chunks of KEY_CHUNK whose products are summed after: IREE 3.13 gives no
# MMA intrinsic to a product whose reduced dim is dynamic, and folds a split
# reduced dim back into one (BlockDynamicDimensions blocks parallel dims only).
KEY_CHUNK = 256
# Static M, N and K of a 16-bit product are padded to a multiple of this (the
# intrinsics' sizes: 16 x 8 x 16).
MMA_MULTIPLE = 16
_FLOATS = ("f16", "bf16", "f32")
_HALF = ("f16", "bf16")
_PARALLEL = '"parallel"'
PRODUCT_OPS = ("torch.aten.linear", "torch.aten.mm", "torch.aten.addmm", "torch.aten.bmm")
# Ops that move or view values without changing them.
_VIEWS = ("torch.aten.view", "torch.aten.reshape", "torch.aten._unsafe_view",
          "torch.aten.flatten.using_ints", "torch.aten.unflatten.int", "torch.aten.permute",
          "torch.aten.transpose.int", "torch.aten.unsqueeze", "torch.aten.squeeze.dim",
          "torch.aten.expand", "torch.aten.contiguous", "torch.aten.clone",
          "torch.aten.slice.Tensor", "torch.aten.select.int")


@dataclasses.dataclass(frozen=True)
class Product:
    """One product's form: ``[batch.., M, K] x [batch.., K, N]`` (``b_layout``
    "kn") or ``x [lead.., K] x W [N, K]^T`` (linear: "nk", ``lead`` the
    dims collapsed into the rows)."""
    kind: str                  # "linear", "mm", "addmm", "bmm"
    lead: tuple                # linear: x's dims before K; else ()
    batch: tuple               # bmm: the batch dim; else ()
    m: int | None
    n: int | None
    k: int | None
    b_layout: str              # "kn" or "nk"
    operand: str               # a's and b's element type as given
    compute: str               # the element type the product reads (f16 when demoted)
    out: str                   # the result's element type
    bias: int | None           # the bias's size (N), or None: no bias


def _sizes(value):
    shape = vtensor_shape(value.type)
    return shape if shape is not None else (None, None)


def _owner_name(value):
    return getattr(value.owner, "name", None)


def _through_views(value):
    """The op that computes ``value``'s elements, past views (at most 12); None
    for an argument."""
    for _ in range(12):
        op = value.owner
        if getattr(op, "name", None) not in _VIEWS:
            return op if hasattr(op, "name") else None
        value = op.operands[0]
    return None


def _half_source(value) -> str | None:
    """"f16" or "bf16" where ``value`` (float32) is such data cast up, through
    views and scales of at most 1 (rounding it back to 16 bits rounds once
    and cannot overflow); else None."""
    op = _through_views(value)
    name = getattr(op, "name", None)
    if name in ("torch.aten.mul.Scalar", "torch.aten.div.Scalar"):
        factor = constant_as_float(op.operands[1])
        if factor is None or factor == 0:
            return None
        scale = factor if name == "torch.aten.mul.Scalar" else 1 / factor
        return _half_source(op.operands[0]) if abs(scale) <= 1 else None
    if name in ("torch.aten._to_copy", "torch.prims.convert_element_type",
                "torch.aten.to.dtype"):
        source = _sizes(op.operands[0])[1]
        return source if source in _HALF else None
    return None


def _probabilities(value) -> bool:
    """``value`` is a softmax, or ``exp(S - amax(S, keepdim=True))`` (at most
    1: a deferred normalization's numerator), through views."""
    op = _through_views(value)
    name = getattr(op, "name", None)
    if name in ("torch.aten.softmax.int", "torch.aten._softmax"):
        return True
    if name != "torch.aten.exp":
        return False
    sub = op.operands[0].owner
    if getattr(sub, "name", None) != "torch.aten.sub.Tensor" or \
            constant_as_float(sub.operands[2]) != 1.0:
        return False
    amax = sub.operands[1].owner
    return getattr(amax, "name", None) == "torch.aten.amax" and \
        amax.operands[0] == sub.operands[0] and constant_bool(amax.operands[2]) is True


def _demoted(a, b) -> str | None:
    """The 16-bit type a float32 product of ``a`` and ``b`` reads: where one
    is 16-bit data cast up and the other is too, or is probabilities; else
    None (the product stays float32)."""
    sources = [_half_source(a), _half_source(b)]
    for value, source in zip((a, b), sources):
        if source is None and not _probabilities(value):
            return None
    known = {s for s in sources if s is not None}
    return known.pop() if len(known) == 1 else None


def _tiled_rows(m: int | None, compute: str) -> bool:
    """Whether a product of ``m`` rows is rewritten: a dynamic count; or, in
    16 bits, a static one of more than one row that is not a multiple of
    MMA_MULTIPLE (IREE 3.13 gives 2 to 7 static rows its reduction strategy).
    One row is a matrix-vector product: IREE's own configuration stands."""
    if m is None:
        return True
    return compute in _HALF and m > 1 and m % MMA_MULTIPLE != 0


def _rows(sizes) -> int | None:
    if None in sizes:
        return None
    return math.prod(sizes)


def _match(op) -> tuple[Product, list] | None:
    """(form, operands) of a product ``_tiled_rows`` takes; else None."""
    name = op.name
    out = _sizes(op.results[0])[1]
    if out not in _FLOATS:
        return None
    if name == "torch.aten.linear":
        (x_sizes, x_type), (w_sizes, w_type) = _sizes(op.operands[0]), _sizes(op.operands[1])
        if x_sizes is None or w_sizes is None or len(x_sizes) < 2 or len(w_sizes) != 2 \
                or x_type != w_type or x_type != out or None in w_sizes \
                or w_sizes[1] != x_sizes[-1]:
            return None
        n, k = w_sizes
        bias = None
        if _owner_name(op.operands[2]) != "torch.constant.none":
            if _sizes(op.operands[2]) != ([n], out):
                return None
            bias = n
        lead = tuple(x_sizes[:-1])
        m = _rows(lead)
        if not _tiled_rows(m, out):
            return None
        form = Product("linear", lead, (), m, n, k, "nk", out, out, out, bias)
        return form, [op.operands[0], op.operands[1]] + ([op.operands[2]] if bias else [])
    if name in ("torch.aten.mm", "torch.aten.addmm", "torch.aten.bmm"):
        first = 1 if name == "torch.aten.addmm" else 0
        a, b = op.operands[first], op.operands[first + 1]
        (a_sizes, a_type), (b_sizes, b_type) = _sizes(a), _sizes(b)
        rank = 3 if name == "torch.aten.bmm" else 2
        if a_sizes is None or b_sizes is None or len(a_sizes) != rank or \
                len(b_sizes) != rank or a_type != b_type or a_type not in _FLOATS \
                or a_type != out:
            return None
        m, k = a_sizes[-2:]
        n = b_sizes[-1]
        if a_sizes[:-2] != b_sizes[:-2] or k != b_sizes[-2]:
            return None  # a dim static in one operand and dynamic in the other
        bias = None
        if name == "torch.aten.addmm":
            if constant_as_float(op.operands[3]) != 1.0 or constant_as_float(op.operands[4]) != 1.0 \
                    or n is None or _sizes(op.operands[0]) != ([n], out):
                return None
            bias = n
        compute = a_type if a_type != "f32" else (_demoted(a, b) or "f32")
        if not _tiled_rows(m, compute):
            return None
        batch = tuple(a_sizes[:1]) if rank == 3 else ()
        form = Product(name.removeprefix("torch.aten."), (), batch, m, n, k, "kn", a_type,
                       compute, out, bias)
        return form, [a, b] + ([op.operands[0]] if bias else [])
    return None


@dataclasses.dataclass(frozen=True)
class _Axis:
    """How one of M, N, K is tiled: padded to a multiple of ``tile`` (1: not
    padded) and, if ``split``, split ``[size / tile, tile]``."""
    size: int | None
    tile: int
    split: bool

    @property
    def padded(self) -> int | None:
        if self.size is None:
            return None
        return -(-self.size // self.tile) * self.tile


def _axes(form: Product) -> dict[str, _Axis]:
    half = form.compute in _HALF

    def static(size: int) -> _Axis:
        return _Axis(size, MMA_MULTIPLE if half and size % MMA_MULTIPLE else 1, False)

    return {"m": _Axis(None, ROW_TILE, True) if form.m is None else static(form.m),
            "n": _Axis(None, SPAN_TILE, True) if form.n is None else static(form.n),
            "k": _Axis(None, KEY_CHUNK, True) if form.k is None else static(form.k)}


def _tensor(sizes, dtype: str) -> str:
    dims = "x".join("?" if s is None else str(s) for s in sizes)
    return f"tensor<{dims + 'x' if dims else ''}{dtype}>"


def _map(loops, results) -> str:
    return f"affine_map<({', '.join(loops)}) -> ({', '.join(results)})>"


class _Body:
    """The helper function's body, one SSA value at a time."""

    def __init__(self):
        self.lines: list[str] = []
        self.constants: set[int] = {0}

    def emit(self, line: str) -> None:
        self.lines.append("  " + line)

    def index(self, value: int) -> str:
        self.constants.add(value)
        return f"%c{value}"

    def dims(self, value: str, sizes, dtype: str, names) -> list[str]:
        """The sizes of ``value`` as SSA values or constants (``names`` for the dynamic ones)."""
        out = []
        for axis, (size, name) in enumerate(zip(sizes, names)):
            if size is None:
                self.emit(f"%{name} = tensor.dim {value}, {self.index(axis)} : "
                          f"{_tensor(sizes, dtype)}")
                out.append(f"%{name}")
            else:
                out.append(str(size))
        return out

    def elementwise(self, name: str, inputs, out_sizes, out_dim_values, out_dtype, body,
                    input_maps=None) -> str:
        """A parallel ``linalg.generic`` over ``out_sizes``: ``inputs`` are
        (value, sizes, dtype); ``body(args)`` returns the lines and the yielded value."""
        rank = len(out_sizes)
        loops = [f"d{i}" for i in range(rank)]
        identity = _map(loops, loops)
        maps = [identity if m is None else m for m in (input_maps or [None] * len(inputs))]
        dynamic = [v for v, s in zip(out_dim_values, out_sizes) if s is None]
        out_type = _tensor(out_sizes, out_dtype)
        self.emit(f"%{name}_init = tensor.empty({', '.join(dynamic)}) : {out_type}")
        args = [f"%{name}_in{i}: {dtype}" for i, (_, _, dtype) in enumerate(inputs)]
        lines, result = body([a.split(":")[0] for a in args])
        self.emit(f"%{name} = linalg.generic {{indexing_maps = [{', '.join(maps + [identity])}], "
                  f"iterator_types = [{', '.join([_PARALLEL] * rank)}]}} "
                  f"ins({', '.join(v for v, _, _ in inputs)} : "
                  f"{', '.join(_tensor(s, d) for _, s, d in inputs)}) "
                  f"outs(%{name}_init : {out_type}) {{")
        self.emit(f"^bb0({', '.join(args)}, %{name}_out: {out_dtype}):")
        for line in lines:
            self.emit("  " + line)
        self.emit(f"  linalg.yield {result} : {out_dtype}")
        self.emit(f"}} -> {out_type}")
        return f"%{name}"


def _padded_split(body: _Body, name: str, value: str, sizes, dtype: str, roles,
                  axes: dict[str, _Axis], extents: dict[str, str]):
    """``value`` (dims ``roles``: "b" for a batch dim, else "m", "n", "k")
    padded with zeros to its axes' tiles and split where they split. Returns
    (value, sizes, roles of the split dims: "mq", "mt", ..., or the role)."""
    highs, padded_sizes = [], []
    for size, role in zip(sizes, roles):
        axis = axes.get(role)
        if axis is None or axis.tile == 1:
            highs.append("0")
            padded_sizes.append(size)
        elif axis.size is None:
            highs.append(f"%{role}_high")
            padded_sizes.append(None)
        else:
            highs.append(str(axis.padded - axis.size))
            padded_sizes.append(axis.padded)
    current = value
    if any(h != "0" for h in highs):
        body.emit(f"%{name}_pad = tensor.pad {value} low[{', '.join(['0'] * len(sizes))}] "
                  f"high[{', '.join(highs)}] {{")
        body.emit(f"^bb0({', '.join(f'%{name}_i{i}: index' for i in range(len(sizes)))}):")
        body.emit(f"  tensor.yield %zero_{dtype} : {dtype}")
        body.emit(f"}} : {_tensor(sizes, dtype)} to {_tensor(padded_sizes, dtype)}")
        current = f"%{name}_pad"
    groups, split_sizes, split_roles, shape = [], [], [], []
    for size, role in zip(padded_sizes, roles):
        axis = axes.get(role)
        if axis is not None and axis.split:
            groups.append([len(split_sizes), len(split_sizes) + 1])
            split_sizes += [None, axis.tile]
            split_roles += [role + "q", role + "t"]
            shape += [f"%{role}_q", str(axis.tile)]
        else:
            groups.append([len(split_sizes)])
            split_sizes.append(size)
            split_roles.append(role)
            shape.append(extents[role] if size is None else str(size))
    if len(split_sizes) != len(padded_sizes):
        body.emit(f"%{name}_split = tensor.expand_shape {current} [{_groups(groups)}] "
                  f"output_shape [{', '.join(shape)}] : {_tensor(padded_sizes, dtype)} into "
                  f"{_tensor(split_sizes, dtype)}")
        current = f"%{name}_split"
    return current, split_sizes, split_roles


def _all_dims(sizes, dynamic_values) -> list[str]:
    """Every size of a shape: the static ones, and ``dynamic_values`` in turn."""
    values = iter(dynamic_values)
    return [next(values) if size is None else str(size) for size in sizes]


def _groups(groups) -> str:
    return ", ".join("[" + ", ".join(str(g) for g in group) + "]" for group in groups)


def _function_text(name: str, form: Product) -> str:
    """The helper that computes ``form`` on whole tiles (``_axes``)."""
    axes = _axes(form)
    operand, compute, out, acc = form.operand, form.compute, form.out, "f32"
    body = _Body()
    linear = form.kind == "linear"
    batch = list(form.batch)
    batch_roles = ["b"] * len(batch)
    a_sizes = list(form.lead) + [form.k] if linear else batch + [form.m, form.k]
    b_sizes = batch + [form.k, form.n] if form.b_layout == "kn" else [form.n, form.k]
    b_roles = batch_roles + (["k", "n"] if form.b_layout == "kn" else ["n", "k"])
    result_sizes = (list(form.lead) if linear else batch + [form.m]) + [form.n]
    params = [f"%a: {_tensor(a_sizes, operand)}", f"%b: {_tensor(b_sizes, operand)}"]
    if form.bias is not None:
        params.append(f"%bias: {_tensor([form.bias], out)}")

    # x [lead.., K] -> rows [M, K]
    a_value, rows_sizes = "%a", a_sizes
    lead_values = []
    if linear:
        lead_values = body.dims("%a", a_sizes[:-1] + [form.k], operand,
                                [f"lead{i}" for i in range(len(a_sizes))])[:-1]
        if len(form.lead) > 1:
            rows_sizes = [form.m, form.k]
            body.emit(f"%rows = tensor.collapse_shape %a "
                      f"[{_groups([list(range(len(form.lead))), [len(form.lead)]])}] : "
                      f"{_tensor(a_sizes, operand)} into {_tensor(rows_sizes, operand)}")
            a_value = "%rows"
    a_roles = batch_roles + ["m", "k"]
    extents = {}
    if batch and batch[0] is None:
        body.emit(f"%batch = tensor.dim {a_value}, {body.index(0)} : "
                  f"{_tensor(rows_sizes, operand)}")
        extents["b"] = "%batch"
    for role, value, sizes, axis_index in (
            ("m", a_value, rows_sizes, len(batch)),
            ("n", "%b", b_sizes, b_roles.index("n")),
            ("k", a_value, rows_sizes, len(batch) + 1)):
        if axes[role].size is None:
            dtype_sizes = _tensor(sizes, operand)
            body.emit(f"%{role} = tensor.dim {value}, {body.index(axis_index)} : {dtype_sizes}")
            extents[role] = f"%{role}"
    for role in ("m", "n", "k"):
        axis = axes[role]
        if axis.size is None:
            tile = body.index(axis.tile)
            body.emit(f"%{role}_up = arith.addi %{role}, {body.index(axis.tile - 1)} : index")
            body.emit(f"%{role}_q = arith.divui %{role}_up, {tile} : index")
            body.emit(f"%{role}_padded = arith.muli %{role}_q, {tile} : index")
            body.emit(f"%{role}_high = arith.subi %{role}_padded, %{role} : index")

    def in_compute(tag: str, value: str, sizes, roles) -> str:
        if operand == compute:
            return value
        dims = body.dims(value, sizes, operand, [f"{tag}_d{i}" for i in range(len(sizes))])
        return body.elementwise(f"{tag}_rounded", [(value, sizes, operand)], sizes, dims,
                                compute, lambda args: (
                                    [f"%{tag}_t = arith.truncf {args[0]} : {operand} to "
                                     f"{compute}"], f"%{tag}_t"))

    a_in = in_compute("a", a_value, rows_sizes, a_roles)
    b_in = in_compute("b", "%b", b_sizes, b_roles)
    a_split, a_split_sizes, a_split_roles = _padded_split(
        body, "a", a_in, rows_sizes, compute, a_roles, axes, extents)
    b_split, b_split_sizes, b_split_roles = _padded_split(
        body, "b", b_in, b_sizes, compute, b_roles, axes, extents)

    # The loops: [kq] batch.. (mq mt | m) (nq nt | n) (kt | k); K's chunks
    # are parallel, summed by a reduction of their own below.
    split_k = axes["k"].split
    batch_loops = [f"b{i}" for i in range(len(batch))]
    m_loops = ["mq", "mt"] if axes["m"].split else ["m"]
    n_loops = ["nq", "nt"] if axes["n"].split else ["n"]
    k_loops = ["kt"] if split_k else ["k"]
    loops = (["kq"] if split_k else []) + batch_loops + m_loops + n_loops + k_loops

    def loop_of(roles) -> list[str]:
        names, batch_index = [], 0
        for role in roles:
            if role == "b":
                names.append(batch_loops[batch_index])
                batch_index += 1
            else:
                names.append(role)
        return names

    out_loops = (["kq"] if split_k else []) + batch_loops + m_loops + n_loops
    maps = [_map(loops, loop_of(a_split_roles)), _map(loops, loop_of(b_split_roles)),
            _map(loops, out_loops)]
    def split_sizes(role: str) -> list:
        axis = axes[role]
        return [None, axis.tile] if axis.split else [axis.padded]

    tile_sizes = batch + split_sizes("m") + split_sizes("n")
    tile_values = ([extents["b"]] if batch and batch[0] is None else []) + \
        [f"%{role}_q" for role in ("m", "n") if axes[role].split]
    product_sizes = ([None] if split_k else []) + tile_sizes
    product_values = (["%k_q"] if split_k else []) + tile_values
    product_type = _tensor(product_sizes, acc)
    body.emit(f"%product_init = tensor.empty({', '.join(product_values)}) : {product_type}")
    body.emit(f"%product_zero = linalg.fill ins(%zero_{acc} : {acc}) "
              f"outs(%product_init : {product_type}) -> {product_type}")
    iterators = [_PARALLEL] * (len(loops) - 1) + ['"reduction"']
    body.emit(f"%product = linalg.generic {{indexing_maps = [{', '.join(maps)}], "
              f"iterator_types = [{', '.join(iterators)}]}} ins({a_split}, {b_split} : "
              f"{_tensor(a_split_sizes, compute)}, {_tensor(b_split_sizes, compute)}) "
              f"outs(%product_zero : {product_type}) {{")
    body.emit(f"^bb0(%x: {compute}, %y: {compute}, %sum: {acc}):")
    x, y = "%x", "%y"
    if compute != acc:
        body.emit(f"  %x_wide = arith.extf %x : {compute} to {acc}")
        body.emit(f"  %y_wide = arith.extf %y : {compute} to {acc}")
        x, y = "%x_wide", "%y_wide"
    body.emit(f"  %term = arith.mulf {x}, {y} : {acc}")
    body.emit(f"  %next = arith.addf %sum, %term : {acc}")
    body.emit(f"  linalg.yield %next : {acc}")
    body.emit(f"}} -> {product_type}")
    result = "%product"
    tile_type = _tensor(tile_sizes, acc)
    if split_k:
        # The chunks' sums, the chunk the outer dim (IREE tiles such an outer
        # reduction across the kept dims, each thread summing its column).
        rest = [f"d{i}" for i in range(len(tile_sizes))]
        body.emit(f"%chunks_init = tensor.empty({', '.join(tile_values)}) : {tile_type}")
        body.emit(f"%chunks_zero = linalg.fill ins(%zero_{acc} : {acc}) "
                  f"outs(%chunks_init : {tile_type}) -> {tile_type}")
        body.emit(f"%chunks = linalg.generic {{indexing_maps = ["
                  f"{_map(rest + ['kq'], ['kq'] + rest)}, {_map(rest + ['kq'], rest)}], "
                  f"iterator_types = [{', '.join([_PARALLEL] * len(rest))}, \"reduction\"]}} "
                  f"ins(%product : {product_type}) outs(%chunks_zero : {tile_type}) {{")
        body.emit(f"^bb0(%part: {acc}, %total: {acc}):")
        body.emit(f"  %more = arith.addf %total, %part : {acc}")
        body.emit(f"  linalg.yield %more : {acc}")
        body.emit(f"}} -> {tile_type}")
        result = "%chunks"
    # Bias and the result's dtype on the whole tiles (fused into the product's dispatch).
    if form.bias is not None or out != acc:
        inputs = [(result, tile_sizes, acc)]
        input_maps = [None]
        bias_value = "%bias"
        if form.bias is not None and axes["n"].tile > 1:
            high = axes["n"].padded - axes["n"].size
            body.emit(f"%bias_pad = tensor.pad %bias low[0] high[{high}] {{")
            body.emit("^bb0(%bias_i: index):")
            body.emit(f"  tensor.yield %zero_{out} : {out}")
            body.emit(f"}} : {_tensor([form.bias], out)} to {_tensor([axes['n'].padded], out)}")
            bias_value = "%bias_pad"
        if form.bias is not None:
            rank = len(tile_sizes)
            inputs.append((bias_value, [axes["n"].padded], out))
            input_maps.append(_map([f"d{i}" for i in range(rank)], [f"d{rank - 1}"]))
        all_values = _all_dims(tile_sizes, tile_values)

        def epilogue(args):
            # The bias is added before the one rounding to the result's type.
            lines, value = [], args[0]
            if form.bias is not None:
                bias = args[1]
                if out != acc:
                    lines.append(f"%bias_wide = arith.extf {bias} : {out} to {acc}")
                    bias = "%bias_wide"
                lines.append(f"%biased = arith.addf {value}, {bias} : {acc}")
                value = "%biased"
            if out != acc:
                lines.append(f"%narrow = arith.truncf {value} : {acc} to {out}")
                value = "%narrow"
            return lines, value

        result = body.elementwise("epilogue", inputs, tile_sizes, all_values, out, epilogue,
                                  input_maps)
    if not axes["m"].split and axes["m"].tile > 1:
        # Static rows padded without a split: IREE folds the slice below into
        # the product (back to its 2 to 7 rows) unless a barrier keeps them apart.
        dynamic = [v for v, s in zip(_all_dims(tile_sizes, tile_values), tile_sizes) if s is None]
        tile_type = _tensor(tile_sizes, out)
        body.emit(f"%whole = iree_tensor_ext.compute_barrier.start {result} : {tile_type}"
                  f"{'{' + ', '.join(dynamic) + '}' if dynamic else ''} -> {tile_type}")
        result = "%whole"
    # [batch.., (Mq, ROW_TILE | Mp), (Nq, SPAN_TILE | Np)] -> [batch.., M, N]
    groups = [[i] for i in range(len(batch))]
    for role in ("m", "n"):
        start = sum(len(g) for g in groups)
        groups.append([start, start + 1] if axes[role].split else [start])
    flat_sizes = batch + [axes["m"].padded, axes["n"].padded]
    result_value = result
    if len(flat_sizes) != len(tile_sizes):
        body.emit(f"%flat = tensor.collapse_shape {result} [{_groups(groups)}] : "
                  f"{_tensor(tile_sizes, out)} into {_tensor(flat_sizes, out)}")
        result_value = "%flat"
    kept_sizes = batch + [form.m, form.n]
    batch_values = [extents["b"] if s is None else str(s) for s in batch]
    m_value = "%m" if form.m is None else str(form.m)
    n_value = "%n" if form.n is None else str(form.n)
    body.emit(f"%kept = tensor.extract_slice {result_value}"
              f"[{', '.join(['0'] * len(flat_sizes))}] "
              f"[{', '.join(batch_values + [m_value, n_value])}] "
              f"[{', '.join(['1'] * len(flat_sizes))}] : {_tensor(flat_sizes, out)} to "
              f"{_tensor(kept_sizes, out)}")
    final = "%kept"
    if linear and len(form.lead) > 1:
        body.emit(f"%result = tensor.expand_shape %kept "
                  f"[{_groups([list(range(len(form.lead))), [len(form.lead)]])}] output_shape "
                  f"[{', '.join(lead_values + [str(form.n)])}] : {_tensor(kept_sizes, out)} "
                  f"into {_tensor(result_sizes, out)}")
        final = "%result"
    body.emit(f"return {final} : {_tensor(result_sizes, out)}")
    zero = {"f16": "0.0 : f16", "bf16": "0.0 : bf16", "f32": "0.0 : f32"}
    head = [f"func.func private @{name}({', '.join(params)}) -> "
            f"{_tensor(result_sizes, out)} {{"]
    head += [f"  %c{c} = arith.constant {c} : index" for c in sorted(body.constants)]
    head += [f"  %zero_{d} = arith.constant {zero[d]}" for d in sorted({operand, compute, out, acc})]
    return "\n".join(head + body.lines + ["}"]) + "\n"


def tile_products(in_file: Path, out_file: Path, text_file: Path | None = None) -> int:
    """Rewrite ``in_file`` (the iree-input stage, torch-dialect IR) into
    ``out_file`` (bytecode; ``text_file`` as text when given) with every
    product ``_match`` finds computed padded to whole tiles. Returns how many."""
    def rewrite(ir, module) -> int:
        found = matches(ir, module, PRODUCT_OPS, _match)
        functions: dict[Product, str] = {}  # in order of first use
        for op, (form, operands) in found:
            name = functions.setdefault(form, f"anyshape_tiled_{form.kind}_{len(functions)}")
            with ir.InsertionPoint(op), op.location:
                result = call_with_builtin_tensors(ir, name, operands, op.results[0].type)
            op.results[0].replace_all_uses_with(result)
            op.erase()
        if not found:
            return 0
        text = "".join(_function_text(name, form) for form, name in functions.items())
        helpers = ir.Module.parse(f"module {{{text}}}")
        for helper in list(helpers.body.operations):
            module.body.append(helper)
        return len(found)

    return rewrite_with_iree_bindings(in_file, out_file, text_file, rewrite)


def main(argv: list[str] | None = None) -> int:
    return rewrite_main("anyshape.iree.tiled_products",
                        "Pad the products of an iree-input file to whole tiles, as "
                        "target='cuda' does", "the iree-input stage (torch IR), text or bytecode",
                        tile_products,
                        lambda count, where: f"padded {count} products to whole tiles in {where}",
                        argv)


if __name__ == "__main__":
    sys.exit(main())
