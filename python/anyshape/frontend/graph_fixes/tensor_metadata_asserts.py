"""Drop torch.export's ``_assert_tensor_metadata`` where the graph's own types prove it.

torch.export records a ``.to()`` as ``_assert_tensor_metadata`` on its input
(dtype, device, layout) before the copy. torch-mlir's canonicalizer checks
the dtype against the IR type and refuses a complex one it maps differently
("Failed to canonicalize the _assert_tensor_metadata op since the dtype does
not match"): the complex rotary embeddings of Llama 4 and DeepSeek-V2 failed
so, at ``freqs_cis.to(device)``. The assertion is about the traced values'
metadata, which the exported fake values fix: where they say it holds, it
holds for every run, and the node is dropped. One that does not hold is kept
(torch-mlir reports it). Guarded by ``test_import.py::
test_complex_to_device_imports``; remove when torch-mlir maps complex dtypes in
that check.
"""

from __future__ import annotations

import torch
from torch.fx import Graph, Node

from anyshape.stages import Workaround

aten = torch.ops.aten

WORKAROUNDS = (Workaround(
    name="proven_metadata_asserts", stage="import", where="drop_proven_metadata_asserts",
    upstream="torch-mlir 20261001 refuses torch.export's _assert_tensor_metadata on a "
             "complex64 tensor (\"Failed to canonicalize the _assert_tensor_metadata op since "
             "the dtype does not match\"): Llama 4's and DeepSeek-V2's rotary embeddings.",
    guard="test/python/frontend/test_import.py::test_complex_to_device_imports",
    remove_when="torch-mlir maps complex dtypes in that check"),)


def drop_proven_metadata_asserts(graph: Graph) -> int:
    dropped = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not aten._assert_tensor_metadata.default \
                or node.users:
            continue
        source = node.args[0]
        val = source.meta.get("val") if isinstance(source, Node) else None
        dtype = node.kwargs.get("dtype", node.args[3] if len(node.args) > 3 else None)
        if isinstance(val, torch.Tensor) and (dtype is None or dtype == val.dtype):
            graph.erase_node(node)
            dropped += 1
    return dropped
