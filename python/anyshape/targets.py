"""Compile targets and the IREE options anyshape uses for them: the one place they are set.

Why each option:
- ``--iree-input-type=torch``: anyshape hands IREE torch-dialect IR (plus
  builtin ops the passes introduce). IREE's torch input consumes
  ``torch.symbolic_int``/``torch.bind_symbolic_shape`` (turning the bounds on
  function arguments into ``util.assume.int``), which torch-mlir's own linalg
  pipeline cannot, and lowers ``scaled_dot_product_attention`` to a fused
  attention op.
- ``--iree-hal-target-device=local`` + ``llvm-cpu`` + ``--iree-llvmcpu-target-cpu=host``:
  code for the CPU it is compiled on (AVX-512 where present); an artifact is
  for that CPU family.
- ``--iree-opt-level=O1``: IREE's default is O0. At O2 (with or without data
  tiling) IREE 3.13 fails on a roberta-base-sized model with a dynamic
  sequence length ("exceeded stack allocation limit" in the embeddings'
  layer-norm dispatch, and a vector-mask verifier error in the attention
  dispatch). Raising the stack limit only moves that failure to a run-time
  crash, so anyshape does not; O1 compiles and runs correctly at every length.
- cuda: ``--iree-hal-target-device=cuda --iree-cuda-target=<arch>``; compiling
  needs no GPU, running needs IREE's cuda driver and a device.
"""

from __future__ import annotations

import dataclasses

DEFAULT_OPT_LEVEL = "O1"
DEFAULT_CUDA_ARCH = "sm_80"

_COMMON = ["--iree-input-type=torch"]


@dataclasses.dataclass(frozen=True)
class Target:
    name: str                # "cpu" or "cuda"
    driver: str              # IREE runtime driver
    cuda_arch: str | None = None
    opt_level: str = DEFAULT_OPT_LEVEL

    def iree_flags(self) -> list[str]:
        flags = list(_COMMON) + [f"--iree-opt-level={self.opt_level}"]
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


def make_target(target: str, cuda_arch: str | None = None, opt_level: str | None = None) -> Target:
    opt_level = opt_level or DEFAULT_OPT_LEVEL
    if opt_level not in ("O0", "O1", "O2", "O3"):
        raise ValueError(f"opt_level: expected one of O0, O1, O2, O3, got '{opt_level}'")
    if target == "cpu":
        if cuda_arch is not None:
            raise ValueError("cuda_arch: only meaningful with target='cuda'")
        return Target("cpu", "local-task", None, opt_level)
    if target == "cuda":
        arch = cuda_arch or DEFAULT_CUDA_ARCH
        if not (arch.startswith("sm_") and arch[3:].isdigit()):
            raise ValueError(f"cuda_arch: expected an NVIDIA architecture like 'sm_80', got '{arch}'")
        return Target("cuda", "cuda", arch, opt_level)
    raise ValueError(f"target: expected 'cpu' or 'cuda', got '{target}'")
