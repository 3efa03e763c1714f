"""HuggingFace encoder, decoder and encoder-decoder families, unmodified, compiled once
with dynamic batch and sequence (and decoder) lengths: outputs equal eager."""

import subprocess
import sys
import textwrap

import pytest
import torch

import anyshape
from anyshape.frontend import hf
from anyshape.iree.kernels import build, linear_rows

MAX_SEQ = 128
SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
             vocab_size=200)
FAMILIES = {
    "bert-sequence-classification": ("bert", "sequence-classification",
                                     dict(SMALL, max_position_embeddings=MAX_SEQ)),
    "bert-masked-lm": ("bert", "masked-lm", dict(SMALL, max_position_embeddings=MAX_SEQ)),
    "roberta-sequence-classification": ("roberta", "sequence-classification",
                                        dict(SMALL, max_position_embeddings=MAX_SEQ + 2)),
    "electra-discriminator": ("electra", "pretraining",
                              dict(SMALL, embedding_size=16, max_position_embeddings=MAX_SEQ)),
    "distilbert-sequence-classification": ("distilbert", "sequence-classification", dict(
        dim=32, n_layers=2, n_heads=2, hidden_dim=64, vocab_size=200,
        max_position_embeddings=MAX_SEQ)),
    "gpt2-causal-lm": ("gpt2", "causal-lm", dict(
        n_embd=32, n_layer=2, n_head=2, n_inner=64, vocab_size=200, n_positions=MAX_SEQ)),
    "gpt2-causal-lm-last-token": ("gpt2", "causal-lm-last-token", dict(
        n_embd=32, n_layer=2, n_head=2, n_inner=64, vocab_size=200, n_positions=MAX_SEQ)),
    "t5-seq2seq-lm": ("t5", "seq2seq-lm", dict(
        d_model=32, d_kv=16, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=2,
        vocab_size=200)),
}
LENGTHS = [1, 2, 17, MAX_SEQ]
# The decoder's length, unlike the encoder's (T5): its own dynamic dim.
DECODER_LENGTH = {1: 1, 2: 3, 17: 9, MAX_SEQ: MAX_SEQ}


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request):
    model_type, task, config = FAMILIES[request.param]
    built = hf.build(model_type, task, config)
    inputs = built.example_inputs(2, 8, dec_seq=5)
    compiled = anyshape.compile(built.model, (), inputs,
                                dynamic_shapes=built.dynamic_shapes({"batch", "seq"}, 4, MAX_SEQ))
    return built, compiled


def _tensors(output):
    if isinstance(output, torch.Tensor):
        return {"": output}
    return {key: value for key, value in output.items() if isinstance(value, torch.Tensor)}


@pytest.mark.builds_after_export
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("length", LENGTHS)
def test_matches_eager_with_padding(family, batch, length):
    built, compiled = family
    inputs = built.example_inputs(batch, length, dec_seq=DECODER_LENGTH[length], seed=length)
    assert inputs["attention_mask"].min() == (0 if length > 1 else 1)
    with torch.no_grad():
        expected = _tensors(built.model(**inputs))
    got = _tensors(compiled(**inputs))
    assert got.keys() == expected.keys() and expected
    for key in expected:
        assert got[key].shape == expected[key].shape, key
        torch.testing.assert_close(got[key], expected[key], atol=1e-4, rtol=0, msg=key)


def test_squeezed_head_reaches_iree_as_a_known_op():
    """Electra's discriminator ends in `logits.squeeze(-1)`, which torch decomposes to
    `squeeze.dims`: torch-mlir has no op for that, and IREE rejected the opaque op."""
    built = hf.build("electra", "pretraining", FAMILIES["electra-discriminator"][2])
    text = str(anyshape.import_torch(built.model, (), built.example_inputs(2, 8),
                                     dynamic_shapes=built.dynamic_shapes({"seq"}, 4, MAX_SEQ)))
    assert "torch.aten.squeeze.dim" in text
    assert "torch.operator" not in text


@pytest.fixture(scope="module")
def gpt2_external():
    """GPT-2 ties its LM head to the token embedding: one tensor under two names."""
    built = hf.build("gpt2", "causal-lm", dict(n_embd=64, n_layer=2, n_head=2, n_inner=128,
                                                vocab_size=2000, n_positions=64))
    assert built.model.lm_head.weight is built.model.transformer.wte.weight
    compiled = anyshape.compile(built.model, (), built.example_inputs(2, 8),
                                dynamic_shapes=built.dynamic_shapes({"batch", "seq"}, 4, 64),
                                backend=anyshape.BackendOptions(params="external"))
    return built, compiled


@pytest.mark.builds_after_export
def test_external_parameters_hold_each_weight_once(gpt2_external):
    """The archive holds the weights packed as the products read them
    (runtime/parameter_encoding.py): each weight once, and the tied table
    twice, since the gather reads it as it is and the LM head's product packed."""
    built, compiled = gpt2_external
    weights = hf.unique_parameter_bytes(built.model)
    table = built.model.lm_head.weight.numel() * 4
    archive = compiled.parameters_path.stat().st_size
    assert compiled.encoder_path is not None
    assert weights + table <= archive <= 1.05 * (weights + table), (archive, weights, table)
    # The .vmfb is the code alone: less than the tied embedding by itself.
    assert compiled.vmfb_path.stat().st_size < built.model.lm_head.weight.numel() * 4


@pytest.mark.builds_after_export
@pytest.mark.parametrize("model_type, config", [
    ("gpt2", dict(n_embd=64, n_layer=1, n_head=2, n_inner=128, vocab_size=16000, n_positions=64)),
    ("t5", dict(d_model=64, d_kv=32, d_ff=128, num_layers=1, num_decoder_layers=1, num_heads=2,
                vocab_size=16000)),
])
def test_inline_artifact_holds_tied_weights_once(model_type, config):
    """GPT-2's LM head is its token embedding; T5's encoder and decoder embeddings and
    LM head are one `shared` table. Packed for the LM head's matmul and read
    unpacked by the gather, the table was stored twice when IREE evaluated the
    packing at compile time. The vocabulary makes that table most of the bytes,
    so the whole `.vmfb` (code included) is held to 5% above the unique bytes,
    plus the code of anyshape's product kernel (at most its object file's
    size, about 50 KB), which a small model's own code does not dwarf."""
    built = hf.build(model_type, "causal-lm" if model_type == "gpt2" else "seq2seq-lm", config)
    weights = hf.unique_parameter_bytes(built.model)
    named = sum(p.numel() * p.element_size() for p in built.model.state_dict().values())
    assert named > 1.5 * weights  # the tied table counted once against several names
    compiled = anyshape.compile(built.model, (), built.example_inputs(2, 8, dec_seq=5),
                                dynamic_shapes=built.dynamic_shapes({"batch", "seq"}, 4, 64))
    assert "--iree-global-opt-data-tiling" in compiled.iree_flags
    artifact = compiled.vmfb_path.stat().st_size
    kernel, _ = build.kernel_object(linear_rows.SOURCE)
    kernel_code = kernel.stat().st_size if kernel is not None else 0
    assert weights <= artifact <= 1.05 * weights + kernel_code, (artifact, weights, kernel_code)
    inputs = built.example_inputs(3, 21, dec_seq=6, seed=3)
    with torch.no_grad():
        expected = built.model(**inputs).logits
    torch.testing.assert_close(compiled(**inputs).logits, expected, atol=1e-4, rtol=0)


@pytest.mark.builds_after_export
def test_external_parameters_match_eager(gpt2_external):
    built, compiled = gpt2_external
    inputs = built.example_inputs(3, 37, seed=5)
    with torch.no_grad():
        expected = built.model(**inputs).logits
    torch.testing.assert_close(compiled(**inputs).logits, expected, atol=1e-4, rtol=0)


@pytest.mark.builds_after_export
def test_saved_external_parameters_load_in_fresh_process(gpt2_external, tmp_path):
    built, compiled = gpt2_external
    compiled.save(tmp_path / "art")
    assert sorted(p.name for p in (tmp_path / "art").iterdir()) == [
        "encoder.vmfb", "manifest.json", "module.vmfb", "params.irpa"]
    inputs = built.example_inputs(2, 11, seed=3)
    torch.save(inputs, tmp_path / "inputs.pt")
    with torch.no_grad():
        torch.save(built.model(**inputs).logits, tmp_path / "expected.pt")
    script = textwrap.dedent(f"""
        import sys, torch, anyshape
        model = anyshape.load({str(tmp_path / 'art')!r})
        inputs = torch.load({str(tmp_path / 'inputs.pt')!r})
        expected = torch.load({str(tmp_path / 'expected.pt')!r})
        torch.testing.assert_close(model(**inputs).logits, expected, atol=1e-4, rtol=0)
        assert "iree.compiler" not in sys.modules and "torch_mlir" not in sys.modules
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr


@pytest.mark.builds_after_export
def test_missing_parameter_archive_is_named(gpt2_external, tmp_path):
    built, compiled = gpt2_external
    compiled.save(tmp_path / "art")
    (tmp_path / "art" / "params.irpa").unlink()
    loaded = anyshape.load(tmp_path / "art")
    with pytest.raises(FileNotFoundError, match="params.irpa: the parameter archive"):
        loaded(**built.example_inputs(1, 4))


@pytest.mark.builds_after_export
def test_parameters_written_where_the_artifact_runs(gpt2_external, tmp_path):
    """An artifact travels without its archive and gets its weights from a model
    built where it runs: the outputs are that model's, not the compiled one's."""
    built, compiled = gpt2_external
    compiled.save(tmp_path / "art")
    (tmp_path / "art" / "params.irpa").unlink()
    other = hf.build("gpt2", "causal-lm", dict(n_embd=64, n_layer=2, n_head=2, n_inner=128,
                                               vocab_size=2000, n_positions=64), seed=7)
    anyshape.write_parameters(tmp_path / "art", other.model)
    inputs = built.example_inputs(2, 13, seed=4)
    with torch.no_grad():
        expected, compiled_weights = other.model(**inputs).logits, built.model(**inputs).logits
    got = anyshape.load(tmp_path / "art")(**inputs).logits
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)
    assert (got - compiled_weights).abs().max() > 0.1


@pytest.mark.builds_after_export
def test_write_parameters_names_what_does_not_fit(gpt2_external, tmp_path):
    built, compiled = gpt2_external
    compiled.save(tmp_path / "art")
    state = dict(built.model.state_dict())
    del state["transformer.h.0.attn.c_attn.weight"]
    with pytest.raises(ValueError, match=r"expected a tensor named 'transformer.h.0.attn.c_attn"
                                         r".weight' \(shape \(64, 192\), float32\), got none"):
        anyshape.write_parameters(tmp_path / "art", state)
    state = dict(built.model.state_dict(), **{"transformer.ln_f.bias": torch.zeros(65)})
    with pytest.raises(ValueError, match=r"'transformer.ln_f.bias' expected shape \(64,\) "
                                         r"float32, got shape \(65,\) float32"):
        anyshape.write_parameters(tmp_path / "art", state)
    half = {k: v.half() for k, v in built.model.state_dict().items()}
    with pytest.raises(ValueError, match=r"expected shape \(.*\) float32, got shape \(.*\) "
                                         r"float16"):
        anyshape.write_parameters(tmp_path / "art", half)


def test_params_option_is_checked():
    built = hf.build("gpt2", "causal-lm", dict(n_embd=32, n_layer=1, n_head=2, vocab_size=100))
    with pytest.raises(ValueError, match="params: expected 'inline' or 'external', got 'outside'"):
        anyshape.compile(built.model, (), built.example_inputs(1, 4),
                         backend=anyshape.BackendOptions(params="outside"))


@pytest.mark.parametrize("model_type, task, overrides, message", [
    ("no-such-type", "masked-lm", {}, "transformers has no model type 'no-such-type'"),
    ("gpt2", "masked-lm", {}, "no 'masked-lm' model for model type 'gpt2' "
                              r"\(its tasks: sequence-classification, causal-lm"),
    ("bert", "masked-lm", {"layers": 2}, "BertConfig\\) has no field 'layers'"),
    ("bert", "translation", {}, "task: expected one of sequence-classification"),
])
def test_build_errors_name_the_problem(model_type, task, overrides, message):
    with pytest.raises(ValueError, match=message):
        hf.build(model_type, task, overrides)


def test_roberta_default_takes_512_tokens():
    """transformers' default RobertaConfig has 512 positions, two of them unusable;
    roberta-base has 514, and so does the default here."""
    assert hf.build("roberta", "sequence-classification", dict(SMALL)).max_seq == 512
    assert hf.build("roberta", "sequence-classification",
                    dict(SMALL, max_position_embeddings=130)).max_seq == 128
