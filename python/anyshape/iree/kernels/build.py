"""Building anyshape's C kernels into objects IREE links, and the executable
text that calls them: what ``linear_rows`` and ``attention`` share.

Each kernel is compiled, with the machine's C compiler, into an object that
IREE links into the module's code (``hal.executable.objects``), once per
source, compiler, flags and instruction set (``kernel_object``). Where it
cannot be built, or the object fails a check IREE's embedded ELF needs it to
pass (``object_problem``), the module keeps IREE's own code for what the
kernel would have computed, and a ``KernelUnavailable`` warning says why.

The object's widest instruction set is the module's target CPU's
(``isa_for_cpu``; ``isa.h`` caps its run-time choice at it): an artifact built
for ``x86-64-v3`` runs the kernels' AVX2 code on an AVX-512 host too, and so
computes there, to the bit, what it computes on an AVX2 host.

IREE 3.13 writes an object given inline (``#hal.executable.object<{data =
...}>``) as an empty file before linking (``LLVMCPUTarget.cpp``: the
temporary is created, never written), so the executable names the object's
file by path (``kernel_executable``).
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import os
import platform
import shutil
import stat
import struct
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Callable, Sequence

from anyshape.iree.cpu import HOST, compile_probe, resolve
from anyshape.stages import Workaround

# The largest frame a kernel function may have: attention's vector paths
# need 36 KiB (32 query rows of q and of sums at D = 128), and the tests'
# workers run on stacks of 48 KiB. A larger frame fails the build
# (KernelUnavailable), not a worker at run time.
FRAME_BUDGET = 40 * 1024
# Freestanding code for IREE's embedded ELF: no library calls, no stack
# protector (it reads a TLS canary), nothing the embedded loader cannot
# relocate. Stack-clash protection probes a large frame page by page, so that
# one past a worker's stack faults on its guard page rather than writing past
# it; on x86-64 GCC and clang probe inline, with no symbol to link.
CFLAGS = ("-O3", "-std=c11", "-ffreestanding", "-fno-builtin", "-fPIC", "-fno-plt",
          "-fno-stack-protector", "-fstack-clash-protection",
          f"-Werror=frame-larger-than={FRAME_BUDGET}", "-fcf-protection=none",
          "-fno-asynchronous-unwind-tables", "-fno-exceptions", "-mno-red-zone")

# isa.h's instruction sets.
ISA_PORTABLE, ISA_AVX2, ISA_AVX512, ISA_AVX512_VNNI = 1, 2, 3, 4
# platform.machine() -> the ELF machine (e_machine) of an object built for it.
ELF_MACHINES = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183}

WORKAROUNDS = (
    Workaround(
        name="executable_object_by_path", stage="iree-input",
        where="anyshape.iree.kernels.build.kernel_executable "
              "(#hal.executable.object<{path = ...}>)",
        upstream="IREE 3.13's LLVMCPU target writes an inline object "
                 "(#hal.executable.object<{data = ...}>) as an empty temporary file before "
                 "linking it (compiler/plugins/target/LLVMCPU/LLVMCPUTarget.cpp: "
                 "Artifact::createTemporary, never written), and iree-lld then reports the "
                 "kernel's symbol undefined. The executable names the compiled object's file "
                 "in anyshape's cache instead of holding its bytes.",
        guard="test/python/iree/test_linear_rows.py::test_inline_object_is_still_written_empty",
        remove_when="when IREE writes inline objects: the IR then carries its object"),
)


class KernelUnavailable(UserWarning):
    """An anyshape kernel could not be built here: IREE's own code runs instead."""


def isa_for_cpu(requested: str = HOST) -> int:
    """The widest of the kernels' instruction sets that the CPU IREE builds
    for, given ``requested`` (``--iree-llvmcpu-target-cpu``), has."""
    features = set(resolve(requested).features)
    if {"avx512f", "fma"} <= features:
        return ISA_AVX512_VNNI if {"avx512bw", "avx512vl", "avx512vnni"} <= features \
            else ISA_AVX512
    if {"avx2", "fma"} <= features:
        return ISA_AVX2
    return ISA_PORTABLE


def target_cpu_of(flags: Sequence[str]) -> str:
    """The CPU iree-compile's ``flags`` build for (``--iree-llvmcpu-target-cpu``)."""
    prefix = "--iree-llvmcpu-target-cpu="
    return next((f[len(prefix):] for f in flags if f.startswith(prefix)), HOST)


@functools.lru_cache(maxsize=1)
def _private_dir() -> Path:
    """A directory of this process's own (mode 0700), removed at exit."""
    path = Path(tempfile.mkdtemp(prefix="anyshape-kernels-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def cache_dir() -> Path:
    """Where built objects are kept: anyshape's cache, in a directory of mode
    0700 that this user owns; else (it cannot be made, is not writable, or
    another user owns it or may write into it: an object there would be
    linked into modules unread) a private temporary directory."""
    from anyshape.options import cache_root

    shared = cache_root() / "kernels"
    try:
        shared.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.stat(shared)
        if info.st_uid != os.getuid() or not stat.S_ISDIR(info.st_mode):
            return _private_dir()
        if info.st_mode & 0o077:  # made by an older anyshape, under its umask
            os.chmod(shared, 0o700)
        if not os.access(shared, os.W_OK | os.X_OK):
            return _private_dir()
    except OSError:
        return _private_dir()
    return shared


def compiler() -> str | None:
    """The C compiler the kernels are built with: $CC, else cc, gcc or clang."""
    configured = os.environ.get("CC")
    if configured:
        return shutil.which(configured) or configured
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name)
        if found:
            return found
    return None


def object_problem(data: bytes, machine: str) -> str | None:
    """Why IREE's embedded ELF loader could not run the object ``data`` on a
    ``machine`` (``platform.machine()``) host, or None: it must be a 64-bit
    little-endian ELF object for that machine, and reference no symbol (the
    loader resolves none: a compiler's own call of memcpy or of a stack
    probe would fail the module's link, or its load)."""
    try:
        return _elf_problem(data, machine)
    except (struct.error, ValueError) as error:  # cut short, or offsets past its end
        return f"it is not a whole ELF object ({error})"


def _elf_problem(data: bytes, machine: str) -> str | None:
    def unpack(layout: str, at: int):
        return struct.unpack_from("<" + layout, data, at)

    if data[:4] != b"\x7fELF" or data[4:6] != b"\x02\x01":
        return "it is not a 64-bit little-endian ELF object"
    wanted = ELF_MACHINES.get(machine.lower())
    (found,) = unpack("H", 18)
    if found != wanted:
        return f"it is for ELF machine {found}, not {machine} ({wanted})"
    (section_offset,) = unpack("Q", 0x28)
    entry_size, count = unpack("HH", 0x3A)
    undefined = []
    for i in range(count):
        header = section_offset + i * entry_size
        (kind,) = unpack("I", header + 4)
        if kind != 2:  # SHT_SYMTAB
            continue
        offset, size = unpack("QQ", header + 0x18)
        (strings_index,) = unpack("I", header + 0x28)
        (symbol_size,) = unpack("Q", header + 0x38)
        (strings,) = unpack("Q", section_offset + strings_index * entry_size + 0x18)
        for at in range(offset, offset + size, symbol_size):
            name, _, _, section = unpack("IBBH", at)
            if section == 0 and name:  # SHN_UNDEF
                end = data.index(b"\0", strings + name)
                undefined.append(data[strings + name:end].decode(errors="replace"))
    if undefined:
        return (f"it calls {', '.join(sorted(undefined))}, which IREE's embedded ELF "
                f"loader cannot resolve")
    return None


def kernel_object(source: Path, isa: int = ISA_AVX512_VNNI) -> tuple[Path | None, str]:
    """(the object file of the kernel ``source``, its code for instruction
    sets up to ``isa``, "") or (None, why it could not be built or fails
    ``object_problem``). Kept in ``cache_dir`` under a name that hashes the
    source, the headers beside it, the compiler's identity and the flags;
    written under a temporary name and renamed, so concurrent builds each see
    a whole file. A build of the same object under way on another thread
    (``build_in_background``) is waited for, not started again."""
    with _BUILDING_LOCK:
        lock = _building.setdefault((source, isa), threading.Lock())
    with lock:
        return _kernel_object(source, isa)


kernel_object.cache_clear = lambda: _kernel_object.cache_clear()

_BUILDING_LOCK = threading.Lock()
_building: dict[tuple[Path, int], threading.Lock] = {}


def build_in_background(build: Callable[[], object]) -> threading.Thread:
    """``build`` (calls of ``kernel_object``) run on a thread of its own: a
    compile starts it before its export, which keeps one core busy for
    seconds, so that the C compiler runs on another meanwhile (the first
    compile on a machine builds the kernels: about 6 s). Its result and
    errors are the later calls' (``kernel_object`` is cached, and a failed
    build is reported where the compile asks for the object)."""
    def run() -> None:
        try:
            build()
        except Exception:  # the compile's own call meets it again and says why
            pass

    thread = threading.Thread(target=run, name="anyshape-kernel-build", daemon=True)
    thread.start()
    return thread


@functools.lru_cache(maxsize=None)
def _kernel_object(source: Path, isa: int) -> tuple[Path | None, str]:
    machine = platform.machine()
    if machine.lower() not in ("x86_64", "amd64"):
        return None, f"the kernel is written for x86-64, this host is {machine}"
    cc = compiler()
    if cc is None:
        return None, "no C compiler found (cc, gcc or clang on PATH, or $CC)"
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True,
                                 timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as error:
        return None, f"the C compiler {cc} does not run: {error}"
    flags = (*CFLAGS, f"-DANYSHAPE_MAX_ISA={isa}")
    digest = hashlib.sha256()
    headers = sorted(source.parent.glob("*.h"))
    for part in (source.read_bytes(), *(h.read_bytes() for h in headers), version.encode(),
                 " ".join(flags).encode()):
        digest.update(part + b"\0")
    directory = cache_dir()
    target = directory / f"{source.stem}-{digest.hexdigest()[:24]}.o"
    if not target.is_file():
        with tempfile.TemporaryDirectory(dir=directory, prefix=".build-") as tmp:
            built = Path(tmp) / target.name
            done = subprocess.run([cc, *flags, "-c", str(source), "-o", str(built)],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                first = next((l for l in done.stderr.splitlines() if "error" in l),
                             done.stderr.strip()[:300])
                return None, f"{cc} could not compile {source.name}: {first}"
            os.replace(built, target)
    problem = object_problem(target.read_bytes(), machine)
    if problem is not None:
        return None, f"{cc}'s object of {source.name} cannot be linked into IREE's code: {problem}"
    return target, ""


_TARGET_START = '#hal.executable.target<"llvm-cpu"'


@functools.lru_cache(maxsize=None)
def executable_target(flags: tuple[str, ...]) -> str:
    """The ``#hal.executable.target`` IREE builds the module's code for with
    ``flags``, read back from a tiny module compiled a few phases in. A
    kernel's executable must name exactly that target: IREE links executables
    of one target into one variant, and a variant of another (a target of our
    own) would be a second binary the runtime chooses instead of the module's,
    whose dispatches it then lacks ("export not found in library")."""
    done = compile_probe(flags)
    start = done.stdout.find(_TARGET_START)
    if done.returncode != 0 or start < 0:
        raise RuntimeError(f"iree-compile did not show the CPU target for {' '.join(flags)}: "
                           f"{done.stderr.strip()[:500]}")
    depth, at = 0, start
    while True:  # to the '>' that closes the attribute (it nests #iree_cpu...<>)
        char = done.stdout[at]
        depth += char == "<"
        depth -= char == ">"
        at += 1
        if depth == 0 and char == ">":
            return done.stdout[start:at]


def pipeline_layout(constants: int, bindings: Sequence[bool]) -> str:
    """A ``#hal.pipeline.layout`` of ``constants`` push constants and one
    storage buffer per binding (True: read only)."""
    kinds = ["<storage_buffer, ReadOnly>" if read_only else "<storage_buffer>"
             for read_only in bindings]
    return (f"#hal.pipeline.layout<constants = {constants}, bindings = [" +
            ", ".join(f"#hal.pipeline.binding{kind}" for kind in kinds) + "]>")


def binding_pointers(layout: str, sizes: Sequence[str]) -> tuple[list[str], list[str], list[str]]:
    """(lines, arguments, their types): each binding of ``layout`` (``sizes``:
    its size in floats, an SSA name) as the base pointer and offset an
    ``llvm.bareptr`` function takes."""
    lines, arguments, types = [], [], []
    for i, size in enumerate(sizes):
        lines.append(f"%b{i} = hal.interface.binding.subspan layout({layout}) binding({i}) "
                     f"alignment(64) offset(%c0) : memref<?xf32>{{{size}}}")
        lines.append(f"%p{i}, %o{i}, %s{i}, %t{i} = iree_codegen.extract_strided_metadata "
                     f"%b{i} : memref<?xf32> -> memref<f32>, index, index, index")
        arguments += [f"%p{i}", f"%o{i}"]
        types += ["memref<f32>", "index"]
    return lines, arguments, types


def entry_function(name: str, types: Sequence[str], lines: Sequence[str],
                   arguments: Sequence[str]) -> str:
    """The executable's function ``name`` (each workgroup runs it): ``lines``
    (with ``%c0`` defined), then a call of the kernel's ``anyshape_<name>``
    on ``arguments`` of ``types``, declared for ``llvm.bareptr``."""
    signature = ", ".join(types)
    body = "\n        ".join(lines)
    return f"""
      func.func private @anyshape_{name}({signature})
          attributes {{hal.import.static, llvm.bareptr = true}}
      func.func @{name}() {{
        %c0 = arith.constant 0 : index
        {body}
        func.call @anyshape_{name}({", ".join(arguments)}) : ({signature}) -> ()
        return
      }}"""


def kernel_executable(executable: str, object_path: Path, target: str,
                      exports: Sequence[str], functions: Sequence[str]) -> str:
    """A ``hal.executable`` for ``target`` whose code links the object at
    ``object_path`` (named by path: ``executable_object_by_path``)."""
    path = str(object_path).replace("\\", "\\\\").replace('"', '\\"')
    return f"""
hal.executable private @{executable} {{
  hal.executable.variant public @x86_64 target({target}) objects([
      #hal.executable.object<{{path = "{path}"}}>]) {{{"".join(exports)}
    builtin.module {{{"".join(functions)}
    }}
  }}
}}
"""
