"""``anyshape-eliminate-padding``: token-wise ops on the real tokens only.

A batch of sequences padded to its longest costs ``B x L`` token rows in
every projection, feed-forward layer and normalization, though only the
``T`` real tokens matter. With the attention mask as argument ``mask``
(``[B, L]``, 0 at padding), this pass gives the function two more arguments
that the runtime computes from the mask: ``tokens`` (``[T]``, the flat
``b * L + l`` positions of the real tokens, in order) and ``slots``
(``[B * L]``, each position's row among them; a padded position names any
row). Then:

- a *token-wise* op (elementwise with operands that broadcast over tokens,
  linear and matmul with a weight, layer norm, softmax and reductions over
  the feature axes, dropout in eval, reshapes and slices of the feature
  axes), on values laid out ``[B, L, ...]`` or ``[B * L, ...]``, runs on
  ``[1, T, ...]`` / ``[T, ...]``: the token rows, gathered once where a
  connected group of such ops that holds a matmul starts (``index_select``
  by ``tokens``);
- where ops that read across positions (attention) need the padded layout,
  the rows go back by ``index_select`` by ``slots``.

What a padded position holds after that is not what eager computes there:
``padding_safety.py`` proves that no real token and no per-sequence output
reads it (attention's additive mask and softmax zero it), and fails with
the op that would otherwise. A value whose padded entries eager knows (a
product with the mask: 0; a ``masked_fill`` of the padding: the fill) goes
back with those entries instead, so masked pooling (a sum or a max over
positions) reads eager's values. Outputs laid out per token get 0 at padded
positions. The function gets the attribute ``anyshape.padding``: ``mask``,
``per_token`` (results zeroed at padding) and ``per_row``
(``"result:axis:c"``: results exact for the sequences, along ``axis``, whose
position ``c`` is a real token).

With ``dense=true`` the function as it was stays beside it as
``@<name>$dense``, named by ``dense`` in ``anyshape.padding``: the runtime
calls it for a batch without padding, where each gather would be a dispatch
that buys nothing. The two share their weights.
"""

from __future__ import annotations

import dataclasses

import sympy

from anyshape.dialects import vtensor_shape
from anyshape.mlir import ir, torch_ops
from anyshape.passes import ModulePass, PassFailure, register
from anyshape.passes.eliminate_padding.padding_safety import (BIG_NEGATIVE, PaddingSafety, Poison,
                                                              held_number, is_taint)
from anyshape.passes.eliminate_padding.padding_safety import tainted as tainted_roles
from anyshape.passes.torch_ir.constants import (constant_int, int_constant, int_list_construct,
                                                list_items)
from anyshape.passes.torch_ir.ops import (ELEMENTWISE, LAYER_NORMS, REDUCTIONS, RESHAPES,
                                          SOFTMAXES, dropout_in_eval, reduced_axes)
from anyshape.passes.torch_ir.scalar_builder import ScalarBuilder
from anyshape.passes.torch_ir.shape_analysis import ShapeAnalysis, same_size
from anyshape.passes.torch_ir.values import (IDENTITY, defining_op, functions,
                                             hoist_argument_bindings, is_a, rebuilt, typed, users,
                                             vtensor_type)

PADDING_ATTR = "anyshape.padding"
_OLD, _NEW = "anyshape.padded_rows", "anyshape.token_rows"  # marks, while the pass runs
_UNBOUNDED = 2**63 - 1
_FLOATS = {"f32", "f16", "bf16", "f64"}
_MATMULS = {"torch.aten.linear", "torch.aten.matmul", "torch.aten.mm", "torch.aten.addmm"}
# Ops that only move or select feature entries: a region does not start with them. (It may
# end with them: a projection's head split stays next to it, where
# anyshape-data-tiling-forms finds the projections to fuse.)
_SHAPE_ONLY = RESHAPES | {"torch.aten.permute", "torch.aten.transpose.int",
                          "torch.aten.unsqueeze", "torch.aten.squeeze.dim",
                          "torch.aten.slice.Tensor", "torch.aten.select.int",
                          "torch.tensor_static_info_cast", "torch.aten.clone",
                          "torch.aten.contiguous"}


@register
@dataclasses.dataclass
class EliminatePaddingPass(ModulePass):
    argument = "anyshape-eliminate-padding"
    description = ("Run token-wise ops on the real tokens of a padded batch, gathered by "
                   "the attention mask (argument 'mask'), and prove the padding unread")

    mask: int = -1
    # Keep the function as it was beside it, as ``<name>$dense``, for batches
    # without padding: there the gathers (a dispatch each, in IREE) buy nothing.
    dense: bool = False

    def apply(self, module_op):
        if self.mask < 0:
            raise PassFailure("option mask: expected the position of the attention mask "
                              "argument ([batch, length], 0 at padding), e.g. "
                              "--anyshape-eliminate-padding='mask=1'; got none")
        for func in list(functions(module_op)):
            twin = _dense_twin(func) if self.dense else None
            _Packer(func, self.mask).run()
            if twin is not None:
                info = ir.DictAttr(func.attributes[PADDING_ATTR])
                func.attributes[PADDING_ATTR] = ir.DictAttr.get(
                    {**{info[i].name: info[i].attr for i in range(len(info))},
                     "dense": ir.FlatSymbolRefAttr.get(twin)})


def dense_twin(module_op: ir.Operation, name: str) -> str | None:
    """The function ``dense=true`` kept beside packed function ``name``, if any."""
    for func in functions(module_op):
        if ir.StringAttr(func.attributes["sym_name"]).value == name \
                and PADDING_ATTR in func.attributes:
            info = ir.DictAttr(func.attributes[PADDING_ATTR])
            return ir.FlatSymbolRefAttr(info["dense"]).value if "dense" in info else None
    return None


def _dense_twin(func: ir.Operation) -> str:
    # ``$``: no Python or torch name has it.
    name = ir.StringAttr(func.attributes["sym_name"]).value + "$dense"
    taken = {ir.StringAttr(op.attributes["sym_name"]).value
             for op in func.parent.regions[0].blocks[0].operations if "sym_name" in op.attributes}
    if name in taken:
        raise PassFailure(f"option dense: the module already has a function @{name}",
                          func.location)
    twin = func.clone(ip=ir.InsertionPoint.after(func))
    twin.attributes["sym_name"] = ir.StringAttr.get(name)
    return name


class _Packer:
    def __init__(self, func: ir.Operation, mask: int):
        hoist_argument_bindings(func)
        self.func = func
        self.block = func.regions[0].blocks[0]
        arguments = list(self.block.arguments)
        if mask >= len(arguments):
            raise PassFailure(f"option mask: expected an argument position below "
                              f"{len(arguments)}, got {mask}")
        self.mask_position = mask
        self.mask = arguments[mask]
        self.analysis = ShapeAnalysis(func)
        self.builder = ScalarBuilder(self.analysis)
        dims = self.analysis.dims.get(self.mask)
        if dims is None or len(dims) != 2:
            raise PassFailure(f"argument {mask} (the attention mask): expected a "
                              f"[batch, length] tensor, got {self.mask.type}")
        self.batch, self.length = dims
        if self.length.is_Integer:
            raise PassFailure(f"argument {mask} (the attention mask): its length dim is "
                              f"static ({self.length}); padding elimination needs a dynamic "
                              f"length")

    # -- layouts ----------------------------------------------------------------
    def layout(self, value: ir.Value) -> str | None:
        """'BL' for ``[B, L, ...]``, 'F' for ``[B * L, ...]``; None otherwise."""
        dims = self.analysis.dims.get(value)
        if dims is None or vtensor_shape(value.type) is None:
            return None
        symbols = self.length.free_symbols | self.batch.free_symbols

        def free(rest):
            return all(d is not None and not (d.free_symbols & symbols) for d in rest)

        if len(dims) >= 2 and same_size(dims[0], self.batch) and same_size(dims[1], self.length) \
                and free(dims[2:]):
            return "BL"
        if len(dims) >= 1 and same_size(dims[0], self.batch * self.length) and free(dims[1:]):
            return "F"
        return None

    def token_wise(self, op: ir.Operation) -> bool:
        name = op.name
        results = list(op.results)
        if not results or any(self.layout(r) is None for r in results):
            return False
        data = [v for v in op.operands if self.layout(v) is not None]
        if not data:
            return False
        first = op.operands[0]
        kind = self.layout(first)
        prefix = 2 if kind == "BL" else 1
        rank = len(vtensor_shape(results[0].type)[0])
        if name in RESHAPES:
            return kind is not None and all(isinstance(d, sympy.Integer) or d.is_Integer
                                            for d in self.analysis.dims[results[0]]
                                            [2 if self.layout(results[0]) == "BL" else 1:])
        if name == "torch.aten.addmm":
            addmm = typed(op)
            return self.layout(addmm.mat1) == "F" and self.layout(results[0]) == "F" and \
                self._no_token_dims([addmm.self_, addmm.mat2])
        if kind is None or any(self.layout(r) != kind for r in results):
            return False
        if name in ELEMENTWISE or name == "torch.aten.dropout":
            if name == "torch.aten.dropout" and not dropout_in_eval(op):
                return False
            return all(self._broadcasts_over_tokens(v, kind, rank) for v in op.operands
                       if vtensor_shape(v.type) is not None)
        if name in ("torch.aten.linear", "torch.aten.matmul", "torch.aten.mm"):
            weight = op.operands[1]  # linear's weight, matmul's other, mm's mat2
            return self._no_token_dims(list(op.operands)[1:]) and \
                len(vtensor_shape(weight.type)[0]) <= 2
        if name in LAYER_NORMS:
            norm = typed(op)
            normalized = list_items(norm.normalized_shape)
            return normalized is not None and len(normalized) <= rank - prefix and \
                self._no_token_dims([norm.weight, norm.bias])
        if name in SOFTMAXES:
            dim = constant_int(typed(op).dim)
            return dim is not None and dim % rank >= prefix
        if name in REDUCTIONS:
            dims = reduced_axes(op, len(vtensor_shape(first.type)[0]))
            return dims is not None and all(d >= prefix for d in dims)
        if name == "torch.aten.permute":
            order = [constant_int(v) for v in list_items(typed(op).dims) or []]
            return order[:prefix] == list(range(prefix))
        if name == "torch.aten.transpose.int":
            axes = [constant_int(typed(op).dim0), constant_int(typed(op).dim1)]
            return None not in axes and all(a % rank >= prefix for a in axes)
        if name in ("torch.aten.unsqueeze", "torch.aten.squeeze.dim", "torch.aten.slice.Tensor",
                    "torch.aten.select.int"):
            dim = constant_int(typed(op).dim)
            in_rank = len(vtensor_shape(first.type)[0])
            modulus = in_rank + 1 if name == "torch.aten.unsqueeze" else in_rank
            return dim is not None and dim % modulus >= prefix
        return False

    def _broadcasts_over_tokens(self, value, kind, rank) -> bool:
        """A token operand of the result's layout, or one constant along the token axes."""
        if self.layout(value) == kind and len(vtensor_shape(value.type)[0]) == rank:
            return True
        shape = vtensor_shape(value.type)[0]
        prefix = 2 if kind == "BL" else 1
        covered = [i - (rank - len(shape)) for i in range(prefix)]
        return all(a < 0 or shape[a] == 1 for a in covered)

    def _no_token_dims(self, values) -> bool:
        symbols = self.length.free_symbols
        for value in values:
            dims = self.analysis.dims.get(value)
            if vtensor_shape(value.type) is None:
                continue
            if dims is None or any(d is None or d.free_symbols & symbols for d in dims):
                return False
        return True

    # -- regions ----------------------------------------------------------------
    def regions(self) -> set:
        members = {op.operation for op in self.block.operations if self.token_wise(op.operation)}
        changed = True
        while changed:  # no region starts with a mere reshape or selection
            changed = False
            for op in list(members):
                if op.name in _SHAPE_ONLY and not any(defining_op(v) in members
                                                      for v in op.operands):
                    members.discard(op)
                    changed = True
        # Connected groups (through token values); only those with a matmul pay for
        # their gathers.
        parent = {op: op for op in members}

        def find(op):
            while parent[op] is not op:
                parent[op] = parent[parent[op]]
                op = parent[op]
            return op

        for op in members:
            for value in op.operands:
                producer = defining_op(value)
                if producer in members:
                    parent[find(op)] = find(producer)
        heavy = {find(op) for op in members if op.name in _MATMULS}
        return {op for op in members if find(op) in heavy}

    # -- the rewrite --------------------------------------------------------------
    def run(self) -> None:
        region = self.regions()
        if not region:
            raise PassFailure("no projection runs on the token rows of the attention mask's "
                              "[batch, length] layout: nothing to pack", self.func.location)
        # Python's Operation objects do not stay hashable across rewrites: the
        # ops are marked by attributes instead (removed below).
        for op in region:
            op.attributes[_OLD] = ir.UnitAttr.get()
        eager = self._eager_facts()
        self._add_arguments()
        packed: dict[ir.Value, ir.Value] = {}
        gathered: dict[ir.Value, ir.Value] = {}
        broadcast: list[ir.Value] = []  # other tensors token rows read (weights, constants)
        for op in [o.operation for o in self.block.operations]:
            if _OLD not in op.attributes:
                continue
            with ir.InsertionPoint(op), op.location:
                operands = []
                for value in op.operands:
                    if value in packed:
                        operands.append(packed[value])
                    elif self.layout(value) is not None and vtensor_shape(value.type) is not None:
                        if value not in gathered:
                            gathered[value] = self._pack(value)
                        operands.append(gathered[value])
                    else:
                        if vtensor_shape(value.type) is not None:
                            broadcast.append(value)
                        operands.append(value)
                new_results = self._recreate(op, operands)
            for old, new in zip(op.results, new_results):
                packed[old] = new
        unpacked, filled = {}, {}
        for old, new in packed.items():
            outside = [u for u in users(old) if _OLD not in u.attributes]
            if not outside:
                continue
            first = next(o.operation for o in self.block.operations
                         if any(o.operation == u for u in outside))
            padded = self._padded_entries(old, eager)
            with ir.InsertionPoint(first), first.location:
                unpacked[old] = self._unpack(new, old.type, self.layout(old))
                if padded is not None:
                    fill, facts = padded
                    unpacked[old] = self._where_real(unpacked[old], fill(), "BL")
                    filled[old] = facts
        for old in packed:
            for user in [u.owner for u in old.uses]:
                if is_a(user, torch_ops.BindSymbolicShapeOp):
                    user.erase()
        for old, value in unpacked.items():
            old.replace_all_uses_with(value)
        self._prove(unpacked, filled, gathered, broadcast)
        for op in reversed([o.operation for o in self.block.operations]):
            if _OLD in op.attributes:
                op.erase()
            elif _NEW in op.attributes and not any(list(r.uses) for r in op.results):
                op.erase()  # a head split whose rows were gathered unsplit
            elif _NEW in op.attributes:
                del op.attributes[_NEW]

    def _add_arguments(self) -> None:
        index = ir.Type.parse("!torch.vtensor<[?],si64>")
        location = self.func.location
        self.tokens = self.block.add_argument(index, location)
        self.slots = self.block.add_argument(index, location)
        function_type = ir.FunctionType(ir.TypeAttr(self.func.attributes["function_type"]).value)
        self.func.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
            [*function_type.inputs, index, index], function_type.results))
        if "arg_attrs" in self.func.attributes:
            attrs = list(ir.ArrayAttr(self.func.attributes["arg_attrs"]))
            self.func.attributes["arg_attrs"] = ir.ArrayAttr.get(
                attrs + [ir.DictAttr.get({}), ir.DictAttr.get({})])
        binding = next((op.operation for op in self.block.operations
                        if is_a(op, torch_ops.BindSymbolicShapeOp)
                        and op.operation.operands[0] == self.mask), None)
        if binding is None:
            raise PassFailure(f"argument {self.mask_position} (the attention mask) has no "
                              f"torch.bind_symbolic_shape: its dims' ranges are unknown")
        high = self.analysis.max_of(self.batch * self.length)
        with ir.InsertionPoint(binding), binding.location:
            count = torch_ops.SymbolicIntOp("anyshape_tokens", 1,
                                            min(high or _UNBOUNDED, _UNBOUNDED)).result
        with ir.InsertionPoint.after(binding), binding.location:
            torch_ops.BindSymbolicShapeOp(self.tokens, [count], ir.AffineMapAttr.get(
                ir.AffineMap.get(0, 1, [ir.AffineSymbolExpr.get(0)])))
            mask_map = ir.AffineMapAttr(binding.attributes["shape_expressions"]).value
            torch_ops.BindSymbolicShapeOp(self.slots, list(binding.operands)[1:],
                                          ir.AffineMapAttr.get(ir.AffineMap.get(
                                              0, mask_map.n_symbols,
                                              [mask_map.results[0] * mask_map.results[1]])))
        self.analysis = ShapeAnalysis(self.func)  # the new arguments' dims, rooted
        self.builder = ScalarBuilder(self.analysis)

    def _pack(self, value: ir.Value) -> ir.Value:
        sizes, dtype = vtensor_shape(value.type)
        kind = self.layout(value)
        rest = sizes[2:] if kind == "BL" else sizes[1:]
        flat = self._feature_rows(value, 2 if kind == "BL" else 1, dtype)
        rows = self._select_rows(flat, self.tokens, None, rest, dtype)
        if kind == "BL":
            rows = self._op(torch_ops.AtenUnsqueezeOp, [1, None, *rest], dtype,
                            rows, int_constant(0))
        return rows

    def _unpack(self, rows: ir.Value, old_type: ir.Type, kind: str) -> ir.Value:
        sizes, dtype = vtensor_shape(old_type)
        rest = sizes[2:] if kind == "BL" else sizes[1:]
        flat = self._feature_rows(rows, 2 if kind == "BL" else 1, dtype)
        grid = self._select_rows(flat, self.slots, sizes[0] if kind == "F" else None, rest, dtype)
        if kind == "BL":
            split = int_list_construct([self.builder.build(self.batch),
                                        self.builder.build(self.length)])
            grid = self._op(torch_ops.AtenUnflattenIntOp, sizes, dtype, grid,
                            int_constant(0), split)
        return grid

    def _feature_rows(self, value: ir.Value, lead: int, dtype) -> ir.Value:
        """``value`` (``lead`` token axes, then features) as ``[rows, features]``,
        the features on one axis where their sizes are known: from the value a
        split of them was made from, when it was (a head split of a projection),
        else flattened. IREE folds a reshape of a gather's source into the
        gather, whose index it then divides and remainders per element: the Q,
        K and V gathers of roberta-base (batch 8, L = 64, 24 real tokens per
        row) took 25.6 ms per call that way, 18.7 ms from the unsplit rows."""
        sizes = vtensor_shape(value.type)[0]
        features = sizes[lead:]
        split = defining_op(value)
        if (len(features) > 1 and is_a(split, torch_ops.AtenUnflattenIntOp)
                and constant_int(typed(split).dim) == lead
                and len(vtensor_shape(typed(split).self_.type)[0]) == lead + 1):
            value = typed(split).self_
            features = vtensor_shape(value.type)[0][lead:]
        elif len(features) > 1 and all(isinstance(d, int) for d in features):
            value = self._op(torch_ops.AtenFlattenUsingIntsOp, [*sizes[:lead], _product(features)],
                             dtype, value, int_constant(lead), int_constant(-1))
            features = [_product(features)]
        if lead == 2:
            value = self._op(torch_ops.AtenFlattenUsingIntsOp, [None, *features], dtype,
                             value, int_constant(0), int_constant(1))
        return value

    def _select_rows(self, rows: ir.Value, index: ir.Value, count, rest: list,
                     dtype) -> ir.Value:
        """``rows`` (``[N, ...]``, ``_feature_rows``) at ``index`` along axis 0, as
        ``[count, *rest]``."""
        features = vtensor_shape(rows.type)[0][1:]
        picked = self._op(torch_ops.AtenIndexSelectOp, [count, *features], dtype,
                          rows, int_constant(0), index)
        if features != list(rest):
            split = int_list_construct([int_constant(n) for n in rest])
            picked = self._op(torch_ops.AtenUnflattenIntOp, [count, *rest], dtype, picked,
                              int_constant(1), split)
        return picked

    def _op(self, op_class: type, sizes, dtype, *operands) -> ir.Value:
        op = op_class(vtensor_type(sizes, dtype), *operands).operation
        op.attributes[_NEW] = ir.UnitAttr.get()
        return op.result

    def _recreate(self, op: ir.Operation, operands: list) -> list:
        if op.name in RESHAPES:
            return [self._reshape(operands[0], op.operands[0], op.results[0])]
        types = []
        for result in op.results:
            sizes, dtype = vtensor_shape(result.type)
            kind = self.layout(result)
            types.append(vtensor_type([1, None, *sizes[2:]] if kind == "BL" else [None, *sizes[1:]],
                                      dtype))
        new = rebuilt(op, operands, types, _attributes(op))
        new.attributes[_NEW] = ir.UnitAttr.get()
        return list(new.results)

    def _reshape(self, rows: ir.Value, source: ir.Value, result: ir.Value) -> ir.Value:
        """``rows`` (packed ``source``) reshaped as ``result`` is, per token: the
        feature axes flattened and split again, in place after the token axes
        (a head split stays an ``unflatten`` of the projection)."""
        dtype = vtensor_shape(rows.type)[1]
        kind_in, kind_out = self.layout(source), self.layout(result)
        lead = [1, None] if kind_in == "BL" else [None]
        rest_in = vtensor_shape(rows.type)[0][len(lead):]
        rest_out = [int(d) for d in self.analysis.dims[result][2 if kind_out == "BL" else 1:]]
        if rest_in != rest_out:
            axis = len(lead)
            if len(rest_in) != 1:
                rows = self._op(torch_ops.AtenFlattenUsingIntsOp if rest_in else
                                torch_ops.AtenUnsqueezeOp, [*lead, _product(rest_in)], dtype,
                                *([rows, int_constant(axis), int_constant(-1)] if rest_in
                                  else [rows, int_constant(axis)]))
            if len(rest_out) > 1:
                split = int_list_construct([int_constant(n) for n in rest_out])
                rows = self._op(torch_ops.AtenUnflattenIntOp, [*lead, *rest_out], dtype,
                                rows, int_constant(axis), split)
            elif not rest_out:
                rows = self._op(torch_ops.AtenSqueezeDimOp, lead, dtype, rows, int_constant(axis))
        if kind_in == "BL" and kind_out == "F":
            rows = self._op(torch_ops.AtenSqueezeDimOp, [None, *rest_out], dtype, rows,
                            int_constant(0))
        elif kind_in == "F" and kind_out == "BL":
            rows = self._op(torch_ops.AtenUnsqueezeOp, [1, None, *rest_out], dtype, rows,
                            int_constant(0))
        return rows

    # -- eager's padded entries ---------------------------------------------------
    def _eager_facts(self) -> PaddingSafety:
        """What eager holds at padded positions, from the mask alone (before the
        rewrite: no value is tainted yet)."""
        eager = PaddingSafety(self.analysis, self.batch, self.length)
        eager.seed(self.mask, [frozenset({"B"}), frozenset({"keep"})])
        eager.run(self.block)
        return eager

    def _padded_entries(self, old: ir.Value, eager: PaddingSafety):
        """(a builder of the scalar, the facts) where eager's ``old`` holds one
        known value at every padded position: ``x * mask`` (0, mean pooling's
        masked sum), a mask itself, ``x.masked_fill(mask == 0, v)`` (``v``, max
        pooling's fill: a ``where`` whose padded positions take a branch that is
        not token rows); else None. Unpacked with it, rather than with copies of
        real rows, ``old`` is eager's exactly, and reductions over positions may
        read it. Floating ``[B, L, ...]`` values only."""
        shape = vtensor_shape(old.type)
        if self.layout(old) != "BL" or shape[1] not in _FLOATS:
            return None
        roles = eager.of(old)
        if isinstance(roles, Poison) or roles is None or tainted_roles(roles):
            roles = None
        at_padding = roles[1] & {"zero", "keep", "pad"} if roles is not None else frozenset()
        if at_padding & {"zero", "keep"}:
            return (lambda: int_constant(0)), frozenset({"zero"})
        if at_padding == {"pad"}:
            return (lambda: int_constant(1)), frozenset({"pad"})
        op = defining_op(old)
        if op is None or not is_a(op, torch_ops.AtenWhereSelfOp):  # masked_fill, decomposed
            return None
        condition = eager.of(op.operands[0])
        if isinstance(condition, Poison) or condition is None or tainted_roles(condition):
            return None
        axis = len(condition) - len(shape[0]) + 1  # the condition broadcasts from the right
        marks = condition[axis] & {"pad", "keep"} if axis >= 0 else frozenset()
        if len(marks) != 1:
            return None
        chosen = op.operands[1 if marks == {"pad"} else 2]  # the padded positions' branch
        if self.layout(chosen) is not None or vtensor_shape(chosen.type) is None:
            return None  # token rows, not a value eager fills in
        number = held_number(chosen)
        facts = {"zero"} if number == 0 else \
            {"add"} if number is not None and number <= BIG_NEGATIVE else set()
        return (lambda: chosen), frozenset(facts)

    def _where_real(self, value: ir.Value, other: ir.Value, layout: str,
                    real: dict | None = None) -> ir.Value:
        """``value`` at real tokens, ``other`` (a scalar, or a tensor that
        broadcasts to it) at padded positions."""
        if real is None or layout not in real:
            keep = torch_ops.AtenNeScalarOp(
                vtensor_type(vtensor_shape(self.mask.type)[0], "i1"), self.mask,
                int_constant(0)).result
            if layout == "F":
                keep = torch_ops.AtenFlattenUsingIntsOp(
                    vtensor_type([None], "i1"), keep, int_constant(0), int_constant(1)).result
            if real is not None:
                real[layout] = keep
        condition = real[layout] if real is not None else keep
        rank = len(vtensor_shape(value.type)[0])
        sizes = vtensor_shape(condition.type)[0]
        while len(sizes) < rank:
            sizes = [*sizes, 1]
            condition = torch_ops.AtenUnsqueezeOp(vtensor_type(sizes, "i1"), condition,
                                                  int_constant(len(sizes) - 1)).result
        if vtensor_shape(other.type) is not None:
            return torch_ops.AtenWhereSelfOp(value.type, condition, value, other).result
        return torch_ops.AtenWhereScalarOtherOp(value.type, condition, value, other).result

    # -- the proof ----------------------------------------------------------------
    def _prove(self, unpacked, filled, gathered, broadcast) -> None:
        safety = PaddingSafety(self.analysis, self.batch, self.length)
        safety.seed(self.mask, [frozenset({"B"}), frozenset({"keep"})])
        for old, value in unpacked.items():
            rank = len(vtensor_shape(value.type)[0])
            if old in filled:  # eager's own values at padded positions: nothing tainted
                lead = [frozenset({"B"}), filled[old]]
            elif self.layout(old) == "BL":
                lead = [frozenset({"B"}), frozenset({"L"})]
            else:
                lead = [frozenset({"BL"})]
            safety.seed(value, lead + [frozenset()] * (rank - len(lead)))
        safety.run(self.block, skip=(_OLD, _NEW))
        for value in gathered:
            roles = safety.of(value)
            if isinstance(roles, Poison):
                raise _unsafe(roles, "the token rows gathered after it")
            if roles is not None and not _packable(roles, self.layout(value)):
                raise PassFailure(f"a value gathered by token rows carries padded positions on "
                                  f"axes it is not gathered by (roles {_show(roles)})",
                                  defining_op(value).location if defining_op(value) else None)
        for value in broadcast:
            roles = safety.of(value)
            if isinstance(roles, Poison):
                raise _unsafe(roles, "the token rows that read it")
            if roles is not None and any(is_taint(r) for axis in roles for r in axis):
                raise PassFailure(f"token rows read a value computed from padded positions "
                                  f"(roles {_show(roles)})",
                                  defining_op(value).location if defining_op(value) else None)
        self._zero_outputs(safety)

    def _zero_outputs(self, safety: PaddingSafety) -> None:
        ret = self.block.operations[len(self.block.operations) - 1].operation
        per_token, per_row = [], []
        real: dict = {}  # one comparison with the mask for every result
        for position, value in enumerate(ret.operands):
            roles = safety.of(value)
            if roles is None:
                continue
            if isinstance(roles, Poison):
                raise _unsafe(roles, f"result {position}")
            taint = [{r for r in axis if is_taint(r)} for axis in roles]
            if not any(taint):
                continue
            rows = sorted({r.split(":", 1)[1] for axis in taint for r in axis
                           if r.startswith(("row:", "at:"))})
            positional = [i for i, t in enumerate(taint) if t - {r for r in t if ":" in r}]
            if not positional:
                batch = next((i for i, axis in enumerate(roles) if "B" in axis), None)
                if batch is None or "?" in rows:
                    raise PassFailure(f"result {position} reads positions it cannot tell of "
                                      f"sequences it cannot tell (roles {_show(roles)})",
                                      ret.location)
                per_row += [f"{position}:{batch}:{c}" for c in rows]
                continue
            layout = "BL" if taint[:2] == [set(), {"L"}] and "B" in roles[0] else \
                "F" if taint[0] == {"BL"} else None
            if layout is None or any(taint[2 if layout == "BL" else 1:]) or rows:
                raise PassFailure(f"result {position} carries padded positions on axes "
                                  f"{positional} (roles {_show(roles)}), which no mask zeroes",
                                  ret.location)
            with ir.InsertionPoint(ret), ret.location:
                ret.operands[position] = self._where_real(value, int_constant(0), layout, real)
            per_token.append(position)
        text = (f'{{mask = {self.mask_position} : i64, per_token = [{", ".join(map(str, per_token))}], '
                f'per_row = [{", ".join(chr(34) + r + chr(34) for r in per_row)}]}}')
        self.func.attributes[PADDING_ATTR] = ir.Attribute.parse(text)


def _attributes(op: ir.Operation) -> dict:
    named = (op.attributes[i] for i in range(len(op.attributes)))
    return {a.name: a.attr for a in named if a.name not in (_OLD, IDENTITY)}


def _packable(roles, kind) -> bool:
    lead = [{"B"}, {"L", "dead", "zero"}] if kind == "BL" else [{"BL"}]
    for axis, allowed in zip(roles, lead):
        if {r for r in axis if is_taint(r)} - allowed:
            return False
    return not any(is_taint(r) for axis in roles[len(lead):] for r in axis)


def _unsafe(poison: Poison, reader: str) -> PassFailure:
    return PassFailure(f"'{poison.op.name}' reads across positions ({poison.why}), and "
                       f"{reader} depend on what it computes: padding elimination cannot prove "
                       f"the padded positions unread", poison.op.location)


def _show(roles) -> str:
    return "[" + ", ".join("{" + ",".join(sorted(r)) + "}" for r in roles) + "]"


def _product(sizes) -> int:
    out = 1
    for n in sizes:
        out *= n
    return out


