"""``anyshape-serve``'s arguments: each bad one is refused before Ray starts,
naming it."""

from __future__ import annotations

import pytest

from anyshape.tools.serve import main


@pytest.fixture
def artifact(tmp_path):
    (tmp_path / "manifest.json").write_text("{}")
    return str(tmp_path)


@pytest.mark.parametrize("arguments, match", [
    (["{missing}"], "artifact: expected an anyshape artifact directory"),
    (["{artifact}", "--replicas", "0"], "--replicas: expected at least 1, got 0"),
    (["{artifact}", "--port", "70000"], "--port: expected 1 to 65535, got 70000"),
    (["{artifact}", "--tokenizer", "{missing}"], "--tokenizer: expected a HF tokenizer directory"),
    (["{artifact}", "--max-waiting", "0"], "--max-waiting: expected at least 1"),
    (["{artifact}", "--rows", "0"], "--rows: expected at least 1"),
    (["{artifact}", "--task", "translate"], "invalid choice: 'translate'"),
    (["{artifact}", "--stop-after", "-1"], "--stop-after: expected a positive number"),
    (["{artifact}", "--stop-after", "nan"], "--stop-after: expected a positive number"),
])
def test_negative_bad_arguments_are_refused_naming_them(artifact, tmp_path, capsys, arguments,
                                                        match):
    given = [a.format(artifact=artifact, missing=str(tmp_path / "missing")) for a in arguments]
    with pytest.raises(SystemExit) as caught:
        main(given)
    assert caught.value.code == 2
    assert match in capsys.readouterr().err
