# Hand-written lit configuration (no generated site config): run from the repo
# with the project's virtual environment, `lit -sv test`.
import os
import shutil
import sys

import lit.formats

config.name = "anyshape"
# The internal shell provides `not` and pipes on every platform.
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]
config.excludes = ["python", "lib", "lit.cfg.py", "Inputs"]
config.test_source_root = os.path.dirname(__file__)

# Tools come from the environment lit runs in (the .venv's bin directory).
bin_dir = os.path.dirname(sys.executable)
config.environment["PATH"] = os.pathsep.join([bin_dir, os.environ.get("PATH", "")])
config.environment["PYTHONUNBUFFERED"] = "1"


def tool(name):
    path = shutil.which(name, path=config.environment["PATH"])
    if path is None:
        lit_config.fatal(f"'{name}' not found next to {sys.executable}; run `make test`")
    return path


config.substitutions.append(("%PYTHON", sys.executable))
config.substitutions.append(("%test_passes", os.path.join(config.test_source_root, "lib", "test_passes.py")))
# FileCheck is the `filecheck` package from PyPI.
config.substitutions.append((r"\bFileCheck\b", tool("filecheck")))
config.substitutions.append((r"\banyshape-opt\b", tool("anyshape-opt")))
