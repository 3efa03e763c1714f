"""Casts from a float to an unsigned integer, through int64.

torch-mlir lowers ``x.to(torch.uint8)`` of a float tensor as a signed
conversion (its builtin integers are signless), so every value from 128 up
came back 127: ``(x * 250).byte()`` gave 127 where eager gives 152, on both
anyshape and the plain stack. From int64 the cast is a truncation of the
bits, which is right for every value the unsigned type holds (and wraps as
eager does for the integers past it).
"""

from __future__ import annotations

import torch
from torch.fx import Graph
from anyshape.stages import Workaround

_CASTS = (torch.ops.aten._to_copy.default, torch.ops.prims.convert_element_type.default)
_UNSIGNED = (torch.uint8, torch.uint16, torch.uint32)


def _target_dtype(node) -> torch.dtype | None:
    if node.target is torch.ops.aten._to_copy.default:
        return node.kwargs.get("dtype")
    return node.args[1] if len(node.args) > 1 else node.kwargs.get("dtype")


def cast_floats_to_unsigned_through_int64(graph: Graph) -> int:
    """Insert the int64 step before each such cast; returns how many."""
    count = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in _CASTS:
            continue
        source = node.args[0]
        source_val = getattr(source, "meta", {}).get("val")
        if _target_dtype(node) not in _UNSIGNED or not isinstance(source_val, torch.Tensor) \
                or not source_val.is_floating_point():
            continue
        with graph.inserting_before(node):
            wide = graph.call_function(torch.ops.prims.convert_element_type.default,
                                       (source, torch.int64))
        wide.meta.update({k: v for k, v in node.meta.items() if k not in ("val", "tensor_meta")})
        with source_val.fake_mode:
            wide.meta["val"] = source_val.to(torch.int64)
        node.replace_input_with(source, wide)
        count += 1
    return count


# Workarounds of upstream bugs here (docs/workarounds.md, anyshape/stages.py).
WORKAROUNDS = (
    Workaround(
        name='unsigned_casts_through_int64', stage='import',
        where='cast_floats_to_unsigned_through_int64',
        upstream='torch-mlir lowers x.to(torch.uint8) of a float tensor as a signed conversion '
                 '(signless builtin integers), so every value from 128 up came back 127 ((x * '
                 '250).byte() gave 127 where eager gives 152).',
        guard='test/python/test_opinfo_floor.py::test_floor[byte-float32-4]',
        remove_when='(inferred) when torch-mlir converts floats to unsigned integers as unsigned;'
                    ' the docstring states no removal condition'),
)
