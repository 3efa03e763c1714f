"""`make zoo`: each HuggingFace family at its default size, compiled once with dynamic
batch and sequence, checked and timed against eager at L = 128.

Each model comes from ``anyshape.frontend.hf.build`` (transformers' default config of the
model type, random weights), is compiled in this process with
``params="external"`` (so the weight bytes are the archive's) and once more
with the default ``params="inline"`` for the size of that ``.vmfb``, then run at
batch 1, L = 128 with a padded attention mask: the max error against eager on
the same inputs, and median latencies of anyshape and eager over alternating
runs after a warm-up. Writes ``bench/results/zoo.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

import anyshape
from anyshape.frontend import hf

HERE = Path(__file__).resolve().parent

# (model type, task): the families of issue 6
FAMILIES = [
    ("bert", "sequence-classification"),
    ("bert", "masked-lm"),
    ("roberta", "sequence-classification"),
    ("electra", "pretraining"),
    ("distilbert", "sequence-classification"),
    ("gpt2", "causal-lm"),
    ("gpt2", "causal-lm-last-token"),
    ("t5", "seq2seq-lm"),
]


def tensors(output) -> dict[str, torch.Tensor]:
    if isinstance(output, torch.Tensor):
        return {"": output}
    return {k: v for k, v in output.items() if isinstance(v, torch.Tensor)}


def measure(model_type: str, task: str, length: int, runs: int, max_batch: int) -> dict:
    built = hf.build(model_type, task)
    max_seq = built.max_seq or hf.DEFAULT_MAX_SEQ
    started = time.monotonic()
    compiled = anyshape.compile(
        built.model, (), built.example_inputs(2, 8, dec_seq=5),
        dynamic_shapes=built.dynamic_shapes({"batch", "seq"}, max_batch, max_seq),
        backend=anyshape.BackendOptions(params="external"))
    compile_s = time.monotonic() - started
    # The default artifact, weights inside the .vmfb: its size only.
    inline = anyshape.compile(
        built.model, (), built.example_inputs(2, 8, dec_seq=5),
        dynamic_shapes=built.dynamic_shapes({"batch", "seq"}, max_batch, max_seq))
    inline_mb = inline.vmfb_path.stat().st_size / 1e6
    del inline
    inputs = built.example_inputs(1, length, seed=1)
    with torch.no_grad():
        expected = tensors(built.model(**inputs))
        got = tensors(compiled(**inputs))
        error = max(float((got[k] - expected[k]).abs().max()) for k in expected)
        times = {"anyshape": [], "eager": []}
        for _ in range(2):  # warm-up
            compiled(**inputs), built.model(**inputs)
        for _ in range(runs):
            for name, run in (("anyshape", lambda: compiled(**inputs)),
                              ("eager", lambda: built.model(**inputs))):
                t = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - t)
    return {
        "family": f"{model_type} {task}", "class": type(built.model).__name__,
        "parameters": built.parameters(), "unique_mb": hf.unique_parameter_bytes(built.model) / 1e6,
        "archive_mb": compiled.parameters_path.stat().st_size / 1e6,
        "vmfb_mb": compiled.vmfb_path.stat().st_size / 1e6, "inline_mb": inline_mb,
        "compile_s": compile_s,
        "max_seq": max_seq, "error": error,
        "anyshape_ms": statistics.median(times["anyshape"]) * 1e3,
        "eager_ms": statistics.median(times["eager"]) * 1e3,
    }


def table(rows: list[dict], length: int) -> str:
    head = ["family", "model class", "parameters", "unique weights MB", "params.irpa MB",
            "module.vmfb MB", "inline module.vmfb MB", "compile s", f"max error at L = {length}",
            f"anyshape ms at L = {length}", "eager ms", "eager / anyshape"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if "failure" in r:
            lines.append(f"| {r['family']} | FAILED: {r['failure']} |" + " |" * (len(head) - 2))
            continue
        lines.append("| " + " | ".join([
            r["family"], r["class"], f"{r['parameters'] / 1e6:.1f}M", f"{r['unique_mb']:.1f}",
            f"{r['archive_mb']:.1f}", f"{r['vmfb_mb']:.2f}", f"{r['inline_mb']:.1f}",
            f"{r['compile_s']:.0f}",
            f"{r['error']:.1e}", f"{r['anyshape_ms']:.1f}", f"{r['eager_ms']:.1f}",
            f"{r['eager_ms'] / r['anyshape_ms']:.2f}x"]) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--only", nargs="+", default=None,
                        help="model types to run (default: every family)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "zoo.md")
    args = parser.parse_args(argv)
    torch.set_num_threads(os.cpu_count() or 1)
    rows = []
    for model_type, task in FAMILIES:
        if args.only and model_type not in args.only:
            continue
        print(f"[{time.strftime('%H:%M:%S')}] {model_type} {task}", flush=True)
        try:
            rows.append(measure(model_type, task, args.length, args.runs, args.max_batch))
        except Exception as error:  # a family that fails is a row of the table, not the end
            rows.append({"family": f"{model_type} {task}",
                         "failure": f"{type(error).__name__}: {str(error).splitlines()[0]}"})
        print(table(rows[-1:], args.length).splitlines()[-1], flush=True)
    cpu = platform.processor() or platform.machine()
    command = " ".join(["python bench/zoo.py", *(sys.argv[1:] if argv is None else argv)])
    text = (f"# anyshape zoo\n\n{cpu}, {os.cpu_count()} cores, {torch.get_num_threads()} torch "
            f"threads; fp32, random weights; {time.strftime('%Y-%m-%d %H:%M')}; "
            f"command: `{command}` (`make zoo`)\n\n"
            f"Each family: transformers' default config of the model type, compiled once with "
            f"dynamic batch (1..{args.max_batch}) and sequence (1..the model's positions, 512 "
            f"for T5; T5's decoder length its own dim) and `params=\"external\"` (compile s: "
            f"that build; inline module.vmfb: the size of the default build, weights inside); "
            f"run at batch 1, "
            f"L = {args.length}, the attention mask padded from half the row on; latency: "
            f"medians of {args.runs} alternating runs after 2 warm-ups.\n\n"
            + table(rows, args.length) + "\n")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    return 1 if any("failure" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
