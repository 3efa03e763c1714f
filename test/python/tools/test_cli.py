"""The console scripts as a user runs them."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from models import shape_queries_case

import anyshape

BIN = Path(sys.executable).parent
PLUGIN = Path(__file__).parents[2] / "lib" / "test_passes.py"


def run(*argv, stdin=None):
    return subprocess.run([str(BIN / argv[0]), *argv[1:]], input=stdin, capture_output=True,
                          text=True)


def test_opt_round_trips_stdin():
    result = run("anyshape-opt", stdin="func.func @f() { return }")
    assert result.returncode == 0, result.stderr
    assert "func.func @f()" in result.stdout and "return" in result.stdout
    again = run("anyshape-opt", stdin=result.stdout)
    assert again.stdout == result.stdout


def test_opt_parse_error_exit_status_and_location(tmp_path):
    path = tmp_path / "bad.mlir"
    path.write_text("func.func @f() {\n  %0 = arith.constant 1 : i33x\n  return\n}\n")
    result = run("anyshape-opt", str(path))
    assert result.returncode == 1
    assert f"{path}:2:26: error: expected non-function type" in result.stderr
    assert result.stdout == ""


def test_opt_writes_output_file(tmp_path):
    out = tmp_path / "out.mlir"
    result = run("anyshape-opt", "-", "-o", str(out), "--cse", stdin="func.func @g() { return }")
    assert result.returncode == 0 and result.stdout == ""
    assert "func.func @g()" in out.read_text()


def test_opt_list_passes():
    plain = run("anyshape-opt", "--list-passes")
    assert plain.returncode == 0 and "anyshape passes:" in plain.stdout
    loaded = run("anyshape-opt", f"--load-passes={PLUGIN}", "--list-passes")
    assert "--anyshape-test-fold-double-neg" in loaded.stdout
    assert "op-name=str (default 'torch.aten.neg')" in loaded.stdout


def test_opt_usage_error():
    result = run("anyshape-opt", "a.mlir", "b.mlir")
    assert result.returncode == 2 and "expected one input file" in result.stderr


@pytest.mark.builds_in_subprocess
def test_compile_cli_from_imported_text(tmp_path):
    model, args, dynamic = shape_queries_case()
    (tmp_path / "model.mlir").write_text(str(anyshape.import_torch(model, args,
                                                                   dynamic_shapes=dynamic)))
    result = run("anyshape-compile", str(tmp_path / "model.mlir"), "-o", str(tmp_path / "art"),
                 "--dump-ir-dir", str(tmp_path / "ir"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "ir" / "00-import.mlir").is_file()
    compiled = anyshape.load(tmp_path / "art")
    assert compiled.signature.symbols[compiled.signature.inputs[0].dims[1]].max == 64
    x = torch.randn(3, 21, 8)
    torch.testing.assert_close(compiled(x), model(x).detach(), atol=1e-5, rtol=0)


@pytest.mark.builds_in_subprocess
def test_compile_cli_data_tiling_auto_by_default_off_on_request(tmp_path):
    model, args, dynamic = shape_queries_case()
    (tmp_path / "model.mlir").write_text(str(anyshape.import_torch(model, args,
                                                                   dynamic_shapes=dynamic)))
    for flags, tiled in (((), True), (("--data-tiling=off",), False), (("--data-tiling",), True)):
        out = tmp_path / f"art-{tiled}"
        result = run("anyshape-compile", str(tmp_path / "model.mlir"), "-o", str(out), *flags,
                     "--progress", "none")
        assert result.returncode == 0, result.stderr
        assert "running" not in result.stderr and "[anyshape-compile" not in result.stderr
        compiled = anyshape.load(out)
        assert compiled.target.data_tiling is tiled
        assert ("--iree-global-opt-data-tiling" in compiled.iree_flags) is tiled
        x = torch.randn(2, 9, 8)
        torch.testing.assert_close(compiled(x), model(x).detach(), atol=1e-5, rtol=0)


def test_compile_cli_reports_parse_error(tmp_path):
    path = tmp_path / "bad.mlir"
    path.write_text("func.func @main() {\n  bogus\n}\n")
    result = run("anyshape-compile", str(path), "-o", str(tmp_path / "art"))
    assert result.returncode == 1 and f"{path}:2:" in result.stderr


TINY_GPT2 = ["--config", "n_embd=32", "--config", "n_layer=2", "--config", "n_head=2",
             "--config", "n_inner=64", "--config", "vocab_size=300", "--config", "n_positions=64"]


def _tiny_gpt2():
    """The model TINY_GPT2 makes anyshape-compile build, built here for eager."""
    from anyshape.frontend import hf

    overrides = hf.parse_overrides([v for v in TINY_GPT2 if v != "--config"])
    return hf.build("gpt2", "causal-lm-last-token", overrides)


@pytest.mark.builds_in_subprocess
def test_compile_cli_hf_model_with_external_parameters(tmp_path):
    out = tmp_path / "art"
    result = run("anyshape-compile", "--hf", "gpt2", "--task", "causal-lm-last-token",
                 *TINY_GPT2, "--max-batch", "16", "--max-seq", "32", "--params", "external",
                 "-o", str(out))
    assert result.returncode == 0, result.stderr
    # Progress, stage by stage: printed lines where stderr is no terminal.
    assert re.search(r"^\[anyshape-compile +\d+\.\ds\] running anyshape-hoist-slices$",
                     result.stderr, re.M), result.stderr
    summary = result.stdout
    assert "model: gpt2 causal-lm-last-token (LastTokenLogits)" in summary
    assert "stages: export " in summary and "iree-compile " in summary
    assert "params.irpa" in summary
    assert "dynamic dims: 'batch' in [1, 16], 'seq' in [1, 32]" in summary
    assert "inputs: input_ids int64 (batch, seq); attention_mask int64 (batch, seq)" in summary
    assert "outputs (a tensor): outputs float32 (batch, 300)" in summary
    assert f"anyshape.load({str(out)!r})" in summary
    built = _tiny_gpt2()
    inputs = built.example_inputs(3, 29, seed=2)
    with torch.no_grad():
        expected = built.model(**inputs)
    compiled = anyshape.load(out)
    assert compiled.parameters_path == out / "params.irpa"
    torch.testing.assert_close(compiled(**inputs), expected, atol=1e-4, rtol=0)


@pytest.mark.builds_in_subprocess
def test_compile_cli_hf_model_uses_the_default_dims(tmp_path):
    """/// Without --max-batch or --max-seq: an unbounded batch and sequence, as a
    /// user's plain Dim("batch"), Dim("seq"); past GPT-2's 64 positions
    /// (n_positions) the call is refused by the position read's size check."""
    out = tmp_path / "art"
    result = run("anyshape-compile", "--hf", "gpt2", "--task", "causal-lm-last-token",
                 *TINY_GPT2, "-o", str(out), "--progress", "bars")
    assert result.returncode == 0, result.stderr
    # A line per stage with its clock, as on a terminal (where each redraw
    # returns to the line's start; text mode reads those returns as new lines).
    assert re.search(r"^running anyshape-hoist-slices  00:\d\d$", result.stderr, re.M), \
        result.stderr
    assert "[anyshape-compile" not in result.stderr
    assert "dynamic dims: 'batch' in [1, inf], 'seq' in [1, inf]" in result.stdout
    built = _tiny_gpt2()
    inputs = built.example_inputs(33, 64, seed=3)
    with torch.no_grad():
        expected = built.model(**inputs)
    compiled = anyshape.load(out)
    torch.testing.assert_close(compiled(**inputs), expected, atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match=r"expected sizes with seq <= 64 .*transformer.wpe"):
        compiled(**built.example_inputs(1, 65, seed=4))


@pytest.mark.builds_in_subprocess
def test_compile_cli_model_factory(tmp_path):
    (tmp_path / "mine.py").write_text(
        "import torch\n"
        "class Pool(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.proj = torch.nn.Linear(8, 4)\n"
        "    def forward(self, x, mask):\n"
        "        return {'mean': (self.proj(x) * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)}\n"
        "def make():\n"
        "    torch.manual_seed(0)\n"
        "    return Pool(), {'x': torch.randn(2, 5, 8), 'mask': torch.ones(2, 5)}\n")
    out = tmp_path / "art"
    result = run("anyshape-compile", "--model", f"{tmp_path / 'mine.py'}:make", "--max-seq", "40",
                 "--product-kernel", "iree", "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert anyshape.load(out).target.product_kernel == "iree"
    assert "dynamic dims: 'batch' in [1, 16], 'seq' in [1, 40]" in result.stdout
    assert "outputs (dict): outputs['mean'] float32 (batch, 4)" in result.stdout
    sys.path.insert(0, str(tmp_path))
    try:
        import mine
    finally:
        sys.path.remove(str(tmp_path))
    model = mine.make()[0]
    x, mask = torch.randn(3, 33, 8), torch.ones(3, 33)
    mask[1, 20:] = 0
    torch.testing.assert_close(anyshape.load(out)(x=x, mask=mask)["mean"],
                               model(x, mask)["mean"].detach(), atol=1e-5, rtol=0)


@pytest.mark.parametrize("argv, message", [
    ([], "give one model: an MLIR file, --hf MODEL_TYPE, --model MODULE:FACTORY or --hf-dir DIR"),
    (["--hf", "gpt2"], "--hf needs --task"),
    (["--task", "masked-lm", "x.mlir"], "--task and --config go with --hf"),
    (["x.mlir", "--params", "external"], "an MLIR file's weights are compiled inline"),
    (["--hf", "gpt2", "--task", "masked-lm"], "no 'masked-lm' model for model type 'gpt2'"),
    (["--hf", "nope", "--task", "masked-lm"], "transformers has no model type 'nope'"),
    (["--hf", "bert", "--task", "masked-lm", "--config", "layers=2"], "has no field 'layers'"),
    (["--hf", "bert", "--task", "masked-lm", "--config", "layers"], "expected KEY=VALUE, got 'layers'"),
    (["--hf", "bert", "--task", "masked-lm", "--max-seq", "600"],
     "bert's positions allow at most 512 tokens, got 600"),
    (["--hf", "bert", "--task", "masked-lm", "--dynamic", "seq,heads"],
     "--dynamic: expected a comma list of batch and seq"),
    (["--hf", "bert", "--task", "masked-lm", "--max-batch", "0"], "--max-batch: expected a positive"),
    (["--model", "no_such_module_here:make"], "--model: cannot import 'no_such_module_here'"),
    (["--model", "make"], "--model: expected MODULE:FACTORY, got 'make'"),
    (["--model", "/no/such/file.py:make"], "--model: no file '/no/such/file.py'"),
    (["--hf", "bert", "--task", "masked-lm", "--config", "num_hidden_layers=1",
      "--matmul-precision", "medium", "--target-cpu", "znver3"],
     "'medium' needs a CPU with AVX-512 BF16 (avx512bf16), which target_cpu='znver3'"),
    (["x.mlir", "--matmul-precision", "low"], "invalid choice: 'low'"),
    (["x.mlir", "--product-kernel", "mkl"], "invalid choice: 'mkl'"),
])
def test_compile_cli_model_errors(tmp_path, argv, message):
    result = run("anyshape-compile", *argv, "-o", str(tmp_path / "art"))
    assert result.returncode in (1, 2)
    assert message in result.stderr, result.stderr
    assert not (tmp_path / "art").exists()


def test_compile_cli_factory_without_inputs(tmp_path):
    (tmp_path / "bare.py").write_text("import torch\ndef make():\n    return torch.nn.Linear(2, 2)\n")
    result = run("anyshape-compile", "--model", f"{tmp_path / 'bare.py'}:make", "-o",
                 str(tmp_path / "art"))
    assert result.returncode == 1
    assert "must return (model, example_inputs) or (model, example_inputs, dynamic_shapes)" in \
        result.stderr


def _word_tokenizer(directory: Path, words: int = 300) -> Path:
    """A word-level HF tokenizer of ``words`` ids: ``<unk>``, ``<pad>``, w2, w3, ..."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = ["<unk>", "<pad>"] + [f"w{i}" for i in range(2, words)]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>",
                            pad_token="<pad>").save_pretrained(directory)
    return directory


@pytest.mark.builds_in_subprocess
def test_compile_cli_calibrates_int4_weights_on_a_text_file(tmp_path):
    """/// --calibrate: the lines, tokenized by --tokenizer and padded into one
    /// batch, are anyshape.calibrated's samples; the artifact computes what
    /// the calibrated copy does in eager, which rounding to nearest does not."""
    from transformers import AutoTokenizer

    from anyshape.iree.quantized_weights import reference_model, weight_format

    generator = torch.Generator().manual_seed(5)
    lines = [" ".join(f"w{int(i)}" for i in torch.randint(2, 300, (int(n),), generator=generator))
             for n in torch.randint(3, 40, (12,), generator=generator)]
    (tmp_path / "texts.txt").write_text("\n".join(lines[:6]) + "\n\n" + "\n".join(lines[6:]) + "\n")
    tokenizer_dir = _word_tokenizer(tmp_path / "tokenizer")
    out = tmp_path / "art"
    result = run("anyshape-compile", "--hf", "gpt2", "--task", "causal-lm-last-token",
                 *TINY_GPT2, "--weights", "int4", "--calibrate", str(tmp_path / "texts.txt"),
                 "--tokenizer", str(tokenizer_dir), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert f"calibrating the int4 weights on 12 lines of {tmp_path / 'texts.txt'}" in result.stderr
    assert "calibrating model.transformer.h.1.mlp.c_proj (32 x 64) to int4" in result.stderr
    built = _tiny_gpt2()
    encoded = AutoTokenizer.from_pretrained(tokenizer_dir)(lines, padding=True,
                                                           return_tensors="pt")
    sample = {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}
    calibrated = anyshape.calibrated(built.model, [sample])
    nearest = reference_model(built.model, weight_format("int4", None))
    inputs = built.example_inputs(3, 29, seed=2)
    with torch.no_grad():
        want, rounded = calibrated(**inputs), nearest(**inputs)
    got = anyshape.load(out)(**inputs)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=0)
    assert (got - rounded).abs().max() > 100 * (got - want).abs().max()


@pytest.mark.parametrize("extra, message", [
    (["--calibrate", "t.txt", "--tokenizer", "tok"],
     "--calibrate goes with --weights int8 or int4, got --weights float32"),
    (["--weights", "int4", "--calibrate", "t.txt"], "--calibrate needs --tokenizer DIR"),
    (["--weights", "int4", "--tokenizer", "tok"], "--tokenizer goes with --calibrate TEXT_FILE"),
])
def test_compile_cli_calibration_flags_are_checked_first(tmp_path, extra, message):
    result = run("anyshape-compile", "--hf", "gpt2", "--task", "causal-lm-last-token",
                 *TINY_GPT2, *extra, "-o", str(tmp_path / "art"))
    assert result.returncode == 2 and message in result.stderr, result.stderr


def test_compile_cli_refuses_to_calibrate_an_encoder_decoder_from_text(tmp_path):
    result = run("anyshape-compile", "--hf", "t5", "--task", "seq2seq-lm", "--weights", "int8",
                 "--calibrate", "t.txt", "--tokenizer", "tok", "-o", str(tmp_path / "art"))
    assert result.returncode == 2
    assert "--calibrate: --task seq2seq-lm is an encoder-decoder's" in result.stderr


def test_compile_cli_calibration_input_errors_name_the_file_or_tokenizer(tmp_path):
    """/// Each refused before anything is compiled: a missing file, a file of
    /// blank lines, a directory that is not a tokenizer, ids past the vocabulary."""
    (tmp_path / "blank.txt").write_text("\n  \n\n")
    (tmp_path / "texts.txt").write_text("w5 w6\n\nw7 w8 w9\n")
    small = _word_tokenizer(tmp_path / "tokenizer")
    large = _word_tokenizer(tmp_path / "large", words=400)
    (tmp_path / "texts-large.txt").write_text("w5\nw6 w350\n")
    cases = [
        (tmp_path / "none.txt", small, f"--calibrate: cannot read '{tmp_path / 'none.txt'}'"),
        (tmp_path / "blank.txt", small, "holds no text (one sample per non-empty line)"),
        (tmp_path / "texts.txt", tmp_path / "none",
         f"--tokenizer: expected a HF tokenizer directory, got '{tmp_path / 'none'}'"),
        (tmp_path / "texts-large.txt", large,
         f"--tokenizer: its ids reach 350, past the model's vocabulary of 300 (line 2 of "
         f"'{tmp_path / 'texts-large.txt'}')"),
    ]
    for text, tokenizer, message in cases:
        result = run("anyshape-compile", "--hf", "gpt2", "--task", "causal-lm-last-token",
                     *TINY_GPT2, "--weights", "int8", "--calibrate", str(text),
                     "--tokenizer", str(tokenizer), "-o", str(tmp_path / "art"))
        assert result.returncode == 1 and message in result.stderr, (message, result.stderr)
        assert not (tmp_path / "art").exists()


def test_compile_cli_refuses_to_calibrate_a_factory_of_positional_inputs(tmp_path):
    (tmp_path / "mine.py").write_text(
        "import torch\n"
        "def make():\n"
        "    return torch.nn.Linear(32, 4), (torch.randn(2, 5, 32),)\n")
    (tmp_path / "texts.txt").write_text("w5 w6\n")
    result = run("anyshape-compile", "--model", f"{tmp_path / 'mine.py'}:make", "--weights",
                 "int8", "--calibrate", str(tmp_path / "texts.txt"), "--tokenizer",
                 str(_word_tokenizer(tmp_path / "tokenizer")), "-o", str(tmp_path / "art"))
    assert result.returncode == 1
    assert (f"--calibrate: {tmp_path / 'mine.py'}:make's example inputs must be keyword "
            f"arguments with input_ids") in result.stderr, result.stderr
    assert "got positional arguments" in result.stderr and not (tmp_path / "art").exists()


@pytest.mark.builds_in_subprocess
def test_compile_cli_calibration_cuts_lines_at_the_positions_after_roberta_padding(tmp_path):
    """/// RoBERTa's positions start after its padding index: a line longer than
    /// the model is cut at max_position_embeddings - pad_token_id - 1 tokens
    /// (config_limits), not at max_position_embeddings, past which its
    /// position table has no row."""
    (tmp_path / "long.txt").write_text(" ".join(f"w{i}" for i in range(2, 90)) + "\nw5 w6\n")
    result = run("anyshape-compile", "--hf", "roberta", "--task", "sequence-classification",
                 "--config", "num_hidden_layers=1", "--config", "hidden_size=32",
                 "--config", "num_attention_heads=2", "--config", "intermediate_size=64",
                 "--config", "vocab_size=300", "--config", "max_position_embeddings=40",
                 "--weights", "int8", "--calibrate", str(tmp_path / "long.txt"),
                 "--tokenizer", str(_word_tokenizer(tmp_path / "tokenizer")),
                 "-o", str(tmp_path / "art"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "art" / "module.vmfb").exists()
