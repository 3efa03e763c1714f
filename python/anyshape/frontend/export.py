"""Export stage: ``torch.export`` with the user's dims, then the decomposition
anyshape imports (``decomposition_table``: core ATen with a few ops kept whole)."""

from __future__ import annotations

import dataclasses
import inspect
import re
import warnings
from typing import Any

import torch
import torch.export

from torch.export.dynamic_shapes import _DerivedDim

from anyshape.errors import CompileError, DimBoundedByConfig
from anyshape.frontend import (cache_output, chunked_scans, config_bounds, export_diagnostics,
                               grouped_experts, order_statistics, pooling, pooling_sizes,
                               quantized_ops, unproven_guards)
from anyshape.frontend.layout_probes import static_layout_probes
from anyshape.frontend.sliding_window_cache import window_cut_caches
from anyshape.frontend.program_signature import SIZE_CONDITIONS, output_roles
from anyshape.stages import Workaround

# The graph module's meta key marking a program prepare_program decomposed.
DECOMPOSED = "anyshape.decomposed"

# Ops kept whole through import, and why (everything else decomposes to core ATen,
# which is what torch-mlir's lowering to linalg covers best):
# - linear: the slice-hoisting pass moves row slices through it as one matmul,
#   and IREE's torch input lowers it to a matmul plus a broadcast add that fuse.
# - layer_norm: kept so passes see one normalization with its axes; torch-mlir
#   decomposes it after anyshape's passes, inside IREE's torch input.
# - softmax / _softmax: same, one op with its axis for the shape passes.
# - gelu: one elementwise op instead of an erf polynomial of several ops; but
#   gelu(approximate="tanh") is decomposed (_gelu_tanh_decomposed).
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
        output = torch_attention(*args, **kwargs)
        if output.dim() != 4:
            return output.contiguous()
        # [N, H, L, E] laid out as [N, L, H, E]: CPU flash attention's layout, which the
        # exported program's views of the heads' transpose were traced against.
        return output.transpose(1, 2).contiguous().transpose(1, 2)

    table[sdpa] = contiguous_attention
    table[torch.ops.aten.squeeze.dims] = _squeeze_one_dim_at_a_time
    table[torch.ops.aten._native_batch_norm_legit_no_training.default] = _batch_norm_eval
    table[torch.ops.aten.empty_permuted.default] = _empty_permuted_as_permuted_empty
    table[torch.ops.aten.fmod.Scalar] = _integer_fmod
    table[torch.ops.aten.split_with_sizes.default] = _split_with_dynamic_sizes_as_slices
    table[torch.ops.aten.gelu.default] = _gelu_tanh_decomposed
    table[torch.ops.aten.fmod.Tensor] = _integer_fmod
    table.update(grouped_experts.decompositions())
    table.update(order_statistics.decompositions())
    table.update(pooling.decompositions())
    table.update(quantized_ops.decompositions())
    return table


def _empty_permuted_as_permuted_empty(size, physical_layout, dtype=None, layout=None,
                                      device=None, pin_memory=None):
    # torch decomposes empty_like to empty_permuted (its memory order), which
    # torch-mlir has no op for (an opaque `torch.operator`; transformers' MoE
    # experts invert their sort with `empty_like(perm)`): an empty tensor in
    # memory order, permuted to the logical order, as torch's own op builds it.
    physical = [size[axis] for axis in physical_layout]
    logical = sorted(range(len(physical_layout)), key=lambda i: physical_layout[i])
    return torch.empty(physical, dtype=dtype, device=device,
                       pin_memory=bool(pin_memory)).permute(logical)


def _integer_fmod(a, b):
    """C's integer ``%`` (the sign of ``a``) as ``a - b * trunc(a / b)``. Floats
    are torch-mlir's to lower (NotImplemented), a Python number divisor as a 0-d
    tensor: torch-mlir legalizes fmod.Tensor, not fmod.Scalar."""
    if not isinstance(a, torch.Tensor) or a.dtype.is_complex:
        return NotImplemented
    if a.dtype.is_floating_point:
        if isinstance(b, (int, float)) and not isinstance(b, bool):
            return torch.ops.aten.fmod.Tensor(a, torch.full((), b, dtype=a.dtype))
        return NotImplemented
    if (isinstance(b, torch.Tensor) and b.dtype.is_floating_point) or isinstance(b, float):
        return NotImplemented
    return a - b * torch.div(a, b, rounding_mode="trunc")


def _gelu_tanh_decomposed(x, approximate="none"):
    """gelu(approximate="tanh") as torch's own decomposition (a tanh of a cubic):
    torch-mlir's lowering of the op whole was 100x further from float64 than
    eager float32 (5e-5 at x = 1.34), which Gemma 4's norm after a small MLP
    output made 1.6e-4 in the logits. The erf form stays whole (NotImplemented)."""
    if approximate != "tanh":
        return NotImplemented
    return torch._decomp.decomposition_table[torch.ops.aten.gelu.default](x, approximate)


def _split_with_dynamic_sizes_as_slices(x, split_sizes, dim=0):
    """A split whose sizes are symbolic (``torch.split(x, 2)`` along a dynamic dim:
    [2, 2, n - 4]) as one slice per piece: torch-mlir cannot legalize the
    split's list of sizes when one is a symbol. Static sizes stay one split."""
    if all(isinstance(size, int) for size in split_sizes):
        return NotImplemented
    pieces, start = [], 0
    for size in split_sizes:
        pieces.append(torch.ops.aten.slice.Tensor(x, dim, start, start + size))
        start = start + size
    return pieces


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
                   dynamic_shapes: Any, strict_dims: bool = False,
                   stacklevel: int = 3) -> torch.export.ExportedProgram:
    """``torch.export`` of ``model``, decomposed (``prepare_program``). Where
    torch's only objection is a max its config implies on one of the user's
    dims, exported with that max and a ``DimBoundedByConfig`` warning
    (``config_bounds.py``); ``strict_dims=True``: refused, as torch refuses.
    ``stacklevel``: the warnings' (the caller's caller: the user's line)."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    if model.training:
        warnings.warn(
            "model is in training mode: dropout and batch-norm statistics are exported as "
            "training ops; call model.eval() first to compile for inference",
            stacklevel=stacklevel,
        )
    args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
    args, kwargs = _owning_their_storage((args, kwargs or {}))
    applied: list[config_bounds.Bound] = []
    deferred = False  # conditions torch could not prove, proven here: checked at run time
    no_cache = False  # config.use_cache off: the model returned its cache (cache_output.py)
    while True:
        with torch.no_grad(), static_layout_probes(), chunked_scans.any_length_scans(), \
                window_cut_caches(), pooling.symbolic_max_pool1d(), \
                cache_output.cache_left_out(model, no_cache), \
                export_diagnostics.listening() as shape_log:
            try:
                program = torch.export.export(
                    model, args, kwargs or {}, dynamic_shapes=dynamic_shapes, strict=False,
                    prefer_deferred_runtime_asserts_over_guards=deferred)
                break
            except Exception as error:
                if not no_cache and cache_output.cache_in_output(error) and \
                        cache_output.can_leave_out(model, args, kwargs or {}):
                    no_cache = True
                    cache_output.warn_left_out(model, stacklevel)
                    continue
                text = str(error)
                retry = None if strict_dims or len(applied) >= _MAX_BOUND_RETRIES else \
                    config_bounds.bounded(text, model, dynamic_shapes,
                                          export_diagnostics.violated_conditions(text, shape_log))
                names = list(inspect.signature(model.forward).parameters)
                refusal = export_diagnostics.export_error(error, shape_log, dynamic_shapes, names)
                if retry is None and not deferred and unproven_guards.deferrable(
                        text, export_diagnostics.violated_expressions(text, shape_log),
                        _declared_ranges(dynamic_shapes)):
                    deferred, first_refusal = True, refusal
                    continue
                if retry is None:
                    raise (first_refusal if deferred else refusal) from error
                dynamic_shapes, bounds = retry
                applied += [dataclasses.replace(bound, source=f"{bound.source}; torch.export "
                                                f"needs it: {_needed_at(refusal)}")
                            for bound in bounds]
    for bound in applied:
        warnings.warn(f"dynamic_shapes: dim '{bound.dim}' is bounded to at most {bound.max}, as "
                      f"the model's config implies ({bound.source}); declare "
                      f"Dim('{bound.dim}', max={bound.max}) to say so, or pass strict_dims=True "
                      f"to refuse instead", DimBoundedByConfig, stacklevel=stacklevel)
    return prepare_program(program)


def _declared_ranges(dynamic_shapes) -> dict[str, tuple[int, int | None]]:
    """Each plain Dim of the user's: name -> (min, max or None)."""
    ranges = {}
    for dim in config_bounds.dims_in(dynamic_shapes):
        if not isinstance(dim, _DerivedDim):
            high = dim.max if isinstance(dim.max, int) and dim.max < 1 << 62 else None
            ranges[dim.__name__] = (int(dim.min), high)
    return ranges


def _owning_their_storage(example):
    """``example`` with each tensor that is a view of another (HF's sliding-window
    cache hands out ``keys[:, :, -window + 1:]``) copied to a tensor of its own.
    torch.export traces a view input through its base, and relates the user's
    dims to the base's sizes, which no run passes; the values are the same."""
    return torch.utils._pytree.tree_map_only(
        torch.Tensor, lambda t: t.clone(memory_format=torch.contiguous_format)
        if t._is_view() else t, example)


# torch asks for one bound at a time where a model needs several.
_MAX_BOUND_RETRIES = 4


def _needed_at(refusal: CompileError) -> str:
    """Where the model's code needs the bound, from the refusal's explanation."""
    match = re.search(r"the condition (.+?) holds only for some sizes, added at (.+?):\n\s*(.+)",
                      refusal.diagnostic)
    if match is None:
        return refusal.diagnostic.splitlines()[0]
    condition = re.sub(r"L\['(\w+)'\]", r"\1", match[1])  # as the inputs are named
    return f"{condition} at {match[2]}: {match[3].strip()}"


def prepare_program(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """An exported program (``export_program``'s, or one a user passes to
    ``compile``) decomposed as anyshape imports it (``decomposition_table``);
    one this returned already (or derived from one: ``derived_programs.py``)
    as it is."""
    if program.graph_module.meta.get(DECOMPOSED):
        return program
    lowest = {str(symbol): int(rng.lower)  # at most 2: torch's assumption, not the user's
              for symbol, rng in program.range_constraints.items()
              if rng.lower.is_integer and rng.lower > 2}
    pooled = pooling_sizes.pooled_size_conditions(program.graph, lowest)
    try:
        with static_layout_probes():
            program = program.run_decompositions(decomposition_table())
    except Exception as error:
        first = next((line for line in str(error).splitlines() if line.strip()), "")
        raise CompileError("export", f"decomposing the exported program to core ATen ops "
                                     f"failed ({type(error).__name__}): {first[:300]}",
                           None, None) from error
    output_roles(program)  # refuses state updated in place before the slow stages
    program.graph_module.meta[SIZE_CONDITIONS] = pooled
    program.graph_module.meta[DECOMPOSED] = True
    return program


def forget_last_trace() -> None:
    """Drop torch's reference to the graph it traced last (workaround
    export_keeps_last_trace): the graph holds the model's tensors."""
    from torch.fx.experimental import proxy_tensor

    getattr(proxy_tensor, "_FAKE_TENSOR_ID_TO_PROXY_MAP_FOR_EXPORT", {}).clear()


# Workarounds of upstream bugs here (docs/workarounds.md, anyshape/stages.py).
WORKAROUNDS = (
    Workaround(
        name='squeeze_dims_one_dim_at_a_time', stage='export',
        where='KEPT_WHOLE (aten.squeeze.dim), decomposition_table, _squeeze_one_dim_at_a_time',
        upstream='torch decomposes squeeze.dim and squeeze() to aten.squeeze.dims, for which '
                 'torch-mlir has no op: it imports as an opaque `torch.operator` that IREE cannot'
                 " lower (Electra's `logits.squeeze(-1)`).",
        guard=('test/python/frontend/test_import.py::test_squeezes_compile_and_match_eager',
               'test/python/test_hf_families.py::test_squeezed_head_reaches_iree_as_a_known_op'),
        remove_when='(inferred) when torch-mlir has an op/lowering for aten.squeeze.dims'),
    Workaround(
        name='empty_permuted_as_permuted_empty', stage='export',
        where='_empty_permuted_as_permuted_empty (decomposition_table)',
        upstream="torch decomposes empty_like to aten.empty_permuted, for which torch-mlir has "
                 "no op: it imports as an opaque `torch.operator` that IREE cannot lower "
                 "(transformers' MoE experts invert their sort with empty_like).",
        guard='test/python/frontend/test_grouped_experts.py::'
              'test_empty_like_compiles_with_a_dynamic_length',
        remove_when='(inferred) when torch-mlir has an op/lowering for aten.empty_permuted'),
    Workaround(
        name='integer_fmod_as_truncated_division', stage='export',
        where='_integer_fmod (decomposition_table)',
        upstream="torch-mlir 20261001 has no lowering of aten.fmod for integer tensors "
                 "(\"failed to legalize operation 'torch.aten.fmod.Scalar'\"): torch.roll's "
                 "decomposition indexes with (arange + shift) fmod n; nor of fmod.Scalar "
                 "(\"failed to legalize operation 'torch.constant.int'\").",
        guard=('test/python/test_op_coverage.py::test_matches_eager[slice-roll]',
               'test/python/test_op_coverage.py::test_matches_eager[fmod-int-and-float]'),
        remove_when='torch-mlir lowers integer fmod'),
    Workaround(
        name='gelu_tanh_decomposed', stage='export', where='_gelu_tanh_decomposed (decomposition_table)',
        upstream="torch-mlir 20261001's lowering of aten.gelu with approximate='tanh' is 5e-5 "
                 "from float64 at x = 1.34, 100x eager float32 (Gemma 4's logits 1.6e-4 off); "
                 "torch's decomposition (a tanh of a cubic) is as close as eager.",
        guard='test/python/test_op_coverage.py::test_matches_eager[act-gelu-tanh]',
        remove_when="torch-mlir's gelu tanh lowering is as accurate as eager float32"),
    Workaround(
        name='split_with_dynamic_sizes_as_slices', stage='export',
        where='_split_with_dynamic_sizes_as_slices (decomposition_table)',
        upstream="torch-mlir 20261001 cannot legalize aten.split_with_sizes whose sizes list "
                 "holds a symbol (\"failed to legalize operation 'torch.constant.int'\"); "
                 'torch.split along a dynamic dim makes one.',
        guard='test/python/test_opinfo_floor.py::test_floor[split-float32-0]',
        remove_when='torch-mlir lowers split_with_sizes with symbolic sizes'),
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
        upstream="torch's own scaled_dot_product_attention decomposition returns its output "
                 "stored as [L, N, H, E] (for nn.MultiheadAttention), where eager's CPU flash "
                 "attention, whose layout the exported program was traced against, stores it "
                 "as [N, L, H, E]: GPT-2's `x.view(-1, hidden)` and JetMoE's and AfMoE's views "
                 "of the heads' transpose then fail while decomposing. The result is laid out "
                 "as eager's.",
        guard='test/python/frontend/test_attention_output_layout.py::'
              'test_heads_viewed_in_other_groups_after_attention',
        remove_when="when torch's SDPA decomposition returns eager's layout (the guard passes "
                    "without it)"),
    Workaround(
        name='export_keeps_last_trace', stage='export',
        where='forget_last_trace (after the export and decompositions, driver/compile.py)',
        upstream="torch 2.13's make_fx tracer (PythonKeyTracer.trace) keeps the nodes of the "
                 'graph it traced last in the module global _FAKE_TENSOR_ID_TO_PROXY_MAP_FOR_EXPORT'
                 " (for export's fake tensor leak detection) until the next trace; through "
                 "their graph's module they hold the model's real tensors. A model compiled "
                 'from a checkpoint directory stayed mapped after the compile: 12.2 GiB of '
                 "file pages resident of an 8B model's 14.96 GiB of shards.",
        guard='test/python/generation/test_checkpoint_dir.py::'
              'test_a_compiled_checkpoint_is_not_held_after_the_compile',
        remove_when='when torch clears the map after an export (the guard passes without it)'),
)
