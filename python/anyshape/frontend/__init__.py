"""The frontend stage: a PyTorch module to torch-dialect MLIR.

``export`` (``torch.export`` with the user's dims, the decomposition table),
``export_diagnostics`` (what an export failure means in the user's dims),
``graph_fixes`` (the ordered rewrites of the exported graph) and ``importer``
(torch-mlir's FX importer, weights as resources, symbolic shapes kept).
"""
