"""Conditions torch.export cannot prove, proven here, and exported as run-time checks.

torch.export refuses a dim when a condition it recorded is one it cannot show
holds at every size: ``min(2048, seq) <= seq`` (DeepSeek-V3.2's indexer, GLM's
MoE-DSA), ``seq * min(64, 64 * seq) == 64 * seq`` (Aria's reshape of a matmul).
Both hold at every length; torch's solver does not simplify the min. Where
every condition torch refuses is over one dim and holds at every size of its
declared range, ``export_program`` exports again with torch's
``prefer_deferred_runtime_asserts_over_guards``: the conditions become checks in
the program, which always pass. A condition that fails somewhere (a branch on
the length, padding to a chunk size) is not proven and the refusal stands.

The proof: a condition over one size ``n`` built from +, *, min and max of it and
integers is a polynomial on each side of its breakpoints, which lie within the
integers it names; it is checked at every size up to past the largest of them,
and beyond that as sympy simplifies it for every larger ``n``. Conditions with
``%`` or ``//`` are not proven.
"""

from __future__ import annotations

from typing import Any

import sympy

from anyshape.stages import Workaround

WORKAROUNDS = (Workaround(
    name="unproven_guards_deferred", stage="export", where="deferrable (export_program)",
    upstream="torch 2.13's export constraint solver does not simplify min/max: it refuses "
             "conditions that hold at every size (min(2048, seq) <= seq: DeepSeek-V3.2, "
             "GLM-MoE-DSA, HY-V4, AXK2; seq * min(64, 64 * seq) == 64 * seq: Aria).",
    guard="test/python/frontend/test_unproven_guards.py::"
          "test_a_condition_that_holds_at_every_size_compiles",
    remove_when="torch.export proves these (the guard passes without the retry)"),)

# Past this, checking every size below the breakpoints takes too long to be worth it.
_LARGEST_BREAKPOINT = 1 << 16


def holds_at_every_size(expr, low: int, high: int | None) -> bool:
    """Whether ``expr`` (a sympy condition over one symbol) is true at every
    integer in [low, high] (``high`` None: no end)."""
    from torch.utils._sympy.functions import Max, Min

    symbols = list(getattr(expr, "free_symbols", ()))
    if len(symbols) != 1:
        return False
    # sympy's own Min and Max, and a symbol assumed nothing of but being an integer
    # (a torch symbol is positive, which would take size 0 out of the proof)
    symbol = sympy.Symbol("size", integer=True)
    expr = expr.replace(Max, sympy.Max).replace(Min, sympy.Min).subs(symbols[0], symbol)
    if not isinstance(expr, (sympy.Rel, sympy.Eq, sympy.Ne)):
        return False
    allowed = (sympy.Add, sympy.Mul, sympy.Pow, sympy.Max, sympy.Min, sympy.Integer,
               sympy.Symbol, sympy.Rel, sympy.Eq, sympy.Ne, sympy.core.numbers.NegativeOne,
               sympy.core.numbers.One, sympy.core.numbers.Zero)
    if any(not isinstance(node, allowed) for node in sympy.preorder_traversal(expr)):
        return False
    numbers = [abs(int(n)) for n in expr.atoms(sympy.Integer)]
    bound = 2 * max(numbers, default=0) + 2
    if bound > _LARGEST_BREAKPOINT:
        return False
    test = sympy.lambdify(symbol, expr, modules=[{"Min": min, "Max": max}, "math"])
    top = bound if high is None else min(high, bound)
    if any(not bool(test(size)) for size in range(max(low, 0), top + 1)):
        return False
    if high is not None and high <= bound:
        return True
    beyond = sympy.Symbol("beyond", integer=True, nonnegative=True)
    return sympy.simplify(expr.subs(symbol, bound + 1 + beyond)) is sympy.true


def deferrable(error_text: str, conditions: list[tuple[str, Any]],
               ranges: dict[str, tuple[int, int | None]]) -> bool:
    """Whether torch's refusal ``error_text`` is only conditions it could not prove
    (``conditions``: each dim's name and the condition as sympy, from
    ``export_diagnostics.violated_expressions``) that hold at every size of the
    dim's declared range (``ranges``: name -> (min, max))."""
    bullets = [line for line in error_text.splitlines() if line.strip().startswith("- ")]
    if "Constraints violated" not in error_text or "Suggested fixes" in error_text or \
            not conditions or len(bullets) != len(conditions):
        return False
    return all(expr is not None and name in ranges and holds_at_every_size(expr, *ranges[name])
               for name, expr in conditions)
