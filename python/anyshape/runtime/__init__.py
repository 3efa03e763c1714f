"""The runtime stage: what a saved artifact needs to run, without torch-mlir or
the IREE compiler.

``compiled_module`` (``CompiledModule``, ``load``, ``write_parameters``: the
IREE runtime, argument checks, save and load), ``signature`` (the inputs'
and outputs' names, dims and dtypes, as the manifest records them) and
``size_conditions`` (the conditions on the dims a call is checked against).
"""
