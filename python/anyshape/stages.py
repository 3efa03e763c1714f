"""The names of the compile stages that the compiler and the runtime share.

A module of its own so that ``runtime.py`` (which needs only torch, numpy and
iree-base-runtime) reads them without importing ``compiler.py``.
"""

IMPORT_STAGE = "import"          # the torch dialect as imported
IREE_INPUT_STAGE = "iree-input"  # exactly what IREE receives (IREE's own ops included)
IREE_COMPILE_STAGE = "iree-compile"
