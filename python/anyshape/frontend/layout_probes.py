"""torch's layout probes without guards, while anyshape exports.

torch asks "is this tensor contiguous?" of every intermediate result it records
(``fx.passes.shape_prop._extract_tensor_metadata``) and in its fake kernels'
``definitely_contiguous`` checks. Those probes pass ``false_if_dde=True``: they may
answer "no" when they cannot tell. But for sizes torch has a hint for, they still
decide by the hint and record it as a guard. A slice of a buffer by the length
(GPT-Neo's and OpenAI-GPT's ``self.bias[:, :, :seq, :seq]``) is contiguous only at
``seq == 512``; a length-1 check on ``seq - 1`` (MobileBERT) holds only at ``seq == 2``.
So a probe whose answer no op depends on refuses the user's unbounded ``Dim("seq")``.
The order of an elementwise result's dims in memory
(``compute_elementwise_output_logical_to_physical_perm``, which always compares
strides with ``guard_or_false``) does the same: Inkling-2's short convolution
flips ``unfold(-1, 4, 1)`` windows, and comparing their strides recorded
``seq >= 4``.

``static_layout_probes`` makes those probes answer from what holds at every size
(``statically_known_true``), as pytorch/pytorch#185166 and #185084 do upstream. A
probe that answers "not known contiguous" (or "keep the dims in their order") is
always safe: the result's layout is only recorded, and ops that need one copy.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Iterator

import torch._prims_common as prims_common
from torch.fx.experimental import symbolic_shapes

from anyshape.stages import Workaround

WORKAROUNDS = (Workaround(
    name="static_layout_probes", stage="export", where="static_layout_probes",
    upstream="torch 2.13's false_if_dde contiguity probes (fx shape_prop's tensor metadata, "
             "fake kernels) record guards from the example sizes: seq != 512 for a causal-mask "
             "buffer sliced by the length (OpenAI-GPT, GPT-Neo), seq - 1 != 1 (MobileBERT), "
             "seq >= 4 from the strides of unfold windows (Inkling-2's elementwise output "
             "layout), out_h * out_w > 1 from are_strides_like_channels_last_or_false (fake "
             "tensors' suggest_memory_format of a max pooling's output); the contiguity "
             "probes are fixed upstream by pytorch/pytorch#185166 and #185084, the layout "
             "ones are not.",
    guard=("test/python/frontend/test_length_sliced_state.py::"
           "test_a_buffer_sliced_by_the_length_needs_only_the_configs_bound",
           "test/python/test_hf_family_sweep.py::test_matches_eager[mobilebert-1-7]",
           "test/python/frontend/test_length_sliced_state.py::"
           "test_flipped_windows_compile_with_an_unbounded_seq",
           "test/python/frontend/test_pooling.py::test_max_pool2d_down_to_one_position"),
    remove_when="the pinned torch has pytorch/pytorch#185166 and #185084 and answers the "
                "elementwise layout without guards (the guards pass "
                "without it)"),)

# The probes that take ``false_if_dde``; each looks guard_or_false / guard_or_true up
# in symbolic_shapes when it runs, and calls the others through prims_common.
_PROBES = ("is_contiguous", "is_channels_last_contiguous_2d",
           "is_channels_last_contiguous_3d", "check_contiguous_sizes_strides",
           "compute_elementwise_output_logical_to_physical_perm",
           "are_strides_like_channels_last_or_false")
# Probes that always answer with guard_or_false / guard_or_true (no
# ``false_if_dde`` argument): the order of an elementwise result's dims in
# memory, from its inputs' strides; whether strides look channels-last (fake
# tensors' ``suggest_memory_format`` of every result: a max pooling's output
# of out_h * out_w > 1).
_ALWAYS_FALSE_IF_DDE = ("compute_elementwise_output_logical_to_physical_perm",
                        "are_strides_like_channels_last_or_false")


def _static_guard_or_false(condition) -> bool:
    return symbolic_shapes.statically_known_true(condition)


def _static_guard_or_true(condition) -> bool:
    return not symbolic_shapes.statically_known_false(condition)


@contextlib.contextmanager
def static_guards() -> Iterator[None]:
    """Within: torch's ``guard_or_false`` / ``guard_or_true`` answer from what
    holds at every size, recording no guard (as their contract allows)."""
    saved = symbolic_shapes.guard_or_false, symbolic_shapes.guard_or_true
    symbolic_shapes.guard_or_false = _static_guard_or_false
    symbolic_shapes.guard_or_true = _static_guard_or_true
    try:
        yield
    finally:
        symbolic_shapes.guard_or_false, symbolic_shapes.guard_or_true = saved


def _without_guards(probe):
    signature = inspect.signature(probe)
    always = probe.__name__ in _ALWAYS_FALSE_IF_DDE

    @functools.wraps(probe)
    def probe_statically(*args, **kwargs):
        if not always and not signature.bind(*args, **kwargs).arguments.get("false_if_dde", False):
            return probe(*args, **kwargs)
        with static_guards():
            return probe(*args, **kwargs)
    return probe_statically


@contextlib.contextmanager
def static_layout_probes() -> Iterator[None]:
    """Within: torch's ``false_if_dde`` layout probes add no guards."""
    saved = {name: getattr(prims_common, name) for name in _PROBES}
    for name, probe in saved.items():
        setattr(prims_common, name, _without_guards(probe))
    try:
        yield
    finally:
        for name, probe in saved.items():
            setattr(prims_common, name, probe)
