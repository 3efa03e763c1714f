"""``anyshape-compile --task text-generation`` and ``anyshape-generate``, as a user runs them."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

BIN = Path(sys.executable).parent
CONFIG = ["--config", "n_layer=2", "--config", "n_embd=64", "--config", "n_head=4",
          "--config", "vocab_size=300", "--config", "n_positions=256"]


def run(*argv):
    return subprocess.run([str(BIN / argv[0]), *argv[1:]], capture_output=True, text=True)


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpt2-generator") / "gpt2"
    result = run("anyshape-compile", "--hf", "gpt2", "--task", "text-generation", *CONFIG,
                 "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert "anyshape-generate" in result.stdout
    return out


def hf_model():
    from anyshape.frontend import hf

    overrides = hf.parse_overrides([c for c in CONFIG if c != "--config"])
    return hf.build("gpt2", "causal-lm", overrides).model


@pytest.mark.builds_in_subprocess
def test_generate_from_token_ids_is_hf_generate(artifact):
    result = run("anyshape-generate", str(artifact), "--ids", "5,6,7,8,9", "--ids", "10,11",
                 "--max-new-tokens", "12")
    assert result.returncode == 0, result.stderr
    rows = [[int(t) for t in line.split(",")] for line in result.stdout.splitlines()]
    ids = torch.tensor([[5, 6, 7, 8, 9], [0, 0, 0, 10, 11]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 0, 1, 1]])
    with torch.no_grad():
        want = hf_model().generate(ids, attention_mask=mask, max_new_tokens=12, do_sample=False)
    assert rows[0] == want[0].tolist()
    assert rows[1] == [10, 11, *want[1, 5:].tolist()]


@pytest.mark.builds_in_subprocess
def test_beam_search_from_the_command_line_is_hf_beam_search(artifact):
    result = run("anyshape-generate", str(artifact), "--ids", "5,6,7,8,9", "--ids", "10,11",
                 "--max-new-tokens", "12", "--num-beams", "4", "--num-return-sequences", "2",
                 "--no-repeat-ngram-size", "2", "--length-penalty", "0.5",
                 "--early-stopping", "never")
    assert result.returncode == 0, result.stderr
    rows = [[int(t) for t in line.split(",")] for line in result.stdout.splitlines()]
    ids = torch.tensor([[5, 6, 7, 8, 9], [0, 0, 0, 10, 11]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 0, 1, 1]])
    with torch.no_grad():
        want = hf_model().generate(ids, attention_mask=mask, max_new_tokens=12, num_beams=4,
                                   num_return_sequences=2, no_repeat_ngram_size=2,
                                   length_penalty=0.5, early_stopping="never", do_sample=False)
    assert len(rows) == 4
    for number, row in enumerate(rows):
        prompt = ids[number // 2][mask[number // 2] == 1].tolist()
        assert row == prompt + want[number, 5:].tolist()


@pytest.mark.builds_in_subprocess
def test_prompt_lookup_from_the_command_line_is_greedy(artifact):
    prompt = ["--ids", "5,6,7,8,9,10,11,5,6,7"]
    plain = run("anyshape-generate", str(artifact), *prompt, "--max-new-tokens", "16")
    lookup = run("anyshape-generate", str(artifact), *prompt, "--max-new-tokens", "16",
                 "--prompt-lookup-num-tokens", "3")
    assert plain.returncode == 0 and lookup.returncode == 0, plain.stderr + lookup.stderr
    assert lookup.stdout == plain.stdout


@pytest.mark.builds_in_subprocess
def test_generate_from_text_with_a_tokenizer(artifact, tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<unk>", "<pad>"] + [f"w{i}" for i in range(298)]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>",
                                        pad_token="<pad>")
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    result = run("anyshape-generate", str(artifact), "--tokenizer", str(tmp_path / "tokenizer"),
                 "--prompt", "w5 w6 w7", "--max-new-tokens", "6")
    assert result.returncode == 0, result.stderr
    with torch.no_grad():
        want = hf_model().generate(torch.tensor([[7, 8, 9]]), max_new_tokens=6, do_sample=False)
    assert result.stdout.strip() == tokenizer.decode(want[0], skip_special_tokens=True)


@pytest.mark.builds_in_subprocess
def test_sampling_with_a_seed_repeats(artifact):
    argv = ["anyshape-generate", str(artifact), "--ids", "5,6,7", "--max-new-tokens", "10",
            "--do-sample", "--top-k", "30", "--seed", "3", "--new-only"]
    first, second = run(*argv), run(*argv)
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout and len(first.stdout.split(",")) == 10


@pytest.mark.builds_in_subprocess
def test_generate_errors_are_named(artifact, tmp_path):
    result = run("anyshape-generate", str(artifact), "--prompt", "hello")
    assert result.returncode == 2 and "--prompt needs --tokenizer" in result.stderr
    result = run("anyshape-generate", str(artifact), "--ids", "1,x")
    assert result.returncode == 2 and "--ids: expected comma-separated token ids" in result.stderr
    result = run("anyshape-generate", str(artifact), "--ids", "1,2", "--max-new-tokens", "300")
    assert result.returncode == 1
    assert "needs 302 positions; this gpt2 model has 256" in result.stderr
    result = run("anyshape-generate", str(tmp_path), "--ids", "1")
    assert result.returncode == 1 and "no manifest.json" in result.stderr


def test_compile_refuses_options_that_do_not_apply(tmp_path):
    result = run("anyshape-compile", "--hf", "gpt2", "--task", "text-generation",
                 "--eliminate-padding", "-o", str(tmp_path / "x"))
    assert result.returncode == 2
    assert "--eliminate-padding does not apply to --task text-generation" in result.stderr


def test_compile_names_the_generation_task_of_the_model_type(tmp_path):
    # The task is HF's pipeline name: an encoder-decoder is text2text-generation,
    # a decoder-only model text-generation; the other is refused before any build.
    result = run("anyshape-compile", "--hf", "t5", "--task", "text-generation",
                 "-o", str(tmp_path / "t5"))
    assert result.returncode != 0
    assert "t5 is an encoder-decoder; compile it with --task text2text-generation" in \
        result.stderr
    result = run("anyshape-compile", "--hf", "gpt2", "--task", "text2text-generation",
                 "-o", str(tmp_path / "gpt2"))
    assert result.returncode != 0
    assert "gpt2 is a decoder-only model; compile it with --task text-generation" in \
        result.stderr


BART_CONFIG = ["--config", "d_model=64", "--config", "encoder_layers=1", "--config",
               "decoder_layers=1", "--config", "encoder_attention_heads=4", "--config",
               "decoder_attention_heads=4", "--config", "encoder_ffn_dim=128", "--config",
               "decoder_ffn_dim=128", "--config", "vocab_size=300", "--config",
               "max_position_embeddings=256", "--config", "init_std=0.5"]


@pytest.mark.builds_in_subprocess
def test_an_encoder_decoder_generates_hf_tokens_from_the_command_line(tmp_path):
    out = tmp_path / "bart"
    result = run("anyshape-compile", "--hf", "bart", "--task", "text2text-generation",
                 *BART_CONFIG, "-o", str(out))
    assert result.returncode == 0, result.stderr
    result = run("anyshape-generate", str(out), "--ids", "5,6,7,8,9", "--ids", "10,11",
                 "--max-new-tokens", "12")
    assert result.returncode == 0, result.stderr
    rows = [[int(t) for t in line.split(",")] for line in result.stdout.splitlines()]
    from anyshape.frontend import hf

    overrides = hf.parse_overrides([c for c in BART_CONFIG if c != "--config"])
    model = hf.build("bart", "seq2seq-lm", overrides).model
    # anyshape-generate left-pads the shorter row (with 0s); the encoder masks it.
    ids = torch.tensor([[5, 6, 7, 8, 9], [0, 0, 0, 10, 11]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 0, 1, 1]])
    with torch.no_grad():
        want = model.generate(ids, attention_mask=mask, max_new_tokens=12, do_sample=False)
    assert rows == [row[1:] for row in want.tolist()]


@pytest.mark.builds_in_subprocess
def test_int4_weights_from_the_command_line_generate_as_the_dequantized_model(tmp_path):
    from anyshape.iree.quantized_weights import reference_model, weight_format

    out = tmp_path / "gpt2-int4"
    result = run("anyshape-compile", "--hf", "gpt2", "--task", "text-generation", *CONFIG,
                 "--weights", "int4", "--group-size", "64", "-o", str(out))
    assert result.returncode == 0, result.stderr
    result = run("anyshape-generate", str(out), "--ids", "5,6,7,8,9", "--max-new-tokens", "12")
    assert result.returncode == 0, result.stderr
    reference = reference_model(hf_model(), weight_format("int4", 64))
    with torch.no_grad():
        want = reference.generate(torch.tensor([[5, 6, 7, 8, 9]]), max_new_tokens=12,
                                  do_sample=False)
    assert [int(t) for t in result.stdout.split(",")] == want[0].tolist()


def test_a_group_size_without_int4_weights_is_refused():
    result = run("anyshape-compile", "--hf", "gpt2", "--task", "text-generation", *CONFIG,
                 "--weights", "int8", "--group-size", "64", "-o", "unused")
    assert result.returncode == 2
    assert "--group-size goes with --weights int4, got --weights int8" in result.stderr


def test_int8_activations_without_int4_weights_are_refused():
    result = run("anyshape-compile", "--hf", "gpt2", "--task", "text-generation", *CONFIG,
                 "--weights", "int8", "--activations", "int8", "-o", "unused")
    assert result.returncode == 2
    assert "--activations int8 goes with --weights int4, got --weights int8" in result.stderr


def test_int16_activations_without_int8_weights_are_refused():
    result = run("anyshape-compile", "--hf", "gpt2", "--task", "text-generation", *CONFIG,
                 "--weights", "int4", "--activations", "int16", "-o", "unused")
    assert result.returncode == 2
    assert "--activations int16 goes with --weights int8, got --weights int4" in result.stderr
