"""Outputs against eager's.

Floats: |got - expected| <= ATOL + RTOL * |expected| elementwise, NaN where
eager has NaN and infinities equal. OpInfo's float samples are drawn from
[-9, 9] and a case's reductions run over at most a few thousand of them, so
float32 rounding stays orders of magnitude below 1e-4 of the magnitudes
involved, while a wrong element, a dropped or doubled row, or a mis-indexed
read is off by far more. Integers and booleans exactly; dtypes and shapes equal.
Random outputs (``random=True``): shape and dtype, and finite wherever eager's
are all finite; so are indices that ties make ambiguous (``ties=True``).
"""

from __future__ import annotations

import torch
from torch.utils._pytree import tree_leaves

ATOL = 1e-4
RTOL = 1e-4


def leaves(output) -> list:
    return tree_leaves(output)


def mismatch(got: list, expected: list, random: bool = False, ties: bool = False) -> str | None:
    """Why ``got`` (flat outputs) differs from ``expected`` (eager's flat
    outputs), or None when they agree. ``ties``: integer outputs are indices
    that ties make ambiguous, compared by shape and dtype only."""
    if len(got) != len(expected):
        return f"{len(got)} outputs, eager has {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected)):
        loose = random or (ties and isinstance(e, torch.Tensor) and not e.is_floating_point())
        why = _one(g, e, loose)
        if why:
            return f"output {i}: {why}"
    return None


def _one(got, expected, random: bool) -> str | None:
    if not isinstance(expected, torch.Tensor):
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if isinstance(expected, float) and isinstance(got, (int, float)):
            ok = abs(got - expected) <= ATOL + RTOL * abs(expected) or got == expected
        else:
            ok = got == expected
        return None if ok else f"{got!r}, eager {expected!r}"
    if not isinstance(got, torch.Tensor):
        return f"a {type(got).__name__}, eager a tensor"
    if got.dtype != expected.dtype:
        return f"dtype {got.dtype}, eager {expected.dtype}"
    if tuple(got.shape) != tuple(expected.shape):
        return f"shape {tuple(got.shape)}, eager {tuple(expected.shape)}"
    if random:
        if expected.is_floating_point() and bool(expected.isfinite().all()) and \
                not bool(got.isfinite().all()):
            return "non-finite values where eager's are all finite"
        return None
    if got.numel() == 0:
        return None
    if not expected.is_floating_point():
        bad = got != expected
        if bool(bad.any()):
            return _where(bad, got, expected)
        return None
    g, e = got.double(), expected.double()
    nan = e.isnan()
    if not torch.equal(g.isnan(), nan):
        return _where(g.isnan() != nan, got, expected, "NaN in one only")
    finite = e.isfinite()
    infinite = ~finite & ~nan
    if not torch.equal(g[infinite], e[infinite]):
        return _where(infinite & (g != e), got, expected, "infinities differ")
    bad = finite & ((g - e).abs() > ATOL + RTOL * e.abs())
    if bool(bad.any()):
        err = (g - e).abs()[bad].max().item()
        return _where(bad, got, expected, f"max abs error {err:.3g}")
    return None


def _where(bad: torch.Tensor, got, expected, what: str = "values differ") -> str:
    count = int(bad.sum())
    first = tuple(int(i) for i in bad.nonzero()[0]) if bad.dim() else ()
    return (f"{what} at {count} of {bad.numel()} elements; first at {first}: "
            f"{got[first].item()!r}, eager {expected[first].item()!r}")
