"""The compile driver: from ``anyshape.compile``'s arguments to the IREE call.

- ``compile.py``: ``compile`` and ``compile_module``, the stages in order;
- ``arguments.py``: the arguments checked, the options made a ``Target``;
- ``pipeline.py``: pass pipelines (text, pass managers, the compile's own);
- ``stage_files.py``: the IR after each stage, kept and read back;
- ``compilation.py``: what one compile runs with, for every stage and retry;
- ``iree_input.py``: the last pass stage rewritten into what IREE receives;
- ``fallbacks.py``: the builds redone another way when IREE fails;
- ``compile_cache.py``: one saved artifact per program and options;
- ``ir_signature.py``: a module's signature read from torch-dialect IR.

Nothing is imported here, so ``anyshape.driver.compile`` names the module.
"""
