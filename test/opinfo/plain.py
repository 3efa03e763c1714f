"""The plain stack, the floor anyshape is held to: torch.export with its
default decompositions, torch-mlir's FX importer, ``iree-compile`` with the
flags anyshape used, ``iree.runtime``. No anyshape code runs here; only the
flag list comes from anyshape (the caller passes it in)."""

from __future__ import annotations

import io
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import torch

# Stage names, as the results record them.
EXPORT, DECOMPOSE, IMPORT, IREE_COMPILE, RUN = "export", "decompose", "import", "iree-compile", "run"


class StageError(Exception):
    """A plain-stack stage failed; ``stage`` names it, ``__cause__`` is the error."""

    def __init__(self, stage: str, message: str):
        super().__init__(message)
        self.stage = stage


def export(module, inputs: tuple, dynamic_shapes) -> torch.export.ExportedProgram:
    with torch.no_grad():
        return torch.export.export(module, inputs, dynamic_shapes=dynamic_shapes, strict=False)


def decompose(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    return program.run_decompositions()


def import_program(program: torch.export.ExportedProgram) -> bytes:
    """torch-dialect bytecode of the program (IREE reads torch-mlir's bytecode;
    the two bundle different copies of MLIR's bindings)."""
    from torch_mlir import ir
    from torch_mlir.dialects import torch as torch_dialect
    from torch_mlir.extras.fx_importer import FxImporter

    context = ir.Context()
    torch_dialect.register_dialect(context)
    importer = FxImporter(context=context)
    importer.import_frozen_program(program, import_symbolic_shape_expressions=True)
    buffer = io.BytesIO()
    importer.module.operation.write_bytecode(buffer)
    return buffer.getvalue()


def iree_compile(bytecode: bytes, flags: list[str], workdir: Path) -> Path:
    from iree.compiler.tools.binaries import find_tool

    source, vmfb = workdir / "plain.mlirbc", workdir / "plain.vmfb"
    source.write_bytes(bytecode)
    proc = subprocess.run([find_tool("iree-compile"), str(source), *flags, "-o", str(vmfb)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise StageError(IREE_COMPILE, first_error(proc.stderr))
    return vmfb


def first_error(stderr: str) -> str:
    lines = stderr.splitlines()
    for line in lines:
        if "error:" in line:
            return line.strip()
    return stderr.strip()[-2000:] or "iree-compile failed with no diagnostic"


class PlainModule:
    """A compiled plain-stack module, called as the module was: returns its
    outputs (flat) and the inputs as the call leaves them, with the new values
    of those the module updates in place."""

    def __init__(self, vmfb: Path, kinds: list):
        self.kinds = kinds
        import iree.runtime as rt

        config = rt.Config("local-task")
        self._context = rt.SystemContext(config=config)
        vm_module = rt.VmModule.copy_buffer(config.vm_instance, vmfb.read_bytes())
        self._context.add_vm_module(vm_module)
        self._function = getattr(self._context.modules, vm_module.name)["main"]

    def __call__(self, *tensors) -> tuple[list, list]:
        arrays = [t.detach().contiguous().numpy() for t in tensors]
        results = self._function(*arrays)
        if not isinstance(results, (tuple, list)):
            results = (results,)
        results = [_to_torch(r) for r in results]
        if len(results) != len(self.kinds):
            return results, list(tensors)  # the comparison reports the count
        after = list(tensors)
        for result, kind in zip(results, self.kinds):
            if isinstance(kind, int):
                after[kind] = result
        return [r for r, kind in zip(results, self.kinds) if kind is None], after


def _to_torch(result):
    value = result.to_host() if hasattr(result, "to_host") else result
    if isinstance(value, np.ndarray) or np.isscalar(value):
        return torch.from_numpy(np.array(value))
    return value


def lower(program: torch.export.ExportedProgram) -> tuple[bytes, list]:
    """Decompose and import ``program``: the bytecode, and what each result of
    the compiled function is (``output_kinds``). A failure is a ``StageError``
    naming the stage, chained to the original exception."""
    for stage, step in ((DECOMPOSE, decompose), (IMPORT, import_program)):
        try:
            result = step(program)
        except Exception as error:
            raise StageError(stage, f"{type(error).__name__}: {error}") from error
        if stage == DECOMPOSE:
            program = result
    return result, output_kinds(program)


def output_kinds(program: torch.export.ExportedProgram) -> list:
    """Per graph output: None for one of the module's own outputs, else the
    index of the user input it is the new value of (torch.export returns an
    input the module updates in place as an extra output, ahead of the rest)."""
    from torch.export.graph_signature import OutputKind

    sig = program.graph_signature
    inputs = list(sig.user_inputs)
    kinds = []
    for spec in sig.output_specs:
        if spec.kind == OutputKind.USER_INPUT_MUTATION:
            kinds.append(inputs.index(spec.target))
        elif spec.kind == OutputKind.USER_OUTPUT:
            kinds.append(None)
        else:
            kinds.append("other")
    return kinds


def compile_bytecode(bytecode: bytes, kinds: list, flags: list[str]) -> PlainModule:
    with tempfile.TemporaryDirectory(prefix="opinfo-plain-") as workdir:
        vmfb = iree_compile(bytecode, flags, Path(workdir))
        try:
            return PlainModule(vmfb, kinds)
        except Exception as error:
            raise StageError(RUN, f"{type(error).__name__}: {error}") from error
