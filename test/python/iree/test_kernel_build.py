"""The guards on building anyshape's C kernels (``iree/kernels/build.py``).

A kernel object that IREE's embedded ELF cannot run, a frame a worker's stack
cannot hold, or a cache another user could have written is refused with a
``KernelUnavailable`` reason, and IREE's own code runs instead; the object
for a CPU without AVX-512 holds no AVX-512 code.
"""

import os
import re
import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

import anyshape
from anyshape.iree.kernels import attention, build, linear_rows

needs_compiler = pytest.mark.skipif(build.compiler() is None, reason="no C compiler")
KERNELS = {"linear_rows": linear_rows.SOURCE, "attention": attention.SOURCE}


@pytest.fixture
def fresh_builds():
    """kernel_object builds again (and the test's changes to where, or from
    what, are not left cached for the tests after it)."""
    build.kernel_object.cache_clear()
    yield
    build.kernel_object.cache_clear()


def _source(tmp_path, text: str):
    source = tmp_path / "kernel.c"
    source.write_text(text)
    return source


@needs_compiler
def test_a_frame_past_the_budget_is_refused(tmp_path, fresh_builds):
    """/// A frame past FRAME_BUDGET would run past a small worker stack at run time."""
    source = _source(tmp_path, f"""
        void anyshape_big(float* y, unsigned long n) {{
          volatile float scratch[{build.FRAME_BUDGET // 4 + 1024}];
          for (unsigned long i = 0; i < n; ++i) scratch[i] = y[i];
          y[0] = scratch[n / 2];
        }}""")
    built, why = build.kernel_object(source)
    assert built is None
    assert "could not compile kernel.c" in why and "frame size" in why, why


@needs_compiler
@pytest.mark.parametrize("kernel", list(KERNELS))
def test_the_kernels_probe_their_stack_inline(kernel, tmp_path):
    """/// Stack-clash protection is on (a frame past the stack faults on the
    guard page) and its probes need no symbol: the kernels' objects pass."""
    built, why = build.kernel_object(KERNELS[kernel])
    assert built is not None, why
    if shutil.which("objdump") is None:
        pytest.skip("no objdump")
    code = subprocess.run(["objdump", "-d", str(built)], capture_output=True, text=True,
                          check=True).stdout
    assert re.search(r"or[lq]\s+\$0x0,(0x[0-9a-f]+)?\(%rsp\)", code), "no stack probe"


@needs_compiler
def test_an_object_that_calls_a_library_is_refused(tmp_path, fresh_builds):
    """/// A compiler that emits a call (memcpy: IREE's embedded ELF loader
    resolves no symbol) gives KernelUnavailable, not a broken link."""
    source = _source(tmp_path, """
        void* memcpy(void* to, const void* from, unsigned long n);
        void anyshape_copy(float* to, const float* from, unsigned long n) {
          memcpy(to, from, n * sizeof(float));
        }""")
    built, why = build.kernel_object(source)
    assert built is None
    assert re.search(r"it calls (.*, )?memcpy", why), why


@needs_compiler
def test_an_object_for_another_machine_is_refused():
    built, why = build.kernel_object(linear_rows.SOURCE)
    assert built is not None, why
    data = built.read_bytes()
    assert build.object_problem(data, "x86_64") is None
    assert build.object_problem(data, "aarch64") == "it is for ELF machine 62, not aarch64 (183)"
    assert build.object_problem(data[:40], "x86_64").startswith("it is not a whole ELF object")
    assert build.object_problem(b"MZ" + data[2:], "x86_64") == \
        "it is not a 64-bit little-endian ELF object"


@needs_compiler
def test_products_whose_object_is_refused_are_irees(tmp_path, monkeypatch, fresh_builds):
    """/// The model still builds, with IREE's products, and a warning says why."""
    source = _source(tmp_path, (linear_rows.SOURCE.read_text() + """
        void* memcpy(void* to, const void* from, unsigned long n);
        void anyshape_copy(float* to, const float* from, unsigned long n) {
          memcpy(to, from, n * sizeof(float));
        }"""))
    for header in linear_rows.SOURCE.parent.glob("*.h"):
        shutil.copy(header, tmp_path)
    monkeypatch.setattr(linear_rows, "SOURCE", source)
    model = torch.nn.Linear(32, 24).eval()
    with pytest.warns(build.KernelUnavailable, match="IREE.s own kernel.*it calls .*memcpy"):
        module = anyshape.compile(  # for a CPU without AVX2: the quickest object to build
            model, (torch.randn(20, 32),), cache=False,
            backend=anyshape.BackendOptions(target_cpu="x86-64-v2"))
    assert "anyshape_linear_rows" not in module.ir("iree-input")
    x = torch.randn(20, 32)
    with torch.no_grad():
        np.testing.assert_allclose(np.asarray(module(x)), model(x).numpy(), atol=1e-5)


def test_the_cache_directory_is_private(tmp_path, monkeypatch):
    monkeypatch.setenv("ANYSHAPE_CACHE_DIR", str(tmp_path / "cache"))
    made = build.cache_dir()
    assert made == tmp_path / "cache" / "kernels"
    assert made.stat().st_mode & 0o777 == 0o700
    made.chmod(0o755)  # as an older anyshape left it, under a umask of 022
    assert build.cache_dir() == made and made.stat().st_mode & 0o777 == 0o700


def test_a_cache_directory_of_another_user_is_refused(tmp_path, monkeypatch):
    """/// An object there could be anyone's code, linked into modules unread."""
    monkeypatch.setenv("ANYSHAPE_CACHE_DIR", str(tmp_path / "cache"))
    shared = build.cache_dir()
    monkeypatch.setattr(os, "getuid", lambda: os.stat(shared).st_uid + 1)
    private = build.cache_dir()
    assert private != shared
    assert private.stat().st_mode & 0o777 == 0o700


@needs_compiler
def test_an_unwritable_cache_builds_in_a_private_directory(tmp_path, monkeypatch, fresh_builds):
    """/// A cache that cannot be made (here: under a file) is no reason to
    lose the kernel, with cache=False or without."""
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("ANYSHAPE_CACHE_DIR", str(tmp_path / "file" / "cache"))
    # Portable code, for a CPU without AVX2: the quickest to build here again.
    built, why = build.kernel_object(linear_rows.SOURCE, build.ISA_PORTABLE)
    assert built is not None, why
    assert built.parent == build.cache_dir() and tmp_path not in built.parents
    model = torch.nn.Linear(32, 24).eval()
    module = anyshape.compile(model, (torch.randn(20, 32),), cache=False,
                              backend=anyshape.BackendOptions(target_cpu="x86-64-v2"))
    assert f'path = "{built}"' in module.ir("iree-input")
    x = torch.randn(20, 32)
    with torch.no_grad():
        np.testing.assert_allclose(np.asarray(module(x)), model(x).numpy(), atol=1e-5)


@needs_compiler
@pytest.mark.parametrize("kernel", list(KERNELS))
def test_the_object_for_a_cpu_without_avx512_has_no_avx512_code(kernel):
    """/// Where the target CPU lacks AVX-512, the kernel's AVX-512 code is not
    compiled: on an AVX-512 host that artifact runs the AVX2 code, and its
    results are the AVX2 host's to the bit."""
    if shutil.which("objdump") is None:
        pytest.skip("no objdump")

    def disassembly(cpu: str) -> str:
        built, why = build.kernel_object(KERNELS[kernel], build.isa_for_cpu(cpu))
        assert built is not None, why
        return subprocess.run(["objdump", "-d", str(built)], capture_output=True, text=True,
                              check=True).stdout

    def zmm_instructions(cpu: str) -> int:
        return len(re.findall(r"%zmm\d", disassembly(cpu)))

    assert build.isa_for_cpu("skylake-avx512") == build.ISA_AVX512
    assert build.isa_for_cpu("cascadelake") == build.ISA_AVX512_VNNI
    assert build.isa_for_cpu("znver4") == build.ISA_AVX512_VNNI
    assert build.isa_for_cpu("x86-64-v3") == build.ISA_AVX2
    assert build.isa_for_cpu("x86-64-v2") == build.ISA_PORTABLE
    assert zmm_instructions("skylake-avx512") > 0
    assert zmm_instructions("x86-64-v3") == 0
    # VNNI's dot products only where the target has them (the integer tiles)
    assert "vpdpbusd" not in disassembly("skylake-avx512")
    if kernel == "linear_rows":
        assert "vpdpbusd" in disassembly("cascadelake")


@needs_compiler
def test_a_build_under_way_is_waited_for_not_started_again(tmp_path, monkeypatch, fresh_builds):
    """/// A compile starts the kernels' build before its export
    (linear_rows.start_building); its own call for the object later waits for
    that build: the C compiler runs once, and both get the same object."""
    monkeypatch.setenv("ANYSHAPE_CACHE_DIR", str(tmp_path / "cache"))
    source = shutil.copy(KERNELS["linear_rows"], tmp_path / "linear_rows.c")
    for header in KERNELS["linear_rows"].parent.glob("*.h"):
        shutil.copy(header, tmp_path)
    compiles = []
    real_run = subprocess.run

    def counted(command, *args, **kwargs):
        if "-c" in command:
            compiles.append(command)
        return real_run(command, *args, **kwargs)

    monkeypatch.setattr(build.subprocess, "run", counted)
    background = []
    thread = build.build_in_background(
        lambda: background.append(build.kernel_object(Path(source), build.ISA_AVX2)))
    built, why = build.kernel_object(Path(source), build.ISA_AVX2)
    thread.join()
    assert built is not None, why
    assert background == [(built, "")]
    assert len(compiles) == 1, compiles


@needs_compiler
def test_start_building_builds_what_the_compile_then_links(tmp_path, monkeypatch, fresh_builds):
    """/// The objects start_building leaves are the ones kernel_for and
    /// attention.kernel return for the target; a target that does not link
    /// them (product_kernel="iree") builds nothing."""
    from anyshape.iree.flags import make_target, with_product_kernel

    monkeypatch.setenv("ANYSHAPE_CACHE_DIR", str(tmp_path / "cache"))
    iree_products = with_product_kernel(make_target("cpu", target_cpu="x86-64-v3"), "iree")
    linear_rows.start_building(iree_products)
    target = make_target("cpu", target_cpu="x86-64-v3")
    linear_rows.start_building(target)
    for thread in [t for t in threading.enumerate()
                   if t.name == "anyshape-kernel-build"]:
        thread.join()
    built = sorted(p.name for p in (tmp_path / "cache" / "kernels").glob("*.o"))
    assert len(built) == 2, built
    assert sorted([linear_rows.kernel_for(target)[0].name,
                   attention.kernel(target.cpu).name]) == built
