"""The floor: PyTorch's own OpInfo database (``op_db``) as an outside oracle.

Each OpInfo sample becomes a small module whose tensors are its inputs, every
dim of size > 1 dynamic and unbounded. It runs through anyshape and through
the plain stack (torch.export, torch-mlir's FX importer, IREE with the same
flags, none of anyshape's passes), and both are compared with eager at the
traced sizes and at larger ones. The plain stack is the floor: a case it
passes, anyshape must pass too; a case anyshape fails must fail with a clear
error, never a crash in anyshape's code or a wrong answer.

Modules: ``cases`` (which samples, by id), ``wrap`` (a sample as a module,
its dynamic shapes, its inputs at other sizes), ``plain`` (the plain stack),
``compare`` (outputs against eager), ``classify`` (a failure's stage and
cause), ``run_case`` (one case end to end), ``worker`` and ``pool`` (cases in
subprocesses that may crash), ``summary`` (the table).
"""
