"""What a decoder's compile costs against its size: time, memory, disk, first call.

Each model is a HuggingFace causal LM built from its config (random weights,
float32), compiled with ``anyshape.compile_generator`` in a fresh process with
an empty compile cache and its own temporary directory. Reported per model:

- the weights' bytes;
- compile seconds, cold, and ``stage_seconds`` (where they go);
- the peak resident memory of the whole process tree (the Python process and
  the ``iree-compile`` it starts), sampled every 0.1 s, and of the Python
  process alone before the compile (the model built, weights held);
- the peak bytes of the compile's temporary files, sampled likewise;
- the first ``generate`` after the compile and a warm one, the same request
  (batch 1, a 17-token prompt, 32 new tokens, greedy), and their ratio.

    python bench/compile_cost.py [--models gpt2,qwen2-0.5b,tinyllama-1.1b]
        [--params inline|external] [--out bench/results/compile-cost]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from family_sweep import host_cpu  # noqa: E402

SHAPES = {
    "gpt2": ("GPT2LMHeadModel", "GPT2Config", {}),
    "qwen2-0.5b": ("Qwen2ForCausalLM", "Qwen2Config", dict(
        hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
        num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768,
        tie_word_embeddings=True)),
    "tinyllama-1.1b": ("LlamaForCausalLM", "LlamaConfig", dict(
        hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
        num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048)),
}


def build(name: str):
    import torch
    import transformers

    model_class, config_class, fields = SHAPES[name]
    torch.manual_seed(0)
    config = getattr(transformers, config_class)(**fields)
    return getattr(transformers, model_class)(config).eval()


class Peaks:
    """The process tree's resident bytes and a directory's bytes, sampled until stopped."""

    def __init__(self, directory: Path, every: float = 0.1):
        import psutil

        self.process, self.directory, self.every = psutil.Process(), directory, every
        self.memory = self.disk = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _tree_rss(self) -> int:
        import psutil

        total = 0
        for process in [self.process, *self.process.children(recursive=True)]:
            try:
                total += process.memory_info().rss
            except psutil.Error:
                continue
        return total

    def _disk(self) -> int:
        total = 0
        for root, _, names in os.walk(self.directory):
            for name in names:
                try:
                    total += os.lstat(os.path.join(root, name)).st_blocks * 512
                except OSError:
                    continue
        return total

    def _run(self):
        while not self._stop.is_set():
            self.memory = max(self.memory, self._tree_rss())
            self.disk = max(self.disk, self._disk())
            self._stop.wait(self.every)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *_):
        self._stop.set()
        self._thread.join()


def worker(name: str, params: str) -> dict:
    import psutil
    import torch

    import anyshape

    torch.set_num_threads(os.cpu_count() or 1)
    model = build(name)
    weights = sum(t.numel() * t.element_size()
                  for t in {id(t): t for t in model.state_dict().values()}.values())
    built_rss = psutil.Process().memory_info().rss
    scratch = Path(tempfile.gettempdir())
    with Peaks(scratch) as peaks:
        start = time.monotonic()
        generator = anyshape.compile_generator(
            model, cache=False, backend=anyshape.BackendOptions(params=params))
        compile_seconds = time.monotonic() - start
    prompt = torch.randint(0, model.config.vocab_size, (1, 17),
                           generator=torch.Generator().manual_seed(0))
    request = dict(max_new_tokens=32, min_new_tokens=32, do_sample=False)
    start = time.monotonic()
    first_tokens = generator.generate(prompt, **request)
    first = time.monotonic() - start
    warm = []
    for _ in range(2):
        start = time.monotonic()
        warm_tokens = generator.generate(prompt, **request)
        warm.append(time.monotonic() - start)
    if not torch.equal(first_tokens, warm_tokens):
        raise AssertionError("the first and a warm generate disagree")
    return {"model": name, "params": params,
            "parameters": sum(p.numel() for p in model.parameters()),
            "weights_bytes": weights, "compile_s": compile_seconds,
            "stage_seconds": dict(generator.module.stage_seconds),
            "peak_tree_rss_bytes": peaks.memory, "built_rss_bytes": built_rss,
            "peak_scratch_bytes": peaks.disk, "first_generate_s": first,
            "warm_generate_s": min(warm), "first_over_warm": first / min(warm)}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gpt2,qwen2-0.5b,tinyllama-1.1b")
    parser.add_argument("--params", choices=["inline", "external"], default="inline")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "compile-cost")
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.params)), flush=True)
        return 0
    names = args.models.split(",")
    unknown = sorted(set(names) - set(SHAPES))
    if unknown:
        parser.error(f"--models: expected names among {', '.join(SHAPES)}, got {unknown}")
    results = []
    for name in names:
        with tempfile.TemporaryDirectory(prefix="anyshape-compile-cost-") as directory:
            scratch, cache = Path(directory, "tmp"), Path(directory, "cache")
            scratch.mkdir()
            env = {**os.environ, "TMPDIR": str(scratch), "ANYSHAPE_CACHE_DIR": str(cache)}
            run = subprocess.run([sys.executable, __file__, "--worker", name,
                                  "--params", args.params], env=env,
                                 capture_output=True, text=True)
            if run.returncode:
                raise SystemExit(f"{name}: the worker failed\n{run.stderr[-4000:]}")
            row = json.loads(run.stdout.strip().splitlines()[-1])
        print(json.dumps(row), flush=True)
        results.append(row)
    command = "python bench/compile_cost.py " + shlex.join(argv)
    host = host_cpu()
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"compile-cost-{args.params}"
    (args.out / f"{stem}.json").write_text(json.dumps(
        {"host": host, "command": command, "results": results}, indent=1))
    gb = 2 ** 30
    lines = [f"# Compile cost against model size (float32, params={args.params}, cold cache)", "",
             f"Host: {host}. Command: `{command}`.", "",
             "| model | weights GiB | compile s | peak memory GiB (tree) | over weights GiB | "
             "peak scratch GiB | first generate s | warm s | first/warm |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(
            f"| {r['model']} | {r['weights_bytes'] / gb:.2f} | {r['compile_s']:.1f} | "
            f"{r['peak_tree_rss_bytes'] / gb:.2f} | "
            f"{(r['peak_tree_rss_bytes'] - r['weights_bytes']) / gb:.2f} | "
            f"{r['peak_scratch_bytes'] / gb:.2f} | {r['first_generate_s']:.2f} | "
            f"{r['warm_generate_s']:.2f} | {r['first_over_warm']:.2f} |")
    lines += ["", "Stage seconds:", ""]
    for r in results:
        stages = ", ".join(f"{k} {v:.1f}" for k, v in r["stage_seconds"].items())
        lines.append(f"- {r['model']}: {stages}")
    (args.out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
