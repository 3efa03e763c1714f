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


def _github_anchors(path):
    """The anchors GitHub gives a Markdown file's headings (a repeated one gets -1, -2, ...)."""
    anchors, seen, fenced = set(), {}, False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        heading = None if fenced else re.match(r"#+\s+(.*)", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
            anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    return anchors


def test_readme_is_one_screen():
    """Issue 64: the README says what anyshape is and how to start; measurements
    and their history are in docs/."""
    assert len((ROOT / "README.md").read_text().splitlines()) <= 150


def test_relative_links_in_the_docs_resolve():
    pages = [ROOT / "README.md", ROOT / "bench" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path) if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _github_anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, broken
