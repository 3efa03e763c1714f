"""The IREE input of a product with quantized weights (``linear_rows.route_linears``):
the packed weights and scales as literals over blobs of their own, and the
helper function that dispatches the kernel's ``_q8``/``_q4`` entry points
(``quantized_panels.h``).

A weight read by several functions (``main`` and a decode step), or by
several products (a tied LM head), is quantized once: its blobs are keyed by
the float32 values' digest, and every literal of them names the same blob.
"""

from __future__ import annotations

import hashlib
from typing import Callable

import numpy as np

from anyshape.dialects import stored_literal
from anyshape.iree.constant_values import attribute_resource_key, resource_key, source_key
from anyshape.iree.quantized_weights import (PANEL, WeightFormat, check_shape, exact_codes,
                                             nibble_quads, packed)

class QuantizedBlobs:
    """The blobs of quantized weights a rewrite makes, in IREE's bindings
    ``ir``, each once; ``arrays`` (resource blob name -> array) gets each
    blob's array, so that ``params="external"`` moves them to the archive."""

    def __init__(self, ir, fmt: WeightFormat, arrays: dict):
        self.ir, self.fmt, self.arrays = ir, fmt, arrays
        self._attributes: dict[str, tuple] = {}  # digest -> (data, scales) attributes
        self._codes: dict[str, tuple | None] = {}  # digest -> exact_codes (a checkpoint's)
        # (source_key, layout) -> {(start, end): (data, scales) attributes}:
        # each function of a module reads the same weights, quantized once.
        self._sources: dict[tuple, dict] = {}

    def quantized_before(self, weight, layout: str) -> bool:
        """Whether ``weight``, read in ``layout``, was quantized (some of its
        columns) by an earlier product: its value is then known storable."""
        source = source_key(weight)
        return source is not None and (source, layout) in self._sources

    def storable(self, values: np.ndarray) -> bool:
        """Whether ``values`` (float32 [n, k]) are stored quantized: always
        when the format quantizes at compile time, and for a checkpoint's
        format only where they are exact images of its codes (the weights it
        kept in float stay float32)."""
        return self.fmt.checkpoint is None or self._exact(values) is not None

    def _exact(self, values: np.ndarray):
        values = np.ascontiguousarray(values, dtype=np.float32)
        key = self._digest(values)
        if key not in self._codes:
            self._codes[key] = exact_codes(values, self.fmt)
        return self._codes[key]

    def _digest(self, values: np.ndarray) -> str:
        """A key of ``values`` (contiguous), hashed in place: a copy of the
        bytes was the compile's largest allocation for an 8B model's table,
        and OpenSSL's SHA-256 reads about twice as fast as blake2b here."""
        digest = hashlib.sha256(values.data)
        digest.update(repr((values.shape, self.fmt)).encode())
        return digest.hexdigest()

    def literals(self, weight, start: int, end: int, columns: int,
                 values: Callable[[], np.ndarray], layout: str) -> list:
        """New literals of the packed weight and its scales, for ``values()``
        (float32 [n, k]: output columns [start, end) of the ``columns`` of
        ``weight``, read in ``layout``), called only for a part of a weight
        not quantized before."""
        source = source_key(weight)
        known = {} if source is None else self._sources.get((source, layout), {})
        if (start, end) in known:
            return [self._literal(attribute) for attribute in known[start, end]]
        values = values()
        n, k = values.shape
        check_shape(self.fmt, n, k, _described(weight, start, end, columns))
        values = np.ascontiguousarray(values, dtype=np.float32)
        key = self._digest(values)
        if key not in self._attributes:
            codes = None if self.fmt.checkpoint is None else self._exact(values)
            if self.fmt.checkpoint is not None and codes is None:
                raise ValueError(f"weight {_described(weight, start, end, columns)}: not codes "
                                 f"of the checkpoint's {self.fmt.name} format")
            data, scales = packed(values, self.fmt, codes)
            index = len(self._attributes)
            self._attributes[key] = (self._attribute(data.view(np.int8), f"quantized.{index}.panels"),
                                     self._attribute(scales, f"quantized.{index}.scales"))
        if source is not None:  # recorded once packed: a weight that failed is not known
            self._sources.setdefault((source, layout), {})[start, end] = self._attributes[key]
        return [self._literal(attribute) for attribute in self._attributes[key]]

    def _attribute(self, array: np.ndarray, name: str):
        ir = self.ir
        element = {np.dtype(np.int8): ir.IntegerType.get_signed(8),
                   np.dtype(np.float16): ir.F16Type.get(),
                   np.dtype(np.float32): ir.F32Type.get()}[array.dtype]
        attribute = ir.DenseResourceElementsAttr.get_from_buffer(
            array, name, ir.RankedTensorType.get(list(array.shape), element))
        self.arrays[attribute_resource_key(attribute)] = array
        return attribute

    def _literal(self, attribute):
        ir = self.ir
        text = str(attribute.type)  # tensor<PxKx16xsi8>
        sizes, dtype = text[len("tensor<"):-1].rsplit("x", 1)[0], text[:-1].rsplit("x", 1)[1]
        vtensor = ir.Type.parse(f"!torch.vtensor<[{sizes.replace('x', ',')}],{dtype}>")
        return ir.Operation.create("torch.vtensor.literal", results=[vtensor],
                                   attributes={"value": attribute}).result


def _described(weight, start: int, end: int, n: int) -> str:
    literal = stored_literal(weight)
    if literal is not None:
        name = f"'{resource_key(literal)}'"
    else:
        name = f"computed by {getattr(weight.owner, 'name', 'an argument')}"
    return name if (start, end) == (0, n) else f"{name} (output columns {start} to {end})"


def quantized_function_text(executable: str, name: str, rows, k: int, n: int, fmt: str,
                            group: int | None, has_bias: bool) -> str:
    """The helper function ``name``: x [rows, k] times the packed weight
    (``fmt``: "int8" or "int8i16", or "int4" or "int4i8" with ``group``:
    ``WeightFormat.entry``) plus the bias, in one dispatch of the kernel's
    ``linear_rows_q8``/``_q8i16``/``_q4``/``_q4i8`` entry point in ``executable``."""
    panels = -(-n // PANEL)
    m = "?" if rows is None else str(rows)
    x_type, y_type = f"tensor<{m}x{k}xf32>", f"tensor<{m}x{n}xf32>"
    if fmt in ("int8", "int8i16"):
        q_type, s_type = f"tensor<{panels}x{k}x{PANEL}xi8>", f"tensor<{panels * PANEL}xf32>"
        entry = "linear_rows_q8i16" if fmt == "int8i16" else "linear_rows_q8"
    else:
        # int4i8's weights come in fours of k (quantized_weights.nibble_quads)
        q_sizes = f"{k // 8}x{PANEL}x4" if fmt == "int4i8" else f"{k // 2}x{PANEL}"
        q_type, s_type = f"tensor<{panels}x{q_sizes}xi8>", \
            f"tensor<{panels}x{k // group}x{PANEL}xf16>"
        entry = "linear_rows_q4i8" if fmt == "int4i8" else "linear_rows_q4"
    dims = "{%m}" if rows is None else ""
    bias_arg = f", %b: tensor<{n}xf32>" if has_bias else ""
    bias_operand = ", %b" if has_bias else ""
    bias_type = f", tensor<{n}xf32>" if has_bias else ""
    grouped = fmt.startswith("int4")
    group_constant = f"%g32 = arith.constant {group} : i32\n  " if grouped else ""
    group_operand = ", %g32" if grouped else ""
    group_type = ", i32" if grouped else ""
    entry += "" if has_bias else "_no_bias"
    return f"""
func.func private @{name}(%x: {x_type}, %q: {q_type}, %s: {s_type}{bias_arg}) -> {y_type} {{
  %c0 = arith.constant 0 : index
  %m = tensor.dim %x, %c0 : {x_type}
  %m32 = arith.index_cast %m : index to i32
  %n32 = arith.constant {n} : i32
  %k32 = arith.constant {k} : i32
  {group_constant}%panels = arith.constant {panels} : index
  %y = flow.dispatch @{executable}::@x86_64::@{entry}[%m, %panels](%m32, %n32, %k32{group_operand}, %x, %q, %s{bias_operand}) : (i32, i32, i32{group_type}, {x_type}{dims}, {q_type}, {s_type}{bias_type}) -> {y_type}{dims}
  return %y : {y_type}
}}
"""


def _embedding_text(name: str, ids_sizes: list, ids_element: str, vocab: int, dim: int,
                    fmt: str, group: int | None, quads: bool) -> str:
    """The helper function ``name``: the rows ``ids`` of a table [vocab, dim]
    stored as the packed weight of a product (an LM head's layout, so a tied
    one is stored once; ``quads``: int4 in fours of k, ``nibble_quads``),
    dequantized. Ids are clamped into the table, as a read must stay in it
    (the runtime's bounds checks refuse them first)."""
    panels = -(-vocab // PANEL)
    text = lambda sizes: "x".join("?" if s is None else str(s) for s in sizes)  # noqa: E731
    ids_type = f"tensor<{text(ids_sizes)}x{ids_element}>"
    flat_type = f"tensor<{'?' if None in ids_sizes else _product(ids_sizes)}x{ids_element}>"
    rows_type = f"tensor<{'?' if None in ids_sizes else _product(ids_sizes)}x{dim}xf32>"
    out_type = f"tensor<{text(ids_sizes + [dim])}xf32>"
    if fmt == "int8":
        q_type, s_type = f"tensor<{panels}x{dim}x{PANEL}xi8>", f"tensor<{panels * PANEL}xf32>"
        value = f"""%b = tensor.extract %q[%p, %d, %j] : {q_type}
      %e = arith.extsi %b : i8 to i32
      %f = arith.sitofp %e : i32 to f32
      %scale = tensor.extract %s[%i] : {s_type}"""
    else:
        s_type = f"tensor<{panels}x{dim // group}x{PANEL}xf16>"
        if quads:  # byte [p, d / 8, j, d % 4] holds d (d % 8 < 4: low bits) and d + 4
            q_type = f"tensor<{panels}x{dim // 8}x{PANEL}x4xi8>"
            byte = f"""%step = arith.divui %d, %c8 : index
      %in_step = arith.remui %d, %c8 : index
      %byte_of = arith.remui %in_step, %c4 : index
      %high = arith.divui %in_step, %c4 : index
      %b = tensor.extract %q[%p, %step, %j, %byte_of] : {q_type}"""
        else:  # byte [p, d / 2, j] holds d (d even: low bits)
            q_type = f"tensor<{panels}x{dim // 2}x{PANEL}xi8>"
            byte = f"""%half = arith.divui %d, %c2 : index
      %high = arith.remui %d, %c2 : index
      %b = tensor.extract %q[%p, %half, %j] : {q_type}"""
        value = f"""{byte}
      %u = arith.extui %b : i8 to i32
      %shift_index = arith.muli %high, %c4 : index
      %shift = arith.index_cast %shift_index : index to i32
      %nibble = arith.shrui %u, %shift : i32
      %low = arith.andi %nibble, %c15_i32 : i32
      %centered = arith.subi %low, %c8_i32 : i32
      %f = arith.sitofp %centered : i32 to f32
      %g = arith.divui %d, %c_group : index
      %scale16 = tensor.extract %s[%p, %g, %j] : {s_type}
      %scale = arith.extf %scale16 : f16 to f32"""
    rank = len(ids_sizes)
    collapse = f"[[{', '.join(map(str, range(rank)))}]]"
    expand = f"[[{', '.join(map(str, range(rank)))}], [{rank}]]"
    dims = [f"%ids_dim{i}" if size is None else str(size) for i, size in enumerate(ids_sizes)]
    dim_lines = "".join(f"\n  %ids_dim{i} = tensor.dim %ids, %c{i}_dim : {ids_type}"
                        for i, size in enumerate(ids_sizes) if size is None)
    dim_constants = "".join(f"\n  %c{i}_dim = arith.constant {i} : index"
                            for i, size in enumerate(ids_sizes) if size is None)
    count = "(%count)" if None in ids_sizes else "()"
    return f"""
func.func private @{name}(%ids: {ids_type}, %q: {q_type}, %s: {s_type}) -> {out_type} {{
  %c0 = arith.constant 0 : index{dim_constants}{dim_lines}
  %flat = tensor.collapse_shape %ids {collapse} : {ids_type} into {flat_type}
  %count = tensor.dim %flat, %c0 : {flat_type}
  %empty = tensor.empty{count} : {rows_type}
  %rows = linalg.generic {{indexing_maps = [affine_map<(t, d) -> (t)>, affine_map<(t, d) -> (t, d)>],
      iterator_types = ["parallel", "parallel"]}} ins(%flat : {flat_type}) outs(%empty : {rows_type}) {{
    ^bb0(%id: {ids_element}, %out: f32):
      %c2 = arith.constant 2 : index
      %c4 = arith.constant 4 : index
      %c8 = arith.constant 8 : index
      %c16 = arith.constant {PANEL} : index
      %c_group = arith.constant {group or 1} : index
      %c15_i32 = arith.constant 15 : i32
      %c8_i32 = arith.constant 8 : i32
      %zero = arith.constant 0 : index
      %last = arith.constant {vocab - 1} : index
      %d = linalg.index 1 : index
      %given = arith.index_cast %id : {ids_element} to index
      %above = arith.maxsi %given, %zero : index
      %i = arith.minsi %above, %last : index
      %p = arith.divui %i, %c16 : index
      %j = arith.remui %i, %c16 : index
      {value}
      %v = arith.mulf %f, %scale : f32
      linalg.yield %v : f32
  }} -> {rows_type}
  %out = tensor.expand_shape %rows {expand} output_shape [{', '.join(dims + [str(dim)])}] : {rows_type} into {out_type}
  return %out : {out_type}
}}
"""


def _product(sizes) -> int:
    count = 1
    for size in sizes:
        count *= size
    return count


def route_embeddings(ir, module, blobs: QuantizedBlobs, functions: dict) -> int:
    """Every ``aten.embedding`` of a table ``blobs`` can evaluate, read from
    the table quantized as the packed weight of a product (shared with a tied
    LM head's), by a helper function in ``functions`` (key -> name; the
    caller writes each ``embedding_function_text``). Returns how many."""
    from anyshape.dialects import vtensor_shape
    from anyshape.iree.constant_values import erase_if_unused, evaluate
    from anyshape.iree.torch_ir_builders import call_with_builtin_tensors, matches

    fmt = blobs.fmt
    # source_key -> whether the table is stored quantized: each function reads
    # the same tables, judged once
    judged: dict[tuple, bool] = {}

    def match(op):
        table, ids = op.operands[0], op.operands[1]
        table_shape, ids_shape = vtensor_shape(table.type), vtensor_shape(ids.type)
        if table_shape is None or ids_shape is None or len(table_shape[0]) != 2 \
                or None in table_shape[0] or table_shape[1] != "f32" \
                or ids_shape[1] not in ("si64", "si32") or not ids_shape[0]:
            return None
        if blobs.quantized_before(table, "nk"):
            return True  # a tied LM head's weight, packed by its product
        source = source_key(table)
        if source is None or source not in judged:
            values = evaluate(table, blobs.arrays)
            storable = values is not None and blobs.storable(values)
            if source is None:
                return storable or None
            judged[source] = storable
        return judged[source] or None

    found = matches(ir, module, ("torch.aten.embedding",), match)
    tables = []
    for op, _ in found:
        table, ids = op.operands[0], op.operands[1]
        vocab, dim = vtensor_shape(table.type)[0]
        ids_sizes, ids_dtype = vtensor_shape(ids.type)
        element = {"si64": "i64", "si32": "i32"}[ids_dtype]
        key = ("embedding", tuple(ids_sizes), element, vocab, dim, fmt.name, fmt.group_size,
               nibble_quads(fmt))
        name = functions.setdefault(key, f"anyshape_embedding_{fmt.name}_{vocab}x{dim}_"
                                         f"{len(functions)}")
        with ir.InsertionPoint(op), op.location:
            # As a tied LM head's weight ([vocab, dim]: "nk"), packed once for both
            packed = blobs.literals(table, 0, vocab, vocab, lambda: evaluate(table, blobs.arrays),
                                    "nk")
            rows = call_with_builtin_tensors(ir, name, [ids, *packed], op.results[0].type)
        op.results[0].replace_all_uses_with(rows)
        op.erase()
        if not any(table == seen for seen in tables):
            tables.append(table)
    for table in tables:
        erase_if_unused(table)
    return len(found)


def embedding_function_text(name: str, key: tuple) -> str:
    _, ids_sizes, element, vocab, dim, fmt, group, quads = key
    return _embedding_text(name, list(ids_sizes), element, vocab, dim, fmt, group, quads)
