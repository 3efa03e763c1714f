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
- ``--iree-opt-data-tiling`` only with ``data_tiling=True``: off by default,
  because IREE 3.13 computes wrong results with it on some programs (below).
  It is where most of the CPU matmul speed is (about 2x less CPU time in
  iree-benchmark-module for the roberta-base classifier at L = 128, batch 1).
  An earlier build gave wrong results with it under a dynamic batch and
  length (duplicate dispatch workload sizes folded by IREE 3.13, see
  ``iree_workarounds.py``); with that workaround and the argument range facts
  roberta-base is exact: max |error| <= 9e-7 against eager at 1x1, 2x2,
  1x128, 3x77, 2x200, 3x512, 8x65 and 5x333 (without slice hoisting), and
  without the range facts it is not (``compile`` refuses data tiling with
  dynamic dims unless ``anyshape-lower`` runs). But not every program is
  exact: the Gluon-NLP style encoder block of ``test/python/models.py``
  (``encoder_pattern_case``: a mask broadcast to ``[B, 1, L, L]``,
  ``masked_fill``, one-head attention) comes out wrong at batch 2 and 3 (max
  error 17 at 2x9, 3x9 and 3x33) and right at 1x5 and 4x64, with the range
  facts in place, with or without ``anyshape-data-tiling-forms``; without
  data tiling it is exact (``test_data_tiling_wrong_on_encoder_pattern``, an
  expected failure). Use it for a model checked against eager at the shapes
  it will run.
  The slice-hoisted last layer needs ``anyshape-data-tiling-forms`` (which
  ``compile`` adds after ``anyshape-hoist-slices``, or before
  ``anyshape-lower`` without it, when data tiling is on): IREE's CPU codegen
  rejects the packing of its one-row attention products and of a one-row
  slice fused into a projection's dispatch. IREE 3.13 also fails to
  data-tile some programs that compile without it (the packing of some
  attention forms: ``affine.delinearize_index`` "no basis element may be
  statically non-positive", with or without anyshape's passes; 15 of the 16
  bundle compiles of the slice-hoisting property test, whose random
  programs have hidden sizes 8 and 16): a ``CompileError``.
- cuda: ``--iree-hal-target-device=cuda --iree-cuda-target=<arch>``; compiling
  needs no GPU, running needs IREE's cuda driver and a device.
"""

from __future__ import annotations

import dataclasses

DEFAULT_OPT_LEVEL = "O2"
DEFAULT_CUDA_ARCH = "sm_80"

_COMMON = ["--iree-input-type=torch", "--iree-dispatch-creation-fuse-multi-use=false"]


@dataclasses.dataclass(frozen=True)
class Target:
    name: str                # "cpu" or "cuda"
    driver: str              # IREE runtime driver
    cuda_arch: str | None = None
    opt_level: str = DEFAULT_OPT_LEVEL
    data_tiling: bool = False

    def iree_flags(self) -> list[str]:
        flags = list(_COMMON) + [f"--iree-opt-level={self.opt_level}"]
        if self.data_tiling:
            flags.append("--iree-opt-data-tiling")
        if self.name == "cpu":
            flags += [
                "--iree-hal-target-device=local",
                "--iree-hal-local-target-device-backends=llvm-cpu",
                "--iree-llvmcpu-target-cpu=host",
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
                data_tiling: bool = False) -> Target:
    opt_level = opt_level or DEFAULT_OPT_LEVEL
    if not isinstance(data_tiling, bool):
        raise ValueError(f"data_tiling: expected True or False, got {data_tiling!r}")
    if opt_level not in ("O0", "O1", "O2", "O3"):
        raise ValueError(f"opt_level: expected one of O0, O1, O2, O3, got '{opt_level}'")
    if target == "cpu":
        if cuda_arch is not None:
            raise ValueError("cuda_arch: only meaningful with target='cuda'")
        return Target("cpu", "local-task", None, opt_level, data_tiling)
    if target == "cuda":
        arch = cuda_arch or DEFAULT_CUDA_ARCH
        if not (arch.startswith("sm_") and arch[3:].isdigit()):
            raise ValueError(f"cuda_arch: expected an NVIDIA architecture like 'sm_80', got '{arch}'")
        return Target("cuda", "cuda", arch, opt_level, data_tiling)
    raise ValueError(f"target: expected 'cpu' or 'cuda', got '{target}'")
