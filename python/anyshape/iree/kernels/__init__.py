"""anyshape's C kernels, each beside the module that routes work to it.

- ``linear_rows``: products with a constant weight, computing only the rows
  there are (``linear_rows.c``);
- ``attention``: attention over a whole sequence in one pass (``attention.c``,
  ``attention_body.h``);
- ``build``: what both share: compiling a kernel into an object IREE links
  (and the checks that object must pass), and the executable text that calls
  it. ``isa.h``: the run-time choice of instruction set both kernels make.
"""
