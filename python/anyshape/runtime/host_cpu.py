"""Whether this host's CPU can run a CPU artifact, with no compiler at hand.

A ``.vmfb`` uses every instruction its features allow (``iree/cpu.py``
resolves them when it is built), and the x86 hosts here vary (AVX2 only, or
AVX-512 with bf16): built on one and run on the other, it dies with an
illegal instruction. ``missing_on_this_host`` compares the artifact's
features with the host's, read from ``/proc/cpuinfo`` so that loading needs
only the runtime. Only instruction-set features are compared (``CHECKED``):
LLVM's list also holds system features (``shstk``, ``rdpru``, ``mwaitx``)
that compiled kernels never execute, and hosts of one CPU model differ in
those.
"""

from __future__ import annotations

import platform
import re
from pathlib import Path

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
