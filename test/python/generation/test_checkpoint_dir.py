"""``compile_generator("path/to/hf_dir")``: a checkpoint directory, compiled without loading it.

The checkpoints are written here by ``save_pretrained`` (nothing is
downloaded), in shards, and read back by ``frontend/checkpoint.py`` as views
of their bytes. Tokens are checked against HF's own ``from_pretrained`` and
``generate`` on the same directory; the memory test watches the anonymous
memory (what the process itself holds, not the page cache of the mapped
shards) of a compile in a fresh process.
"""

from __future__ import annotations

import collections
import gc
import json
import os
import re
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
from extent import sweep
from test_generate import hf_generate, mixed_batch, small_causal_lm

import anyshape
from anyshape.frontend.checkpoint import load_checkpoint


def _saved(model, directory, dtype=None, shard="200KB"):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (model.to(dtype) if dtype else model).save_pretrained(directory, max_shard_size=shard)
    return directory


def _from_pretrained(directory, dtype):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM

    seq2seq = AutoConfig.from_pretrained(directory).is_encoder_decoder
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        auto = AutoModelForSeq2SeqLM if seq2seq else AutoModelForCausalLM
        return auto.from_pretrained(directory, dtype=dtype).eval()


def _small_t5():
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    return T5ForConditionalGeneration(T5Config(
        d_model=64, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=4, d_kv=16,
        vocab_size=256)).eval()


@pytest.mark.parametrize("model_type", ["gpt2", "llama", "t5"])
def test_the_checkpoint_model_is_from_pretrained_s(model_type, tmp_path):
    """/// GPT-2 ties its LM head to the embedding and keeps causal-mask buffers;
    /// Llama computes RoPE's frequencies; T5 shares one embedding three ways:
    /// the model read as views of the shards computes HF's logits bit for
    /// bit, in the stored dtype and cast."""
    model = _small_t5() if model_type == "t5" else small_causal_lm(model_type)
    directory = _saved(model, tmp_path / "ckpt", torch.bfloat16)
    ids = torch.randint(3, 200, (2, 9), generator=torch.Generator().manual_seed(1))
    inputs = {"input_ids": ids, **({"decoder_input_ids": ids[:, :4]} if model_type == "t5"
                                   else {})}
    for dtype in (None, torch.float32):
        ours = load_checkpoint(directory, dtype)
        theirs = _from_pretrained(directory, dtype or "auto")
        assert next(ours.parameters()).dtype == (dtype or torch.bfloat16)
        if model_type == "gpt2":
            assert ours.lm_head.weight is ours.transformer.wte.weight
        with torch.no_grad():
            assert torch.equal(ours(**inputs).logits, theirs(**inputs).logits)


def test_casts_are_split_into_scratch_files_each_mapped_within_the_bound(tmp_path, monkeypatch):
    """/// Linux refuses one copy-on-write mapping larger than memory and swap
    /// (Llama-3-8B cast to float32 is 32 GB): the casts go to files of at most
    /// SCRATCH_FILE_BYTES (a larger tensor alone), and the model read from
    /// them computes HF's logits bit for bit."""
    import anyshape.frontend.checkpoint as checkpoint

    model = small_causal_lm("llama")
    directory = _saved(model, tmp_path / "ckpt", torch.bfloat16)
    bound = 40_000  # bytes: the 256 x 64 float32 embedding (65,536 bytes) is one file alone
    monkeypatch.setattr(checkpoint, "SCRATCH_FILE_BYTES", bound)
    files = []
    real = checkpoint._cast_into_file

    def recorded(casts, mappings, where, total, needed):
        files.append((total, len(casts)))
        return real(casts, mappings, where, total, needed)

    monkeypatch.setattr(checkpoint, "_cast_into_file", recorded)
    ours = load_checkpoint(directory, torch.float32)
    assert len(files) > 3, files
    assert all(total <= bound or count == 1 for total, count in files), files
    assert any(total > bound for total, _ in files), files
    ids = torch.randint(3, 200, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(ours(input_ids=ids).logits,
                           _from_pretrained(directory, torch.float32)(input_ids=ids).logits)


@pytest.mark.builds_after_export
def test_a_bfloat16_checkpoint_generates_hf_s_tokens_in_float32(tmp_path):
    """/// Sharded bfloat16 safetensors compiled in float32: the tokens of HF's
    /// generate on from_pretrained(dir, dtype=float32), at batch 1 (7 tokens)
    /// and on a left-padded batch of 1, 17 and 33 tokens, with the checkpoint's
    /// own generation config."""
    model = small_causal_lm("llama")
    model.generation_config.max_new_tokens = 24
    # Random weights at the default scale repeat one token; these make a
    # varied sequence, so that a wrong step shows.
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(8.0)
    directory = _saved(model, tmp_path / "ckpt", torch.bfloat16)
    assert len(list(directory.glob("*.safetensors"))) > 1
    generator = anyshape.compile_generator(str(directory), dtype=torch.float32)
    reference = _from_pretrained(directory, torch.float32)
    one = torch.randint(3, 200, (1, 7), generator=torch.Generator().manual_seed(2))
    ids, mask = mixed_batch([1, 17, 33])
    for prompt, prompt_mask in ((one, None), (ids, mask)):
        expected = hf_generate(reference, prompt, prompt_mask, do_sample=False)
        got = generator.generate(prompt, attention_mask=prompt_mask)
        assert torch.equal(torch.as_tensor(got), expected)
        assert expected.shape[1] == prompt.shape[1] + 24
        assert len(set(expected[0, prompt.shape[1]:].tolist())) > 3


@pytest.mark.parametrize("model_type", ["gpt2", "llama", "t5"])
def test_quantized_layers_keep_the_stored_weights_and_compute_hf_s_logits(model_type, tmp_path):
    """/// For a compile that quantizes, the linear layers' weights (GPT-2's
    /// Conv1D, Llama's Linear and untied LM head, T5's) stay the bfloat16
    /// views of the shards, each read through a cast; the first floating
    /// parameter (the embedding: HF's model.dtype) and the tied LM heads are
    /// cast as before: the logits are from_pretrained(dtype=float32)'s bit
    /// for bit."""
    import anyshape.frontend.checkpoint as checkpoint

    model = _small_t5() if model_type == "t5" else small_causal_lm(model_type)
    directory = _saved(model, tmp_path / "ckpt", torch.bfloat16)
    ours = load_checkpoint(directory, torch.float32, quantized=True)
    assert ours.dtype == torch.float32
    stored = {name: p.dtype for name, p in ours.named_parameters()}
    kept = [name for name, dtype in stored.items() if dtype == torch.bfloat16]
    layer = {"gpt2": "c_attn", "llama": "q_proj", "t5": "SelfAttention.q"}[model_type]
    assert any(layer in name and name.endswith(".original") for name in kept), kept
    assert all(name.endswith("parametrizations.weight.original") for name in kept), kept
    if model_type == "gpt2":
        assert ours.lm_head.weight is ours.transformer.wte.weight
        assert ours.lm_head.weight.dtype == torch.float32
    elif model_type == "llama":
        assert "lm_head.parametrizations.weight.original" in kept
    # Without quantizing, and for a dtype the compile cannot widen, all are cast.
    for dtype, quantized in ((torch.float32, False), (torch.float16, True)):
        plain = checkpoint.load_checkpoint(directory, dtype, quantized=quantized)
        assert {p.dtype for p in plain.parameters()} == {dtype}
    ids = torch.randint(3, 200, (2, 9), generator=torch.Generator().manual_seed(1))
    inputs = {"input_ids": ids, **({"decoder_input_ids": ids[:, :4]} if model_type == "t5"
                                   else {})}
    with torch.no_grad():
        assert torch.equal(ours(**inputs).logits,
                           _from_pretrained(directory, torch.float32)(**inputs).logits)


def test_the_first_weight_of_each_nested_hf_model_is_cast(tmp_path):
    """/// HF takes a model's dtype from its first floating parameter, that of
    /// each HF model within another too (and builds its masks in it): where
    /// that parameter is a linear layer's weight, it is cast, not kept as
    /// stored, and the nested model's dtype is the compiled one."""
    from transformers.modeling_utils import ModuleUtilsMixin

    from anyshape.frontend.checkpoint import StoredTensor, _kept_as_stored

    class Inner(torch.nn.Module, ModuleUtilsMixin):
        def __init__(self):
            super().__init__()
            self.projection = torch.nn.Linear(4, 4)
            self.other = torch.nn.Linear(4, 4)

    class Outer(torch.nn.Module, ModuleUtilsMixin):
        def __init__(self):
            super().__init__()
            self.embedding = torch.nn.Embedding(8, 4)
            self.inner = Inner()
            self.head = torch.nn.Linear(4, 8)

    model = Outer()
    stored = {name: StoredTensor(tmp_path / "shard", torch.bfloat16, tuple(p.shape), 0)
              for name, p in model.named_parameters()}
    assert _kept_as_stored(model, stored, torch.float32) == {"inner.other.weight", "head.weight"}


@pytest.mark.builds_after_export
@pytest.mark.parametrize("model_type", sweep(["llama"], ["gpt2"]))
def test_int4_weights_from_bfloat16_shards_are_quantized_from_the_stored_bytes(
        model_type, tmp_path, monkeypatch):
    """/// int4 weights from bfloat16 shards, compiled in float32: no linear
    /// layer's weight is cast into scratch files (the embedding and the norms
    /// are), each is quantized (GPT-2's c_attn too, split into Q, K and V
    /// columns) from one widening for all entry points, and the tokens are HF's
    /// generate on the int4-dequantized from_pretrained(dtype=float32), at
    /// batch 1 and on a left-padded batch of 1, 7 and 17 tokens."""
    import anyshape.frontend.checkpoint as checkpoint
    from anyshape.iree import constant_values
    from anyshape.iree.quantized_weights import reference_model, weight_format

    model = small_causal_lm(model_type, initializer_range=0.3)
    embedding = next(name for name, _ in model.named_parameters())
    linear = [f"{name}.weight" for name, module in model.named_modules()
              if type(module).__name__ in ("Linear", "Conv1D")]
    directory = _saved(model, tmp_path / "ckpt", torch.bfloat16)
    cast, real = [], checkpoint._cast_into_file

    def recorded(casts, mappings, where, total, needed):
        cast.extend(casts)
        return real(casts, mappings, where, total, needed)

    monkeypatch.setattr(checkpoint, "_cast_into_file", recorded)
    widened, widen = [], constant_values._widened

    def counted(op, arrays):
        source = op.operands[0].owner
        if getattr(source, "name", None) == "torch.vtensor.literal":
            widened.append(constant_values.resource_key(source))
        return widen(op, arrays)

    monkeypatch.setattr(constant_values, "_widened", counted)
    generator = anyshape.compile_generator(
        str(directory), dtype=torch.float32, cache=False,
        backend=anyshape.BackendOptions(weights="int4", params="external"))
    # Each stored weight widened once for all five entry points that read it
    # (twice where one reads it in two forms: GPT-2's last c_attn, whole for
    # every token's keys and values, and in columns for the last token's query).
    times = collections.Counter(widened)
    entries = len(generator.spec["decode_entries"]) + 1  # and the verifier
    assert times and max(times.values()) <= 2 < entries, (times, entries)
    assert embedding in cast
    assert not set(cast) & set(linear), cast
    # Each stored weight quantized leaves the module with its packed copy only.
    read = generator.module.parameter_specs
    assert read and not [name for name in read if "parametrizations" in name], sorted(read)
    reference = reference_model(_from_pretrained(directory, torch.float32),
                                weight_format("int4", None))
    for ids, mask in ((torch.randint(3, 200, (1, 7), generator=torch.Generator().manual_seed(2)),
                       None), mixed_batch([1, 7, 17], seed=3)):
        want = hf_generate(reference, ids, mask, max_new_tokens=12, do_sample=False)
        got = generator.generate(ids, attention_mask=mask, max_new_tokens=12)
        assert torch.equal(torch.as_tensor(got), want), (got, want)
        assert len(set(want[0, ids.shape[1]:].tolist())) > 3


MEMORY_SCRIPT = textwrap.dedent('''
    import json, sys, threading, time, warnings
    warnings.simplefilter("ignore")
    import torch, transformers, anyshape
    import anyshape.driver.compile, anyshape.generation.causal_lm, anyshape.frontend.checkpoint
    from anyshape.mlir import iree_bindings
    iree_bindings()
    transformers.LlamaForCausalLM  # the modules the compile imports, before "before"

    def anonymous():
        for line in open("/proc/self/status"):
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    # The compile's peak, up to the load stage, where the module's weights are
    # packed for running: what running it holds, not what compiling it does.
    peaks, phase, done = {{"compile": 0, "load": 0}}, ["compile"], []
    def watch():
        while not done:
            peaks[phase[0]] = max(peaks[phase[0]], anonymous())
            time.sleep(0.002)
    def progress(message):
        if message.startswith("loading the module"):
            phase[0] = "load"
    before = anonymous()
    watcher = threading.Thread(target=watch)
    watcher.start()
    generator = anyshape.compile_generator({directory!r}, dtype=torch.float32, cache=False,
                                           progress=progress)
    done.append(1)
    watcher.join()
    print(json.dumps({{"before": before, **peaks}}))
''')


@pytest.mark.builds_after_export
def test_compiling_a_checkpoint_never_holds_its_weights(tmp_path):
    """/// 2 layers 2048 wide in bfloat16 shards (310 MB), compiled in float32
    /// (621 MB): the compiling process's own memory grows by less than half
    /// the float32 weights, where loading them would add all of them, until
    /// the compiled module is loaded to run (its weights packed: the load
    /// stage, which compile_generator reports)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=2048, intermediate_size=8192, num_hidden_layers=2,
                         num_attention_heads=16, num_key_value_heads=4, vocab_size=8192)
    with torch.device("meta"):
        shapes = LlamaForCausalLM(config)
    float32_bytes = sum(p.numel() * 4 for p in shapes.parameters())
    torch.manual_seed(0)
    directory = _saved(LlamaForCausalLM(config).to(torch.bfloat16), tmp_path / "ckpt",
                       shard="100MB")
    done = subprocess.run([sys.executable, "-c", MEMORY_SCRIPT.format(directory=str(directory))],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    memory = json.loads(done.stdout.strip().splitlines()[-1])
    grown = memory["compile"] - memory["before"]
    assert memory["load"] > 0  # the load stage was seen
    assert float32_bytes > 6e8
    assert grown < float32_bytes / 2, (grown, float32_bytes)
    print(f"compile grew anonymous memory by {grown / 1e6:.0f} MB, loading by "
          f"{(memory['load'] - memory['before']) / 1e6:.0f} MB; float32 weights "
          f"{float32_bytes / 1e6:.0f} MB")


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads /proc/self/maps")
@pytest.mark.builds_after_export
def test_a_compiled_checkpoint_is_not_held_after_the_compile(tmp_path):
    """/// The model read from the shards is dropped once compiled: no shard
    /// stays mapped in the process (torch's export kept its last traced graph,
    /// and with it the model's tensors: workaround export_keeps_last_trace)."""
    directory = _saved(small_causal_lm("llama"), tmp_path / "ckpt", torch.bfloat16)
    # Quantized: the linear layers' weights are views of the shards (cast in
    # scratch files otherwise)
    generator = anyshape.compile_generator(str(directory), dtype=torch.float32, cache=False,
                                           backend=anyshape.BackendOptions(weights="int8"))
    gc.collect()
    with open("/proc/self/maps") as maps:
        held = sorted({line.split()[-1] for line in maps if str(directory) in line})
    assert not held, held
    assert generator.generate(torch.tensor([[5, 6, 7]]), max_new_tokens=2).shape == (1, 5)


def test_negative_a_tensor_the_checkpoint_lacks_is_named(tmp_path):
    """/// A shard deleted from under its index, a tensor missing from the
    /// shards, a shape the config does not build, a directory without
    /// safetensors: each error names what is wrong and where."""
    from safetensors.torch import load_file, save_file

    directory = _saved(small_causal_lm("llama"), tmp_path / "ckpt", shard="10MB")
    single = directory / "model.safetensors"
    tensors = load_file(single)
    tensors.pop("model.layers.1.mlp.up_proj.weight")
    save_file(tensors, single, metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"holds no tensor for model\.layers\.1\.mlp\.up_proj"
                                         r"\.weight \(LlamaForCausalLM"):
        anyshape.compile_generator(directory)

    tensors["model.layers.1.mlp.up_proj.weight"] = torch.zeros(3, 5)
    save_file(tensors, single, metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"tensor 'model\.layers\.1\.mlp\.up_proj\.weight' has "
                                         r"shape \[3, 5\] in model\.safetensors; "
                                         r"LlamaForCausalLM built from its config\.json expects "
                                         r"\[128, 64\]"):
        load_checkpoint(directory)

    single.unlink()
    with pytest.raises(FileNotFoundError, match=r"expected model\.safetensors or "
                                                r"model\.safetensors\.index\.json in .*ckpt, "
                                                r"found neither"):
        load_checkpoint(directory)
    with pytest.raises(FileNotFoundError, match=r"checkpoint: expected a directory written by "
                                                r"save_pretrained, got '.*nowhere' \(not found\)"):
        anyshape.compile_generator(str(tmp_path / "nowhere"))
    with pytest.raises(TypeError, match=r"dtype: expected a floating torch\.dtype, got "
                                        r"torch\.int8"):
        load_checkpoint(directory, torch.int8)
    config = json.loads((directory / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "gptq", "bits": 4}
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(NotImplementedError, match=r"checkpoint: .*ckpt is quantized \(gptq\); "
                                                  r"load it with from_pretrained and pass the "
                                                  r"model to compile_generator"):
        anyshape.compile_generator(directory)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "anyshape.tools.compile", *args],
                          capture_output=True, text=True, timeout=900)


STAGE_HEADS = ("reading the checkpoint", "exporting the step of GPT2LMHeadModel",
               "running anyshape-canonicalize-shapes", "compiling with IREE", "done in",
               "loading the module", "loaded in")


@pytest.mark.builds_after_export
def test_the_cli_compiles_a_checkpoint_dir_with_external_parameters(tmp_path):
    """/// anyshape-compile --hf-dir DIR --params external writes params.irpa
    /// beside the module; anyshape-generate on it gives HF's greedy tokens."""
    model = small_causal_lm("gpt2")
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(8.0)
    directory = _saved(model, tmp_path / "ckpt")
    done = _cli("--hf-dir", str(directory), "--params", "external", "-o", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "out" / "params.irpa").is_file()
    assert "params.irpa" in done.stdout and "GPT2LMHeadModel, torch.float32" in done.stdout
    # Its progress (printed lines: stderr is no terminal here): every stage
    # in order, on one clock from the checkpoint's reading to the load.
    said = re.findall(r"^\[anyshape-compile +(\d+\.\d)s\] (\S.*)$", done.stderr, re.M)
    heads = [message for _, message in said]
    for before, after in zip(STAGE_HEADS, STAGE_HEADS[1:]):
        assert heads.index(next(h for h in heads if h.startswith(before))) < \
            heads.index(next(h for h in heads if h.startswith(after))), heads
    seconds = [float(at) for at, _ in said]
    assert seconds == sorted(seconds) and seconds[-1] > 1.0, said
    generated = subprocess.run(
        [sys.executable, "-m", "anyshape.tools.generate", str(tmp_path / "out"), "--ids", "5,6,7",
         "--max-new-tokens", "12"], capture_output=True, text=True, timeout=600)
    assert generated.returncode == 0, generated.stderr[-3000:]
    expected = hf_generate(_from_pretrained(directory, torch.float32), torch.tensor([[5, 6, 7]]),
                           max_new_tokens=12, do_sample=False)
    assert generated.stdout.strip().splitlines()[-1] == ",".join(map(str, expected[0].tolist()))


def test_negative_the_cli_names_a_bad_checkpoint_option(tmp_path):
    """/// --dtype without --hf-dir, --task with it (exit 2); a directory that is
    /// not there (exit 1, the message names it)."""
    done = _cli("--hf", "gpt2", "--dtype", "float32", "-o", str(tmp_path / "out"))
    assert done.returncode == 2 and "--dtype goes with --hf-dir" in done.stderr
    done = _cli("--hf-dir", str(tmp_path), "--task", "text-generation", "-o", str(tmp_path / "o"))
    assert done.returncode == 2 and "--task does not apply to --hf-dir" in done.stderr
    done = _cli("--hf-dir", str(tmp_path / "nowhere"), "-o", str(tmp_path / "out"))
    assert done.returncode == 1
    assert (f"anyshape-compile: checkpoint: expected a directory written by save_pretrained, "
            f"got '{tmp_path / 'nowhere'}' (not found)") in done.stderr
