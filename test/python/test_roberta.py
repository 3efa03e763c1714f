"""HuggingFace RoBERTa, unmodified, compiled once for dynamic batch and sequence length."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import MAX_LEN
from models import roberta_inputs

from without_compilers import FORBID_COMPILERS

import anyshape

LENGTHS = [1, 2, 7, 64, MAX_LEN]


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("length", sorted(set(LENGTHS)))
def test_matches_eager_with_padding(compiled_roberta, roberta, batch, length):
    ids, mask = roberta_inputs(batch, length, pad_from=max(1, length // 2), seed=length)
    with torch.no_grad():
        expected = roberta(ids, attention_mask=mask)
    got = compiled_roberta(ids, attention_mask=mask)
    assert type(got) is type(expected)
    assert got.logits.shape == expected.logits.shape == (batch, 2)
    torch.testing.assert_close(got.logits, expected.logits, atol=1e-4, rtol=0)


def test_accepts_numpy_and_positional(compiled_roberta, roberta):
    ids, mask = roberta_inputs(2, 5)
    with torch.no_grad():
        expected = roberta(ids, attention_mask=mask).logits
    got = compiled_roberta(ids.numpy(), mask.numpy())
    assert isinstance(got.logits, torch.Tensor)
    torch.testing.assert_close(got.logits, expected, atol=1e-4, rtol=0)


def test_stages_and_ir(compiled_roberta):
    assert compiled_roberta.stages[0] == "import"
    assert compiled_roberta.stages[-1] == "iree-input"
    text = compiled_roberta.ir("import")
    assert "torch.symbolic_int" in text and "torch.aten.layer_norm" in text
    with pytest.raises(ValueError, match="stage: expected one of import"):
        compiled_roberta.ir("no-such-stage")


def test_manifest(compiled_roberta, tmp_path):
    compiled_roberta.save(tmp_path)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert (tmp_path / manifest["vmfb"]).stat().st_size > 0
    assert [i["name"] for i in manifest["inputs"]] == ["input_ids", "attention_mask"]
    assert all(i["dtype"] == "int64" for i in manifest["inputs"])
    batch_sym, seq_sym = manifest["inputs"][0]["dims"]
    assert manifest["inputs"][1]["dims"] == [batch_sym, seq_sym]
    assert manifest["symbols"][seq_sym] | {"name": None} == {
        "name": None, "min": 1, "max": MAX_LEN, "label": "seq"}
    assert manifest["symbols"][batch_sym]["label"] == "batch"
    assert manifest["outputs"] == [{"name": "output_0", "dtype": "float32", "dims": [batch_sym, 2]}]
    assert manifest["target"]["name"] == "cpu"
    assert set(manifest["versions"]) >= {"torch", "torch-mlir", "iree-base-compiler", "iree-base-runtime"}


LOAD_IN_FRESH_PROCESS = FORBID_COMPILERS + textwrap.dedent("""
    import torch, anyshape
    artifact, data = sys.argv[1], sys.argv[2]
    inputs = torch.load(data)
    module = anyshape.load(artifact)
    out = module(inputs["ids"], attention_mask=inputs["mask"])
    torch.save({"logits": out.logits, "type": type(out).__name__}, data + ".out")
""")


def test_save_load_in_fresh_process(compiled_roberta, roberta, tmp_path):
    compiled_roberta.save(tmp_path / "artifact")
    ids, mask = roberta_inputs(3, 11, pad_from=4)
    torch.save({"ids": ids, "mask": mask}, tmp_path / "inputs.pt")
    subprocess.run([sys.executable, "-c", LOAD_IN_FRESH_PROCESS, str(tmp_path / "artifact"),
                    str(tmp_path / "inputs.pt")], check=True, env={**os.environ})
    out = torch.load(tmp_path / "inputs.pt.out")
    with torch.no_grad():
        expected = roberta(ids, attention_mask=mask).logits
    assert out["type"] == "SequenceClassifierOutput"
    torch.testing.assert_close(out["logits"], expected, atol=1e-4, rtol=0)


def test_load_rejects_non_artifact(tmp_path):
    with pytest.raises(FileNotFoundError, match="not an anyshape artifact"):
        anyshape.load(tmp_path)
