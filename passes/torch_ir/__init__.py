"""What anyshape's passes know about torch-dialect IR, in one place.

- ``ops.py``: ops by family (elementwise, reductions, softmax forms,
  normalizations, reshapes), one table each, with readers of their operands;
- ``constants.py``: one reader per constant kind (int, float, bool, none, int
  list) and the builders of constants and int lists;
- ``values.py``: producers and users of values, tensor types, and tidying a
  function (argument bindings first, unused ops erased);
- ``shape_analysis.py``: every tensor dim as an expression over the function
  arguments' dims;
- ``scalar_builder.py``: such expressions built back as torch scalar ops.

Ops are matched, read and built through torch-mlir's generated op classes
(``anyshape.mlir.torch_ops``): ``is_a(op, torch_ops.AtenExpandOp)`` and
pattern roots by class, operands by name (``typed(op).keepdim``), new ops by
their typed builders (``torch_ops.AtenUnsqueezeOp(type, x, dim)``). Op
families stay tables keyed by op name in ``ops.py``.
``values.rebuilt`` is the one generic builder, for re-issuing whichever op of
a family a rewrite matched. ``test/python/passes/test_torch_ir_ops.py`` holds the
tables to the generated classes.

The passes import from these modules; nothing here registers a pass.
"""
