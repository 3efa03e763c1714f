"""Weights kept out of the IR from the import to IREE's input.

``anyshape.compile`` imports each weight as a ``dense_resource`` handle
without its data (``frontend/importer.py``, ``detach``): the arrays stay in
a table beside the module, keyed by blob name. The passes never read a
weight's values (what quantizing needs, it reads from the table), so every
stage file, and every parse of one, costs the IR's bytes, not the weights'.
The weights join the module once, in the ``iree-input`` stage: as parameters
(``parameters.py``, ``params="external"``) or, here, as the data of the
blobs themselves (``params="inline"``), which IREE then stores in the
``.vmfb`` as before.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from anyshape.iree.constant_values import resource_key
from anyshape.mlir import operations_in, rewrite_with_iree_bindings


def attach_weights(in_file: Path, out_file: Path, arrays: dict[str, np.ndarray],
                   text_file: Path | None = None) -> int:
    """Rewrite ``in_file`` (the IREE input, bytecode or text) into ``out_file``
    (bytecode; ``text_file`` as text when given): every ``dense_resource``
    literal whose blob is one of ``arrays`` gets that array as its data
    (without a copy: the blob borrows the array's buffer). Returns how many
    blobs got their data."""

    def attach(iree_ir, module) -> int:
        attached: dict[str, object] = {}
        for op in operations_in(module.operation):
            if op.name != "torch.vtensor.literal":
                continue
            key = resource_key(op)
            if key is None or key not in arrays:
                continue
            if key not in attached:
                # The handle the file names holds no data, and keeps its name:
                # the new blob is named after it (MLIR numbers it apart).
                attached[key] = iree_ir.DenseResourceElementsAttr.get_from_buffer(
                    memoryview(arrays[key]), key, op.attributes["value"].type)
            op.attributes["value"] = attached[key]
        return len(attached)

    return rewrite_with_iree_bindings(in_file, out_file, text_file, attach)
