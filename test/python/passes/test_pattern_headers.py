"""Each pass's lit cases are grouped under ``/// [Pattern: name, ...]`` headers
that name its patterns: every pattern a pass applies must be named by a header
in its lit files, and every name in a header must exist in the pass's modules.
The patterns applied are observed, not listed: the pass runs on a trivial
function with ``apply_patterns`` recorded."""
import functools
import re
from pathlib import Path

import pytest

import anyshape.passes.canonicalize_shapes.broadcasts as broadcasts
import anyshape.passes.canonicalize_shapes.iota_lookups as iota_lookups
import anyshape.passes.canonicalize_shapes.pass_ as canonicalize_shapes
import anyshape.passes.canonicalize_shapes.structural_reshapes as structural_reshapes
import anyshape.passes.data_tiling_forms as data_tiling_forms
import anyshape.passes.defer_softmax_normalization as defer_softmax_normalization
import anyshape.passes.hoist_slices as hoist_slices
import anyshape.passes.logsumexp_softmax as logsumexp_softmax
import anyshape.passes.lower as lower
from anyshape.mlir import ir
from anyshape.dialects import new_context

LIT = Path(__file__).resolve().parents[3] / "test" / "passes"

# pass module (whose apply_patterns is recorded) -> its lit files, and the
# modules whose functions its headers may name
PASSES = {
    canonicalize_shapes: ("canonicalize-shapes-*.mlir",
                          [canonicalize_shapes, broadcasts, iota_lookups, structural_reshapes]),
    data_tiling_forms: ("data-tiling-forms.mlir", [data_tiling_forms]),
    defer_softmax_normalization: ("defer-softmax-normalization.mlir",
                                  [defer_softmax_normalization]),
    hoist_slices: ("hoist-slices-*.mlir", [hoist_slices]),
    logsumexp_softmax: ("logsumexp-softmax.mlir", [logsumexp_softmax]),
    lower: ("lower.mlir", [lower]),
}
_IDS = [module.__name__.split(".")[-1] if module.__name__.split(".")[-1] != "pass_"
        else "canonicalize_shapes" for module in PASSES]


def _pattern_name(fn) -> str:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return fn.__name__


def _applied_patterns(module, monkeypatch) -> set[str]:
    seen = set()

    def record(op, patterns, max_iterations=None):
        seen.update(_pattern_name(fn) for _, fn in patterns)

    monkeypatch.setattr(module, "apply_patterns", record)
    pass_class = next(value for value in vars(module).values()
                      if isinstance(value, type) and value.__module__ == module.__name__
                      and hasattr(value, "argument") and hasattr(value, "apply"))
    with new_context(), ir.Location.unknown():
        trivial = ir.Module.parse("func.func @f() { return }")
        pass_class().apply(trivial.operation)
    return seen


def _headers(glob: str) -> set[str]:
    names = set()
    for path in sorted(LIT.glob(glob)):
        for header in re.findall(r"^/// \[Pattern: (.*)\]", path.read_text(), re.M):
            names |= {part.split("(")[0].strip() for part in header.split(",")}
    return names


def _defined(name: str, modules) -> bool:
    return any(hasattr(module, name) or any(
        isinstance(value, type) and hasattr(value, name) for value in vars(module).values())
        for module in modules)


@pytest.mark.parametrize("module", list(PASSES), ids=_IDS)
def test_every_applied_pattern_is_named_by_a_header(module, monkeypatch):
    glob, _ = PASSES[module]
    applied = _applied_patterns(module, monkeypatch)
    assert applied, "the pass applied no patterns on a trivial function"
    assert applied - _headers(glob) == set()


@pytest.mark.parametrize("module", list(PASSES), ids=_IDS)
def test_every_header_names_something_that_exists(module):
    glob, modules = PASSES[module]
    named = _headers(glob)
    assert named, f"no /// [Pattern: ...] header in {glob}"
    assert {n for n in named if not _defined(n, modules)} == set()


@pytest.mark.parametrize("module", list(PASSES), ids=_IDS)
def test_applied_patterns_have_docstrings(module, monkeypatch):
    applied = _applied_patterns(module, monkeypatch)
    undocumented = set()
    for name in applied:
        fn = getattr(module, name, None)
        if fn is None:
            fn = next(getattr(value, name) for value in vars(module).values()
                      if isinstance(value, type) and hasattr(value, name))
        if not (fn.__doc__ or "").strip():
            undocumented.add(name)
    assert undocumented == set()
