"""Building anyshape's C kernels into objects IREE links, and the executable
text that calls them: what ``linear_rows`` and ``attention`` share.

Each kernel is compiled, with the machine's C compiler, into an object that
IREE links into the module's code (``hal.executable.objects``), once per
source, compiler and flags (``kernel_object``). Where it cannot be built, the
module keeps IREE's own code for what the kernel would have computed, and a
``KernelUnavailable`` warning says why.

IREE 3.13 writes an object given inline (``#hal.executable.object<{data =
...}>``) as an empty file before linking (``LLVMCPUTarget.cpp``: the
temporary is created, never written), so the executable names the object's
file by path (``kernel_executable``).
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Sequence

from anyshape.iree.cpu import compile_probe
from anyshape.workarounds_index import Workaround

# Freestanding code for IREE's embedded ELF: no library calls, no stack
# protector (it reads a TLS canary), nothing the embedded loader cannot relocate.
CFLAGS = ("-O3", "-std=c11", "-ffreestanding", "-fno-builtin", "-fPIC", "-fno-plt",
          "-fno-stack-protector", "-fno-stack-clash-protection", "-fcf-protection=none",
          "-fno-asynchronous-unwind-tables", "-fno-exceptions", "-mno-red-zone")

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


def _cache_dir() -> Path:
    from anyshape.compile_cache import cache_root

    return cache_root() / "kernels"


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


@functools.lru_cache(maxsize=None)
def kernel_object(source: Path) -> tuple[Path | None, str]:
    """(the object file of the kernel ``source``, "") or (None, why it could
    not be built). Kept in anyshape's cache under a name that hashes the
    source, the headers beside it, the compiler's identity and the flags;
    written under a temporary name and renamed, so concurrent builds each see
    a whole file."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None, f"the kernel is written for x86-64, this host is {platform.machine()}"
    cc = compiler()
    if cc is None:
        return None, "no C compiler found (cc, gcc or clang on PATH, or $CC)"
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True,
                                 timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as error:
        return None, f"the C compiler {cc} does not run: {error}"
    digest = hashlib.sha256()
    headers = sorted(source.parent.glob("*.h"))
    for part in (source.read_bytes(), *(h.read_bytes() for h in headers), version.encode(),
                 " ".join(CFLAGS).encode()):
        digest.update(part + b"\0")
    target = _cache_dir() / f"{source.stem}-{digest.hexdigest()[:24]}.o"
    if target.is_file():
        return target, ""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
        built = Path(tmp) / target.name
        done = subprocess.run([cc, *CFLAGS, "-c", str(source), "-o", str(built)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            first = next((l for l in done.stderr.splitlines() if "error" in l),
                         done.stderr.strip()[:300])
            return None, f"{cc} could not compile {source.name}: {first}"
        os.replace(built, target)
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
