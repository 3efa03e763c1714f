"""The lit cases of anyshape-hoist-slices are grouped under ``/// [Pattern: ...]``
headers naming the rules and patterns of passes/hoist_slices.py they exercise:
a header naming nothing there, or a rule no header names, fails here."""
import re
from pathlib import Path

import anyshape.passes.hoist_slices as hoist_slices

ROOT = Path(__file__).resolve().parents[2]


def _named_in_headers() -> set[str]:
    names = set()
    for path in sorted((ROOT / "test" / "passes").glob("hoist-slices-*.mlir")):
        for header in re.findall(r"^/// \[Pattern: (.*)\]$", path.read_text(), re.M):
            names |= {part.split("(")[0].strip() for part in header.split(",")}
    return names


def test_headers_name_rules_and_patterns_that_exist():
    named = _named_in_headers()
    assert named
    assert {n for n in named if not hasattr(hoist_slices, n)
            and not hasattr(hoist_slices._Hoister, n)} == set()


def test_every_rule_is_exercised_under_a_header():
    rules = {rule.__name__ for rule in hoist_slices._RULES.values()}
    assert rules - _named_in_headers() == set()
