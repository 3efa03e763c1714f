"""Which CPU a CPU artifact is built for, and whether this host can run it.

``--iree-llvmcpu-target-cpu`` takes ``host``, a CPU LLVM knows (``znver3``,
``skylake-avx512``) or an x86-64 level (``x86-64-v3``). IREE resolves it to a
CPU name and LLVM's feature list, which ``resolve`` reads back from the target
attribute of a tiny module compiled a few phases in (a fraction of a second):
IREE and LLVM stay the one authority on what a name means.

Whether this host can run an artifact is the runtime's to check, with no
compiler: ``runtime/host_cpu.py``.
"""

from __future__ import annotations

import dataclasses
import functools
import platform
import re
import subprocess
import tempfile
from pathlib import Path

from anyshape.runtime.host_cpu import CHECKED, check_runs_here, host_flags, missing_on_this_host

__all__ = ["HOST", "CpuTarget", "compile_probe", "resolve",
           "CHECKED", "check_runs_here", "host_flags", "missing_on_this_host"]

HOST = "host"

_PROBE = "func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n" \
         "  %0 = arith.addf %a, %a : tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n"


@dataclasses.dataclass(frozen=True)
class CpuTarget:
    requested: str        # what the user asked for: "host", "znver3", "x86-64-v3"
    name: str             # the CPU LLVM resolved it to: "znver4" for "host" on such a host
    arch: str             # platform.machine() of the build host: "x86_64"
    features: tuple[str, ...]  # LLVM's enabled features, sorted, without the "+"

    def checked_features(self) -> set[str]:
        return set(self.features) & set(CHECKED)


def compile_probe(flags) -> subprocess.CompletedProcess:
    """A tiny module compiled with ``flags`` to the preprocessing phase, where
    its text shows the executable target those flags build for."""
    from anyshape.mlir import iree_tool

    with tempfile.TemporaryDirectory(prefix="anyshape-cpu-") as tmp:
        probe = Path(tmp) / "probe.mlir"
        probe.write_text(_PROBE)
        return subprocess.run([iree_tool("iree-compile"), str(probe), *flags,
                               "--compile-to=preprocessing"], capture_output=True, text=True)


@functools.lru_cache(maxsize=None)
def resolve(requested: str) -> CpuTarget:
    """The CPU and features IREE builds for when given ``requested``."""
    if not isinstance(requested, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", requested):
        raise ValueError(f"target_cpu: expected 'host', a CPU name such as 'znver3' or "
                         f"'skylake-avx512', or a level such as 'x86-64-v3', got {requested!r}")
    done = compile_probe(["--iree-hal-target-device=local",
                          "--iree-hal-local-target-device-backends=llvm-cpu",
                          f"--iree-llvmcpu-target-cpu={requested}"])
    output = done.stdout + done.stderr
    if "is not a recognized processor" in output or done.returncode != 0:
        accepted = re.search(r"List of accepted CPUs: (.*)", output)
        known = f" (LLVM knows: {accepted.group(1).strip()})" if accepted else ""
        raise ValueError(f"target_cpu: expected 'host' or a CPU LLVM knows, got "
                         f"{requested!r}{known}")
    name = re.search(r'cpu = "([^"]*)"', output)
    features = re.search(r'cpu_features = "([^"]*)"', output)
    if name is None or features is None:
        raise RuntimeError(f"iree-compile did not say which CPU {requested!r} is: "
                           f"{output[-2000:]}")
    enabled: dict[str, bool] = {}
    for item in features.group(1).split(","):  # later entries override earlier ones
        if item[:1] in "+-" and len(item) > 1:
            enabled[item[1:]] = item[0] == "+"
    return CpuTarget(requested, name.group(1), platform.machine(),
                     tuple(sorted(f for f, on in enabled.items() if on)))
