"""Which CPU a CPU artifact is built for, and whether this host can run it.

``--iree-llvmcpu-target-cpu`` takes ``host``, a CPU LLVM knows (``znver3``,
``skylake-avx512``) or an x86-64 level (``x86-64-v3``). IREE resolves it to a
CPU name and LLVM's feature list, which ``resolve`` reads back from the target
attribute of a tiny module compiled a few phases in (a fraction of a second):
IREE and LLVM stay the one authority on what a name means.

A ``.vmfb`` uses every instruction its features allow, and the x86 hosts here
vary (AVX2 only, or AVX-512 with bf16): built on one and run on the other, it
dies with an illegal instruction. ``missing_on_this_host`` compares the
artifact's features with the host's, read from ``/proc/cpuinfo`` so that
loading needs only the runtime. Only instruction-set features are compared
(``CHECKED``): LLVM's list also holds system features (``shstk``, ``rdpru``,
``mwaitx``) that compiled kernels never execute, and hosts of one CPU model
differ in those.
"""

from __future__ import annotations

import dataclasses
import functools
import platform
import re
import subprocess
import tempfile
from pathlib import Path

HOST = "host"

# LLVM's name -> the flag /proc/cpuinfo shows for it: the instruction-set
# features x86 kernels may use. Not listed: features no compiled kernel executes.
CHECKED = {
    "sse": "sse", "sse2": "sse2", "sse3": "pni", "ssse3": "ssse3", "sse4.1": "sse4_1",
    "sse4.2": "sse4_2", "sse4a": "sse4a", "avx": "avx", "avx2": "avx2", "fma": "fma",
    "fma4": "fma4", "xop": "xop", "f16c": "f16c", "bmi": "bmi1", "bmi2": "bmi2",
    "lzcnt": "abm", "popcnt": "popcnt", "movbe": "movbe", "cmov": "cmov", "cx16": "cx16",
    "aes": "aes", "pclmul": "pclmulqdq", "vaes": "vaes", "vpclmulqdq": "vpclmulqdq",
    "gfni": "gfni", "sha": "sha_ni", "adx": "adx",
    "avx512f": "avx512f", "avx512bw": "avx512bw", "avx512cd": "avx512cd",
    "avx512dq": "avx512dq", "avx512vl": "avx512vl", "avx512ifma": "avx512ifma",
    "avx512vbmi": "avx512vbmi", "avx512vbmi2": "avx512_vbmi2", "avx512vnni": "avx512_vnni",
    "avx512bitalg": "avx512_bitalg", "avx512vpopcntdq": "avx512_vpopcntdq",
    "avx512bf16": "avx512_bf16", "avx512fp16": "avx512_fp16",
    "avx512vp2intersect": "avx512_vp2intersect", "avxvnni": "avx_vnni",
    "amx-tile": "amx_tile", "amx-int8": "amx_int8", "amx-bf16": "amx_bf16",
}

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


def host_flags() -> set[str] | None:
    """The CPU flags ``/proc/cpuinfo`` lists for this host; None where there is none."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    found = re.search(r"^flags\s*:(.*)$", text, re.MULTILINE)
    return set(found.group(1).split()) if found else None


def missing_on_this_host(arch: str, features) -> list[str] | None:
    """The checked features of an artifact that this host lacks (its architecture's
    name when that differs); None when the host cannot tell."""
    if arch != platform.machine():
        return [f"the {arch} architecture (this host is {platform.machine()})"]
    flags = host_flags()
    if flags is None:
        return None
    return sorted(f for f in features if f in CHECKED and CHECKED[f] not in flags)


def check_runs_here(cpu: dict | None, where: str) -> None:
    """Refuse, naming what is missing, an artifact this host's CPU cannot run."""
    if not cpu:
        return  # built before artifacts recorded their CPU: nothing to compare
    missing = missing_on_this_host(cpu["arch"], cpu["features"])
    if missing:
        raise RuntimeError(
            f"{where} was built for CPU '{cpu['name']}' (target_cpu='{cpu['requested']}'), "
            f"and this host lacks {', '.join(missing)}: it would die with an illegal "
            f"instruction. Rebuild it here (target_cpu='host', the default), or for a CPU "
            f"both hosts have, such as target_cpu='x86-64-v3' "
            f"(anyshape-compile --target-cpu x86-64-v3)")
