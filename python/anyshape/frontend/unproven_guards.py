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
and beyond that as sympy simplifies it for every larger ``n``. Where ``n`` is
divided by constants (``n // 256``, ``n % 64``: a length padded to whole
chunks, as Mamba-2's scan pads it), each remainder ``r`` of their least common
multiple ``m`` is taken in turn: at ``n = m * k + r`` every such quotient and
remainder is a polynomial in ``k``, and the condition is proven over ``k`` the
same way (``(256 * (n // 256) + 512) % (n // 256 + 2) == 0`` holds at every
``n``). Divisions sympy cannot reduce that way are not proven.
"""

from __future__ import annotations

import math
import re
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
# and past this, checking each remainder of a division.
_LARGEST_DIVISOR = 1024


def holds_at_every_size(expr, low: int, high: int | None) -> bool:
    """Whether ``expr`` (a sympy condition over one symbol) is true at every
    integer in [low, high] (``high`` None: no end)."""
    from torch.utils._sympy.functions import Max, Min

    expr = _as_sympy_division(expr)
    if expr in (sympy.true, sympy.false):
        return bool(expr)
    symbols = list(getattr(expr, "free_symbols", ()))
    if len(symbols) != 1:
        return False
    divisor = _divisor(expr, symbols[0])
    if divisor is not None:
        return _holds_per_residue(expr, symbols[0], divisor, low, high)
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


def _as_sympy_division(expr):
    """``expr`` with torch's ``Mod``, ``PythonMod`` and ``FloorDiv`` as sympy's
    ``Mod`` and ``floor``, which sympy simplifies (``Mod(256*k + 512, k + 2)``
    is 0 for an integer ``k >= 0``)."""
    from torch.utils._sympy import functions

    for name in ("Mod", "PythonMod"):
        expr = expr.replace(getattr(functions, name), sympy.Mod)
    return expr.replace(functions.FloorDiv, lambda a, b: sympy.floor(a / b))


def _divisor(expr, symbol) -> int | None:
    """The least common multiple of the constants that ``symbol`` is divided by
    (``symbol // c``, ``symbol % c``) in ``expr``; None where it is divided by
    nothing, 0 where by something else."""
    divisors = []
    for node in sympy.preorder_traversal(expr):
        slope = _rational_slope(node.args[0], symbol) if isinstance(node, sympy.floor) else None
        if slope is not None:  # floor(n / c + b), as (n + 1) // 2 is
            divisors.append(int(slope.q))
        elif isinstance(node, (sympy.floor, sympy.Mod)) and symbol in node.free_symbols:
            if isinstance(node, sympy.Mod) and node.args[0] == symbol and node.args[1].is_Integer \
                    and node.args[1] > 0:
                divisors.append(int(node.args[1]))
            elif not any(isinstance(inner, (sympy.floor, sympy.Mod)) and inner is not node
                         for inner in sympy.preorder_traversal(node)):
                return 0
    return math.lcm(*divisors) if divisors else None


def _rational_slope(expr, symbol):
    """``a`` where ``expr`` is ``a * symbol + b`` with rational ``a != 0`` and
    ``b``; None otherwise."""
    if symbol not in expr.free_symbols:
        return None
    slope = sympy.diff(expr, symbol)
    rest = sympy.expand(expr - slope * symbol)
    return slope if slope.is_Rational and rest.is_Rational else None


def _holds_per_residue(expr, symbol, divisor: int, low: int, high: int | None) -> bool:
    """``holds_at_every_size`` where ``symbol`` is divided by constants whose
    least common multiple is ``divisor``: for each remainder ``r``, the sizes
    ``divisor * k + r`` make every ``symbol // c`` and ``symbol % c`` a
    polynomial in ``k`` (sympy simplifies them for an integer ``k``), and the
    condition is proven over ``k``. Quotients and remainders of those
    polynomials that sympy does not simplify are not proven."""
    if not 0 < divisor <= _LARGEST_DIVISOR:
        return False
    k = sympy.Symbol("quotient", integer=True, nonnegative=True)
    only_quotient = expr.subs(sympy.floor(symbol / divisor), k)
    if only_quotient in (sympy.true, sympy.false):
        return bool(only_quotient)
    if symbol not in only_quotient.free_symbols:  # the remainder plays no part
        return holds_at_every_size(only_quotient, max(low, 0) // divisor,
                                   None if high is None else high // divisor)
    for remainder in range(divisor):
        first = -((remainder - max(low, 0)) // divisor)  # ceil((low - r) / divisor)
        last = None if high is None else (high - remainder) // divisor
        if last is not None and last < first:
            continue
        per_residue = expr.subs(symbol, divisor * k + remainder)
        if per_residue in (sympy.true, sympy.false):
            if per_residue is sympy.false:
                return False
            continue
        if _divisor(per_residue, k) is not None or \
                not holds_at_every_size(per_residue, first, last):
            return False
    return True


def deferrable(error_text: str, conditions: list[tuple[str, Any]],
               ranges: dict[str, tuple[int, int | None]]) -> bool:
    """Whether torch's refusal ``error_text`` is only conditions it could not prove
    (``conditions``: each dim's name and the condition as sympy, from
    ``export_diagnostics.violated_expressions``) that hold at every size of the
    dim's declared range (``ranges``: name -> (min, max))."""
    bullets = [line for line in error_text.splitlines() if line.strip().startswith("- ")]
    relations = [_relation(match, ranges) for match in _RELATED.finditer(error_text)]
    if "Constraints violated" not in error_text or "Specializations unexpectedly" in error_text \
            or not conditions or len(bullets) != len(conditions) + len(relations):
        return False
    return all(relation is not None and holds_at_every_size(relation[1], *ranges[relation[0]])
               for relation in relations) and \
        all(expr is not None and name in ranges and holds_at_every_size(expr, *ranges[name])
            for name, expr in conditions)


# torch's solver, where two sources of one Dim came out related by an expression
# ("past + 1 = Min(7, past) + 1": a cache cut to a sliding window, of a past no
# longer than the window).
_RELATED = re.compile(r"^\s*- The values of .+? = \S+ must always be related to the values of "
                      r".+? = \S+ by (.+?) = (.+?)\.$", re.MULTILINE)


def _relation(match: re.Match, ranges: dict[str, tuple[int, int | None]]):
    """(the dim's name, the relation as a sympy equality) where both sides are
    over one declared dim; None otherwise."""
    from torch.utils._sympy.functions import Max, Min

    try:
        sides = [sympy.sympify(side, locals={"Min": Min, "Max": Max}) for side in match.groups()]
    except (sympy.SympifyError, SyntaxError, TypeError):
        return None
    names = {str(symbol) for side in sides for symbol in side.free_symbols}
    if len(names) != 1 or next(iter(names)) not in ranges:
        return None
    return next(iter(names)), sympy.Eq(*sides)
