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
    cpu: str | None = None   # target="cpu": what --iree-llvmcpu-target-cpu gets (iree/cpu.py)

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
                f"--iree-llvmcpu-target-cpu={self.cpu}",
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
        arch = cuda_arch or DEFAULT_CUDA_ARCH
        if not re.fullmatch(r"sm_\d+a?", arch):
            raise ValueError(f"cuda_arch: expected an NVIDIA architecture like 'sm_80', got '{arch}'")
        return Target("cuda", "cuda", arch, opt_level, data_tiling)
    raise ValueError(f"target: expected 'cpu' or 'cuda', got '{target}'")
