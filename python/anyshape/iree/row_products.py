"""A decode step's two products with the cache, tiled for rows read whole.

``anyshape-data-tiling-forms`` writes each product with one query row (a
decode step's, against the cached keys and values) as a multiply and a sum
over dim -2, ``sum(a * b, dim=-2, keepdim=True)`` with ``a`` ``[P..., R, 1]``
and ``b`` ``[P..., R, N]``:

- the scores, ``b`` the keys ``[P..., S, D]`` with their last two dims
  swapped (and scaled, in torch's SDPA decomposition): the sum runs along
  each key's row of ``D`` contiguous floats;
- the weighted values, ``b`` the values ``[P..., S, D]`` as stored: the sum
  runs across rows, and the ``D`` outputs are contiguous.

IREE 3.13's CPU codegen takes both for matmul-like ``matvec_like`` generics
and tiles them 8 heads by 32 outputs by 16 reduced (the scores: 1 x 8 x 16
with the scale fused): its vectors run across keys, so each key's row is read
as columns. GPT-2's decode step with 1000 cached positions spent 2.8 ms of
22.9 ms in the twelve score dispatches and 1.8 ms in the value ones, reading
37 MB each: 13 and 20 GB/s, where the weights' products stream at 33.

This rewrite (CPU targets, float32) computes each such sum in a dispatch of
its own (``flow.dispatch.region``: fused with a producer or consumer, IREE
would build a new op without the configuration) under an
``iree_codegen.compilation_info`` IREE honours as given:

- scores: one key per vector step, its whole head dim reduced as one
  vector, heads and runs of ``KEYS_PER_WORKGROUP`` keys across workgroups;
- values: all ``D`` outputs as one vector, one row per step, one head per
  workgroup.

Each is the same sum of the same products; only the order of a sum's terms
changes, as it does between any two vector widths.
"""

from __future__ import annotations

from pathlib import Path

from anyshape.dialects import builtin_tensor_text, computed_from_constants, vtensor_shape
from anyshape.mlir import rewrite_with_iree_bindings
from anyshape.stages import Workaround
from anyshape.iree.torch_ir_builders import matches
from anyshape.passes.torch_ir.constants import (constant_bool, constant_float32_bits, constant_int,
                                               int_list)

WORKAROUNDS = (
    Workaround(
        name="matvec_rows_read_as_columns", stage="iree-input",
        where="anyshape.iree.row_products.route_row_products",
        upstream="IREE 3.13's LLVMCPU KernelDispatch gives a matvec-like generic whose "
                 "reduced dim is its input's contiguous one (one query row's scores against "
                 "[H, S, D] keys) matmul tiles, 8 x 32 x 16 (1 x 8 x 16 with an elementwise "
                 "producer), that vectorize across rows: 3.2 ms for 24.6 MB of keys, against "
                 "0.5 ms with each row reduced as one vector. The sums get a compilation_info.",
        guard="test/python/iree/test_row_products.py::test_iree_still_tiles_a_query_row_"
              "against_its_keys_across_the_keys",
        remove_when="when IREE's own configuration for such a generic reduces along the rows"),
    Workaround(
        name="compilation_info_kept_apart", stage="iree-input",
        where="anyshape.iree.row_products._function_text (flow.dispatch.region)",
        upstream="IREE 3.13's dispatch formation fuses an elementwise producer or consumer "
                 "(the keys' scale, the mask's addition) with a generic into a new op that "
                 "has lost the generic's compilation_info attribute, so the configuration "
                 "given is silently not used. Each configured sum is its own "
                 "flow.dispatch.region.",
        guard="test/python/iree/test_row_products.py::test_iree_still_drops_a_configuration_"
              "when_it_fuses",
        remove_when="when IREE keeps a compilation_info through fusion"),
)

KEYS_PER_WORKGROUP = 128
# Longest row (head dim) taken as one vector step; a longer one is not an
# attention row (a projection's K), and IREE's own tiling of it stands.
MAX_ROW = 256
_DTYPES = {"f32"}


def _keys_through_swap(value):
    """(keys [..., S, D], scale text or None) when ``value`` is ``keys`` with
    its last two dims swapped, optionally times a float constant; else None."""
    op = value.owner
    scale = None
    if getattr(op, "name", None) == "torch.aten.mul.Scalar":
        scale = constant_float32_bits(op.operands[1])
        if scale is None:
            return None
        op = op.operands[0].owner
    if getattr(op, "name", None) == "torch.aten.permute":
        rank = len(vtensor_shape(op.operands[0].type)[0])
        order = int_list(op.operands[1])
        swapped = list(range(rank - 2)) + [rank - 1, rank - 2]
        if order is None or [d % rank for d in order] != swapped:
            return None
    elif getattr(op, "name", None) == "torch.aten.transpose.int":
        rank = len(vtensor_shape(op.operands[0].type)[0])
        dims = {constant_int(op.operands[1]), constant_int(op.operands[2])}
        if None in dims or {d % rank for d in dims} != {rank - 1, rank - 2}:
            return None
    else:
        return None
    return op.operands[0], scale


def _shared_heads(value):
    """(x [B, H_kv, S, D], G) when ``value`` is HF's ``repeat_kv`` of x
    (``flatten(expand(x.unsqueeze(2), [-1, -1, G, -1, -1]), 1, 2)``, each
    head read by G query heads); else (value, 1). The sum then reads x: as
    its own dispatch's input, the expanded copy would be written out whole."""
    flatten = value.owner
    if getattr(flatten, "name", None) != "torch.aten.flatten.using_ints" \
            or [constant_int(v) for v in flatten.operands[1:3]] != [1, 2]:
        return value, 1
    expand = flatten.operands[0].owner
    if getattr(expand, "name", None) != "torch.aten.expand":
        return value, 1
    unsqueeze = expand.operands[0].owner
    sizes = int_list(expand.operands[1])
    if getattr(unsqueeze, "name", None) != "torch.aten.unsqueeze" \
            or constant_int(unsqueeze.operands[1]) != 2 or sizes is None or len(sizes) != 5:
        return value, 1
    x = unsqueeze.operands[0]
    x_sizes = (vtensor_shape(x.type) or ([], None))[0]
    groups = sizes[2]
    # Every other dim kept: -1, or x's own static size (a dynamic one only as -1).
    kept = sizes[:2] + sizes[3:]
    if len(x_sizes) != 4 or groups < 1 or any(
            size not in (-1, x_size) for size, x_size in zip(kept, x_sizes)):
        return value, 1
    return x, groups


def _match(op):
    """(form, a, b, scale, G) when ``op`` is ``sum(a * b, dim=-2,
    keepdim=True)`` in float32 with ``a`` ``[P..., R, 1]`` and static P:
    "scores" where ``b`` is keys ``[P..., S, R]`` swapped (R static, at most
    ``MAX_ROW``), optionally times ``scale``; "values" where ``b`` is
    ``[P..., R, N]`` as it is (N static, at most ``MAX_ROW``). Returned ``b``
    is the keys or values before the swap and before a ``repeat_kv`` that
    gave each of its heads to G query heads (``_shared_heads``). Else None."""
    if op.name != "torch.aten.sum.dim_IntList" or str(op.operands[3].type) != "!torch.none":
        return None
    product = op.operands[0].owner
    if getattr(product, "name", None) != "torch.aten.mul.Tensor":
        return None
    out = vtensor_shape(op.results[0].type)
    if out is None or out[1] not in _DTYPES or len(out[0]) < 3:
        return None
    rank = len(out[0])
    dims = int_list(op.operands[1])
    if dims is None or [d % rank for d in dims] != [rank - 2] \
            or constant_bool(op.operands[2]) is not True:
        return None
    for a, b in (product.operands, reversed(list(product.operands))):
        a_shape = vtensor_shape(a.type)
        if a_shape is None or a_shape[1] != out[1] or len(a_shape[0]) != rank \
                or a_shape[0][-1] != 1 or None in a_shape[0][:-2]:
            continue
        batch, reduced = a_shape[0][:-2], a_shape[0][-2]
        swapped = _keys_through_swap(b)
        form, scale = ("scores", swapped[1]) if swapped is not None else ("values", None)
        source, groups = _shared_heads(swapped[0] if swapped is not None else b)
        sizes = _f32_sizes(source, rank)
        if sizes is None or computed_from_constants(source) or _unknown_view(source):
            continue
        heads = sizes[:-2] if groups == 1 else sizes[:-3] + [
            None if sizes[-3] is None else sizes[-3] * groups]
        if heads != batch:
            continue
        rows, row = sizes[-2:]
        kept = rows if form == "scores" else row
        if row is None or row > MAX_ROW or out[0] != batch + [1, kept] \
                or reduced != (row if form == "scores" else rows):
            continue
        return form, a, source, scale, groups
    return None


def _unknown_view(value) -> bool:
    """Whether ``value`` is a broadcast or a view that IREE would write out
    whole as the input of a dispatch of its own (one ``_shared_heads`` did
    not recognize)."""
    return getattr(value.owner, "name", None) in (
        "torch.aten.expand", "torch.aten.flatten.using_ints", "torch.aten.view",
        "torch.aten.reshape", "torch.aten.broadcast_to", "torch.aten.repeat")


def _f32_sizes(value, rank: int):
    shape = vtensor_shape(value.type)
    if shape is None or shape[1] not in _DTYPES or len(shape[0]) != rank:
        return None
    return shape[0]


def _config(form: str, loops: int, row: int) -> str:
    """The tiles of a sum with ``loops`` loops before its kept and reduced ones
    (batch, heads and, with shared heads, the group)."""
    ones, zeros = ["1"] * loops, ["0"] * loops
    if form == "scores":
        tiles = (ones + [str(KEYS_PER_WORKGROUP), "0"], ones + ["1", "0"], zeros + ["0", str(row)])
    else:
        tiles = (ones + ["0", "0"], ones + [str(row), "0"], zeros + ["0", "1"])
    distribution, parallel, reduction = (", ".join(t) for t in tiles)
    return (f"#iree_codegen.compilation_info<lowering_config = #iree_cpu.lowering_config<"
            f"distribution = [{distribution}], vector_common_parallel = [{parallel}], "
            f"vector_reduction = [{reduction}]>, translation_info = "
            f"#iree_codegen.translation_info<pipeline = #iree_cpu.pipeline<DoubleTilingExpert>, "
            f"{{enable_loop_peeling}}>>")


def _function_text(name: str, form: str, b_sizes: tuple, scale: str | None, groups: int) -> str:
    """``sum(a * b, dim=-2, keepdim=True)`` of ``_match``'s operands (``b``
    the keys or values as stored: before the scores' swap, and before a
    ``repeat_kv``) in a dispatch of its own. With G shared heads the query
    heads are split [H_kv, G] and the G of a head read its rows together."""
    text = lambda size: "?" if size is None else str(size)  # noqa: E731
    value = lambda size: "%rows" if size is None else str(size)  # noqa: E731  (only rows are dynamic)
    shape = lambda sizes: "x".join(text(size) for size in sizes)  # noqa: E731
    batch = list(b_sizes[:-2])  # the stored heads' [B, H_kv]
    rows, row = b_sizes[-2], b_sizes[-1]  # keys or values [.., rows, row]
    reduced, kept = (row, rows) if form == "scores" else (rows, row)
    heads = batch if groups == 1 else batch[:-1] + [batch[-1] * groups]
    grouped = batch + ([groups] if groups > 1 else [])  # the loops before kept and reduced
    a_type = f"tensor<{shape(heads + [reduced, 1])}xf32>"
    b_type = f"tensor<{shape(b_sizes)}xf32>"
    out_type = f"tensor<{shape(heads + [1, kept])}xf32>"
    a_rows_type = f"tensor<{shape(grouped + [reduced])}xf32>"
    sums_type = f"tensor<{shape(grouped + [kept])}xf32>"
    loops = [f"d{i}" for i in range(len(grouped) + 2)]
    p, n, r = loops[:-2], loops[-2], loops[-1]
    stored = p[:len(batch)]
    every = ", ".join(loops)
    a_map = f"affine_map<({every}) -> ({', '.join(p + [r])})>"
    b_map = f"affine_map<({every}) -> ({', '.join(stored + ([n, r] if form == 'scores' else [r, n]))})>"
    o_map = f"affine_map<({every}) -> ({', '.join(p + [n])})>"
    lead = [f"[{i}]" for i in range(len(heads) - 1)]
    # a [heads.., R, 1] -> [grouped.., R]; sums [grouped.., N] -> [heads.., 1, N]
    split = [f"[{len(heads) - 1}]"] if groups == 1 else [f"[{len(heads) - 1}, {len(heads)}]"]
    tail = len(grouped)
    a_collapse = ", ".join(lead + [f"[{len(heads) - 1}]", f"[{len(heads)}, {len(heads) + 1}]"])
    a_expand = ", ".join(lead + split + [f"[{tail}]"])
    o_collapse = a_expand
    o_expand = a_collapse
    kept_size = "%rows" if kept is None else str(kept)
    dims = "{%rows}" if kept is None else ""
    empty = "(%rows)" if kept is None else "()"
    scale_constant = "" if scale is None else f"%scale = arith.constant {scale} : f32\n  "
    b_value = "%b" if scale is None else "%scaled"
    scale_line = "" if scale is None else "%scaled = arith.mulf %b, %scale : f32\n      "
    a_flat_type = f"tensor<{shape(heads + [reduced])}xf32>"
    flat_out_type = f"tensor<{shape(heads + [kept])}xf32>"
    if groups == 1:
        a_rows = f"%a_rows = tensor.collapse_shape %a [{a_collapse}] : {a_type} into {a_rows_type}"
        out = (f"%out = tensor.expand_shape %sums [{o_expand}] output_shape "
               f"[{', '.join(text(size) for size in heads)}, 1, {kept_size}] : "
               f"{sums_type} into {out_type}")
    else:
        a_rows = (f"%a_flat = tensor.collapse_shape %a [{a_collapse}] : {a_type} into {a_flat_type}\n"
                  f"  %a_rows = tensor.expand_shape %a_flat [{a_expand}] output_shape "
                  f"[{', '.join(value(size) for size in grouped + [reduced])}] : "
                  f"{a_flat_type} into {a_rows_type}")
        out = (f"%flat = tensor.collapse_shape %sums [{o_collapse}] : {sums_type} into {flat_out_type}\n"
               f"  %out = tensor.expand_shape %flat [{o_expand}] output_shape "
               f"[{', '.join(text(size) for size in heads)}, 1, {kept_size}] : "
               f"{flat_out_type} into {out_type}")
    rows_dim = len(batch)
    return f"""
func.func private @{name}(%a: {a_type}, %bs: {b_type}) -> {out_type} {{
  %c{rows_dim} = arith.constant {rows_dim} : index
  %rows = tensor.dim %bs, %c{rows_dim} : {b_type}
  %zero = arith.constant 0.0 : f32
  {scale_constant}{a_rows}
  %sums = flow.dispatch.region -> ({sums_type}{dims}) {{
    %empty = tensor.empty{empty} : {sums_type}
    %filled = linalg.fill ins(%zero : f32) outs(%empty : {sums_type}) -> {sums_type}
    %product = linalg.generic {{indexing_maps = [{a_map}, {b_map}, {o_map}],
        iterator_types = [{', '.join(['"parallel"'] * (len(grouped) + 1))}, "reduction"],
        compilation_info = {_config(form, len(grouped), row)}}}
        ins(%a_rows, %bs : {a_rows_type}, {b_type}) outs(%filled : {sums_type}) {{
    ^bb0(%x: f32, %b: f32, %acc: f32):
      {scale_line}%term = arith.mulf %x, {b_value} : f32
      %sum = arith.addf %term, %acc : f32
      linalg.yield %sum : f32
    }} -> {sums_type}
    flow.return %product : {sums_type}
  }}
  {out}
  return %out : {out_type}
}}
"""


def route_row_products(in_file: Path, out_file: Path, text_file: Path | None = None) -> int:
    """Rewrite ``in_file`` (torch-dialect IR, the iree-input stage) into
    ``out_file`` (bytecode; ``text_file`` as text when given) with every sum
    ``_match`` finds computed under its configuration. Returns how many."""
    def rewrite(ir, module) -> int:
        found = matches(ir, module, ("torch.aten.sum.dim_IntList",), _match)
        functions: dict[tuple, str] = {}  # in order of first use: the same input, the same text
        for op, (form, a, b, scale, groups) in found:
            key = (form, tuple(vtensor_shape(b.type)[0]), scale, groups)
            name = functions.setdefault(key, f"anyshape_row_{form}_{len(functions)}")
            with ir.InsertionPoint(op), op.location:
                builtins = [ir.Operation.create(
                    "torch_c.to_builtin_tensor",
                    results=[ir.Type.parse(builtin_tensor_text(v.type))],
                    operands=[v]).result for v in (a, b)]
                call = ir.Operation.create(
                    "func.call", results=[ir.Type.parse(builtin_tensor_text(op.results[0].type))],
                    operands=builtins, attributes={"callee": ir.FlatSymbolRefAttr.get(name)})
                sums = ir.Operation.create("torch_c.from_builtin_tensor",
                                           results=[op.results[0].type],
                                           operands=[call.result]).result
            op.results[0].replace_all_uses_with(sums)
            op.erase()
        if not found:
            return 0
        text = "".join(_function_text(name, *key) for key, name in functions.items())
        helpers = ir.Module.parse(f"module {{{text}}}")
        for helper in list(helpers.body.operations):
            module.body.append(helper)
        return len(found)

    return rewrite_with_iree_bindings(in_file, out_file, text_file, rewrite)
