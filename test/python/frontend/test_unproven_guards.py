"""Conditions torch.export cannot prove, which hold at every size: proven by
anyshape and exported as run-time checks (frontend/unproven_guards.py).

DeepSeek-V3.2's indexer takes ``topk(scores, min(2048, seq))``; torch.export
refused ``Dim("seq")`` because it could not show ``min(2048, seq) <= seq``.
"""

import pytest
import sympy
import torch
from torch.export import Dim
from torch.utils._sympy.functions import Max, Min

import anyshape
from anyshape.frontend.unproven_guards import holds_at_every_size

n = sympy.Symbol("s0")


@pytest.mark.parametrize("condition, low, high, holds", [
    (sympy.Le(Min(2048, n), n), 0, None, True),
    (sympy.Eq(n * Min(64, 64 * n), 64 * n), 0, None, True),   # Aria's reshape
    (sympy.Ge(Max(1, n), n), 0, None, True),
    (sympy.Eq(Min(64, 64 * n), 64), 1, None, True),
    (sympy.Eq(Min(64, 64 * n), 64), 0, None, False),          # false at 0
    (sympy.Ne(n, 512), 0, None, False),
    (sympy.Le(n, 512), 0, None, False),
    (sympy.Le(n, 512), 0, 512, True),
    # divisions by constants, one remainder at a time
    (sympy.Le(n + sympy.Mod(n, 256), 256), 0, 100, True),
    (sympy.Le(n + sympy.Mod(n, 256), 256), 0, 200, False),    # false at 129
    (sympy.Eq(sympy.Mod(256 * sympy.floor(n / 256) + 512, sympy.floor(n / 256) + 2), 0),
     0, None, True),                                          # Mamba-2's chunks
    (sympy.Ne(sympy.floor(n / 256) + 2, 1), 0, None, True),
    (sympy.Ne(sympy.floor(n / 256) + 1, 1), 0, None, False),  # one chunk below 256
    (sympy.Le(n, 256 * sympy.floor(n / 256) + 512), 0, None, True),
    (sympy.Eq(sympy.Mod(n + sympy.Mod(64 - sympy.Mod(n, 64), 64), 64), 0), 0, None, True),
    (sympy.Ne(sympy.Mod(n, 7), 3), 0, None, False),
    (sympy.Eq(sympy.Mod(n, n // 3 + 1), 0), 0, None, False),   # not a constant divisor
    (sympy.Le(sympy.floor((n + 1) / 2), n), 0, None, True),     # the upper half's size
    (sympy.Le(sympy.floor((n - 1) / 2), n), 0, None, True),
    (sympy.Le(sympy.floor((n + 1) / 2), n - 1), 0, None, False),  # false at 1
    (sympy.Le(sympy.floor((n + 3) / 2), n), 2, None, True),
    (sympy.Le(sympy.floor((n + 3) / 2), n), 1, None, False),
])
def test_what_is_proven(condition, low, high, holds):
    assert holds_at_every_size(condition, low, high) is holds


class TopkOfAtMostFour(torch.nn.Module):
    def forward(self, x):
        return torch.topk(x, min(4, x.shape[1]), dim=1).values * 2


class TopkOfFour(torch.nn.Module):
    def forward(self, x):
        return torch.topk(x, 4, dim=1).values * 2


def test_a_condition_that_holds_at_every_size_compiles():
    model = TopkOfAtMostFour().eval()
    compiled = anyshape.compile(model, (torch.randn(2, 16),),
                                dynamic_shapes={"x": {0: Dim("batch"), 1: Dim("seq")}})
    for length in (1, 3, 4, 5, 33):
        x = torch.randn(3, length)
        torch.testing.assert_close(compiled(x), model(x))


class LowerHalf(torch.nn.Module):
    def forward(self, x):
        return torch.topk(x, (x.shape[1] + 1) // 2, dim=1, largest=False).values


def test_a_size_divided_by_a_constant_plus_one_is_proven():
    """topk of (n + 1) // 2: torch cannot show (n + 1) // 2 <= n."""
    model = LowerHalf().eval()
    compiled = anyshape.compile(model, (torch.randn(2, 16),),
                                dynamic_shapes={"x": {0: Dim("batch"), 1: Dim("seq")}})
    for length in (1, 2, 7, 33):
        x = torch.randn(3, length)
        torch.testing.assert_close(compiled(x), model(x))


def test_negative_a_condition_false_at_some_size_is_still_refused():
    # topk of 4 needs seq >= 4: a real condition of the model, the user's to declare.
    with pytest.raises(anyshape.CompileError, match="'seq'"):
        anyshape.compile(TopkOfFour().eval(), (torch.randn(2, 16),),
                         dynamic_shapes={"x": {0: Dim("batch"), 1: Dim("seq")}})


_RELATED_REFUSAL = """Constraints violated (past)! For more information, run with TORCH_LOGS="+dynamic".
  - The values of past + 1 = L['mask'].size()[1] must always be related to the values of past = L['past'][2].size()[2] by past + 1 = Min(7, past) + 1.
  - Not all values of past = L['past'][2].size()[2] in the specified range past <= 7 satisfy the generated guard L['past'][2].size()[2] == min(7, L['past'][2].size()[2])."""


def test_a_relation_torch_found_between_one_dims_sources_is_proven():
    """/// A sliding-window cache of a past no longer than the window: torch
    /// relates the dim's sources by past = min(7, past), true for past <= 7."""
    from anyshape.frontend.unproven_guards import deferrable

    condition = sympy.Eq(n, Min(7, n))
    assert deferrable(_RELATED_REFUSAL, [("past", condition)], {"past": (0, 7)})
    assert not deferrable(_RELATED_REFUSAL, [("past", condition)], {"past": (0, None)})
