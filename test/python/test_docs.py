"""docs/passes.md is generated from the passes' docstrings: a change to a pass's
docstring, description or options without regenerating it fails here (and in CI)."""
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_pass_docs_are_current():
    result = subprocess.run([sys.executable, "tools/dev/gen_pass_docs.py", "--check"], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_pass_docs_name_every_pass_of_anyshape():
    # anyshape's own passes, not those other tests register in this process
    # (test/lib/test_passes.py).
    from anyshape.passes import _BUILTIN

    text = (ROOT / "docs" / "passes.md").read_text()
    for argument in _BUILTIN:
        assert f"## `{argument}`" in text


def test_workaround_docs_are_current():
    result = subprocess.run([sys.executable, "tools/dev/gen_workarounds_doc.py", "--check"], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_every_workaround_guard_is_a_test_that_exists():
    import re

    from anyshape.tools.workaround_index import all_workarounds

    for workaround in all_workarounds():
        assert workaround.guard or workaround.unguarded, f"{workaround.name}: no guard"
        for guard in workaround.guard:
            path, _, test = guard.partition("::")
            assert (ROOT / path).is_file(), f"{workaround.name}: no file {path}"
            if test:
                name = re.sub(r"\[.*\]$", "", test)
                assert re.search(rf"^def {re.escape(name)}\(", (ROOT / path).read_text(),
                                 re.MULTILINE), f"{workaround.name}: {path} has no {name}"


def test_modules_that_say_when_to_remove_a_workaround_declare_it():
    """A module whose text says when a workaround can go ("remove when") declares
    it in WORKAROUNDS, so docs/workarounds.md lists it."""
    import importlib

    from anyshape.tools.workaround_index import modules as _modules

    undeclared = []
    for name in sorted(set(_modules())):
        module = importlib.import_module(name)
        text = Path(module.__file__).read_text()
        if re.search(r"\b[Rr]emove (it |them |this |the \w+ )?when\b", text) and \
                not getattr(module, "WORKAROUNDS", ()):
            undeclared.append(name)
    assert not undeclared, f"say when to remove a workaround but declare none: {undeclared}"


def test_each_fallback_is_one_declared_workaround():
    """The table compiler.py asks (anyshape/driver/fallbacks.py) and the workarounds
    page list the same fallbacks, at the iree-fallback stage."""
    from anyshape.driver.fallbacks import FALLBACKS, WORKAROUNDS
    from anyshape.tools.workaround_index import all_workarounds

    assert {f"{name}_fallback" for name in FALLBACKS} == {w.name for w in WORKAROUNDS}
    assert {w.name for w in all_workarounds() if w.stage == "iree-fallback"} == \
        {w.name for w in WORKAROUNDS}
