"""Rewrites and refusals of the exported FX graph, before torch-mlir imports it.

Each fixes a form that torch-mlir or IREE lowers wrongly or not at all (its
module's ``WORKAROUNDS`` names the upstream bug and the test that guards it).
``GRAPH_FIXES`` is the one ordered list ``importer.import_program`` applies;
``test/frontend/*.py`` shows each fix's imported IR (lit), and a new fix is a
module here plus a line in the list.
"""

from __future__ import annotations

from typing import Callable

import torch

from anyshape.frontend.graph_fixes.argmax_as_reductions import rewrite_argmax_as_reductions
from anyshape.frontend.graph_fixes.boolean_mask_reads import rewrite_boolean_mask_reads
from anyshape.frontend.graph_fixes.checked_det import check_det
from anyshape.frontend.graph_fixes.complex_as_pairs import rewrite_complex_as_pairs
from anyshape.frontend.graph_fixes.constant_sizes import make_constant_sizes_static
from anyshape.frontend.graph_fixes.constant_subexpressions import compute_constant_subexpressions
from anyshape.frontend.graph_fixes.edge_value_math import rewrite_edge_value_math
from anyshape.frontend.graph_fixes.integer_negation import rewrite_integer_negation
from anyshape.frontend.graph_fixes.nonnegative_dims import count_dims_from_the_front
from anyshape.frontend.graph_fixes.packed_sort_keys import rewrite_sorts_as_packed_keys
from anyshape.frontend.graph_fixes.paired_indices import rewrite_paired_indices
from anyshape.frontend.graph_fixes.rank0_softmax import rewrite_rank0_softmax
from anyshape.frontend.graph_fixes.scatter_reduce_without_self import (
    rewrite_scatter_reduce_without_self)
from anyshape.frontend.graph_fixes.stable_logcumsumexp import rewrite_logcumsumexp
from anyshape.frontend.graph_fixes.symbolic_scalars import (lower_symbolic_scalars,
                                                            wrap_scalars_at_tensor_operands)
from anyshape.frontend.graph_fixes.tensor_metadata_asserts import drop_proven_metadata_asserts
from anyshape.frontend.graph_fixes.unsigned_casts import cast_floats_to_unsigned_through_int64
from anyshape.frontend.graph_fixes.whole_dim_slices import drop_whole_dim_slices
from anyshape.frontend.graph_fixes.wrong_lowerings import refuse_wrong_lowerings

# In the order they run. Refusals first (nothing is rewritten for a graph that
# fails); complex values as pairs before constants are computed (a complex
# constant would stop it); edge_value_math before the scalars become 0-d tensor ops, so that the
# pow ops of sizes stay as they were tested (test_symbolic_scalars.py), on
# IREE's host arithmetic (after them, the IEEE rewrite's sign tests met
# torch-mlir's comparison folder bug, passes/torch_ir/mixed_comparisons.py;
# with that mended both orders pass); paired indices before the argmax they
# read is rewritten; the scalar lowering and wrapping
# together, then the unsigned casts, which read the final dtypes.
GRAPH_FIXES: tuple[tuple[str, Callable[[torch.fx.Graph], None]], ...] = (
    ("wrong_lowerings", refuse_wrong_lowerings),
    ("complex_as_pairs", rewrite_complex_as_pairs),
    ("constant_subexpressions", compute_constant_subexpressions),
    ("tensor_metadata_asserts", drop_proven_metadata_asserts),
    ("packed_sort_keys", rewrite_sorts_as_packed_keys),
    ("integer_negation", rewrite_integer_negation),
    ("nonnegative_dims", count_dims_from_the_front),
    ("scatter_reduce_without_self", rewrite_scatter_reduce_without_self),
    ("boolean_mask_reads", rewrite_boolean_mask_reads),
    ("whole_dim_slices", drop_whole_dim_slices),
    ("constant_sizes", make_constant_sizes_static),
    ("edge_value_math", rewrite_edge_value_math),
    ("rank0_softmax", rewrite_rank0_softmax),
    ("stable_logcumsumexp", rewrite_logcumsumexp),
    ("paired_indices", rewrite_paired_indices),
    ("argmax_as_reductions", rewrite_argmax_as_reductions),
    ("checked_det", check_det),
    ("symbolic_scalars", lower_symbolic_scalars),
    ("symbolic_scalars.wrap", wrap_scalars_at_tensor_operands),
    ("unsigned_casts", cast_floats_to_unsigned_through_int64),
)


def apply_graph_fixes(graph: torch.fx.Graph) -> None:
    """Every fix of ``GRAPH_FIXES`` on ``graph``, in place, in order."""
    for _, fix in GRAPH_FIXES:
        fix(graph)
