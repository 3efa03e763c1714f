"""The start of a script run in a fresh process where torch-mlir and the IREE
compiler cannot be imported: what a saved artifact needs to run must be the
runtime's (iree-base-runtime, numpy, torch) alone."""

import textwrap

FORBID_COMPILERS = textwrap.dedent("""
    import sys, importlib.abc

    class Forbid(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] == "torch_mlir" or name.startswith("iree.compiler"):
                raise ImportError(f"{name} must not be imported to run an artifact")
            return None

    sys.meta_path.insert(0, Forbid())
""")
