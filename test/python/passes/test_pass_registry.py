"""The pass registry imports anyshape's own passes lazily, from a table of argument to
module: a pass module missing from that table would silently vanish from the driver."""
import ast
from pathlib import Path

import pytest

import anyshape.passes as passes

PASSES_DIR = Path(passes.__file__).parent


def _module_name(path: Path) -> str:
    """The module's name under anyshape.passes: "hoist_slices", "canonicalize_shapes.pass_"."""
    parts = path.relative_to(PASSES_DIR).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules_registering_a_pass() -> dict[str, str]:
    """Every module under passes/ (packages included) that registers a pass, by argument."""
    found = {}
    for path in sorted(PASSES_DIR.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            if not any(isinstance(d, ast.Name) and d.id == "register" for d in node.decorator_list):
                continue
            for statement in node.body:
                if (isinstance(statement, ast.Assign)
                        and any(isinstance(t, ast.Name) and t.id == "argument"
                                for t in statement.targets)):
                    found[statement.value.value] = _module_name(path)
    return found


def test_every_pass_module_is_in_the_lazy_table():
    assert _modules_registering_a_pass() == passes._BUILTIN


def test_the_walk_finds_passes_in_packages():
    assert _modules_registering_a_pass()["anyshape-canonicalize-shapes"] == \
        "canonicalize_shapes.pass_"


def test_registered_passes_lists_every_builtin():
    assert set(passes.registered_passes()) >= set(passes._BUILTIN)


def test_lookup_of_an_unknown_pass_names_the_known_ones():
    with pytest.raises(KeyError, match="unknown anyshape pass 'anyshape-no-such-pass'.*"
                                       "anyshape-hoist-slices"):
        passes.lookup("anyshape-no-such-pass")
