"""Generation benchmark: anyshape's ``compile_generator`` against its peers, side by side.

Models (random weights, float32): GPT-2 small (124M) and a Qwen2-0.5B-shaped
model (24 layers, hidden 896, 14 heads, 2 key/value heads, vocabulary 151936).
Runs: prompts of 17 and 333 tokens at batch 1, and a left-padded batch of 4
mixed prompt lengths (333, 17, 120, 65), each with 128 new tokens (greedy,
``min_new_tokens`` = ``max_new_tokens``, so every system makes them all).

Encoder-decoders (``--models t5-small,bart-base``, random weights, float32):
T5-small (its default config) and a BART-base-shaped model (6 + 6 layers,
d_model 768). Runs: sources of 17 and 333 tokens at batch 1 and 4, 64 new
tokens each. Systems: anyshape, HF eager, CTranslate2's ``Translator`` and
ONNX Runtime on optimum-onnx's ``text2text-generation-with-past`` export.
Their "prefill" is the time to the first token (the encoder and one decoder
step); the bound counts the decoder's weights and the LM head.

Systems: anyshape; HF eager ``generate`` (dynamic cache); HF ``generate``
with a static cache and ``torch.compile``; CTranslate2 (float32, converted
from the same weights); ONNX Runtime on optimum-onnx's with-past export
(``--ort-python``: a Python whose environment has optimum-onnx, which pins
transformers < 4.58; see bench/README.md). ``anyshape-iree-products``, only
when named in ``--systems``: anyshape with ``product_kernel="iree"`` (IREE's
own products in place of anyshape's row-exact kernel).

``--num-beams N``: beam search with N beams in every system (HF's
``num_beams``, CTranslate2's ``beam_size``), the tokens/s those of the
returned (best) sequences; llama.cpp has no beam search.

Per system and run: prefill ms (``max_new_tokens=1``; in each repetition the
median of up to 5 calls, as many as fit in a second), decode ms per token
((time for 128 new tokens - prefill) / 127), and decode tokens/s (all rows),
the median of ``--runs`` repetitions (with ``--interleave``, every system is
set up first and each run's repetitions are taken in turn, one per system:
on a host whose speed drifts, systems run one after another are not
comparable). Every system's tokens are compared
with HF eager's. The bandwidth bound: the weight bytes each decode step
reads divided by the memory read bandwidth measured in the same run.

    python bench/generate.py [--models gpt2,qwen2] [--systems ...] [--out bench/results/generate]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from family_sweep import host_cpu  # noqa: E402
NEW_TOKENS = 128
RUNS = {"b1-p17": [17], "b1-p333": [333], "b4-mixed": [333, 17, 120, 65]}
SEQ2SEQ_NEW_TOKENS = 64
SEQ2SEQ_RUNS = {"b1-s17": [17], "b1-s333": [333], "b4-s17": [17] * 4, "b4-s333": [333] * 4}
SEQ2SEQ_MODELS = ("t5-small", "bart-base")
SYSTEMS = ("anyshape", "eager", "compile", "ct2", "ort")
# Run only when named: anyshape with IREE's own products (product_kernel="iree"),
# and the quantized weights of anyshape and its peers (docs/quantized-weights.md):
# anyshape's int8 and int4 (groups of 32), int4 with a decode step's rows
# rounded to int8 (activations="int8") and int8 with them rounded to int16
# (activations="int16"); CTranslate2's int8 (int8 products)
# and int8_float32 (int8 weights, float32 products); llama.cpp's Q8_0 and Q4_0
# through llama-cpp-python (--llama-python, bench/generate_llama_worker.py);
# ONNX Runtime's export quantized by its own quantizers: int8 weights and
# activations (quantize_dynamic, per channel) and int4 weights (MatMulNBits,
# groups of 32, int8 products: accuracy_level 4) (--ort-python).
QUANTIZED_SYSTEMS = ("anyshape-int8", "anyshape-int4", "anyshape-int4-i8", "anyshape-int8-i16",
                     "ct2-int8", "ct2-int8_float32",
                     "ort-int8", "ort-int4",
                     "llama.cpp-q8_0", "llama.cpp-q4_0")
OPTIONAL_SYSTEMS = ("anyshape-iree-products",) + QUANTIZED_SYSTEMS
# Bytes a decode step reads per weight of its products, by system (the bound).
BITS_PER_WEIGHT = {"anyshape-int8": 8, "anyshape-int8-i16": 8, "ct2-int8": 8, "ct2-int8_float32": 8, "ort-int8": 8,
                   "ort-int4": 4.5,
                   "llama.cpp-q8_0": 8.5, "anyshape-int4": 4.5, "anyshape-int4-i8": 4.5,
                   "llama.cpp-q4_0": 4.5}
# Beams of every system's search (--num-beams); 1: greedy.
BEAMS = {"num_beams": 1}
# torch.compile with a static cache is the causal LMs' peer only.
SEQ2SEQ_SYSTEMS = ("anyshape", "anyshape-iree-products", "eager", "ct2", "ort")


def run_lengths(label: str, runs: dict[str, list[int]], letter: str) -> list[int] | None:
    """A run's prompt lengths: a named run's, or ``bB-pN``'s (B prompts of N
    tokens; ``bB-sN``, B sources, for the encoder-decoders: ``letter``), for
    length sweeps at odd sizes; None for a label that is neither."""
    if label in runs:
        return runs[label]
    match = re.fullmatch(rf"b([1-9][0-9]*)-{letter}([1-9][0-9]*)", label)
    if match is None:
        return None
    return [int(match.group(2))] * int(match.group(1))


def build(name: str):
    from transformers import (BartConfig, BartForConditionalGeneration, GPT2Config,
                              GPT2LMHeadModel, Qwen2Config, Qwen2ForCausalLM, T5Config,
                              T5ForConditionalGeneration)

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name == "t5-small":
            # T5Config's defaults are t5-small's; the start token its checkpoints have.
            return T5ForConditionalGeneration(T5Config(decoder_start_token_id=0)).eval()
        if name == "bart-base":
            return BartForConditionalGeneration(BartConfig(
                d_model=768, encoder_layers=6, decoder_layers=6, encoder_attention_heads=12,
                decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072)).eval()
        if name == "gpt2":
            return GPT2LMHeadModel(GPT2Config()).eval()
        if name == "qwen2":
            return Qwen2ForCausalLM(Qwen2Config(
                hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                max_position_embeddings=32768, tie_word_embeddings=True)).eval()
    raise ValueError(f"--models: expected gpt2, qwen2, t5-small or bart-base, got {name}")


def is_seq2seq(name: str) -> bool:
    return name in SEQ2SEQ_MODELS


def decode_weight_bytes(model) -> int:
    """What a decoder step reads of an encoder-decoder's weights: the decoder's
    and the LM head (once where it is the shared embedding)."""
    return _unique_bytes([*model.get_decoder().parameters(),
                          model.get_output_embeddings().weight])


def prompts(lengths: list[int], vocab: int, seed: int = 0, left: bool = True):
    """Prompts of ``lengths`` tokens, padded on the left (causal LMs) or on the
    right (``left=False``: sources, as tokenizers pad for encoder-decoders)."""
    generator = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.randint(10, min(vocab, 50000), (len(lengths), width), generator=generator)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, length in enumerate(lengths):
        real = slice(width - length, width) if left else slice(0, length)
        mask[row, real] = 1
        ids[row][mask[row] == 0] = 0
    return ids, mask


def sources(lengths: list[int], vocab: int, seed: int = 0):
    return prompts(lengths, vocab, seed, left=False)


def _unique_bytes(tensors) -> int:
    """Bytes of ``tensors``, each storage once (tied weights)."""
    seen, total = set(), 0
    for tensor in tensors:
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            total += tensor.numel() * tensor.element_size()
    return total


def weight_bytes(model) -> int:
    return _unique_bytes([*model.parameters(), *model.buffers()])


def read_bandwidth() -> float:
    """Bytes/s of a sum over 1 GiB on every core, the best of 5, in a fresh
    process. In the process that had just run a module, the same sum read at
    the one-thread rate in some runs and at the all-core rate in others
    (docs/benchmarks.md): the bound moved by 2x from run to run."""
    code = ("import os, time, torch\n"
            "torch.set_num_threads(os.cpu_count())\n"
            "data = torch.ones(256 * 1024 * 1024, dtype=torch.float32)\n"
            "best = 0.0\n"
            "for _ in range(5):\n"
            "    start = time.perf_counter()\n"
            "    data.sum()\n"
            "    best = max(best, data.numel() * 4 / (time.perf_counter() - start))\n"
            "print(best)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=300)
    return float(done.stdout.strip().splitlines()[-1])


# -- systems: each returns generate(ids, mask, new_tokens) -> new tokens [B, new] -------------

def _new_tokens(model, ids, out):
    """The new tokens of a ``generate`` result: after the prompt (causal), after
    the decoder start token (encoder-decoder)."""
    return out[:, 1:] if model.config.is_encoder_decoder else out[:, ids.shape[1]:]


def hf_generate(model):
    def run(ids, mask, new):
        with torch.no_grad():
            out = model.generate(ids, attention_mask=mask, max_new_tokens=new,
                                 min_new_tokens=new, do_sample=False, pad_token_id=0,
                                 num_beams=BEAMS["num_beams"])
        return _new_tokens(model, ids, out)
    return run


def hf_static_compiled(model):
    model.forward = torch.compile(model.forward)

    def run(ids, mask, new):
        with torch.no_grad():
            out = model.generate(ids, attention_mask=mask, max_new_tokens=new,
                                 min_new_tokens=new, do_sample=False, pad_token_id=0,
                                 cache_implementation="static",
                                 num_beams=BEAMS["num_beams"])
        return out[:, ids.shape[1]:]
    return run


def anyshape_generate(model, product_kernel: str = "anyshape", weights: str = "float32",
                      activations: str = "float32"):
    import anyshape

    generator = anyshape.compile_generator(
        model, backend=anyshape.BackendOptions(product_kernel=product_kernel, weights=weights,
                                               activations=activations))

    def run(ids, mask, new):
        out = generator.generate(ids, attention_mask=mask, max_new_tokens=new,
                                 min_new_tokens=new, pad_token_id=0,
                                 num_beams=BEAMS["num_beams"])
        return _new_tokens(model, ids, out)
    return run


def ct2_generate(model, workdir: Path, quantization: str = "float32"):
    import ctranslate2
    from ctranslate2.converters import TransformersConverter

    model_dir = workdir / "hf"
    if model.config.model_type == "bart":
        # CTranslate2's BART loader reads this transformers 4 field, which
        # transformers 5's BartConfig no longer has (BART is post-norm).
        model.config.normalize_before = False
    _save_with_tokenizer(model, model_dir)
    out = workdir / f"ct2-{quantization}"
    TransformersConverter(str(model_dir)).convert(str(out), quantization=quantization, force=True)
    if model.config.is_encoder_decoder:
        translator = ctranslate2.Translator(str(out), device="cpu", inter_threads=1,
                                            intra_threads=os.cpu_count() or 1)

        def translate(ids, mask, new):
            batch = [[f"t{int(t)}" for t, m in zip(row, row_mask) if m] for row, row_mask in
                     zip(ids, mask)]
            results = translator.translate_batch(batch, beam_size=BEAMS["num_beams"],
                                                 max_decoding_length=new,
                                                 min_decoding_length=new, return_end_token=True)
            return torch.tensor([[int(t[1:]) for t in r.hypotheses[0]] for r in results])
        return translate
    generator = ctranslate2.Generator(str(out), device="cpu", inter_threads=1,
                                      intra_threads=os.cpu_count() or 1)

    def run(ids, mask, new):
        batch = [[f"t{int(t)}" for t, m in zip(row, row_mask) if m] for row, row_mask in
                 zip(ids, mask)]
        results = generator.generate_batch(batch, max_length=new, min_length=new,
                                           sampling_topk=1, beam_size=BEAMS["num_beams"],
                                           include_prompt_in_result=False)
        return torch.tensor([[int(t[1:]) for t in r.sequences[0]] for r in results])
    return run


def _save_with_tokenizer(model, directory: Path) -> None:
    """The model and a word-level tokenizer whose token i is "t<i>" (CTranslate2's
    converter takes the vocabulary from the tokenizer)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = model.get_output_embeddings().weight.shape[0]
    core = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t0"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="t0", pad_token="t0",
                                        bos_token="t1", eos_token="t2")
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def ort_generate(model, workdir: Path, python: str, quantization: str = "float32"):
    """optimum-onnx's with-past export and ORTModelForCausalLM, in ``python``
    (another environment), driven over JSON lines; with ``quantization``
    int8 or int4, the export quantized by onnxruntime's own quantizers
    (generate_ort_worker.py)."""
    model_dir = workdir / "hf"
    if not model_dir.exists():
        _save_with_tokenizer(model, model_dir)
    return _worker([python, str(HERE / "generate_ort_worker.py"), str(model_dir),
                    str(workdir / f"onnx-{quantization}"),
                    "seq2seq" if model.config.is_encoder_decoder else "causal", quantization])


def _worker(command: list[str]):
    """The ``run`` of a worker process (``command``) that prints
    ``{"ready": ...}`` once set up, then answers each JSON line ``{"ids",
    "mask", "new"}`` with ``{"tokens": ...}`` (or ``{"error": ...}``)."""
    worker = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    ready = json.loads(worker.stdout.readline())
    if "error" in ready:
        raise RuntimeError(ready["error"])

    def run(ids, mask, new):
        worker.stdin.write(json.dumps({"ids": ids.tolist(), "mask": mask.tolist(),
                                       "new": new, **BEAMS}) + "\n")
        worker.stdin.flush()
        reply = json.loads(worker.stdout.readline())
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return torch.tensor(reply["tokens"])
    run.worker = worker
    return run


def llama_generate(model, workdir: Path, python: str, quantization: str):
    """llama.cpp through llama-cpp-python in ``python`` (another environment):
    the model converted by llama.cpp's own converter and quantized to
    ``quantization`` (q8_0, q4_0), driven over JSON lines."""
    model_dir = workdir / "hf"
    if not model_dir.exists():
        _save_with_tokenizer(model, model_dir)
    return _worker([python, str(HERE / "generate_llama_worker.py"), str(model_dir),
                    str(workdir / f"llama-{quantization}"), quantization])


# -- measuring -------------------------------------------------------------------------------

def warm(run, ids, mask, new_tokens: int) -> None:
    # Warm up every shape measured (torch.compile compiles per static cache
    # length: the measured calls must not include it).
    run(ids, mask, 1)
    run(ids, mask, new_tokens)


# A prefill of a short prompt takes a tenth of a second, and this host's speed
# swings by half for seconds at a time: one call per sample is mostly noise.
# Short prefills are taken several times per sample (the median counts); a
# long one (a batch of 333 tokens, seconds) once, as before.
PREFILL_CALLS = 5
PREFILL_BUDGET_S = 1.0


def sample(run, ids, mask, new_tokens: int) -> tuple[float, float, torch.Tensor]:
    """Prefill seconds (``max_new_tokens=1``: the median of up to ``PREFILL_CALLS``
    calls, fewer once ``PREFILL_BUDGET_S`` is spent), the seconds of one whole
    generation, and its tokens."""
    prefills = []
    while len(prefills) < PREFILL_CALLS and sum(prefills) < PREFILL_BUDGET_S:
        start = time.perf_counter()
        run(ids, mask, 1)
        prefills.append(time.perf_counter() - start)
    prefill = statistics.median(prefills)
    start = time.perf_counter()
    tokens = run(ids, mask, new_tokens)
    return prefill, time.perf_counter() - start, tokens


def summary(samples: list, batch: int, new_tokens: int) -> dict:
    p = statistics.median(s[0] for s in samples)
    t = statistics.median(s[1] for s in samples)
    decode = max(t - p, 1e-9) / (new_tokens - 1)
    return {"prefill_ms": p * 1e3, "prefill_samples_ms": [s[0] * 1e3 for s in samples],
            "decode_ms": decode * 1e3,
            "tokens_per_s": batch / decode, "tokens": samples[-1][2]}


def measure(run, ids, mask, runs: int, new_tokens: int = NEW_TOKENS) -> dict:
    warm(run, ids, mask, new_tokens)
    return summary([sample(run, ids, mask, new_tokens) for _ in range(runs)], ids.shape[0],
                   new_tokens)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="gpt2,qwen2,t5-small,bart-base")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--labels", default=None,
                        help="a comma list of the runs to take (default: all: "
                             + ", ".join(RUNS) + "; seq2seq: " + ", ".join(SEQ2SEQ_RUNS)
                             + "; or bB-pN, B prompts of N tokens, bB-sN for seq2seq)")
    parser.add_argument("--ort-python", default=None,
                        help="a Python with optimum-onnx and onnxruntime (for system ort)")
    parser.add_argument("--llama-python", default=None,
                        help="a Python with llama-cpp-python (systems llama.cpp-q8_0, -q4_0)")
    parser.add_argument("--out", default=str(HERE / "results" / "generate"))
    parser.add_argument("--num-beams", type=int, default=1,
                        help="beam search with this many beams in every system (default 1: "
                             "greedy)")
    parser.add_argument("--interleave", action="store_true",
                        help="set every system up first, then take each run's repetitions "
                             "in turn (A, B, C, A, B, C, ...): on a host whose speed drifts "
                             "within minutes, systems measured one after another are not "
                             "comparable")
    args = parser.parse_args(argv)
    if args.num_beams < 1:
        parser.error(f"--num-beams: expected at least 1, got {args.num_beams}")
    BEAMS["num_beams"] = args.num_beams
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    known = SYSTEMS + OPTIONAL_SYSTEMS
    unknown = set(systems) - set(known)
    if unknown:
        parser.error(f"--systems: unknown {', '.join(sorted(unknown))} (known: {', '.join(known)})")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    wanted = [label.strip() for label in args.labels.split(",")] if args.labels else None
    runs_by_model = {}
    for name in models:
        runs = SEQ2SEQ_RUNS if is_seq2seq(name) else RUNS
        if wanted:
            letter = "s" if is_seq2seq(name) else "p"
            chosen_runs = {label: run_lengths(label, runs, letter) for label in wanted}
            unknown_labels = [label for label, lengths in chosen_runs.items() if lengths is None]
            if unknown_labels:
                parser.error(f"--labels: unknown {', '.join(unknown_labels)} for {name} "
                             f"(known: {', '.join(runs)}, or b<rows>-{letter}<tokens>)")
            runs = chosen_runs
        runs_by_model[name] = runs
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    bandwidth = read_bandwidth()
    results = {"host": host_cpu(), "bandwidth_GBps": bandwidth / 1e9, "torch": torch.__version__,
               "command": "python bench/generate.py " + " ".join(argv or sys.argv[1:]),
               "date": time.strftime("%Y-%m-%d %H:%M"), "interleaved": args.interleave,
               "num_beams": args.num_beams,
               "models": {}}
    for name in models:
        model = build(name)
        seq2seq = is_seq2seq(name)
        info = {"weight_bytes": weight_bytes(model), "runs": {}, "setup_s": {}, "errors": {},
                "seq2seq": seq2seq}
        info["decode_weight_bytes"] = decode_weight_bytes(model) if seq2seq else \
            info["weight_bytes"]
        info["bound_tokens_per_s"] = bandwidth / info["decode_weight_bytes"]
        info["new_tokens"] = SEQ2SEQ_NEW_TOKENS if seq2seq else NEW_TOKENS
        results["models"][name] = info
        vocab = model.get_output_embeddings().weight.shape[0]
        runs = runs_by_model[name]
        make_inputs = sources if seq2seq else prompts
        with tempfile.TemporaryDirectory(prefix=f"bench-generate-{name}-") as tmp:
            chosen = [s for s in systems if not seq2seq or s in SEQ2SEQ_SYSTEMS]
            if args.interleave:
                made = {system: _set_up(system, name, Path(tmp), args, info) for system in chosen}
                made = {system: run for system, run in made.items() if run is not None}
                for label, lengths in runs.items():
                    _measure_in_turn(made, label, make_inputs(lengths, vocab), args.runs, name,
                                     info)
                    _write(results, out)
                for run in made.values():
                    _close(run)
                continue
            for system in chosen:
                run = _set_up(system, name, Path(tmp), args, info)
                if run is None:
                    continue
                for label, lengths in runs.items():
                    ids, mask = make_inputs(lengths, vocab)
                    try:
                        measured = measure(run, ids, mask, args.runs, info["new_tokens"])
                    except Exception as error:  # noqa: BLE001
                        _failed(info, name, f"{system} {label}", error)
                        continue
                    _record(info, name, label, system, measured)
                _close(run)
                _write(results, out)
    _write(results, out)
    return 0


def _set_up(system: str, name: str, workdir: Path, args, info: dict):
    """The system's ``run`` for model ``name``, its setup time recorded; None
    (the error recorded) where its setup fails."""
    start = time.perf_counter()
    try:
        run = _make(system, build(name), workdir, args)
    except Exception as error:  # noqa: BLE001  reported in the table
        _failed(info, name, system, error, "setup failed: ")
        return None
    info["setup_s"][system] = time.perf_counter() - start
    return run


def _measure_in_turn(made: dict, label: str, inputs, runs: int, name: str, info: dict) -> None:
    """Every system warmed on ``inputs``, then ``runs`` rounds of one sample each, in turn."""
    ids, mask = inputs
    new_tokens = info["new_tokens"]
    samples = {}
    for system, run in made.items():
        try:
            warm(run, ids, mask, new_tokens)
            samples[system] = []
        except Exception as error:  # noqa: BLE001
            _failed(info, name, f"{system} {label}", error)
    for _ in range(runs):
        for system in list(samples):
            try:
                samples[system].append(sample(made[system], ids, mask, new_tokens))
            except Exception as error:  # noqa: BLE001
                _failed(info, name, f"{system} {label}", error)
                del samples[system]
    for system, taken in samples.items():
        _record(info, name, label, system, summary(taken, ids.shape[0], new_tokens))


def _record(info: dict, name: str, label: str, system: str, measured: dict) -> None:
    info["runs"].setdefault(label, {})[system] = measured
    print(f"{name} {label} {system}: prefill {measured['prefill_ms']:.1f} ms, "
          f"decode {measured['decode_ms']:.1f} ms/token, "
          f"{measured['tokens_per_s']:.1f} tokens/s", flush=True)


def _failed(info: dict, name: str, key: str, error: Exception, prefix: str = "") -> None:
    info["errors"][key] = f"{type(error).__name__}: {str(error)[:300]}"
    print(f"{name} {key}: {prefix}{info['errors'][key]}", flush=True)


def _close(run) -> None:
    if hasattr(run, "worker"):
        run.worker.stdin.close()
        run.worker.wait()


def _make(system: str, model, workdir: Path, args):
    if system == "anyshape":
        return anyshape_generate(model)
    if system == "anyshape-iree-products":
        return anyshape_generate(model, product_kernel="iree")
    if system in ("anyshape-int8", "anyshape-int4"):
        return anyshape_generate(model, weights=system.split("-")[1])
    if system == "anyshape-int4-i8":
        return anyshape_generate(model, weights="int4", activations="int8")
    if system == "anyshape-int8-i16":
        return anyshape_generate(model, weights="int8", activations="int16")
    if system in ("ct2-int8", "ct2-int8_float32"):
        return ct2_generate(model, workdir, quantization=system.split("-")[1])
    if system in ("llama.cpp-q8_0", "llama.cpp-q4_0"):
        if BEAMS["num_beams"] > 1:
            raise RuntimeError("llama.cpp has no beam search (--num-beams)")
        if not args.llama_python:
            raise RuntimeError("no --llama-python given (a Python with llama-cpp-python and "
                               "its converter: bench/README.md)")
        return llama_generate(model, workdir, args.llama_python, system.split("-")[1])
    if system == "eager":
        return hf_generate(model)
    if system == "compile":
        return hf_static_compiled(model)
    if system == "ct2":
        return ct2_generate(model, workdir)
    if system in ("ort", "ort-int8", "ort-int4"):
        if not args.ort_python:
            raise RuntimeError("no --ort-python given (optimum-onnx needs transformers < 4.58)")
        return ort_generate(model, workdir, args.ort_python,
                            system.partition("-")[2] or "float32")
    raise ValueError(system)


def _agreement(tokens: torch.Tensor, reference: torch.Tensor) -> str:
    if tokens.shape != reference.shape:
        return "shape differs"
    return f"{100 * (tokens == reference).float().mean().item():.0f} % agree"


def _write(results: dict, out: Path) -> None:
    serializable = json.loads(json.dumps(results, default=lambda v: v.tolist()
                                         if isinstance(v, torch.Tensor) else str(v)))
    for info in serializable["models"].values():
        for run in info["runs"].values():
            for measured in run.values():
                measured.pop("tokens", None)
    (out / "generate.json").write_text(json.dumps(serializable, indent=1) + "\n")
    lines = [f"# Generation: anyshape against its peers\n",
             f"command: `{results['command']}`; {results['date']}; host: {results['host']}; "
             f"torch {results['torch']}; measured read bandwidth "
             f"{results['bandwidth_GBps']:.1f} GB/s\n",
             ("Greedy" if results.get("num_beams", 1) == 1 else
              f"Beam search, {results['num_beams']} beams (each system's own; tokens/s of the "
              f"best sequence, one per prompt)")
             + ", float32; decode tokens/s counts every row; "
             "the median of the runs. 'same tokens': the system's new tokens are HF eager's "
             "(anyshape float32's where eager did not run). "
             + ("The systems' repetitions were taken in turn (--interleave).\n"
                if results.get("interleaved") else "The systems ran one after another.\n")]
    for name, info in results["models"].items():
        bound = info["bound_tokens_per_s"]
        seq2seq = info.get("seq2seq", False)
        read = (f"{info['decode_weight_bytes'] / 1e6:.0f} MB of them read per decoder step"
                if seq2seq else "")
        lines.append(f"\n## {name}: {info['weight_bytes'] / 1e6:.0f} MB of weights{', ' + read if read else ''}; "
                     f"{info.get('new_tokens', NEW_TOKENS)} new tokens; bandwidth "
                     f"bound at batch 1: {bound:.1f} tokens/s\n")
        if any(system in BITS_PER_WEIGHT for by_system in info["runs"].values()
               for system in by_system):
            lines.append("Quantized systems: their bound is the float32 one times 32 over "
                         "their bits per weight (int8 8, Q8_0 8.5, int4 and Q4_0 4.5, scales "
                         "included); 'same tokens' is the share of their new tokens equal to "
                         "HF eager's float32 ones, position by position.\n")
        setup = ", ".join(f"{s} {v:.0f} s" for s, v in info["setup_s"].items())
        lines.append(f"setup (compile, convert, export): {setup}\n")
        first = "time to first token ms" if seq2seq else "prefill ms"
        lines.append(f"| run | system | {first} | decode ms/token | tokens/s | "
                     "% of bound (batch 1) | same tokens |")
        lines.append("|---|---|---|---|---|---|---|")
        for label, by_system in info["runs"].items():
            # HF eager's tokens; without eager in the run, anyshape float32's
            # (which are eager's: test_generate.py).
            reference = by_system.get("eager", by_system.get("anyshape", {})).get("tokens")
            reference_system = "eager" if "eager" in by_system else "anyshape"
            for system, m in by_system.items():
                same = "-" if reference is None or system == reference_system else \
                    _agreement(torch.as_tensor(m["tokens"]), reference) \
                    if system in BITS_PER_WEIGHT else \
                    ("yes" if torch.equal(torch.as_tensor(m["tokens"]), reference) else "no")
                system_bound = bound * 32 / BITS_PER_WEIGHT.get(system, 32)
                share = f"{100 * m['tokens_per_s'] / system_bound:.0f} %" \
                    if label.startswith("b1") else ""
                lines.append(f"| {label} | {system} | {m['prefill_ms']:.1f} | "
                             f"{m['decode_ms']:.1f} | {m['tokens_per_s']:.1f} | {share} | "
                             f"{same} |")
        for what, error in info["errors"].items():
            lines.append(f"\n{what}: {error}")
    (out / "generate.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
