"""docs/passes.md is generated from the passes' docstrings: a change to a pass's
docstring, description or options without regenerating it fails here (and in CI)."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_pass_docs_are_current():
    result = subprocess.run([sys.executable, "tools/gen_pass_docs.py", "--check"], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_pass_docs_name_every_pass_of_anyshape():
    # anyshape's own passes, not those other tests register in this process
    # (test/lib/test_passes.py).
    from anyshape.passes import _BUILTIN

    text = (ROOT / "docs" / "passes.md").read_text()
    for argument in _BUILTIN:
        assert f"## `{argument}`" in text
