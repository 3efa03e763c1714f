"""Compile targets and the IREE options anyshape uses for them: the one place they are set.

Why each option:
- ``--iree-input-type=torch``: anyshape hands IREE torch-dialect IR (plus
  builtin ops the passes introduce, and the ``util.assume.int`` range facts on
  the arguments' dims that ``iree_dim_facts.py`` adds).
- ``--iree-hal-target-device=local`` + ``llvm-cpu`` + ``--iree-llvmcpu-target-cpu=host``:
  code for the CPU it is compiled on (AVX-512 where present); an artifact is
  for that CPU family.
- ``--iree-opt-level=O2``: IREE's default is O0.
- ``--iree-dispatch-creation-fuse-multi-use=false``: at O2, IREE fuses a
  producer with several users into its consumers' dispatch. In a BERT-style
  embedding block that puts the embedding gathers into the layer-norm
  dispatch; the gathered rows and ``x - mean`` then stay live as whole
  8x768 tiles on the stack (139 KB for hidden 768 against IREE's 32 KB limit:
  "exceeded stack allocation limit"). Raising the limit only turned that into
  a run-time crash; not fusing multi-use producers removes the allocation.
- ``--iree-global-opt-data-tiling`` when data tiling is on: packed matmul
  operands and IREE's mmt4d kernels, where most of the CPU matmul speed is
  (roberta-base at L = 128: about 3x less time than without). ``compile``'s
  default (``data_tiling=None``) turns it on for CPU targets and, when IREE
  fails to compile a module with it, compiles the module again without it
  and warns (``DataTilingFallback``); ``True`` makes that failure an error.
  IREE 3.13 has two data-tiling paths. The dispatch-creation one (what
  ``--iree-opt-data-tiling`` picks) is wrong on a one-head attention score
  ``Linear(x) @ y^T`` at batch 2 and 3 when L is not a multiple of 16 (max
  error 6-16: the projection's dispatch also packs its rows for the batch
  matmul, and gets the batch stride wrong), which broke the Gluon-NLP style
  encoder block of ``test/python/models.py``; the GlobalOptimization path
  used here is exact on it (``test_projection_times_transposed_input_is_exact``),
  on roberta-base and GPT-2 small, and on the slice-hoisting property test's
  random programs 0-44 at hidden 16 and 32: all 90 exact at four shapes
  up to 4x32 (``bench/data_tiling_sweep.py --hidden 16`` and ``--hidden
  32``; 8 failed to compile before the packing barrier below). With
  dynamic dims it needs their ranges (``anyshape-lower``'s facts): without
  them it computed wrong results (roberta-base with ``passes=[]``: max error
  0.36 at L = 128), so ``True`` without that pass is a ``ValueError`` and
  the default leaves data tiling off.
  ``anyshape-data-tiling-forms`` (which ``compile`` adds after
  ``anyshape-hoist-slices``, or before ``anyshape-lower`` without it, when
  data tiling is on) rewrites the forms IREE's CPU codegen rejects or packs
  on every call: the slice-hoisted layer's one-row attention products and
  projections, and linears on ``[B, L, K]`` (broadcast weights). IREE 3.13
  also fails to compile a product whose computed operand has two dynamic
  dims (attention probabilities ``[heads, L, L]`` with a static batch of
  heads, or scaled scores read by another product) with data tiling
  (``affine.delinearize_index`` "no basis element may be statically
  non-positive"): it packs the operand inside its producer's dispatch (the
  row reduction and exponentials of ``exp(S - S.amax(-1)) @ V``), and
  canonicalization folds a dynamic delinearize basis operand that became 0
  into the static basis, which the verifier then rejects: the form of MLIR's
  bug llvm/llvm-project#205288 (open in June 2026). ``iree_workarounds.py``
  puts a barrier between such operands and their products, which keeps the
  packing in a dispatch of its own (``test_packing_barrier_is_still_needed``
  shows the failure without it). The same barrier keeps apart, for speed, a
  product's operand computed elementwise from another product's result with
  one dynamic dim (``iree_workarounds.py``). A module IREE still fails on
  falls back as above.
- ``--iree-llvmcpu-vector-pproc-strategy=peel`` (CPU): with a dynamic dim,
  IREE 3.13's CPU codegen vectorizes a partial tile with masked vectors by
  default, which on x86 costs as much as the arithmetic: ``exp(S - max)``
  over a dynamic ``[?, ?]`` ran 3x slower than over a static ``[6144, 512]``
  (10.6 against 3.6 ms, ``iree-benchmark-module``, 2 threads, AMD EPYC with
  AVX2; the lowering configs were identical). Peeling runs whole vectors and
  leaves the remainder to a scalar loop: 3.1 ms. On roberta-base with a
  dynamic batch and length (``bench/profile_dispatches.py``, batch 1) the
  attention's exponentials went from 114 to 30 ms per call at L = 512, its
  row sums from 37 to 13 ms, and the model from 1185 to 1002 ms (268 to 207
  ms at L = 128, 103 to 95 ms at L = 32). It changes how loops are split,
  not what they compute. In some dispatches (a one-row softmax over a
  dynamic axis, fused with what reads it, in the slice-hoisting property
  test's program 2000) the peeled remainder needs a scratch buffer of
  dynamic size, which IREE refuses ("'memref.alloca' op expected no
  unbounded stack allocations"); such a module is compiled again without
  peeling (``PEELING_FLAG`` is then absent from its ``iree_flags``), which
  compiles it as before.
- ``--iree-llvmcpu-enable-ukernels=all`` (CPU): IREE's default uses its
  microkernels for the data-tiled products only; ``all`` also packs and unpacks
  the products' operands with them. Roberta-base, batch 8, L = 128
  (``bench/profile_dispatches.py``): its 91 packs from 60.0 to 36.9 ms per call
  and its unfused unpacks from 15.9 to 10.1 ms; the model 2.5-6 % faster from
  L = 1 to 128 at batch 1 and 8 (``bench/interleave.py``). Moving data only,
  exact (``test_partial_tiles_are_packed_exactly``).
- ``--iree-opt-const-eval=false``: IREE hoists work that depends only on
  weights (data tiling's packing of each matmul weight, transposes) into
  initializers, and by default evaluates them at compile time, storing the
  results in the ``.vmfb``. A weight that is also read unpacked, as a tied
  embedding and LM head is (GPT-2's ``wte``, T5's ``shared``), is then stored
  twice: a two-layer GPT-2 with its 50257-token vocabulary made a 368.8 MB
  artifact for 214.2 MB of unique weights. Without compile-time evaluation
  the initializers pack once when the module loads (as they must with
  external parameters anyway) and the artifact is 214.4 MB; the run time is
  unchanged, and iree-compile takes less time and memory (16.4 s and 0.87 GB
  against 17.9 s and 1.29 GB on that model).
- ``--iree-input-demote-f64-to-f32=false``: IREE's default computes float64
  in float32 and then fails at run time on any float64 output ("buffer view
  byte length 120 exceeds backing buffer byte length 60":
  ``x.to(torch.float64)``, ``softmax(dtype=torch.float64)``, a Python float
  the model returns) and reads float64 inputs as garbage. Off, float64 is
  float64 (``test_float64_is_computed_in_float64``), but for the float64
  math IREE's CPU code lacks (``iree_workarounds.rewrite_flow``). The
  float32 models' f64 scalar constants and comparisons fold to float32 in
  the generated code all the same: roberta-base ran as fast either way
  (``bench/interleave.py``, demoted / not: 1.00 / 0.99 at batch 1, L = 33
  and 128).
- ``--iree-opt-strip-assertions=false``: from O1 on, IREE drops the
  program's assertions, so a check in it (the element count of a view
  anyshape rewrites, torch-mlir's own size checks) never fired and a call
  with sizes the program cannot hold computed something. Kept, it fails as
  an ``anyshape.RunError`` naming the check. Roberta-base (batch 1..8, L
  1..512) ran as fast either way (``bench/interleave.py``, stripped / kept:
  1.00 / 0.98 at batch 1 L = 17, 1.00 / 1.02 at L = 128, 1.00 / 0.99 at
  batch 4 L = 65).
- cuda: ``--iree-hal-target-device=cuda --iree-cuda-target=<arch>``; compiling
  needs no GPU, running needs IREE's cuda driver and a device. IREE 3.13 has
  no GPU target details for ``sm_90`` (Hopper: "missing GPU target in
  #hal.executable.target", on any input); the default ``sm_80`` artifact
  carries PTX, which the CUDA driver compiles for newer GPUs when it loads.
"""

from __future__ import annotations

import dataclasses
import re

DEFAULT_OPT_LEVEL = "O2"
PEELING_FLAG = "--iree-llvmcpu-vector-pproc-strategy=peel"
MICROKERNELS_FLAG = "--iree-llvmcpu-enable-ukernels=all"
# IREE's refusal of what peeling can need (see the note above).
PEELING_FAILURE = "expected no unbounded stack allocations"
DEFAULT_CUDA_ARCH = "sm_80"

_COMMON = ["--iree-input-type=torch", "--iree-dispatch-creation-fuse-multi-use=false",
           "--iree-opt-const-eval=false", "--iree-input-demote-f64-to-f32=false",
           "--iree-opt-strip-assertions=false"]


@dataclasses.dataclass(frozen=True)
class Target:
    name: str                # "cpu" or "cuda"
    driver: str              # IREE runtime driver
    cuda_arch: str | None = None
    opt_level: str = DEFAULT_OPT_LEVEL
    data_tiling: bool | None = None  # None: decided at compile time (compile_module)

    def iree_flags(self) -> list[str]:
        if self.data_tiling is None:
            raise ValueError("data tiling must be decided (True or False) before IREE runs")
        flags = list(_COMMON) + [f"--iree-opt-level={self.opt_level}"]
        if self.data_tiling:
            flags.append("--iree-global-opt-data-tiling")
        if self.name == "cpu":
            flags += [
                "--iree-hal-target-device=local",
                "--iree-hal-local-target-device-backends=llvm-cpu",
                "--iree-llvmcpu-target-cpu=host",
                MICROKERNELS_FLAG,
                PEELING_FLAG,
            ]
        else:
            flags += ["--iree-hal-target-device=cuda", f"--iree-cuda-target={self.cuda_arch}"]
        return flags

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "Target":
        return cls(**data)


def make_target(target: str, cuda_arch: str | None = None, opt_level: str | None = None,
                data_tiling: bool | None = None) -> Target:
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
        return Target("cpu", "local-task", None, opt_level, data_tiling)
    if target == "cuda":
        arch = cuda_arch or DEFAULT_CUDA_ARCH
        if not re.fullmatch(r"sm_\d+a?", arch):
            raise ValueError(f"cuda_arch: expected an NVIDIA architecture like 'sm_80', got '{arch}'")
        return Target("cuda", "cuda", arch, opt_level, data_tiling)
    raise ValueError(f"target: expected 'cpu' or 'cuda', got '{target}'")
