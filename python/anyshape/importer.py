"""Import stage: an unmodified PyTorch module to torch-dialect MLIR with symbolic shapes."""

from __future__ import annotations

import contextlib
import inspect
import re
import warnings
from typing import Any

import numpy as np
import torch
import torch.export

from anyshape import export_diagnostics
from anyshape.errors import CompileError
from anyshape.mlir import ir, new_context
from anyshape.passes.torch_ir.mixed_comparisons import mend_mixed_comparisons
from anyshape.signature import ordered_range_constraints, output_roles
from anyshape.checked_det import check_det
from anyshape.constant_subexpressions import compute_constant_subexpressions
from anyshape.edge_value_math import rewrite_edge_value_math
from anyshape.integer_negation import rewrite_integer_negation
from anyshape.nonnegative_dims import count_dims_from_the_front
from anyshape.packed_sort_keys import rewrite_sorts_as_packed_keys
from anyshape.rank0_softmax import rewrite_rank0_softmax
from anyshape.stable_logcumsumexp import rewrite_logcumsumexp
from anyshape.symbolic_scalars import (lower_symbolic_scalars, scalar_as_tensor,
                                       wrap_scalars_at_tensor_operands)
from anyshape.tensor_metadata_asserts import drop_proven_metadata_asserts
from anyshape.unsigned_casts import cast_floats_to_unsigned_through_int64
from anyshape.whole_dim_slices import drop_whole_dim_slices
from anyshape.wrong_lowerings import refuse_wrong_lowerings
from anyshape.workarounds_index import Workaround

# Ops kept whole through import, and why (everything else decomposes to core ATen,
# which is what torch-mlir's lowering to linalg covers best):
# - linear: the slice-hoisting pass moves row slices through it as one matmul,
#   and IREE's torch input lowers it to a matmul plus a broadcast add that fuse.
# - layer_norm: kept so passes see one normalization with its axes; torch-mlir
#   decomposes it after anyshape's passes, inside IREE's torch input.
# - softmax / _softmax: same, one op with its axis for the shape passes.
# - gelu: one elementwise op instead of an erf polynomial of several ops.
# - squeeze.dim: torch decomposes it to squeeze.dims, which torch-mlir has no op
#   for (it imports as an opaque `torch.operator` that IREE cannot lower; Electra's
#   `logits.squeeze(-1)`); squeeze.dims itself becomes a chain of squeeze.dim below.
#
# scaled_dot_product_attention is decomposed (to matmuls around a softmax), on
# purpose. Kept whole, IREE's torch input turns it into `iree_linalg_ext.attention`,
# and with a dynamic sequence length IREE 3.13 then fails at O2 (a
# `vector.mask` verifier error after unit dims are dropped from the masked
# Q.K^T contraction); the builds that avoid that failure ran the whole
# roberta-base classifier 2-3x slower at L = 512 than the decomposed form.
# torch's own decomposition returns the output in a permuted memory layout, on
# which GPT-2's later `x.view(-1, hidden)` fails during export: it is used with
# its result made contiguous, as eager attention returns it. (A hand-written
# matmul/softmax form instead made IREE exceed its stack limit in the
# roberta-base attention dispatch.)
KEPT_WHOLE = (
    torch.ops.aten.linear.default,
    torch.ops.aten.layer_norm.default,
    torch.ops.aten.softmax.int,
    torch.ops.aten._softmax.default,
    torch.ops.aten.gelu.default,
    torch.ops.aten.squeeze.dim,
)


def decomposition_table() -> dict:
    table = torch.export.default_decompositions()
    for op in KEPT_WHOLE:
        table.pop(op, None)
    sdpa = torch.ops.aten.scaled_dot_product_attention.default
    torch_attention = table[sdpa]

    def contiguous_attention(*args, **kwargs):
        return torch_attention(*args, **kwargs).contiguous()

    table[sdpa] = contiguous_attention
    table[torch.ops.aten.squeeze.dims] = _squeeze_one_dim_at_a_time
    table[torch.ops.aten._native_batch_norm_legit_no_training.default] = _batch_norm_eval
    return table


def _batch_norm_eval(x, weight, bias, running_mean, running_var, momentum, eps):
    # Batch norm in eval mode is a core ATen op torch-mlir has no lowering for
    # ("failed to legalize ... _native_batch_norm_legit_no_training", static
    # shapes too), and torch's own decomposition of it goes through the training
    # op, which mutates: elementwise arithmetic over the channel axis instead.
    shape = [1, -1] + [1] * (x.dim() - 2)
    scale = torch.rsqrt(running_var + eps)
    if weight is not None:
        scale = scale * weight
    out = (x - running_mean.reshape(shape)) * scale.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    empty = x.new_zeros((0,))  # no saved statistics in eval mode, as the op returns
    return out, empty, empty


def _squeeze_one_dim_at_a_time(x: torch.Tensor, dims) -> torch.Tensor:
    # squeeze.dims leaves a listed dim of size other than 1 alone (x.squeeze()
    # lists every dim); a dynamic dim whose range excludes 1 is left without a
    # guard, one that may be 1 guards as eager's own test would. Highest dim
    # first, so the dims still to squeeze keep their positions.
    for dim in sorted({d % max(x.dim(), 1) for d in dims}, reverse=True):
        if x.dim() and x.shape[dim] == 1:
            x = torch.ops.aten.squeeze.dim(x, dim)
    return x


def export_program(model: torch.nn.Module, args: tuple, kwargs: dict | None,
                   dynamic_shapes: Any) -> torch.export.ExportedProgram:
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    if model.training:
        warnings.warn(
            "model is in training mode: dropout and batch-norm statistics are exported as "
            "training ops; call model.eval() first to compile for inference",
            stacklevel=3,
        )
    args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
    with torch.no_grad(), export_diagnostics.listening() as shape_log:
        try:
            program = torch.export.export(model, args, kwargs or {},
                                          dynamic_shapes=dynamic_shapes, strict=False)
        except Exception as error:
            names = list(inspect.signature(model.forward).parameters)
            raise export_diagnostics.export_error(error, shape_log, dynamic_shapes,
                                                  names) from error
    return prepare_program(program)


def prepare_program(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """An exported program (``export_program``'s, or one a user passes to
    ``compile``) decomposed as anyshape imports it (``decomposition_table``)."""
    try:
        program = program.run_decompositions(decomposition_table())
    except Exception as error:
        first = next((line for line in str(error).splitlines() if line.strip()), "")
        raise CompileError("export", f"decomposing the exported program to core ATen ops "
                                     f"failed ({type(error).__name__}): {first[:300]}",
                           None, None) from error
    output_roles(program)  # refuses state updated in place before the slow stages
    return program


def import_program(program: torch.export.ExportedProgram, ctx: ir.Context | None = None,
                   func_name: str = "main", weights: dict | None = None) -> ir.Module:
    """Import an exported program with weights inlined as resources and symbolic dims kept.

    ``weights``, when given, gets each resource blob's name and the array behind it."""
    from torch_mlir.extras.fx_importer import FxImporter

    ctx = ctx or new_context()
    names: dict[int, str] = {}
    graph = _inline_state(program, names)
    refuse_wrong_lowerings(graph)
    compute_constant_subexpressions(graph)
    drop_proven_metadata_asserts(graph)
    rewrite_sorts_as_packed_keys(graph)
    rewrite_integer_negation(graph)
    count_dims_from_the_front(graph)
    drop_whole_dim_slices(graph)
    # Before the scalars become 0-d tensor ops: those pow ops of sizes stay as
    # they were tested (test_symbolic_scalars.py), on IREE's host arithmetic.
    # (After them, the IEEE rewrite's sign tests met torch-mlir's comparison
    # folder bug, passes/torch_ir/mixed_comparisons.py: the "pow of a size is
    # 1.0" of an earlier note. With that mended, both orders pass those tests.)
    rewrite_edge_value_math(graph)
    rewrite_rank0_softmax(graph)
    rewrite_logcumsumexp(graph)
    check_det(graph)
    lower_symbolic_scalars(graph)
    wrap_scalars_at_tensor_operands(graph)
    cast_floats_to_unsigned_through_int64(graph)
    _return_module_results(program, graph)
    hooks = _WeightLiterals(names)
    importer = FxImporter(context=ctx, hooks=hooks)
    importer._cc.set_symbolic_guards(program)
    # torch-mlir makes the torch.symbolic_int ops in this dict's order: by name,
    # not in torch.export's hash-dependent one (signature.ordered_range_constraints).
    guards = importer._cc._symbolic_guards  # integer symbols only (not .item()'s floats)
    importer._cc._symbolic_guards = {str(sym): guards[str(sym)]
                                     for sym, _ in ordered_range_constraints(program)
                                     if str(sym) in guards}
    with ctx, _shape_expressions_as_affine_maps(), _node_being_imported() as current:
        try:
            importer.import_stateless_graph(graph, func_name=func_name,
                                            import_symbolic_shape_expressions=True)
        except Exception as error:
            raise _import_error(error, current[-1] if current else None) from error
    if weights is not None:
        weights.update(hooks.blobs)
    # What IREE's torch input canonicalizes too, with the same folder, also when
    # no anyshape pass runs (passes=[]): the pow rewrite above emits such tests.
    mend_mixed_comparisons(importer.module.operation)
    return importer.module


def _return_module_results(program: torch.export.ExportedProgram, graph: torch.fx.Graph) -> None:
    """What the module returns (``signature.output_roles``): the new values of
    inputs updated in place, then each output that is not a constant, a Python
    scalar as a 0-d tensor."""
    output = next(n for n in graph.nodes if n.op == "output")
    results = []
    for returned in output_roles(program):
        if returned.role == "scalar":
            results.append(scalar_as_tensor(graph, returned.value, output))
        elif returned.role != "constant":
            results.append(returned.value)
    output.args = (tuple(results),)


@contextlib.contextmanager
def _node_being_imported():
    """The FX node torch-mlir's importer is at, for its failures: it asks each
    node's location first (``ContextCache.get_node_location``) and names
    neither node nor line when it fails."""
    from torch_mlir.extras import fx_importer

    seen: list[torch.fx.Node] = []
    locate = fx_importer.ContextCache.get_node_location

    def remember(cache, node):
        seen.append(node)
        return locate(cache, node)

    fx_importer.ContextCache.get_node_location = remember
    try:
        yield seen
    finally:
        fx_importer.ContextCache.get_node_location = locate


def _import_error(error: Exception, node: torch.fx.Node | None) -> CompileError:
    text = str(error)
    first = next((line for line in text.splitlines() if line.strip()), "")
    if first.startswith("FIX ME: Unimplemented call_function"):
        first = "no import for this call"  # the rest is the node's whole metadata
    reason = f"{type(error).__name__}: {first[:300]}"
    if node is None:
        return CompileError("import", f"torch-mlir's FX importer failed ({reason})", None, None)
    frames = re.findall(r'File "([^"]+)", line (\d+)', node.meta.get("stack_trace") or "")
    at = f" at {frames[-1][0]}:{frames[-1][1]}" if frames else ""
    target = str(node.target) if isinstance(node.target, torch._ops.OpOverload) else \
        getattr(node.target, "__name__", str(node.target))
    return CompileError("import", f"torch-mlir's FX importer cannot import {node.op} "
                                  f"{target}{at} ({reason})", None, None)


@contextlib.contextmanager
def _shape_expressions_as_affine_maps():
    """torch-mlir's importer writes each value's symbolic shape as an affine map,
    and has no translation for sympy's ``FloorDiv``: a strided slice of the length
    (``x[:, ::2]``, size ``(L + 1) // 2``) failed the import with
    "Translation of sympy.Expr of type FloorDiv not implemented yet", and
    likewise for ``PythonMod`` (padding to a multiple of 4: ``(-L) % 4``). By a
    positive constant they are an affine ``floordiv`` and ``mod``; for the
    length of this import the module's translation function is wrapped to
    produce them (torch-mlir's recursion goes through the module's name, so a
    term inside a sum reaches the wrapper too). A shape no affine map can
    state (``x.reshape(-1, 4)``: ``(B*L) // ((B*L) // 4)`` columns, a symbolic
    divisor) failed the whole import; such a value is imported without its
    binding, which only states facts: its type still has the dynamic dims."""
    import sympy
    from torch.utils._sympy.functions import FloorDiv, PythonMod
    from torch_mlir.extras import fx_importer

    original = fx_importer.sympy_expr_to_semi_affine_expr
    bind = fx_importer.GraphNodeImporter._create_bind_symbolic_shape_ops

    def translate(expr, symbols_map):
        divisor = expr.args[1] if isinstance(expr, (FloorDiv, PythonMod)) else None
        if isinstance(divisor, (int, sympy.Integer)) and int(divisor) > 0:
            # Both round toward -inf for a positive divisor, as affine floordiv and mod do.
            make = ir.AffineFloorDivExpr if isinstance(expr, FloorDiv) else ir.AffineModExpr
            return make.get(translate(expr.args[0], symbols_map),
                            ir.AffineConstantExpr.get(int(divisor)))
        return original(expr, symbols_map)

    def bind_if_affine(importer, loc, node):
        try:
            return bind(importer, loc, node)
        except NotImplementedError:
            return None  # no binding: torch-mlir raised before creating any op

    fx_importer.sympy_expr_to_semi_affine_expr = translate
    fx_importer.GraphNodeImporter._create_bind_symbolic_shape_ops = bind_if_affine
    try:
        yield
    finally:
        fx_importer.sympy_expr_to_semi_affine_expr = original
        fx_importer.GraphNodeImporter._create_bind_symbolic_shape_ops = bind


def import_torch(model: torch.nn.Module, args, kwargs: dict | None = None, *,
                 dynamic_shapes: Any = None) -> ir.Module:
    """The import stage on its own: the torch-dialect module, weights included.

    ``str()`` of the result is complete MLIR text that ``anyshape-opt`` reads back.
    """
    return import_program(export_program(model, args, kwargs, dynamic_shapes))


def _inline_state(program: torch.export.ExportedProgram,
                  names: dict[int, str]) -> torch.fx.Graph:
    """Replace lifted parameters, buffers and constants by the tensors themselves,
    recording in ``names`` each tensor's state name (the first, for a tied one).

    torch-mlir's ``import_frozen_program`` looks buffers up in ``state_dict``
    only, but non-persistent buffers (RoBERTa's ``position_ids``) live in the
    program's ``constants``; look in both.
    """
    sig = program.graph_signature
    state = {**program.state_dict, **program.constants}
    lifted = {**sig.inputs_to_parameters, **sig.inputs_to_buffers,
              **sig.inputs_to_lifted_tensor_constants}
    graph = program.graph
    for node in list(graph.nodes):
        if node.op != "placeholder" or node.name not in lifted:
            continue
        name = lifted[node.name]
        if name not in state:
            raise KeyError(f"exported program has no value for '{name}' (input {node.name})")
        names.setdefault(id(state[name]), name)
        node.replace_all_uses_with(state[name])
        graph.erase_node(node)
    return graph


# Integer tensors up to this size are imported as readable dense elements.
_INLINE_INDEX_ELEMENTS = 8192


class _WeightLiterals:
    """Importer hook: weights become ``torch.vtensor.literal`` over a resource blob.

    The default path converts every weight through ``tensor.tolist()``, which
    takes minutes and gigabytes for a roberta-base-sized model; this one hands
    the tensor's buffer over directly. One blob per tensor object, so a tied
    weight used in several places is stored once.
    """

    def __init__(self, names: dict[int, str]):
        # id(tensor) -> (resource attribute, vtensor type, the array backing it, the
        # tensor). The tensor is kept so that its id is not reused: torch-mlir hands
        # a bool literal over as a temporary ``.to(torch.uint8)``, and a later
        # temporary at the same address would be given this one's data.
        self._literals: dict[int, tuple] = {}
        self._names = names  # id(tensor) -> its name in the model's state
        self.blobs: dict[str, np.ndarray] = {}  # resource blob name -> its array

    # FxImporterHooks protocol
    def prepare_module(self, module_op):
        pass

    def resolve_input(self, gni, value, info):
        return None

    def store_produced_value(self, gni, py_value, produced_ir_value, info):
        raise NotImplementedError("mutation of parameters or buffers is not supported")

    def resolve_literal(self, gni, literal, info):
        from torch_mlir.extras.fx_importer import (
            TORCH_DTYPE_TO_MLIR_TYPE, TORCH_DTYPE_TO_MLIR_TYPE_ASM, create_mlir_tensor_type)

        if not isinstance(literal, torch.Tensor) or literal.numel() <= 1:
            return None  # scalars: the default makes splat constants, which fold better
        if literal.dtype not in TORCH_DTYPE_TO_MLIR_TYPE_ASM or literal.is_complex():
            return None
        key = id(literal)
        if key not in self._literals:
            tensor = literal.detach().cpu().contiguous()
            # numpy has no bfloat16: hand over the same bytes as int16.
            raw = tensor.view(torch.int16) if tensor.dtype == torch.bfloat16 else tensor
            array = raw.numpy()
            if not tensor.is_floating_point() and tensor.numel() <= _INLINE_INDEX_ELEMENTS:
                # Small integer buffers (position ids, token type ids) stay readable
                # to the shape passes: a slice of an arange buffer is an iota.
                attr = ir.DenseElementsAttr.get(
                    array, type=TORCH_DTYPE_TO_MLIR_TYPE[tensor.dtype](), shape=array.shape)
            else:
                blob = self._blob_name(key)
                attr = ir.DenseResourceElementsAttr.get_from_buffer(
                    memoryview(array), blob, create_mlir_tensor_type(tensor))
                self.blobs[blob] = array
            shape = ",".join(str(d) for d in tensor.shape)
            vtype = f"!torch.vtensor<[{shape}],{TORCH_DTYPE_TO_MLIR_TYPE_ASM[tensor.dtype]}>"
            self._literals[key] = (attr, vtype, array, literal)
        attr, vtype, _, _ = self._literals[key]
        return ir.Operation.create("torch.vtensor.literal", results=[ir.Type.parse(vtype)],
                                   attributes={"value": attr}).result

    def _blob_name(self, key: int) -> str:
        """The weight's state name (``roberta.encoder.layer.0.output.dense.weight``),
        which also names it in a parameter archive (``params="external"``); made
        an MLIR bare identifier, and numbered where that is not unique."""
        name = re.sub(r"[^A-Za-z0-9_.$]", "_", self._names.get(key, "weight"))
        if not re.match(r"[A-Za-z_]", name):
            name = "_" + name
        if name in self.blobs or name == "weight":
            base, number = name, len(self._literals)
            while f"{base}_{number}" in self.blobs or f"{base}_{number}" in self._names.values():
                number += 1
            name = f"{base}_{number}"
        return name


# Workarounds of upstream bugs here (docs/workarounds.md, anyshape/workarounds_index.py).
WORKAROUNDS = (
    Workaround(
        name='squeeze_dims_one_dim_at_a_time', stage='export',
        where='KEPT_WHOLE (aten.squeeze.dim), decomposition_table, _squeeze_one_dim_at_a_time',
        upstream='torch decomposes squeeze.dim and squeeze() to aten.squeeze.dims, for which '
                 'torch-mlir has no op: it imports as an opaque `torch.operator` that IREE cannot'
                 " lower (Electra's `logits.squeeze(-1)`).",
        guard=('test/python/test_import.py::test_squeezes_compile_and_match_eager',
               'test/python/test_hf_families.py::test_squeezed_head_reaches_iree_as_a_known_op'),
        remove_when='(inferred) when torch-mlir has an op/lowering for aten.squeeze.dims'),
    Workaround(
        name='batch_norm_eval_elementwise', stage='export',
        where='_batch_norm_eval (decomposition_table)',
        upstream='torch-mlir has no lowering for the core ATen op '
                 '_native_batch_norm_legit_no_training ("failed to legalize ... '
                 '_native_batch_norm_legit_no_training", static shapes too), and torch\'s own '
                 'decomposition goes through the mutating training op; written as elementwise '
                 'arithmetic over the channel axis.',
        guard='test/python/test_op_coverage.py::test_matches_eager[norm-batch-norm-eval]',
        remove_when='(inferred) when torch-mlir lowers _native_batch_norm_legit_no_training'),
    Workaround(
        name='sdpa_decomposed_not_fused', stage='export',
        where='decomposition_table (scaled_dot_product_attention not in KEPT_WHOLE)',
        upstream="Kept whole, IREE's torch input turns scaled_dot_product_attention into "
                 'iree_linalg_ext.attention, and with a dynamic sequence length IREE 3.13 fails '
                 'at O2 (a `vector.mask` verifier error after unit dims are dropped from the '
                 'masked Q.K^T contraction); builds avoiding that ran roberta-base 2-3x slower at'
                 ' L=512.',
        guard=(),
        unguarded='Deliberate choice documented in the importer comment and docs/api.md; no test '
                  'asserts the fused form fails. anyshape-defer-softmax-normalization and its '
                  'tests (test_defer_softmax_normalization.py) depend on the decomposed form.',
        remove_when='(inferred) when IREE > 3.13 compiles iree_linalg_ext.attention with a '
                    'dynamic length at O2 and as fast'),
    Workaround(
        name='sdpa_contiguous_output', stage='export',
        where='decomposition_table (contiguous_attention)',
        upstream="torch's own scaled_dot_product_attention decomposition returns its output in a "
                 "permuted memory layout, on which GPT-2's later `x.view(-1, hidden)` fails "
                 'during export; the result is made contiguous, as eager attention returns it.',
        guard=(),
        unguarded='Exercised (not specifically guarded) by the GPT-2 tests, e.g. '
                  'test/python/test_unbounded_dims.py::test_gpt2_last_token_with_unbounded_batch_and_length'
                  ' and test/python/test_data_tiling.py::test_gpt2_data_tiled_matches_eager.',
        remove_when="(inferred) when torch's SDPA decomposition returns a contiguous result"),
    Workaround(
        name='shape_expressions_as_affine_maps', stage='import',
        where='_shape_expressions_as_affine_maps',
        upstream="torch-mlir's importer has no translation for sympy FloorDiv/PythonMod in shape "
                 'bindings ("Translation of sympy.Expr of type FloorDiv not implemented yet": '
                 'x[:, ::2], (-L) % 4); they become affine floordiv/mod, and a shape no affine '
                 'map can state (x.reshape(-1, 4)) is imported without its binding instead of '
                 'failing the import.',
        guard=('test/python/test_import.py::test_strided_slice_of_dynamic_length',
               'test/python/test_import.py::test_modulo_in_symbolic_shape_imports',
               'test/python/test_run_errors.py::test_reshape_of_two_dynamic_dims_is_exact'),
        remove_when="(inferred) when torch-mlir's importer translates FloorDiv/PythonMod and "
                    'tolerates non-affine shape expressions'),
    Workaround(
        name='non_persistent_buffers_inlined', stage='import',
        where='_inline_state',
        upstream="torch-mlir's import_frozen_program looks buffers up in state_dict only, but "
                 "non-persistent buffers (RoBERTa's position_ids) live in the exported program's "
                 'constants; state is inlined from both.',
        guard='test/python/test_import.py::test_non_persistent_buffer',
        remove_when="(inferred) when torch-mlir's frozen-program import reads program.constants"),
    Workaround(
        name='weight_literals_as_resources', stage='import',
        where='_WeightLiterals.resolve_literal',
        upstream="torch-mlir's default literal path converts every weight through "
                 'tensor.tolist(), which takes minutes and gigabytes for a roberta-base-sized '
                 'model; the hook hands the buffer over as a dense_resource blob, one per tensor '
                 '(tied weights stored once).',
        guard='test/python/test_import.py::test_tied_weights_stored_once',
        remove_when="(inferred) when torch-mlir's importer hands tensor buffers over directly"),
    Workaround(
        name='literal_cache_keeps_tensor_alive', stage='import',
        where='_WeightLiterals._literals',
        upstream='torch-mlir hands a bool literal over as a temporary .to(torch.uint8); cached by'
                 " id(tensor), a later temporary at the same address would import as this one's "
                 'data, so the cache keeps the tensor alive.',
        guard='test/python/test_import.py::test_literal_cache_keeps_what_it_is_keyed_by',
        remove_when='(inferred) when the literal cache is no longer keyed by id() or torch-mlir '
                    'passes the original tensor'),
    Workaround(
        name='symbolic_int_order_by_name', stage='import',
        where='import_program (importer._cc._symbolic_guards reordered; '
              'signature.ordered_range_constraints)',
        upstream='torch.export adds the roots of derived dims (2*A, B+1) while iterating a set of'
                 ' sympy symbols, so its order changes with PYTHONHASHSEED; the manifest and '
                 "torch-mlir's torch.symbolic_int ops follow a name order instead.",
        guard='test/python/test_deterministic_compile.py::test_derived_dims_import_in_one_order_whatever_the_hash_seed',
        remove_when="(inferred) when torch.export's range_constraints order is deterministic"),
)
