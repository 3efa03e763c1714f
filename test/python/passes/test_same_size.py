"""``same_size``: whether two symbolic sizes agree for every value of their
symbols, which the passes ask for each view, broadcast and slice they rewrite.
Polynomials are decided by expansion; ``sympy.simplify``, slow on every
difference that is not zero, only sees the rest."""

import sympy
import pytest

from anyshape.passes.torch_ir import shape_analysis
from anyshape.passes.torch_ir.shape_analysis import same_size

B, L = (sympy.Symbol(name, integer=True, positive=True) for name in ("B", "L"))


@pytest.mark.parametrize("a, b, same", [
    (B * L * 768, 12 * L * B * 64, True),          # [B, L, 768] against [B, L, 12, 64] merged
    ((L + 1) ** 2, L ** 2 + 2 * L + 1, True),
    (B * L * 768, 2 * B * L * 768, False),
    (B * L, B, False),
    (12 * B * L, 64, False),
    (L - L, 0, True),
    (sympy.Integer(7), sympy.Integer(7), True),
])
def test_polynomials_decided_without_simplify(monkeypatch, a, b, same):
    def refused(expression):
        raise AssertionError(f"simplify called on the polynomial {expression}")

    monkeypatch.setattr(shape_analysis.sympy, "simplify", refused)
    assert same_size(a, b) is same
    assert same_size(b, a) is same


def test_unknown_sizes_are_never_the_same():
    assert not same_size(None, B)
    assert not same_size(B, None)
    assert not same_size(None, None)


def test_what_is_not_a_polynomial_is_left_to_simplify(monkeypatch):
    asked = []
    simplify = sympy.simplify
    monkeypatch.setattr(shape_analysis.sympy, "simplify",
                        lambda expression: asked.append(expression) or simplify(expression))
    # No expansion shows this to be 1; simplify does.
    assert same_size(sympy.sin(L) ** 2 + sympy.cos(L) ** 2, 1)
    assert not same_size(sympy.Min(B, L), B)  # B > L can hold
    assert len(asked) == 2
