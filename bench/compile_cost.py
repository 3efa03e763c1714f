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
- the peak anonymous memory of the tree (resident less file-backed: the
  process's own, not the page cache of a mapped checkpoint or archive);
- the first ``generate`` after the compile and a warm one, the same request
  (batch 1, a 17-token prompt, 32 new tokens, greedy), and their ratio; and
  after ``anyshape.load`` of the saved generator, the load's seconds and
  its first ``generate``.

``--source dir``: the model is first written as a checkpoint directory
(``save_pretrained``, float32 shards, by another process) and compiled from
it (``compile_generator(dir)``), without building it in the compiling
process; ``--source model`` (default) compiles the model object.

    python bench/compile_cost.py [--models gpt2,qwen2-0.5b,tinyllama-1.1b]
        [--params inline|external] [--source model|dir] [--out bench/results/compile-cost]
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
        self.memory = self.anonymous = self.disk = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _tree_rss(self) -> tuple[int, int]:
        """(resident, anonymous) bytes of the tree; psutil's ``shared`` is the
        file-backed part of the resident (RssFile + RssShmem)."""
        import psutil

        total = anonymous = 0
        for process in [self.process, *self.process.children(recursive=True)]:
            try:
                info = process.memory_info()
            except psutil.Error:
                continue
            total += info.rss
            anonymous += info.rss - info.shared
        return total, anonymous

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
            resident, anonymous = self._tree_rss()
            self.memory = max(self.memory, resident)
            self.anonymous = max(self.anonymous, anonymous)
            self.disk = max(self.disk, self._disk())
            self._stop.wait(self.every)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *_):
        self._stop.set()
        self._thread.join()


def write_checkpoint(name: str, directory: Path) -> None:
    """The model as ``save_pretrained`` writes it (float32 safetensors shards)."""
    build(name).save_pretrained(directory, max_shard_size="2GB")


def worker(name: str, params: str, checkpoint: Path | None) -> dict:
    import psutil
    import torch

    import anyshape

    torch.set_num_threads(os.cpu_count() or 1)
    if checkpoint is None:
        model = build(name)
    else:
        from anyshape.frontend.checkpoint import stored_tensors
        from transformers import AutoConfig

        model = None
    config = model.config if model is not None else AutoConfig.from_pretrained(checkpoint)
    if model is not None:
        weights = sum(t.numel() * t.element_size()
                      for t in {id(t): t for t in model.state_dict().values()}.values())
        parameters = sum(p.numel() for p in model.parameters())
    else:
        stored = stored_tensors(checkpoint)
        weights = sum(t.nbytes for t in stored.values())
        parameters = sum(t.nbytes // t.dtype.itemsize for t in stored.values())
    built_rss = psutil.Process().memory_info().rss
    scratch = Path(tempfile.gettempdir())
    with Peaks(scratch) as peaks:
        start = time.monotonic()
        generator = anyshape.compile_generator(
            model if model is not None else str(checkpoint), cache=False,
            backend=anyshape.BackendOptions(params=params))
        compile_seconds = time.monotonic() - start
    stage_seconds = dict(generator.module.stage_seconds)
    del model
    prompt = torch.randint(0, config.vocab_size, (1, 17),
                           generator=torch.Generator().manual_seed(0))
    request = dict(max_new_tokens=32, min_new_tokens=32, do_sample=False)

    def timed(run):
        start = time.monotonic()
        out = run()
        return out, time.monotonic() - start

    first_tokens, first = timed(lambda: generator.generate(prompt, **request))
    warm = [timed(lambda: generator.generate(prompt, **request)) for _ in range(2)]
    if not all(torch.equal(first_tokens, tokens) for tokens, _ in warm):
        raise AssertionError("the first and a warm generate disagree")
    saved = generator.save(scratch / "saved")
    del generator
    loaded, load_seconds = timed(lambda: anyshape.load(saved))
    loaded_tokens, loaded_first = timed(lambda: loaded.generate(prompt, **request))
    if not torch.equal(first_tokens, loaded_tokens):
        raise AssertionError("the loaded generator's tokens are not the compiled one's")
    warm_seconds = min(seconds for _, seconds in warm)
    return {"model": name, "params": params, "source": "dir" if checkpoint else "model",
            "parameters": parameters,
            "weights_bytes": weights, "compile_s": compile_seconds,
            "stage_seconds": stage_seconds,
            "peak_tree_rss_bytes": peaks.memory, "peak_tree_anonymous_bytes": peaks.anonymous,
            "built_rss_bytes": built_rss,
            "peak_scratch_bytes": peaks.disk, "first_generate_s": first,
            "warm_generate_s": warm_seconds, "first_over_warm": first / warm_seconds,
            "load_s": load_seconds, "first_after_load_s": loaded_first,
            "first_after_load_over_warm": loaded_first / warm_seconds}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gpt2,qwen2-0.5b,tinyllama-1.1b")
    parser.add_argument("--params", choices=["inline", "external"], default="inline")
    parser.add_argument("--source", choices=["model", "dir"], default="model")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--checkpoint", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--write-checkpoint", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "compile-cost")
    args = parser.parse_args(argv)
    if args.write_checkpoint:
        write_checkpoint(args.write_checkpoint[0], Path(args.write_checkpoint[1]))
        return 0
    if args.worker:
        print(json.dumps(worker(args.worker, args.params, args.checkpoint)), flush=True)
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
            source = []
            if args.source == "dir":
                checkpoint = Path(directory, "checkpoint")
                subprocess.run([sys.executable, __file__, "--write-checkpoint", name,
                                str(checkpoint)], check=True, capture_output=True)
                source = ["--checkpoint", str(checkpoint)]
            env = {**os.environ, "TMPDIR": str(scratch), "ANYSHAPE_CACHE_DIR": str(cache)}
            run = subprocess.run([sys.executable, __file__, "--worker", name,
                                  "--params", args.params, *source], env=env,
                                 capture_output=True, text=True)
            if run.returncode:
                raise SystemExit(f"{name}: the worker failed\n{run.stderr[-4000:]}")
            row = json.loads(run.stdout.strip().splitlines()[-1])
        print(json.dumps(row), flush=True)
        results.append(row)
    command = "python bench/compile_cost.py " + shlex.join(argv)
    host = host_cpu()
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"compile-cost-{args.params}" + ("-from-dir" if args.source == "dir" else "")
    (args.out / f"{stem}.json").write_text(json.dumps(
        {"host": host, "command": command, "results": results}, indent=1))
    gb = 2 ** 30
    lines = [f"# Compile cost against model size (float32, params={args.params}, "
             f"from the {'checkpoint directory' if args.source == 'dir' else 'model object'}, "
             f"cold cache)", "",
             f"Host: {host}. Command: `{command}`.", "",
             "| model | weights GiB | compile s | peak memory GiB (tree) | over weights GiB | "
             "peak anonymous GiB (tree) | peak scratch GiB | first generate s | warm s | "
             "first/warm | load s | first after load/warm |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(
            f"| {r['model']} | {r['weights_bytes'] / gb:.2f} | {r['compile_s']:.1f} | "
            f"{r['peak_tree_rss_bytes'] / gb:.2f} | "
            f"{(r['peak_tree_rss_bytes'] - r['weights_bytes']) / gb:.2f} | "
            f"{r['peak_tree_anonymous_bytes'] / gb:.2f} | "
            f"{r['peak_scratch_bytes'] / gb:.2f} | {r['first_generate_s']:.2f} | "
            f"{r['warm_generate_s']:.2f} | {r['first_over_warm']:.2f} | {r['load_s']:.1f} | "
            f"{r['first_after_load_over_warm']:.2f} |")
    lines += ["", "Stage seconds (\"load\": the module loaded into its context and HF's "
              "generation imported, at the end of the compile):", ""]
    for r in results:
        stages = ", ".join(f"{k} {v:.1f}" for k, v in r["stage_seconds"].items())
        lines.append(f"- {r['model']}: {stages}")
    (args.out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
