"""Products with a weight that compute only the rows there are (issue 40).

IREE 3.13's CPU products run its ``mmt4d`` kernel over whole tiles of 16 rows
(8 on AVX2): 17 tokens cost what 32 cost, and a batch-1 model's latency steps
up past every multiple of 16. ``linear_rows.c``, beside this module,
computes exactly the rows given. This module

- has it built into an object that IREE links into the module's code
  (``kernel_for``; ``build.py``);
- rewrites the IREE input (``route_linears``): each float32 ``aten.linear``
  whose weight is a constant of the model, and each ``aten.mm``/``addmm``
  whose right operand is one, becomes a call of a function that packs the
  weight into panels of 16 columns (a computation on a constant, which IREE
  hoists into the module's initializers: it runs once, at load) and
  dispatches the kernel, through an executable written here whose
  entry points call it. A product read only through column slices (the
  fused Q, K and V; an encoder's cross-attention keys and values of every
  layer) is computed part by part, so that no slice of the kernel's result
  is left for IREE to copy (``_column_parts``).

The object picks its AVX-512, AVX2 or portable code at run time from CPUID, so
the module runs on any x86-64 host its other code runs on. Where no C
compiler works, modules are built with IREE's own products and a
``KernelUnavailable`` warning says why. ``test_linear_rows.py`` guards the
kernel's numerics and the executable's object named by path
(``executable_object_by_path``, ``build.py``).
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Sequence

from anyshape.dialects import computed_from_constants, vtensor_shape
from anyshape.iree.constant_values import erase_if_unused, evaluate
from anyshape.iree.flags import Target, routes_products
from anyshape.iree.kernels.attention import SOURCE as ATTENTION_SOURCE
from anyshape.iree.kernels.build import (KernelUnavailable, binding_pointers,
                                         build_in_background, entry_function,
                                         executable_target, isa_for_cpu, kernel_executable,
                                         kernel_object, pipeline_layout)
from anyshape.mlir import rewrite_with_iree_bindings
from anyshape.iree.kernels.quantized_products import (QuantizedBlobs, embedding_function_text,
                                                      quantized_function_text, route_embeddings)
from anyshape.iree.quantized_weights import WeightFormat
from anyshape.iree.torch_ir_builders import call_with_builtin_tensors, matches, new_constant_int

SOURCE = Path(__file__).with_name("linear_rows.c")
EXECUTABLE = "anyshape_row_products"
# Entry point -> whether it takes a bias (float32 weights).
ENTRY_POINTS = {"linear_rows": True, "linear_rows_no_bias": False}
# A quantized format's entry points: these suffixes after "linear_rows"
# (quantized_panels.h), each with a bias and without ("_no_bias").
# "int4i8": int4 weights, the rows rounded to int8; "int8i16": int8 weights,
# the rows rounded to int16 (WeightFormat.entry).
QUANTIZED_ENTRY = {"float32": "", "int8": "_q8", "int4": "_q4", "int4i8": "_q4i8",
                   "int8i16": "_q8i16"}
PANEL = 16
# The kernel's runs of rows and of panels per workgroup (linear_rows.c's
# ``workgroup`` takes what the counts below give it). Each workgroup reads its
# panels out of memory (or L3) once, so every run of rows reads the weights
# again, and a run of a few rows costs what streaming the panels costs: with
# 48 rows roberta-base's products took 20 % longer at 49 rows than at 48
# (Xeon, 2 threads, a C harness); with 192 they took 4-6 % longer, and 97 or
# 145 rows about what 96 or 144 took. A host of more cores would be left part
# idle (up to 192 rows a product of 768 columns has 6 workgroups), so the rows
# are split further where there are fewer runs of panels than workers: into
# as many runs as gives each worker one, in whole tiles (executable_text).
# Rows of one tile (a decode step's) cannot be split: their panels are, into
# runs enough for BALANCE_WORKGROUPS a worker, so that the last workgroups do
# not leave a worker idle (896 columns make 7 runs of 8 panels: of 2
# workers, one would wait out the last).
ROWS_PER_WORKGROUP = 192
PANELS_PER_WORKGROUP = 8
BALANCE_WORKGROUPS = 4
TILE_ROWS = 12  # linear_rows.c's TILE512_ROWS: a workgroup's run of rows is a multiple of it
# A static row count up to this many rows (a decode function's batch of 1, 4
# or 8) gets IREE tiles of its own size, which waste no rows: those products
# stay IREE's, which the decode functions were measured with. The kernel takes
# dynamic row counts (padded to 16 by IREE) and static ones above 16.
IREE_FITTED_ROWS = 16


def kernel_for(target: Target) -> tuple[Path | None, str]:
    """The kernel's object where ``target`` computes its products with it
    (``routes_products``) and it can be built, with the instruction sets
    ``target``'s CPU has; else None, with why it could not be built ("" where
    the target does not use it)."""
    if not routes_products(target):
        return None, ""
    return kernel_object(SOURCE, isa_for_cpu(target.cpu))


def start_building(target: Target) -> None:
    """Both kernels' objects, where ``target`` links them, built on a thread
    of their own while the caller exports (``build.build_in_background``);
    ``kernel_for`` and ``attention.kernel`` then find them built."""
    if routes_products(target):
        def build() -> None:
            isa = isa_for_cpu(target.cpu)
            kernel_object(SOURCE, isa)
            kernel_object(ATTENTION_SOURCE, isa)

        build_in_background(build)


def warn_unavailable(reason: str) -> None:
    warnings.warn(f"products with a weight use IREE's own kernel, which computes whole tiles "
                  f"of 16 rows (8 on AVX2), because anyshape's row-exact kernel is "
                  f"unavailable: {reason}", KernelUnavailable, stacklevel=4)


def _entry_points(formats: Sequence[str]) -> list[tuple[str, bool, str]]:
    """(entry point, whether it takes a bias, weight format) for ``formats``."""
    return [(f"linear_rows{QUANTIZED_ENTRY[fmt]}{'' if bias else '_no_bias'}", bias, fmt)
            for fmt in formats for bias in (True, False)]


def executable_text(object_path: Path, target: str, workers: int = 1,
                    formats: Sequence[str] = ("float32",)) -> str:
    """The executable whose entry points call the kernel: ``linear_rows``
    (with a bias) and ``linear_rows_no_bias`` for float32 weights, and their
    ``_q8``, ``_q4``, ``_q4i8`` and ``_q8i16`` twins for the ``formats`` "int8",
    "int4", "int4i8" and "int8i16" (``WeightFormat.entry``).

    Bindings: x (m x k), the packed weight, [its scales (quantized),] [the
    bias,] y (m x n); constants m, n, k [, int4's group]. Workgroups (the
    workload: rows, panels): runs of PANELS_PER_WORKGROUP panels by runs of
    up to ROWS_PER_WORKGROUP rows, and more runs of rows, up to one per
    tile, where there are fewer runs of panels than ``workers``; rows of one
    tile take runs of fewer panels, at least BALANCE_WORKGROUPS per worker
    where there are as many panels."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers: expected a positive int, got {workers!r}")
    exports, functions = [], []
    for ordinal, (name, bias, fmt) in enumerate(_entry_points(formats)):
        quantized = fmt != "float32"
        weights = fmt[:4] if quantized else fmt  # "int8i16" stores int8 weights
        grouped = weights == "int4"
        constants = 4 if grouped else 3
        layout = pipeline_layout(constants, [True, True] + ([True] if quantized else []) +
                                 ([True] if bias else []) + [False])
        sizes = ["%x_size", "%packed_size"] + (["%scales_size"] if quantized else []) + \
            (["%n"] if bias else []) + ["%y_size"]
        lines, pointers, types = binding_pointers(layout, sizes)
        args = pointers + ["%m", "%n", "%k"] + (["%group"] if grouped else []) + \
            ["%gx", "%nx", "%gy", "%ny"]
        types += ["index"] * (len(args) - len(pointers))
        exports.append(f"""
    hal.executable.export public @{name} ordinal({ordinal}) layout({layout})
        count(%device: !hal.device, %rows: index, %panels: index) -> (index, index, index) {{
      %c1 = arith.constant 1 : index
      %x_runs = affine.apply affine_map<()[s0] -> (s0 ceildiv {PANELS_PER_WORKGROUP})>()[%panels]
      %runs = affine.apply affine_map<()[s0] -> (s0 ceildiv {ROWS_PER_WORKGROUP})>()[%rows]
      %tiles = affine.apply affine_map<()[s0] -> (s0 ceildiv {TILE_ROWS})>()[%rows]
      %balanced = arith.constant {BALANCE_WORKGROUPS * workers} : index
      %x_balanced = arith.minui %panels, %balanced : index
      %x_more = arith.maxui %x_runs, %x_balanced : index
      %one_tile = arith.cmpi ule, %tiles, %c1 : index
      %x = arith.select %one_tile, %x_more, %x_runs : index
      %workers = arith.constant {workers} : index
      %x_at_least_1 = arith.maxui %x, %c1 : index
      %runs_for_workers = arith.ceildivui %workers, %x_at_least_1 : index
      %spread = arith.minui %tiles, %runs_for_workers : index
      %y = arith.maxui %runs, %spread : index
      hal.return %x, %y, %c1 : index, index, index
    }}""")
        loaded = ["m", "n", "k"] + (["group"] if grouped else [])
        # Each binding's size in floats (the kernel reads quantized ones as bytes).
        packed_floats_per_k = {"float32": 16, "int8": 4, "int4": 2}[weights]
        sizes_lines = [
            "%c16 = arith.constant 16 : index",
            f"%per_k = arith.constant {packed_floats_per_k} : index",
            *(f"%{d}32 = hal.interface.constant.load layout({layout}) ordinal({i}) : i32"
              for i, d in enumerate(loaded)),
            *(f"%{d} = arith.index_castui %{d}32 : i32 to index" for d in loaded),
            "%x_size = arith.muli %m, %k : index",
            "%y_size = arith.muli %m, %n : index",
            "%panel_count = arith.ceildivui %n, %c16 : index",
            "%panel_floats = arith.muli %k, %per_k : index",
            "%packed_size = arith.muli %panel_count, %panel_floats : index",
            *({"float32": [],
               "int8": ["%scales_size = arith.muli %panel_count, %c16 : index"],
               "int4": ["%c8 = arith.constant 8 : index",
                        "%groups = arith.divui %k, %group : index",
                        "%group_halves = arith.muli %groups, %c8 : index",
                        "%scales_size = arith.muli %panel_count, %group_halves : index"]
               }[weights]),
            "%gx = hal.interface.workgroup.id[0] : index",
            "%nx = hal.interface.workgroup.count[0] : index",
            "%gy = hal.interface.workgroup.id[1] : index",
            "%ny = hal.interface.workgroup.count[1] : index"]
        functions.append(entry_function(name, types, sizes_lines + lines, args))
    return kernel_executable(EXECUTABLE, object_path, target, exports, functions)


# The product ops rewritten, with where each takes x, the weight and the bias,
# and how it holds the weight: "nk" (n rows of k, linear's) or "kn" (mm's).
_PRODUCTS = {"torch.aten.linear": (0, 1, 2, "nk"), "torch.aten.mm": (0, 1, None, "kn"),
             "torch.aten.addmm": (1, 2, 0, "kn")}


def _f32_shape(value):
    shape = vtensor_shape(value.type)
    if shape is None or shape[1] != "f32":
        return None
    return shape[0]


def _is_constant_one(ir, value) -> bool:
    op = value.owner
    if isinstance(op, ir.Block) or op.name not in ("torch.constant.int", "torch.constant.float"):
        return False
    return float(str(op.attributes["value"]).split(":")[0]) == 1.0


def _routable(ir, op, any_rows: bool = False):
    """(x rows (None: dynamic), k, n, layout, has bias) when ``op`` is a
    float32 product of 2-D x with a constant weight the kernel computes (rows
    dynamic or above ``IREE_FITTED_ROWS``, or any with ``any_rows``); else
    None."""
    x_at, w_at, bias_at, layout = _PRODUCTS[op.name]
    x_shape, w_shape = _f32_shape(op.operands[x_at]), _f32_shape(op.operands[w_at])
    out_shape = _f32_shape(op.results[0])
    if x_shape is None or w_shape is None or out_shape is None or len(x_shape) != 2 \
            or len(w_shape) != 2 or None in w_shape or x_shape[1] is None \
            or not computed_from_constants(op.operands[w_at]):
        return None
    n, k = w_shape if layout == "nk" else reversed(w_shape)
    if x_shape[1] != k or out_shape != [x_shape[0], n]:
        return None
    if x_shape[0] is not None and x_shape[0] <= IREE_FITTED_ROWS and not any_rows:
        return None
    has_bias = False
    if bias_at is not None:
        bias = op.operands[bias_at]
        if str(bias.type) != "!torch.none":
            if _f32_shape(bias) != [n]:
                return None
            has_bias = True
    if op.name == "torch.aten.addmm" and not (_is_constant_one(ir, op.operands[3])
                                              and _is_constant_one(ir, op.operands[4])):
        return None
    return x_shape[0], k, n, layout, has_bias


def _constant_int(op_value):
    op = op_value.owner
    if isinstance(getattr(op, "name", None), str) and op.name == "torch.constant.int":
        return int(str(op.attributes["value"]).split(":")[0])
    return None


def _column_parts(ops, n: int):
    """The column slices the results of ``ops`` (one product, written once per
    slice that reads it) are read through, when they are read through nothing
    else: [(start, end, slice op, the unflatten or view (``_regroups_rows``) it reads, or
    None)]; else None.

    ``anyshape-data-tiling-forms`` computes the linears that share an input as
    one on their concatenated weights and slices the columns after (Q, K and
    V; a seq2seq encoder's cross-attention keys and values of every layer),
    for IREE's products. Behind the kernel's dispatch IREE cannot fuse those
    slices into their readers: each is a strided copy of its own
    (``slow_memcpy``; BART-base's ``encode`` at 4 x 333 tokens, 35 ms of 915).
    Computed part by part, each part's columns are a product of their own,
    whole."""
    parts = []
    last = len(vtensor_shape(ops[0].results[0].type)[0]) - 1

    def column_slice(user, dim_of_columns):
        if user.name != "torch.aten.slice.Tensor" or len(user.operands) != 5:
            return None
        dim, start, end, step = (_constant_int(v) for v in user.operands[1:])
        if dim not in (dim_of_columns, -1) or step != 1 or start is None or end is None:
            return None
        end = min(end, n)
        return (start, end) if 0 <= start < end else None

    for use in (use for op in ops for use in op.results[0].uses):
        user = use.owner
        if (user.name == "torch.aten.unflatten.int" and _constant_int(user.operands[1]) == 0) \
                or _regroups_rows(user, n):
            columns = len(vtensor_shape(user.results[0].type)[0]) - 1
            for inner in user.results[0].uses:
                bounds = column_slice(inner.owner, columns)
                if bounds is None:
                    return None
                parts.append((*bounds, inner.owner, user))
            continue
        bounds = column_slice(user, last)
        if bounds is None:
            return None
        parts.append((*bounds, user, None))
    return parts if len(parts) > 1 else None


def _regroups_rows(op, n: int) -> bool:
    """``op`` is a view of a [rows, n] product into [..., n], its sizes a
    list built in place (a decode function's ``view(y, [b, 1, n])``): it
    regroups the rows and leaves the columns whole."""
    if op.name != "torch.aten.view" or len(op.operands) != 2:
        return False
    source, result = vtensor_shape(op.operands[0].type), vtensor_shape(op.results[0].type)
    sizes = op.operands[1].owner
    return source is not None and result is not None and len(source[0]) == 2 \
        and source[0][1] == n and result[0][-1] == n \
        and getattr(sizes, "name", None) == "torch.prim.ListConstruct" \
        and _constant_int(sizes.operands[-1]) == n


def _regrouped(ir, part, regroup, width: int, result_type):
    """``part`` (a [rows, width] product) regrouped as ``regroup`` (an
    unflatten of the rows, or a view: ``_regroups_rows``) regrouped the whole."""
    if regroup.name == "torch.aten.unflatten.int":
        return ir.Operation.create("torch.aten.unflatten.int", results=[result_type],
                                   operands=[part, *regroup.operands[1:]]).result
    sizes = regroup.operands[1].owner
    narrowed = ir.Operation.create(
        "torch.prim.ListConstruct", results=[sizes.results[0].type],
        operands=[*list(sizes.operands)[:-1], new_constant_int(ir, width)]).result
    return ir.Operation.create("torch.aten.view", results=[result_type],
                               operands=[part, narrowed]).result


def _replace_by_parts(ir, ops, parts, part_product) -> None:
    """Replace ``ops`` (one product, written once per column slice that reads
    it: ``parts``, from ``_column_parts``) by one product per part, made by
    ``part_product(op, start, end, result_type)``."""
    op = ops[0]
    made = {}  # (start, end) -> the part's product, in order of first use
    for start, end, column_slice, regroup in parts:
        if (start, end) not in made:
            with ir.InsertionPoint(op), op.location:
                sizes, dtype = vtensor_shape(op.results[0].type)
                part_type = ir.Type.parse(
                    "!torch.vtensor<[" + ",".join("?" if d is None else str(d)
                                                  for d in sizes[:-1]) +
                    f",{end - start}],{dtype}>")
                made[(start, end)] = part_product(op, start, end, part_type)
        part = made[(start, end)]
        if regroup is not None:
            with ir.InsertionPoint(column_slice), column_slice.location:
                part = _regrouped(ir, part, regroup, end - start, column_slice.results[0].type)
        column_slice.results[0].replace_all_uses_with(part)
        column_slice.erase()
    regroups = []
    for *_, regroup in parts:
        if regroup is not None and not any(regroup == r for r in regroups):
            regroups.append(regroup)
    for regroup in regroups:
        sizes = regroup.operands[1].owner if regroup.name == "torch.aten.view" else None
        regroup.erase()
        if sizes is not None and not list(sizes.results[0].uses):
            sizes.erase()
    for each in ops:
        each.erase()


def _split_fitted_products(ir, module, columns_of) -> int:
    """The products of a few static rows that stay IREE's (a decode
    function's; ``IREE_FITTED_ROWS``) and are read through column slices (Q,
    K and V on their concatenated weights): one IREE product per part, on
    the part's columns of the weight. The kernel computes the same products
    of the step part by part, with each part's weight packed on its own;
    IREE packs a part's weight the same way (``_function_text``) and keeps
    one copy for both; left whole, the fused weight was packed a second time
    (docs/benchmarks.md, "seventh session"). Returns how many products were
    split."""
    found = matches(ir, module, _PRODUCTS, lambda op: _routable(ir, op, any_rows=True))
    split = 0
    for op, shape in found:
        rows, k, n, layout, has_bias = shape
        if rows is None or rows > IREE_FITTED_ROWS:
            continue
        parts = _column_parts([op], n)
        if parts is None:
            continue
        _, w_at, bias_at, _ = _PRODUCTS[op.name]

        def part_product(at, start: int, end: int, result_type, layout=layout,
                         has_bias=has_bias, w_at=w_at, bias_at=bias_at):
            operands = list(at.operands)
            operands[w_at] = columns_of(at.operands[w_at], 0 if layout == "nk" else 1,
                                        start, end)
            if has_bias:
                operands[bias_at] = columns_of(at.operands[bias_at], 0, start, end)
            return ir.Operation.create(at.name, results=[result_type],
                                       operands=operands).result

        _replace_by_parts(ir, [op], parts, part_product)
        split += 1
    return split


def _function_text(name: str, rows, k: int, n: int, layout: str, has_bias: bool) -> str:
    panels = -(-n // PANEL)
    m = "?" if rows is None else str(rows)
    x_type, y_type = f"tensor<{m}x{k}xf32>", f"tensor<{m}x{n}xf32>"
    dims = "{%m}" if rows is None else ""
    w_type = f"tensor<{n}x{k}xf32>" if layout == "nk" else f"tensor<{k}x{n}xf32>"
    # Panels of 16 columns, [panels, k, 16, 1]: the layout, and the very op,
    # of IREE's own packing of a product's right operand for 16 x 1 tiles
    # (x86's float32 mmt4d). A static-row function (decode) whose product
    # stays IREE's packs the weight so too, and IREE then keeps one packed
    # copy for both: with a packing of their own, a module with decode
    # functions held the weights packed twice (docs/benchmarks.md).
    packed_type = f"tensor<{panels}x{k}x{PANEL}x1xf32>"
    padding = " padding_value(%zero : f32)" if panels * PANEL != n else ""
    dims_order = "outer_dims_perm = [0, 1] inner_dims_pos = [0, 1]" if layout == "nk" else \
        "outer_dims_perm = [1, 0] inner_dims_pos = [1, 0]"
    bias_arg = f", %b: tensor<{n}xf32>" if has_bias else ""
    bias_operand = ", %b" if has_bias else ""
    bias_type = f", tensor<{n}xf32>" if has_bias else ""
    entry = "linear_rows" if has_bias else "linear_rows_no_bias"
    return f"""
func.func private @{name}(%x: {x_type}, %w: {w_type}{bias_arg}) -> {y_type} {{
  %c0 = arith.constant 0 : index
  %m = tensor.dim %x, %c0 : {x_type}
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : {packed_type}
  %packed = linalg.pack %w{padding} {dims_order} inner_tiles = [{PANEL}, 1] into %empty : {w_type} -> {packed_type}
  %m32 = arith.index_cast %m : index to i32
  %n32 = arith.constant {n} : i32
  %k32 = arith.constant {k} : i32
  %panels = arith.constant {panels} : index
  %y = flow.dispatch @{EXECUTABLE}::@x86_64::@{entry}[%m, %panels](%m32, %n32, %k32, %x, %packed{bias_operand}) : (i32, i32, i32, {x_type}{dims}, {packed_type}{bias_type}) -> {y_type}{dims}
  return %y : {y_type}
}}
"""


@dataclasses.dataclass
class Routed:
    """What ``route_linears`` did: products on the kernel, those of them with
    quantized weights, and the products whose weight stayed float32 where
    weights were to be quantized (why, for each)."""
    products: int = 0
    quantized: int = 0
    embeddings: int = 0  # embedding tables read quantized
    products_split: int = 0  # IREE's few-row products computed part by part
    kept_float32: list[str] = dataclasses.field(default_factory=list)


def _values_once(weight, layout: str, arrays: dict, values=None):
    """The float32 [n, k] values of ``weight`` read in ``layout``, computed
    at the first call (``values``, when already computed): where every part
    asked for was quantized before in the module, never."""
    held = [values]

    def once():
        if held[0] is None:
            computed = evaluate(weight, arrays)
            held[0] = computed if layout == "nk" else computed.T
        return held[0]
    return once


def route_linears(in_file: Path, out_file: Path, object_path: Path, flags: Sequence[str],
                  text_file: Path | None = None, workers: int = 1,
                  weights: WeightFormat = WeightFormat(), arrays: dict | None = None) -> Routed:
    """Rewrite ``in_file`` (torch-dialect IR, the iree-input stage) into
    ``out_file`` (bytecode; ``text_file`` as text when given), with every
    product ``_routable`` finds computed by the kernel, for the module that
    iree-compile builds with ``flags`` and runs on ``workers`` threads.

    With quantized ``weights``, each weight whose value ``arrays`` (resource
    blob name -> array: the importer's) give is quantized and packed here
    (``quantized_weights.py``) and stored so; its product runs the kernel at
    every row count, as IREE's own products would need it in float32. The
    arrays of the blobs written are added to ``arrays``."""
    routed = Routed()

    def rewrite(ir, module) -> int:
        found = matches(ir, module, _PRODUCTS,
                        lambda op: _routable(ir, op, any_rows=weights.quantized))
        if not found and not weights.quantized:
            return 0
        functions: dict[tuple, str] = {}  # in order of first use: the same input, the same text
        blobs = QuantizedBlobs(ir, weights, arrays if arrays is not None else {})

        def product(op, shape, weight, bias, result_type):
            rows, k, n, layout, has_bias = shape
            name = functions.setdefault(
                shape, f"anyshape_linear_rows_{'d' if rows is None else rows}x{k}x{n}_{layout}"
                       f"{'_bias' if has_bias else ''}")
            x_at = _PRODUCTS[op.name][0]
            operands = [op.operands[x_at], weight] + ([bias] if has_bias else [])
            return call_with_builtin_tensors(ir, name, operands, result_type)

        def quantized_product(op, shape, packed, bias, result_type):
            rows, k, n, _, has_bias = shape
            key = (rows, k, n, weights.entry, weights.group_size, has_bias)
            name = functions.setdefault(
                key, f"anyshape_linear_rows_{'d' if rows is None else rows}x{k}x{n}_"
                     f"{QUANTIZED_ENTRY[weights.entry][1:]}{'_bias' if has_bias else ''}")
            x_at = _PRODUCTS[op.name][0]
            operands = [op.operands[x_at], *packed] + ([bias] if has_bias else [])
            return call_with_builtin_tensors(ir, name, operands, result_type)

        def constant(value: int):
            return new_constant_int(ir, value)

        def columns_of(value, dim: int, start: int, end: int):
            """Output columns [start, end) of a (constant) weight or bias."""
            sizes, dtype = vtensor_shape(value.type)
            sizes = list(sizes)
            sizes[dim] = end - start
            part_type = ir.Type.parse(
                "!torch.vtensor<[" + ",".join(map(str, sizes)) + f"],{dtype}>")
            return ir.Operation.create(
                "torch.aten.slice.Tensor", results=[part_type],
                operands=[value, constant(dim), constant(start), constant(end),
                          constant(1)]).result

        # The same product, written once per slice that reads it (GPT-2's
        # fused Conv1D split in three), is one group: IREE would merge the
        # products, but only after the slices were left apart. Kept in the
        # order the walk found them; compared, not hashed.
        groups: list[tuple[tuple, list]] = []
        for op, shape in found:
            same = next((ops for first_shape, ops in groups if first_shape == shape
                         and ops[0].name == op.name
                         and len(ops[0].operands) == len(op.operands)
                         and all(a == b for a, b in zip(ops[0].operands, op.operands))), None)
            if same is None:
                groups.append((shape, [op]))
            else:
                same.append(op)
        weights_read = []
        for shape, ops in groups:
            rows, k, n, layout, has_bias = shape
            op = ops[0]
            _, w_at, bias_at, _ = _PRODUCTS[op.name]
            weight = op.operands[w_at]
            bias = op.operands[bias_at] if has_bias else None
            quantized = None
            if weights.quantized and blobs.quantized_before(weight, layout):
                quantized = _values_once(weight, layout, blobs.arrays)
            elif weights.quantized:
                quantized = evaluate(weight, blobs.arrays)
                if quantized is None:
                    routed.kept_float32.append(
                        f"{k} x {n} (its weight is computed by {weight.owner.name}, which "
                        f"quantizing at compile time does not evaluate)")
                    if rows is not None and rows <= IREE_FITTED_ROWS:
                        continue  # IREE's own product, as without quantizing
                else:
                    quantized = quantized if layout == "nk" else quantized.T
                    if not blobs.storable(quantized):
                        routed.kept_float32.append(
                            f"{k} x {n} (" + ("not an image of the calibrated codes"
                                             if weights.checkpoint == "calibrated" else
                                             f"the {weights.checkpoint} checkpoint kept it "
                                             f"in float") + ")")
                        quantized = None
                        if rows is not None and rows <= IREE_FITTED_ROWS:
                            continue
                if quantized is not None:
                    quantized = _values_once(weight, layout, blobs.arrays, quantized)
            if quantized is not None and not any(weight == seen for seen in weights_read):
                weights_read.append(weight)
            routed.products += len(ops)
            routed.quantized += len(ops) if quantized is not None else 0

            def part_product(at, start: int, end: int, result_type):
                part_shape = (rows, k, end - start, layout, has_bias)
                part_bias = None if not has_bias else bias if (start, end) == (0, n) else \
                    columns_of(bias, 0, start, end)
                if quantized is not None:
                    packed = blobs.literals(weight, start, end, n,
                                            lambda: quantized()[start:end], layout)
                    return quantized_product(at, part_shape, packed, part_bias, result_type)
                part_weight = weight if (start, end) == (0, n) else \
                    columns_of(weight, 0 if layout == "nk" else 1, start, end)
                return product(at, part_shape, part_weight, part_bias, result_type)

            parts = _column_parts(ops, n)
            if parts is None:
                for each in ops:
                    with ir.InsertionPoint(each), each.location:
                        y = part_product(each, 0, n, each.results[0].type)
                    each.results[0].replace_all_uses_with(y)
                    each.erase()
                continue
            _replace_by_parts(ir, ops, parts, part_product)
        routed.products_split += _split_fitted_products(ir, module, columns_of)
        for weight in weights_read:  # the float32 weights now read by nothing
            erase_if_unused(weight)
        if weights.quantized:
            routed.embeddings = route_embeddings(ir, module, blobs, functions)
        if not functions:
            return 0
        formats = ["float32"] * any(len(key) == 5 for key in functions) + \
            [weights.entry] * any(len(key) == 6 for key in functions)
        text = executable_text(object_path, executable_target(tuple(flags)), workers,
                               formats) if formats else ""
        text += "".join(
            _function_text(name, *key) if len(key) == 5 else
            quantized_function_text(EXECUTABLE, name, *key) if len(key) == 6 else
            embedding_function_text(name, key) for key, name in functions.items())
        helpers = ir.Module.parse(f"module {{{text}}}")
        for helper in list(helpers.body.operations):
            module.body.append(helper)
        return routed.products

    rewrite_with_iree_bindings(in_file, out_file, text_file, rewrite)
    return routed
