"""What a decoder's compile costs against its size: time, memory, disk, first call.

Each model is a HuggingFace causal LM built from its config (random weights,
float32), compiled with ``anyshape.compile_generator`` in a fresh process with
an empty compile cache and its own temporary directory. Reported per model:

- the weights' bytes;
- compile seconds, cold, and ``stage_seconds`` (where they go);
- the peak resident memory of the whole process tree (the Python process and
  the ``iree-compile`` it starts), sampled every 0.1 s, and of the Python
  process alone before the compile (the model built, weights held);
- the peak bytes of the compile's temporary files, sampled likewise, and
  the peak growth of the used bytes of their filesystem (files deleted while
  mapped, as the checkpoint's casts are, still hold disk);
- the peak anonymous memory of the tree (resident less file-backed: the
  process's own, not the page cache of a mapped checkpoint or archive);
- both peaks up to ``compile_generator``'s load stage (the compile) and
  from it on (the module loaded into its context, its weights packed to
  run: what running it holds);
- the first ``generate`` after the compile and a warm one, the same request
  (batch 1, a 17-token prompt, 32 new tokens, greedy), and their ratio; and
  after ``anyshape.load`` of the saved generator, the load's seconds and
  its first ``generate``.

``--source dir``: the model is first written as a checkpoint directory
(``save_pretrained``, float32 shards, by another process) and compiled from
it (``compile_generator(dir)``), without building it in the compiling
process; ``--source model`` (default) compiles the model object.

The decode rate: 31 decode steps, a warm 32-token generate less a 1-token
one; its bound: the memory read bandwidth (a sum over 1 GiB on every core,
in a fresh process, right before) over the bytes each step reads: the
weights, but for an embedding table the LM head does not share, of which a
step reads one row (before 2026-12-07's ninth session the bound counted it:
6 % of TinyLlama's and of the Llama-3-8B shape's int4 archive). Three such
pairs; the table shows the median pair.

``--weights int8|int4`` (with ``--params external``): the weights quantized
as the compile writes them (``BackendOptions(weights=...)``); the bound's
bytes are then the parameter archive's, the weights as the module reads
them (codes and scales, the float ones it keeps, the embedding table).

``llama3-8b`` (and ``llama3-8b-2-layers``, its widths with 2 layers) is
written tensor by tensor as a checkpoint, never built (``--source dir``).
``--exact`` compiles each checkpoint in float32 and compares its greedy
tokens with HF's ``generate`` on ``from_pretrained(dir, dtype=float32)``.

    python bench/compile_cost.py [--models gpt2,qwen2-0.5b,tinyllama-1.1b]
        [--params inline|external] [--source model|dir] [--dtype float32|bfloat16]
        [--weights float32|int8|int4] [--exact] [--out bench/results/compile-cost]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shlex
import shutil
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
_LLAMA3_8B = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                  max_position_embeddings=8192, rope_theta=500000.0, tie_word_embeddings=False)
SHAPES["llama3-8b"] = ("LlamaForCausalLM", "LlamaConfig", _LLAMA3_8B)
# The same widths, 2 layers: what --exact compares with HF's generate in float32.
SHAPES["llama3-8b-2-layers"] = ("LlamaForCausalLM", "LlamaConfig",
                                {**_LLAMA3_8B, "num_hidden_layers": 2})
# Written by write_checkpoint tensor by tensor, never built: an 8B model in
# float32 does not fit this machine's memory.
STREAMED = {"llama3-8b", "llama3-8b-2-layers"}
SHARD_BYTES = 2 * 10 ** 9


def config_of(name: str):
    import transformers

    _, config_class, fields = SHAPES[name]
    return getattr(transformers, config_class)(**fields)


def build(name: str, dtype=None):
    import torch
    import transformers

    if name in STREAMED:
        raise SystemExit(f"{name}: built only as a checkpoint directory (--source dir)")
    torch.manual_seed(0)
    model = getattr(transformers, SHAPES[name][0])(config_of(name)).eval()
    return model.to(dtype) if dtype is not None else model


class Peaks:
    """The process tree's resident bytes and a directory's bytes, sampled until
    stopped, by a process of its own (``monitor``): on a thread of the
    compile's process, its scans of /proc held the GIL and slowed the stages
    that run Python (docs/benchmarks.md, "fifth session")."""

    def __init__(self, directory: Path, every: float = 0.1):
        self.directory, self.every = directory, every
        self.memory = self.anonymous = self.disk = self.filesystem = 0
        # the same peaks from the load stage on (compile_generator's report
        # "loading the module ..."): what running the module holds
        self.load_memory = self.load_anonymous = 0
        self._monitor = None

    def progress(self, message: str) -> None:
        if message.startswith("loading the module"):
            self._monitor.stdin.write("loading\n")
            self._monitor.stdin.flush()

    def __enter__(self):
        self._monitor = subprocess.Popen(
            [sys.executable, __file__, "--monitor", str(os.getpid()), str(self.directory),
             str(self.every)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._monitor.stdout.readline()  # "sampling": the first sample is taken
        return self

    def __exit__(self, *_):
        out, _ = self._monitor.communicate("stop\n", timeout=60)
        peaks = json.loads(out.strip().splitlines()[-1])
        self.memory, self.anonymous, self.disk = peaks["memory"], peaks["anonymous"], peaks["disk"]
        self.filesystem = peaks["filesystem"]
        self.load_memory, self.load_anonymous = peaks["load_memory"], peaks["load_anonymous"]


def monitor(pid: int, directory: Path, every: float) -> dict:
    """Sample process ``pid``'s tree (this process left out) and ``directory``
    every ``every`` seconds until stdin says "stop" (or closes); "loading"
    starts the load stage's peaks. Returns the peaks."""
    import psutil

    root, me = psutil.Process(pid), os.getpid()
    peaks = dict.fromkeys(("memory", "anonymous", "disk", "filesystem", "load_memory",
                           "load_anonymous"), 0)
    # Files deleted while still mapped (the checkpoint's casts) hold disk
    # that a walk of the directory does not see: the growth of the used
    # bytes of its filesystem does (any other writer to it counts as well).
    used_before = shutil.disk_usage(directory).used
    state = {"loading": False}
    stop = threading.Event()

    def read_commands():
        for line in sys.stdin:
            if line.strip() == "loading":
                state["loading"] = True
            elif line.strip() == "stop":
                break
        stop.set()

    def tree_rss() -> tuple[int, int]:
        """(resident, anonymous) bytes; psutil's ``shared`` is the file-backed
        part of the resident (RssFile + RssShmem)."""
        total = anonymous = 0
        try:
            processes = [root, *root.children(recursive=True)]
        except psutil.Error:
            return 0, 0
        for process in processes:
            if process.pid == me:
                continue
            try:
                info = process.memory_info()
            except psutil.Error:
                continue
            total += info.rss
            anonymous += info.rss - info.shared
        return total, anonymous

    def disk() -> int:
        total = 0
        for base, _, names in os.walk(directory):
            for name in names:
                try:
                    total += os.lstat(os.path.join(base, name)).st_blocks * 512
                except OSError:
                    continue
        return total

    def sample() -> None:
        resident, anonymous = tree_rss()
        prefix = "load_" if state["loading"] else ""
        peaks[prefix + "memory"] = max(peaks[prefix + "memory"], resident)
        peaks[prefix + "anonymous"] = max(peaks[prefix + "anonymous"], anonymous)
        peaks["disk"] = max(peaks["disk"], disk())
        peaks["filesystem"] = max(peaks["filesystem"],
                                  shutil.disk_usage(directory).used - used_before)

    threading.Thread(target=read_commands, daemon=True).start()
    sample()
    print("sampling", flush=True)
    # A load stage shorter than one period still gets a sample: the last,
    # taken at "stop", with the loaded module still held.
    while not stop.wait(every):
        sample()
    sample()
    return peaks


def write_checkpoint(name: str, directory: Path, dtype) -> None:
    """The model as ``save_pretrained`` writes it (safetensors shards of
    ``dtype``). A model of ``STREAMED`` is built on the meta device, and each
    tensor drawn (matrices from N(0, initializer_range), norms 1, as HF
    initializes them), cast and written in turn: one tensor in memory at a
    time."""
    import torch

    if name not in STREAMED:
        build(name, dtype).save_pretrained(directory, max_shard_size="2GB")
        return
    import transformers
    from safetensors.torch import save_file

    config = config_of(name)
    config.dtype = dtype
    with torch.device("meta"):
        model = getattr(transformers, SHAPES[name][0])(config)
    directory.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(0)
    shards, shard, size = [], {}, 0
    for tensor_name, parameter in model.named_parameters():
        if parameter.ndim == 1:
            value = torch.ones(parameter.shape, dtype=dtype)
        else:
            value = (torch.randn(parameter.shape, generator=generator)
                     * config.initializer_range).to(dtype)
        if shard and size + value.nbytes > SHARD_BYTES:
            shards.append(list(shard))
            save_file(shard, directory / f"shard-{len(shards):05d}.safetensors",
                      metadata={"format": "pt"})
            shard, size = {}, 0
        shard[tensor_name], size = value, size + value.nbytes
        del value
    shards.append(list(shard))
    save_file(shard, directory / f"shard-{len(shards):05d}.safetensors", metadata={"format": "pt"})
    weight_map = {tensor: f"shard-{number:05d}.safetensors"
                  for number, names in enumerate(shards, 1) for tensor in names}
    (directory / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": weight_map}, indent=1))
    config.save_pretrained(directory)


def untied_table_bytes(config, weight_format: str, bytes_per_weight: float) -> int:
    """The bytes of the embedding table where the LM head does not share it:
    float ones (``bytes_per_weight`` each), or the int8 or int4 panels and
    scales the compile packs it in (``quantized_weights.packed``)."""
    from anyshape.iree.quantized_weights import PANEL, weight_format as quantized_format

    if getattr(config, "tie_word_embeddings", True):
        return 0
    vocab, hidden = config.vocab_size, config.hidden_size
    if weight_format == "float32":
        return int(vocab * hidden * bytes_per_weight)
    columns = -(-vocab // PANEL) * PANEL
    if weight_format == "int8":
        return columns * hidden + columns * 4
    group = quantized_format("int4", None).group_size
    return columns * hidden // 2 + columns * (hidden // group) * 2


def worker(name: str, params: str, checkpoint: Path | None, dtype_name: str,
           weight_format: str = "float32") -> dict:
    import psutil
    import torch

    import anyshape

    dtype = getattr(torch, dtype_name)
    torch.set_num_threads(os.cpu_count() or 1)
    if checkpoint is None:
        model = build(name, dtype)
        config = model.config
        weights = sum(t.numel() * t.element_size()
                      for t in {id(t): t for t in model.state_dict().values()}.values())
        parameters = sum(p.numel() for p in model.parameters())
    else:
        from anyshape.frontend.checkpoint import stored_tensors
        from transformers import AutoConfig

        model, config = None, AutoConfig.from_pretrained(checkpoint)
        stored = stored_tensors(checkpoint)
        weights = sum(t.nbytes for t in stored.values())
        parameters = sum(t.nbytes // t.dtype.itemsize for t in stored.values())
    built_rss = psutil.Process().memory_info().rss
    scratch = Path(tempfile.gettempdir())
    with Peaks(scratch) as peaks:
        start = time.monotonic()
        # The kernel quantizes float32 products: a checkpoint of another
        # dtype compiles in float32, each linear layer's weight cast from the
        # stored one as it is quantized (frontend/checkpoint.py).
        generator = anyshape.compile_generator(
            model if model is not None else str(checkpoint), cache=False,
            dtype=None if weight_format == "float32" else torch.float32,
            backend=anyshape.BackendOptions(params=params, weights=weight_format),
            progress=peaks.progress)
        compile_seconds = time.monotonic() - start
    stored_weights = weights
    if weight_format != "float32":  # what each decode step reads: the archive's weights
        weights = generator.module.parameters_path.stat().st_size
    # less an untied embedding table, of which a step reads one row
    weights -= untied_table_bytes(config, weight_format,
                                  stored_weights / max(parameters, 1))
    stage_seconds = dict(generator.module.stage_seconds)
    del model
    prompt = torch.randint(0, config.vocab_size, (1, 17),
                           generator=torch.Generator().manual_seed(0))

    def timed(run):
        start = time.monotonic()
        out = run()
        return out, time.monotonic() - start

    def generate(model, new):
        return model.generate(prompt, max_new_tokens=new, min_new_tokens=new, do_sample=False)

    first_tokens, first = timed(lambda: generate(generator, 32))
    warm = [timed(lambda: generate(generator, 32)) for _ in range(2)]
    if not all(torch.equal(first_tokens, tokens) for tokens, _ in warm):
        raise AssertionError("the first and a warm generate disagree")
    warm_seconds = min(seconds for _, seconds in warm)
    from generate import read_bandwidth  # bench/generate.py's, as its tables use

    # The bandwidth of this virtual machine's two cores moves by up to 2x from
    # minute to minute: each decode rate is paired with a bandwidth measured
    # right before it, and the ratio is the pairs' median.
    pairs = []
    for _ in range(3):
        bandwidth = read_bandwidth()
        prefill = min(timed(lambda: generate(generator, 1))[1] for _ in range(2))
        whole = min(timed(lambda: generate(generator, 32))[1] for _ in range(2))
        pairs.append((31 / (whole - prefill), bandwidth))  # tokens 2 to 32: one step each
    ratios = sorted(rate / (bandwidth / weights) for rate, bandwidth in pairs)
    decode_rate, bandwidth = sorted(pairs, key=lambda p: p[0] / (p[1] / weights))[1]
    saved = generator.save(scratch / "saved")
    # Freed before the saved one loads (a cycle holds it until collected):
    # two 8B modules do not fit the machine at once.
    del generator
    gc.collect()
    loaded, load_seconds = timed(lambda: anyshape.load(saved))
    loaded_tokens, loaded_first = timed(lambda: generate(loaded, 32))
    if not torch.equal(first_tokens, loaded_tokens):
        raise AssertionError("the loaded generator's tokens are not the compiled one's")
    return {"model": name, "params": params, "source": "dir" if checkpoint else "model",
            "dtype": dtype_name, "weights": weight_format, "parameters": parameters,
            "weights_bytes": stored_weights, "read_bytes_per_step": weights,
            "compile_s": compile_seconds,
            "stage_seconds": stage_seconds,
            "peak_tree_rss_bytes": peaks.memory, "peak_tree_anonymous_bytes": peaks.anonymous,
            "load_peak_tree_rss_bytes": peaks.load_memory,
            "load_peak_tree_anonymous_bytes": peaks.load_anonymous,
            "built_rss_bytes": built_rss,
            "peak_scratch_bytes": peaks.disk,
            "peak_filesystem_growth_bytes": peaks.filesystem, "first_generate_s": first,
            "warm_generate_s": warm_seconds, "first_over_warm": first / warm_seconds,
            "load_s": load_seconds, "first_after_load_s": loaded_first,
            "first_after_load_over_warm": loaded_first / warm_seconds,
            "decode_tokens_per_s": decode_rate, "read_bandwidth_GBps": bandwidth / 1e9,
            # each decode step reads every weight once: the bound is bandwidth / weights
            "decode_bound_tokens_per_s": bandwidth / weights,
            "decode_over_bound": ratios[1],
            "decode_pairs": [{"tokens_per_s": rate, "read_bandwidth_GBps": bw / 1e9,
                              "over_bound": rate / (bw / weights)} for rate, bw in pairs]}


def exactness(checkpoint: Path) -> dict:
    """``compile_generator(checkpoint, dtype=float32)``'s greedy tokens against
    HF's ``generate`` on ``from_pretrained(checkpoint, dtype=float32)``: a
    7-token prompt, 24 new tokens."""
    import torch
    from transformers import AutoModelForCausalLM

    import anyshape

    generator = anyshape.compile_generator(str(checkpoint), dtype=torch.float32, cache=False)
    prompt = torch.randint(3, 1000, (1, 7), generator=torch.Generator().manual_seed(0))
    request = dict(max_new_tokens=24, min_new_tokens=24, do_sample=False)
    ours = torch.as_tensor(generator.generate(prompt, **request))
    del generator
    reference = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    with torch.no_grad():
        theirs = reference.generate(prompt, **request)
    return {"ours": ours[0, 7:].tolist(), "hf": theirs[0, 7:].tolist(),
            "identical": torch.equal(ours, theirs)}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gpt2,qwen2-0.5b,tinyllama-1.1b")
    parser.add_argument("--params", choices=["inline", "external"], default="inline")
    parser.add_argument("--source", choices=["model", "dir"], default="model")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                        help="the weights' dtype, written and compiled in (default float32)")
    parser.add_argument("--weights", choices=["float32", "int8", "int4"], default="float32",
                        help="the weights as compiled (BackendOptions(weights=...); int8 and "
                             "int4 with --params external)")
    parser.add_argument("--exact", action="store_true",
                        help="instead: write each model's checkpoint and compare "
                             "compile_generator(dir, dtype=float32)'s tokens with HF's generate")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--monitor", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--checkpoint", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--write-checkpoint", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "compile-cost")
    args = parser.parse_args(argv)
    if args.monitor:
        pid, directory, every = args.monitor
        print(json.dumps(monitor(int(pid), Path(directory), float(every))), flush=True)
        return 0
    if args.write_checkpoint:
        import torch

        write_checkpoint(args.write_checkpoint[0], Path(args.write_checkpoint[1]),
                         getattr(torch, args.dtype))
        return 0
    if args.worker:
        row = exactness(args.checkpoint) if args.exact else \
            worker(args.worker, args.params, args.checkpoint, args.dtype, args.weights)
        print(json.dumps(row), flush=True)
        return 0
    if args.weights != "float32" and args.params != "external":
        parser.error(f"--weights {args.weights}: needs --params external (the bound is read "
                     f"from the parameter archive)")
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
            if args.source == "dir" or args.exact:
                checkpoint = Path(directory, "checkpoint")
                start = time.monotonic()
                subprocess.run([sys.executable, __file__, "--write-checkpoint", name,
                                str(checkpoint), "--dtype", args.dtype], check=True,
                               capture_output=True)
                print(f"{name}: checkpoint written in {time.monotonic() - start:.0f}s",
                      flush=True)
                source = ["--checkpoint", str(checkpoint)]
            env = {**os.environ, "TMPDIR": str(scratch), "ANYSHAPE_CACHE_DIR": str(cache)}
            run = subprocess.run([sys.executable, __file__, "--worker", name,
                                  "--params", args.params, "--dtype", args.dtype,
                                  "--weights", args.weights, *source,
                                  *(["--exact"] if args.exact else [])], env=env,
                                 capture_output=True, text=True)
            if run.returncode:
                raise SystemExit(f"{name}: the worker failed\n{run.stderr[-4000:]}")
            row = json.loads(run.stdout.strip().splitlines()[-1])
        print(json.dumps(row), flush=True)
        results.append(row)
    if args.exact:
        return 0 if all(row["identical"] for row in results) else 1
    command = "python bench/compile_cost.py " + shlex.join(argv)
    host = host_cpu()
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"compile-cost-{args.params}" + ("-from-dir" if args.source == "dir" else "") + \
        ("" if args.dtype == "float32" else f"-{args.dtype}") + \
        ("" if args.weights == "float32" else f"-{args.weights}")
    (args.out / f"{stem}.json").write_text(json.dumps(
        {"host": host, "command": command, "results": results}, indent=1))
    gb = 2 ** 30
    lines = [f"# Compile cost against model size ({args.dtype}"
             f"{'' if args.weights == 'float32' else ', weights ' + args.weights}, "
             f"params={args.params}, "
             f"from the {'checkpoint directory' if args.source == 'dir' else 'model object'}, "
             f"cold cache)", "",
             f"Host: {host}. Command: `{command}`.", "",
             "| model | weights GiB | compile s | peak memory GiB (tree) | over weights GiB | "
             "peak anonymous GiB (tree) | loaded: memory, anonymous GiB | peak scratch GiB | "
             "peak growth of the scratch filesystem GiB | "
             "first generate s | warm s | "
             "first/warm | load s | first after load/warm | decode tokens/s | bound tokens/s "
             "| of the bound |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(
            f"| {r['model']} | {r['weights_bytes'] / gb:.2f} | {r['compile_s']:.1f} | "
            f"{r['peak_tree_rss_bytes'] / gb:.2f} | "
            f"{(r['peak_tree_rss_bytes'] - r['weights_bytes']) / gb:.2f} | "
            f"{r['peak_tree_anonymous_bytes'] / gb:.2f} | "
            f"{r['load_peak_tree_rss_bytes'] / gb:.2f}, "
            f"{r['load_peak_tree_anonymous_bytes'] / gb:.2f} | "
            f"{r['peak_scratch_bytes'] / gb:.2f} | "
            f"{r['peak_filesystem_growth_bytes'] / gb:.2f} | {r['first_generate_s']:.2f} | "
            f"{r['warm_generate_s']:.2f} | {r['first_over_warm']:.2f} | {r['load_s']:.1f} | "
            f"{r['first_after_load_over_warm']:.2f} | {r['decode_tokens_per_s']:.2f} | "
            f"{r['decode_bound_tokens_per_s']:.2f} | {r['decode_over_bound']:.0%} |")
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
