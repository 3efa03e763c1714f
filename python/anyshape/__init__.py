"""anyshape: compile a PyTorch NLP model once, run it at any sequence length.

``compile`` and ``import_torch`` need torch-mlir and the IREE compiler;
``load`` and a loaded ``CompiledModule`` need only torch, numpy and
iree-base-runtime. Everything is imported on first use, so the command-line
tools start without importing torch.
"""

from anyshape.errors import (CompileError, DataTilingFallback, DimBoundedByConfig,
                             PackedWeightsFallback, RunError)

__all__ = ["compile", "compile_generator", "calibrated", "import_torch", "load", "write_parameters",
           "BackendOptions", "CompiledModule", "Generator", "Scheduler", "CompileError", "CudaArchSubstituted", "DataTilingFallback",
           "DimBoundedByConfig", "PackedWeightsFallback", "RunError"]
__version__ = "0.1.0"

_LAZY = {
    "compile": ("anyshape.driver.compile", "compile"),
    "compile_generator": ("anyshape.generation.causal_lm", "compile_generator"),
    "calibrated": ("anyshape.frontend.calibration", "calibrated"),
    "Generator": ("anyshape.runtime.generator", "Generator"),
    "Scheduler": ("anyshape.runtime.scheduler", "Scheduler"),
    "import_torch": ("anyshape.frontend.importer", "import_torch"),
    "load": ("anyshape.runtime.compiled_module", "load"),
    "write_parameters": ("anyshape.runtime.compiled_module", "write_parameters"),
    "CompiledModule": ("anyshape.runtime.compiled_module", "CompiledModule"),
    "BackendOptions": ("anyshape.options", "BackendOptions"),
    "CudaArchSubstituted": ("anyshape.iree.flags", "CudaArchSubstituted"),
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'anyshape' has no attribute '{name}'")
