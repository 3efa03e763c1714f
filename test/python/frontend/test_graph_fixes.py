"""The graph fixes are one ordered list, and each has its lit case at the import stage."""

import pkgutil
from pathlib import Path

from anyshape.frontend import graph_fixes
from anyshape.frontend.graph_fixes import GRAPH_FIXES

ROOT = Path(__file__).resolve().parents[3]
HELPERS = {"fx_emit"}  # builds nodes for the fixes; not a fix itself


def test_every_fix_module_is_in_the_list():
    """/// A fix module that GRAPH_FIXES does not name would never run."""
    modules = {info.name for info in pkgutil.iter_modules(graph_fixes.__path__)} - HELPERS
    listed = {fix.__module__.rsplit(".", 1)[-1] for _, fix in GRAPH_FIXES}
    assert modules == listed
    assert [name.split(".")[0] for name, fix in GRAPH_FIXES] == \
        [fix.__module__.rsplit(".", 1)[-1] for _, fix in GRAPH_FIXES]


def test_every_fix_has_a_lit_case_at_the_import_stage():
    """/// test/frontend/*.py show each fix's imported IR (`# RUN: %PYTHON %s | FileCheck %s`)."""
    lit = "\n".join(path.read_text() for path in (ROOT / "test" / "frontend").glob("*.py"))
    missing = sorted(name for name in {n.split(".")[0] for n, _ in GRAPH_FIXES} if name not in lit)
    assert missing == []
