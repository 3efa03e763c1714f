"""Compile targets and the IREE options anyshape uses for them: the one place they are set.

Each option's reason and the figures that decided it are in docs/iree-notes.md
("IREE options"); the tests that guard them: test_targets.py (peeling, packing
with microkernels), test_data_tiling.py (the GlobalOptimization data-tiling
path, the packing barrier), test_run_errors.py (float64 kept, assertions kept),
test_hf_families.py (tied weights stored once without const-eval).
Revisit every workaround flag when IREE moves past 3.13.
"""

from __future__ import annotations

import dataclasses
import re
import warnings

from anyshape.runtime.target import DEFAULT_OPT_LEVEL, Target
from anyshape.stages import Workaround

PEELING_FLAG = "--iree-llvmcpu-vector-pproc-strategy=peel"
MICROKERNELS_FLAG = "--iree-llvmcpu-enable-ukernels=all"
# IREE's refusal of what peeling can need (see the note above).
PEELING_FAILURE = "expected no unbounded stack allocations"
DEFAULT_CUDA_ARCH = "sm_80"
# The CUDA architectures IREE 3.13 has GPU target details for; any other fails in
# codegen with "missing GPU target" (sm_90, sm_100: Hopper, datacenter Blackwell).
# test_cuda.py::test_iree_knows_exactly_the_listed_cuda_archs holds this to iree-compile.
IREE_CUDA_ARCHS = ("sm_60", "sm_61", "sm_62", "sm_70", "sm_72", "sm_75", "sm_80", "sm_86",
                   "sm_87", "sm_89", "sm_120", "sm_121")


class CudaArchSubstituted(UserWarning):
    """The GPU named has no IREE target: the module is built for an older architecture."""

# Small constants stay buffers of their own instead of being cloned into the
# dispatches that read them (workaround bf16_constants_not_inlined).
INLINE_CONSTANTS_OFF_FLAG = "--iree-flow-inline-constants-max-byte-length=0"

_COMMON = ["--iree-input-type=torch", "--iree-dispatch-creation-fuse-multi-use=false",
           "--iree-opt-const-eval=false", "--iree-input-demote-f64-to-f32=false",
           "--iree-opt-strip-assertions=false"]


def iree_flags(target: Target) -> list[str]:
    """The iree-compile flags that build for ``target``."""
    if target.data_tiling is None:
        raise ValueError("data tiling must be decided (True or False) before IREE runs")
    flags = list(_COMMON) + [f"--iree-opt-level={target.opt_level}"]
    if target.data_tiling:
        flags.append("--iree-global-opt-data-tiling")
    if not target.outer_dim_concat:
        flags.append("--iree-opt-outer-dim-concat=false")
    if target.matmul_precision == "medium":
        flags += BF16_PRODUCT_FLAGS
    if not target.inline_constants:
        flags.append(INLINE_CONSTANTS_OFF_FLAG)
    if target.name == "cpu":
        flags += [
            "--iree-hal-target-device=local",
            "--iree-hal-local-target-device-backends=llvm-cpu",
            f"--iree-llvmcpu-target-cpu={target.cpu}",
            MICROKERNELS_FLAG,
            PEELING_FLAG,
        ]
    else:
        flags += ["--iree-hal-target-device=cuda", f"--iree-cuda-target={target.cuda_arch}"]
    return flags


def make_target(target: str, cuda_arch: str | None = None, opt_level: str | None = None,
                data_tiling: bool | None = None, target_cpu: str | None = None) -> Target:
    opt_level = opt_level or DEFAULT_OPT_LEVEL
    if data_tiling is not None and not isinstance(data_tiling, bool):
        raise ValueError(f"data_tiling: expected True, False or None (automatic), "
                         f"got {data_tiling!r}")
    if opt_level not in ("O0", "O1", "O2", "O3"):
        raise ValueError(f"opt_level: expected one of O0, O1, O2, O3, got '{opt_level}'")
    if target == "cpu":
        if cuda_arch is not None:
            raise ValueError(f"cuda_arch: expected None with target='cpu' (an architecture is "
                             f"only meaningful with target='cuda'), got {cuda_arch!r}")
        from anyshape.iree.cpu import HOST, resolve

        resolve(target_cpu or HOST)  # an unknown name fails here, before the (slow) export
        return Target("cpu", "local-task", None, opt_level, data_tiling, target_cpu or HOST)
    if target == "cuda":
        if target_cpu is not None:
            raise ValueError(f"target_cpu: expected None with target='cuda' (a CPU is only "
                             f"meaningful with target='cpu'), got {target_cpu!r}")
        requested = cuda_arch or DEFAULT_CUDA_ARCH
        if not re.fullmatch(r"sm_\d+a?", requested):
            raise ValueError(f"cuda_arch: expected an NVIDIA architecture like 'sm_80', "
                             f"got '{requested}'")
        arch = iree_cuda_arch(requested)
        if arch == requested:
            return Target("cuda", "cuda", arch, opt_level, data_tiling)
        warnings.warn(f"cuda_arch: IREE 3.13 has no GPU target for {requested}, so the module is "
                      f"built for {arch}, the newest architecture up to {requested} that IREE "
                      f"knows; the CUDA driver compiles its PTX for the {requested} GPU when the "
                      f"module loads (the manifest records both)", CudaArchSubstituted,
                      stacklevel=3)
        return Target("cuda", "cuda", arch, opt_level, data_tiling,
                      requested_cuda_arch=requested)
    raise ValueError(f"target: expected 'cpu' or 'cuda', got '{target}'")


MATMUL_PRECISIONS = ("highest", "medium")
# IREE's demotion of contraction inputs matches named products only (matmul,
# batch_matmul, matvec, ...), and at O2 GlobalOptimization generalizes them to
# linalg.generic just before it runs (GeneralizeLinalgNamedOpsPass, then
# DemoteContractionInputsPass): with the generalization on, the demotion
# changes nothing. The products are then data-tiled as bf16 x bf16 -> f32
# (mmt4d tiles with K0 = 2, AVX-512 BF16's dot products).
BF16_PRODUCT_FLAGS = ["--iree-opt-generalize-matmul=false",
                      "--iree-global-opt-demote-contraction-inputs-type=bf16",
                      "--iree-global-opt-demote-contraction-inputs-operations=matmul"]


def with_matmul_precision(target: Target, precision) -> Target:
    """``target`` computing its matrix products at ``precision``, as
    ``torch.set_float32_matmul_precision`` names them: "highest" (float32,
    the default) or "medium" (inputs rounded to bfloat16, float32
    accumulation: CPU targets whose CPU has AVX-512 BF16, where it is a
    hardware dot product; elsewhere it would be emulated, slower than float32)."""
    if precision not in MATMUL_PRECISIONS:
        raise ValueError(f"matmul_precision: expected one of {', '.join(MATMUL_PRECISIONS)} "
                         f"(as torch.set_float32_matmul_precision names them), got {precision!r}")
    if precision == "highest":
        return target
    if target.name != "cpu":
        raise ValueError(f"matmul_precision: 'medium' is built for CPU targets only, got "
                         f"target='{target.name}'")
    from anyshape.iree.cpu import resolve

    cpu = resolve(target.cpu)
    if "avx512bf16" not in cpu.features:
        raise ValueError(f"matmul_precision: 'medium' needs a CPU with AVX-512 BF16 "
                         f"(avx512bf16), which target_cpu={target.cpu!r} ({cpu.name}) lacks: "
                         f"its bfloat16 products would be emulated, slower than float32")
    return dataclasses.replace(target, matmul_precision=precision)


PRODUCT_KERNELS = ("anyshape", "iree")


def with_product_kernel(target: Target, kernel) -> Target:
    """``target`` with its products computed by ``kernel``: "anyshape"
    (default: on x86-64 CPU targets whose products are float32, those with a
    constant weight run the row-exact kernel of iree/kernels/linear_rows.py; on CUDA
    targets, every product with a dynamic row count is padded to whole tiles,
    iree/tiled_products.py) or "iree" (IREE's own configuration everywhere)."""
    if kernel not in PRODUCT_KERNELS:
        raise ValueError(f"product_kernel: expected one of {', '.join(PRODUCT_KERNELS)}, "
                         f"got {kernel!r}")
    return dataclasses.replace(target, product_kernel=kernel)


def products_target(target: str, backend) -> Target:
    """The ``Target`` that ``target`` ("cpu", "cuda") and ``backend`` (an
    ``anyshape.BackendOptions``) make, as far as how its products are built:
    what the compile starts from (``driver/arguments.target_from``), and what
    a generator's kernels are built for while it exports."""
    return with_product_kernel(
        with_matmul_precision(make_target(target, backend.cuda_arch, backend.opt_level,
                                          backend.data_tiling, backend.target_cpu),
                              backend.matmul_precision),
        backend.product_kernel)


def routes_products(target: Target) -> bool:
    """Whether ``target`` builds its products with a constant weight with
    anyshape's kernel (where the kernel can be built: iree/kernels/linear_rows.py)."""
    return target.name == "cpu" and target.product_kernel == "anyshape" \
        and target.matmul_precision == "highest"


def iree_cuda_arch(requested: str) -> str:
    """What IREE builds for a GPU of architecture ``requested`` ("sm_90"): that
    one where IREE knows it, else the newest it knows below it, since PTX built
    for an architecture runs on every newer one (the driver compiles it)."""
    if requested in IREE_CUDA_ARCHS:
        return requested
    number = _arch_number(requested)
    older = [arch for arch in IREE_CUDA_ARCHS if _arch_number(arch) <= number]
    if not older:
        raise ValueError(f"cuda_arch: IREE 3.13 builds for {IREE_CUDA_ARCHS[0]} and newer "
                         f"({', '.join(IREE_CUDA_ARCHS)}), got '{requested}'")
    return older[-1]


def _arch_number(arch: str) -> int:
    return int(re.fullmatch(r"sm_(\d+)a?", arch).group(1))


def with_constants_for(target: Target, dtypes) -> Target:
    """``target`` for a model whose tensors have ``dtypes`` (torch dtypes):
    with bfloat16 among them, no constant is inlined into a dispatch
    (workaround bf16_constants_not_inlined)."""
    import torch

    if torch.bfloat16 in set(dtypes) and target.inline_constants:
        return dataclasses.replace(target, inline_constants=False)
    return target


# Workarounds of upstream bugs here (docs/workarounds.md, anyshape/stages.py).
WORKAROUNDS = (
    Workaround(
        name='bf16_constants_not_inlined', stage='iree-flags',
        where='with_constants_for, INLINE_CONSTANTS_OFF_FLAG (Target.inline_constants)',
        upstream="IREE 3.13 clones small constants (at most 256 bytes: a bfloat16 norm weight "
                 "of 64) into the dispatches that read them; the weights are dense_resource "
                 "blobs, and the CPU codegen's ConvertBf16ArithToF32Pass (iree-convert-bf16-"
                 "arith-to-f32) retypes such an arith.constant to f32 without converting its "
                 "resource: \"'arith.constant' op failed to verify that all of {value, result} "
                 "have same type\". Models with bfloat16 tensors compile with "
                 "--iree-flow-inline-constants-max-byte-length=0; float32 and float16 builds "
                 "are unchanged.",
        guard='test/python/generation/test_generate.py::test_bfloat16_is_hf_generate_in_bfloat16',
        remove_when='when IREE converts dense_resource bf16 constants in '
                    'ConvertBf16ArithToF32Pass, or no longer inlines them'),
    Workaround(
        name='bf16_products_need_named_matmuls', stage='iree-flags',
        where='BF16_PRODUCT_FLAGS (--iree-opt-generalize-matmul=false), with_matmul_precision',
        upstream="IREE 3.13's DemoteContractionInputsPass matches named products only "
                 '(linalg.matmul, batch_matmul, matvec, ...), and at O2 GlobalOptimization\'s '
                 'GeneralizeLinalgNamedOpsPass turns them into linalg.generic just before it runs:'
                 ' --iree-global-opt-demote-contraction-inputs-type=bf16 alone left every product'
                 ' in float32. Only matmul_precision="medium" builds turn the generalization off.',
        guard='test/python/iree/test_matmul_precision.py::'
              'test_medium_products_have_bfloat16_error_and_load_as_built',
        remove_when='when IREE demotes generalized contractions too, or demotes before it '
                    'generalizes'),
    Workaround(
        name='no_multi_use_fusion', stage='iree-flags',
        where='_COMMON (--iree-dispatch-creation-fuse-multi-use=false)',
        upstream="At O2 IREE fuses a multi-use producer into its consumers' dispatch; in a "
                 'BERT-style embedding block the gathers land in the layer-norm dispatch and '
                 'whole 8x768 tiles stay on the stack ("exceeded stack allocation limit", 139 KB '
                 'vs 32 KB); raising the limit only gave a run-time crash.',
        guard=(),
        unguarded='The test models (hidden 128) are too small to hit the 32 KB limit; '
                  'roberta-base (hidden 768, examples/bench) is where it shows.',
        remove_when="when IREE moves past 3.13, revisit (flags.py: 'Revisit every workaround flag"
                    " when IREE moves past 3.13')"),
    Workaround(
        name='no_const_eval', stage='iree-flags',
        where='_COMMON (--iree-opt-const-eval=false)',
        upstream="IREE evaluates weight-only initializers (data tiling's packed weights) at "
                 'compile time and stores them in the .vmfb, so a tied weight also read unpacked '
                 "(GPT-2's wte, T5's shared) is stored twice (368.8 MB for 214.2 MB of weights).",
        guard='test/python/test_hf_families.py::test_inline_artifact_holds_tied_weights_once',
        remove_when='when IREE moves past 3.13, revisit (flags.py)'),
    Workaround(
        name='keep_float64', stage='iree-flags',
        where='_COMMON (--iree-input-demote-f64-to-f32=false)',
        upstream="IREE's default demotes float64 to float32 and then fails at run time on any "
                 'float64 output ("buffer view byte length 120 exceeds backing buffer byte length'
                 ' 60") and reads float64 inputs as garbage.',
        guard=('test/python/runtime/test_run_errors.py::test_float64_is_computed_in_float64',
               'test/python/test_opinfo_floor.py::test_floor[softmax.with_dtype-float32-4]'),
        remove_when='when IREE moves past 3.13, revisit (flags.py)'),
    Workaround(
        name='keep_assertions', stage='iree-flags',
        where='_COMMON (--iree-opt-strip-assertions=false)',
        upstream="From O1 on IREE drops the program's assertions, so a check in it (anyshape's "
                 "view element-count check, torch-mlir's size checks, check_det) never fired and "
                 'a call with impossible sizes computed something.',
        guard=('test/python/runtime/test_run_errors.py::test_run_time_failure_names_call_inputs_and_iree_message',
               'test/python/frontend/test_edge_value_math.py::test_det_with_a_zero_pivot_is_an_error_not_nan'),
        remove_when='when IREE moves past 3.13, revisit (flags.py); a behaviour choice more than '
                    'a bug'),
    Workaround(
        name='peel_partial_vectors', stage='iree-flags',
        where='PEELING_FLAG (--iree-llvmcpu-vector-pproc-strategy=peel)',
        upstream="With a dynamic dim IREE 3.13's CPU codegen vectorizes a partial tile with "
                 'masked vectors by default, which on x86 costs as much as the arithmetic (exp(S '
                 '- max) over dynamic [?, ?] 3x slower than static). Performance workaround.',
        guard=('test/python/iree/test_targets.py::test_cpu_peels_partial_vectors_and_cuda_does_not',
               'test/python/iree/test_targets.py::test_peeled_remainders_are_exact'),
        remove_when='when IREE moves past 3.13, revisit (flags.py)'),
    Workaround(
        name='global_opt_data_tiling_path', stage='iree-flags',
        where='iree_flags (--iree-global-opt-data-tiling rather than '
              '--iree-opt-data-tiling)',
        upstream="IREE 3.13's dispatch-creation data tiling (--iree-opt-data-tiling) packs a "
                 "projection's rows for a following batch matmul inside the projection's dispatch"
                 ' and gets every batch after the first wrong when L is not a multiple of 16 (max'
                 ' error 6-16); the GlobalOptimization path is exact.',
        guard='test/python/iree/test_data_tiling.py::test_projection_times_transposed_input_is_exact',
        remove_when='when IREE moves past 3.13, revisit (flags.py)'),
    Workaround(
        name='cuda_arch_substitution', stage='iree-flags',
        where='DEFAULT_CUDA_ARCH, IREE_CUDA_ARCHS, iree_cuda_arch',
        upstream='IREE 3.13 has no GPU target details for sm_90 or sm_100 (Hopper, datacenter '
                 'Blackwell: "missing GPU target in #hal.executable.target", on any input). A '
                 'GPU IREE does not know gets the newest architecture below it that IREE knows '
                 '(sm_90 -> sm_89), with a CudaArchSubstituted warning and both in the manifest; '
                 'its PTX is compiled by the CUDA driver for the GPU when the module loads.',
        guard=('test/python/iree/test_cuda.py::test_iree_knows_exactly_the_listed_cuda_archs',
               'test/python/iree/test_cuda.py::test_unknown_gpu_gets_the_newest_older_arch'),
        remove_when='(inferred) when IREE knows sm_90 and sm_100: the guard fails then'),
)


def with_weights(target: Target, weights, group_size, weights_from: str | None = None,
                 activations: str = "float32") -> Target:
    """``target`` with the weights of its products with a weight of the
    model stored as ``weights`` asks: "float32" (as the model has them),
    "int8" or "int4" (with ``group_size``), quantized at compile time and
    computed by anyshape's CPU kernel (iree/quantized_weights.py)."""
    from anyshape.iree.quantized_weights import weight_format

    fmt = weight_format(weights, group_size, activations=activations)
    if weights_from not in (None, "gptq", "bitsandbytes", "calibrated"):
        raise ValueError(f"weights_from: expected None, 'gptq', 'bitsandbytes' or 'calibrated', "
                         f"got {weights_from!r}")
    if not fmt.quantized:
        return target
    if target.name != "cpu":
        raise ValueError(f"weights: {fmt.name!r} is computed by anyshape's CPU kernel, which "
                         f"CUDA targets do not have yet; got target='{target.name}' (use "
                         f"weights='float32' there)")
    if target.product_kernel != "anyshape":
        raise ValueError(f"weights: {fmt.name!r} is computed by anyshape's product kernel, "
                         f"and product_kernel={target.product_kernel!r} asks for IREE's; use "
                         f"product_kernel='anyshape' (the default)")
    if target.matmul_precision != "highest":
        raise ValueError(f"weights: {fmt.name!r} products compute in float32 from the "
                         f"dequantized weights, not with matmul_precision="
                         f"{target.matmul_precision!r}; give one or the other")
    return dataclasses.replace(target, weights=fmt.name, group_size=fmt.group_size,
                               weights_from=weights_from, activations=fmt.activations)
