"""The objects anyshape's C kernels are linked into modules as, called from
the test process: each built with the module's flags for one instruction set
(``kernels/build.py``), linked into a shared library."""

import ctypes
import subprocess
from pathlib import Path

import pytest

from anyshape.iree.cpu import host_flags
from anyshape.iree.kernels import build

FLAGS = host_flags() or set()
ISAS = {"portable": build.ISA_PORTABLE, "avx2": build.ISA_AVX2, "avx512": build.ISA_AVX512,
        "avx512vnni": build.ISA_AVX512_VNNI}
HOST_HAS = {"portable": True, "avx2": {"avx2", "fma"} <= FLAGS, "avx512": "avx512f" in FLAGS,
            "avx512vnni": {"avx512f", "avx512bw", "avx512vl", "avx512_vnni"} <= FLAGS}


def linked_object(source: Path, isa: str, tmp_path: Path) -> ctypes.CDLL:
    """The object a module built for a CPU whose widest instruction set is
    ``isa`` links (its run-time choice capped there), as a shared library."""
    if build.compiler() is None:
        pytest.skip("no C compiler")
    if not HOST_HAS[isa]:
        pytest.skip(f"this host's CPU cannot run the {isa} path")
    built, why = build.kernel_object(source, ISAS[isa])
    assert built is not None, why
    library = tmp_path / f"{source.stem}_{isa}.so"
    subprocess.run([build.compiler(), "-shared", str(built), "-o", str(library)],
                   check=True, capture_output=True)
    return ctypes.CDLL(str(library))


def skip_unless_packings_match() -> None:
    """Skip where IREE's float32 tiles are not the kernel's 16-wide panels:
    without AVX-512 they are 8 wide, and a weight the kernel and IREE's own
    products both read is packed twice there."""
    if build.isa_for_cpu() <= build.ISA_AVX2:
        pytest.skip("IREE packs float32 products in 8-wide tiles without AVX-512; the "
                    "kernel's panels are 16 wide, so the two packings are not one there")
