# `make opt-compat`: torch-mlir's own lit tests, from a checkout outside this
# repository, run with `torch-mlir-opt` replaced by the driver named in
# `-D driver=` (anyshape-opt, or torch-mlir-opt itself for the reference run).
#
#   lit tools/dev/opt-compat -D torch_mlir_src=/path/to/torch-mlir -D driver=anyshape-opt
#
# torch-mlir's test/lit.cfg.py needs the site config of a CMake build; this one
# stands in for both with what the pinned wheel provides: its torch-mlir-opt,
# and the stablehlo and reference-backend passes it was built with. The python
# and CAPI tests exercise torch-mlir's build, not an opt driver: excluded.
import os
import shutil
import sys

import lit.formats

config.name = "torch-mlir-opt-compat"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]

source = lit_config.params.get("torch_mlir_src")
if not source or not os.path.isdir(os.path.join(source, "test")):
    lit_config.fatal("pass -D torch_mlir_src=<a torch-mlir checkout holding test/>")
config.test_source_root = os.path.join(os.path.abspath(source), "test")
config.test_exec_root = os.path.join(
    lit_config.params.get("exec_root", os.path.join(os.path.dirname(__file__), "Output")),
    lit_config.params.get("driver", "anyshape-opt"))
config.excludes = ["Inputs", "python", "CAPI", "lit.cfg.py", "lit.site.cfg.py.in"]

# What torch-mlir's lit.local.cfg files read from the CMake site config.
config.torch_mlir_enable_refbackend = True
config.enable_stablehlo = True
config.enable_bindings_python = False
config.host_os = "Linux"

bin_dir = os.path.dirname(sys.executable)
config.environment["PATH"] = os.pathsep.join([bin_dir, os.environ.get("PATH", "")])


def tool(name):
    path = shutil.which(name, path=config.environment["PATH"])
    if path is None:
        lit_config.fatal(f"'{name}' not found next to {sys.executable}")
    return path


driver = tool(lit_config.params.get("driver", "anyshape-opt"))
config.substitutions.append((r"\btorch-mlir-opt\b", driver))
config.substitutions.append((r"\bFileCheck\b", tool("filecheck")))
