"""anyshape: compile a PyTorch NLP model once, run it at any sequence length.

``compile`` and ``import_torch`` need torch-mlir and the IREE compiler;
``load`` and a loaded ``CompiledModule`` need only torch, numpy and
iree-base-runtime, so the compiler side is imported on first use.
"""

from anyshape.errors import CompileError
from anyshape.runtime import CompiledModule, load

__all__ = ["compile", "import_torch", "load", "CompiledModule", "CompileError"]
__version__ = "0.1.0"


def __getattr__(name):
    if name == "compile":
        from anyshape.compiler import compile

        return compile
    if name == "import_torch":
        from anyshape.importer import import_torch

        return import_torch
    raise AttributeError(f"module 'anyshape' has no attribute '{name}'")
