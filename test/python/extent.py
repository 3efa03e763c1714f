"""How much of each sweep the suite runs: ``quick`` (the default, what `make
test` and CI run) or ``full`` (`make test-full`), from ``ANYSHAPE_TEST_EXTENT``.

The quick extent keeps every test and at least one case of each behaviour;
the full one adds the rest of each sweep (more random program bundles, more
seeds and OpInfos, more families of a behaviour already covered). Cases left
to the full extent are skipped with a reason that says so, never dropped
silently. docs/testing.md lists what each extent runs and what it costs.
"""

from __future__ import annotations

import os

import pytest

EXTENTS = ("quick", "full")
EXTENT = os.environ.get("ANYSHAPE_TEST_EXTENT", "quick")
if EXTENT not in EXTENTS:
    raise ValueError(f"ANYSHAPE_TEST_EXTENT: expected one of {', '.join(EXTENTS)}, "
                     f"got {EXTENT!r}")
FULL = EXTENT == "full"

# A case the quick extent skips: pytest.param(..., marks=FULL_ONLY).
FULL_ONLY = pytest.mark.full_extent


def quick_or_full(quick, full):
    """``full`` under the full extent, ``quick`` otherwise."""
    return full if FULL else quick


def sweep(quick: list, more: list) -> list:
    """Parametrize values: ``quick`` in every extent, then ``more``, which the
    quick extent skips (a tuple stands for several arguments)."""
    return list(quick) + [pytest.param(*(value if isinstance(value, tuple) else (value,)),
                                       marks=FULL_ONLY) for value in more]
