"""Indexed reads checked in the module: an error, not garbage, where an index computed from the data is out of range.

torch-mlir lowers ``embedding``, ``gather`` and ``index_select`` with no
bounds check and IREE reads past the table (``frontend/indexed_reads.py``).
The runtime checks indices that are inputs or follow from the sizes before
the call; the rest (RoBERTa's positions, counted from the mask) are known
only inside the module, so ``check_indices`` asserts they are in range before
the read. IREE keeps the assertion (``--iree-opt-strip-assertions=false``) and
the runtime raises it as a ``RunError`` with this message. Guarded by
``test_roberta_past_its_positions_is_an_error`` (test_unbounded_dims.py).
Not on CUDA, where IREE 3.13 does not compile it (``SKIPPED_FOR_TARGET``).
"""

from __future__ import annotations

import torch
from torch.fx import Graph

from anyshape.frontend.graph_fixes.fx_emit import Emitter
from anyshape.frontend.indexed_reads import indexed_reads
from anyshape.stages import Workaround

aten = torch.ops.aten


def message(table: str, rows: int, low: int) -> str:
    return (f"index out of range: an index the model computes from its inputs is outside "
            f"[{low}, {rows}), into {table} (eager raises IndexError); for a table of "
            f"positions, the input is longer than the model's positions")


def check_indices(graph: Graph) -> int:
    """Insert the check before each read whose index the data decides (one for
    the reads of one index into equal extents); returns how many."""
    groups: dict[tuple, list] = {}
    for read in indexed_reads(graph):
        if read.kind == "data":
            groups.setdefault((read.index, read.low, read.rows), []).append(read)
    for (index, low, rows), reads in groups.items():
        emit = Emitter(graph, reads[0].node)
        in_range = emit(aten.logical_and.default, emit(aten.ge.Scalar, index, low),
                        emit(aten.lt.Scalar, index, rows))
        # Typed by placeholders: a fake run of either would guard on the data.
        everywhere = emit.untyped(aten.Bool.Tensor, emit(aten.all.default, in_range), value=False)
        tables = " and ".join(dict.fromkeys(read.table for read in reads))
        emit.untyped(aten._assert_scalar.default, everywhere, message(tables, rows, low))
    return len(groups)


# Workarounds of upstream bugs here (docs/workarounds.md, anyshape/stages.py).
WORKAROUNDS = (
    Workaround(
        name='checked_indices_out_of_range', stage='import',
        where='check_indices',
        upstream="torch-mlir lowers embedding, gather and index_select with no bounds check, "
                 "and IREE reads past the table (NaN or another row, or a crash) where eager "
                 "raises IndexError; a run-time assertion turns that into a RunError (relies "
                 "on --iree-opt-strip-assertions=false).",
        guard='test/python/frontend/test_unbounded_dims.py::'
              'test_roberta_past_its_positions_is_an_error',
        remove_when="when torch-mlir's lowerings of these reads check their indices (none "
                    "does in the pinned torch-mlir); on CUDA the check is left out until IREE "
                    "compiles it (iree/test_cuda.py::"
                    "test_iree_does_not_compile_the_index_check_on_cuda)"),
)
