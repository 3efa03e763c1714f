"""anyshape on a GPU against eager PyTorch and ``torch.compile(dynamic=True)``, in one run.

roberta-base sequence classification and GPT-2 small last-token logits
(``bench/models.py``, random weights), fp32 and fp16, batch 1 and 8, L 128
and 512 by default. Compiling needs IREE's compiler and no GPU; running needs
only torch, numpy, transformers and iree-base-runtime on the GPU machine. So
there are two steps, which may run on different machines (the recipe is in
``bench/README.md``):

    python bench/cuda.py compile --out DIR [--models roberta gpt2]
        [--dtypes float32 float16] [--cuda-arch sm_80] [--target cuda] [--tiny]
    python bench/cuda.py run DIR [--batches 1 8] [--lengths 128 512] [--runs 20]
        [--device cuda] [--out RESULTS]

``compile`` writes one artifact per (model, dtype) under DIR, compiled once
with a dynamic batch (up to 8) and length and ``params="external"``, and
deletes its ``params.irpa``: the weights (about 500 MB for roberta-base) do
not travel. ``run`` builds each model from its config where it runs, writes
the artifact's parameter archive from that model's own weights
(``anyshape.write_parameters``), so that all systems compute with the same
weights, and then in each (model, dtype, batch, L) cell warms every system up
(2 calls), records each one's max |difference| from eager in that dtype (TF32
off in the fp32 eager reference), and times the systems round-robin
``--runs`` times (``torch.cuda.synchronize`` around each call; anyshape's
calls take torch CUDA tensors and return them on the GPU, host copies
included, as a user calls it). A figure is the median; ratios are
``system / anyshape``. Writes ``cuda.md`` and ``cuda.json`` under ``--out``.

``python bench/compare.py --target cuda`` (``make bench BENCH_ARGS='--target cuda'``)
runs both steps on one machine that has the compiler and a GPU.

``compile --target cpu`` and ``run --device cpu`` run the same harness on the
CPU, as a smoke test of the script where there is no GPU (not for figures).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

MODEL_KEYS = {"roberta": "roberta-base classifier", "gpt2": "gpt2-small last-token logits"}
MAX_BATCH = 8
WARMUP = 2
TOLERANCE = {"float32": 1e-4, "float16": 1e-2}
SYSTEMS = ["anyshape", "eager", "inductor"]


def _torch_dtype(name: str):
    import torch

    return {"float32": torch.float32, "float16": torch.float16}[name]


def _build(model_key: str, tiny: bool, seed: int = 0):
    import torch
    from models import MODELS

    build, max_len = MODELS[MODEL_KEYS[model_key]]
    torch.manual_seed(seed)
    return build(tiny=tiny).eval(), max_len


def _inputs(batch: int, length: int, device: str, seed: int):
    import torch

    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 1000, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[0, length - length // 4:] = 0  # a padded row
    return ids.to(device), mask.to(device)


# -- step 1: compile (needs IREE's compiler, no GPU) ------------------------------------

def compile_all(out: Path, models: list[str], dtypes: list[str], target: str,
                cuda_arch: str | None, tiny: bool) -> None:
    import anyshape
    from torch.export import Dim

    out.mkdir(parents=True, exist_ok=True)
    for model_key in models:
        model, max_len = _build(model_key, tiny)
        batch, seq = Dim("batch", min=1, max=MAX_BATCH), Dim("seq", min=1, max=min(max_len, 512))
        for dtype in dtypes:
            directory = out / f"{model_key}-{dtype}"
            ids, mask = _inputs(2, 8, "cpu", seed=0)
            started = time.perf_counter()
            compiled = anyshape.compile(
                model, (ids,), {"attention_mask": mask}, target=target,
                cuda_arch=cuda_arch if target == "cuda" else None,
                dynamic_shapes={"input_ids": {0: batch, 1: seq},
                                "attention_mask": {0: batch, 1: seq}},
                params="external", dtype=_torch_dtype(dtype))
            seconds = time.perf_counter() - started
            compiled.save(directory)
            (directory / "params.irpa").unlink()
            info = {"model": model_key, "dtype": dtype, "tiny": tiny, "target": target,
                    "cuda_arch": compiled.target.cuda_arch, "max_len": min(max_len, 512),
                    "compile_seconds": seconds}
            (directory / "bench.json").write_text(json.dumps(info, indent=2) + "\n")
            size = (directory / "module.vmfb").stat().st_size / 1e6
            print(f"{directory.name}: compiled in {seconds:.1f} s, module.vmfb {size:.1f} MB",
                  flush=True)


# -- step 2: run (needs torch, numpy, transformers, iree-base-runtime; a GPU) -------------

def _timed_ms(call, device: str) -> float:
    import torch

    if device != "cpu":
        torch.cuda.synchronize()
    start = time.perf_counter()
    call()
    if device != "cpu":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3


def run_all(artifacts: Path, batches: list[int], lengths: list[int], runs: int, device: str,
            out: Path) -> list[dict]:
    import torch

    import anyshape

    # The fp32 reference in full fp32: TF32 matmuls differ from it by ~1e-3.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    directories = sorted(p.parent for p in artifacts.glob("*/bench.json"))
    if not directories:
        raise SystemExit(f"{artifacts}: no artifacts (bench.json) here; run "
                         f"'python bench/cuda.py compile --out {artifacts}' first")
    cells = []
    for directory in directories:
        info = json.loads((directory / "bench.json").read_text())
        dtype = _torch_dtype(info["dtype"])
        model, _ = _build(info["model"], info["tiny"], seed=1)
        model = model.to(dtype)
        anyshape.write_parameters(directory, model)
        model = model.to(device)
        module = anyshape.load(directory, device=device)
        inductor = torch.compile(model, dynamic=True)
        calls = {"anyshape": lambda ids, mask: module(ids, attention_mask=mask),
                 "eager": lambda ids, mask: model(ids, mask),
                 "inductor": lambda ids, mask: inductor(ids, mask)}
        for batch in batches:
            for length in lengths:
                if length > info["max_len"]:
                    continue
                cell = {"model": info["model"], "dtype": info["dtype"], "batch": batch,
                        "L": length, "samples_ms": {s: [] for s in SYSTEMS}, "max_abs_diff": {},
                        "errors": {}}
                ids, mask = _inputs(batch, length, device, seed=batch * 1000 + length)
                with torch.no_grad():
                    expected = model(ids, mask).float()
                    for system in SYSTEMS:
                        try:
                            for _ in range(WARMUP):
                                output = calls[system](ids, mask)
                            cell["max_abs_diff"][system] = float(
                                (output.float() - expected).abs().max())
                        except Exception as error:  # noqa: BLE001 - written into the cell
                            cell["errors"][system] = f"{type(error).__name__}: {error}"[:200]
                    for _ in range(runs):
                        for system in SYSTEMS:
                            if system not in cell["errors"]:
                                cell["samples_ms"][system].append(
                                    _timed_ms(lambda: calls[system](ids, mask), device))
                cell["median_ms"] = {s: statistics.median(v) if v else None
                                     for s, v in cell["samples_ms"].items()}
                cells.append(cell)
                print(_row(cell), flush=True)
    environment = {
        "device": torch.cuda.get_device_name() if device != "cpu" else platform.processor(),
        "torch": torch.__version__, "python": platform.python_version(),
        "anyshape artifacts": [json.loads((d / "bench.json").read_text()) for d in directories],
        "runs": runs,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "cuda.json").write_text(json.dumps({"environment": environment, "cells": cells},
                                              indent=2) + "\n")
    (out / "cuda.md").write_text(_table(cells, environment))
    print(_table(cells, environment))
    return cells


_HEADER = ("| model | dtype | batch | L | anyshape ms | eager ms | inductor ms | eager / anyshape "
           "| inductor / anyshape | max err anyshape | max err inductor |")


def _row(cell: dict) -> str:
    ms = cell["median_ms"]

    def time(system):
        if system in cell["errors"]:
            return f"failed: {cell['errors'][system][:60]}"
        error = cell["max_abs_diff"].get(system, 0.0)
        return "WRONG" if error > TOLERANCE[cell["dtype"]] else f"{ms[system]:.2f}"

    def ratio(system):
        if ms.get(system) is None or ms.get("anyshape") is None:
            return "-"
        return f"{ms[system] / ms['anyshape']:.2f}x"

    def err(system):
        return f"{cell['max_abs_diff'][system]:.1e}" if system in cell["max_abs_diff"] else "-"

    return (f"| {cell['model']} | {cell['dtype']} | {cell['batch']} | {cell['L']} | "
            f"{time('anyshape')} | {time('eager')} | {time('inductor')} | {ratio('eager')} | "
            f"{ratio('inductor')} | {err('anyshape')} | {err('inductor')} |")


def _table(cells: list[dict], environment: dict) -> str:
    lines = [f"Device: {environment['device']}; torch {environment['torch']}, Python "
             f"{environment['python']}; medians of {environment['runs']} runs after "
             f"{WARMUP} warm-up calls; errors against eager in the same dtype (TF32 off).", "",
             _HEADER, "|" + "---|" * 11]
    return "\n".join(lines + [_row(c) for c in cells]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    steps = parser.add_subparsers(dest="step", required=True)
    comp = steps.add_parser("compile", help="compile the artifacts (no GPU needed)")
    comp.add_argument("--out", type=Path, required=True)
    comp.add_argument("--models", nargs="+", choices=list(MODEL_KEYS), default=list(MODEL_KEYS))
    comp.add_argument("--dtypes", nargs="+", choices=list(TOLERANCE), default=list(TOLERANCE))
    comp.add_argument("--cuda-arch", default=None, help="default: anyshape's (sm_80)")
    comp.add_argument("--target", choices=["cuda", "cpu"], default="cuda",
                      help="cpu: a smoke test of the harness without a GPU")
    comp.add_argument("--tiny", action="store_true", help="2-layer models (smoke tests)")
    run = steps.add_parser("run", help="time the artifacts compiled by 'compile'")
    run.add_argument("artifacts", type=Path)
    run.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    run.add_argument("--lengths", nargs="+", type=int, default=[128, 512])
    run.add_argument("--runs", type=int, default=20)
    run.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu (smoke)")
    run.add_argument("--out", type=Path, default=HERE / "results")
    both = steps.add_parser("all", help="compile, then run, on this machine")
    both.add_argument("--models", nargs="+", choices=list(MODEL_KEYS), default=list(MODEL_KEYS))
    both.add_argument("--dtypes", nargs="+", choices=list(TOLERANCE), default=list(TOLERANCE))
    both.add_argument("--cuda-arch", default=None)
    both.add_argument("--tiny", action="store_true")
    both.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    both.add_argument("--lengths", nargs="+", type=int, default=[128, 512])
    both.add_argument("--runs", type=int, default=20)
    both.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args(argv)
    if any(b > MAX_BATCH for b in getattr(args, "batches", [])):
        parser.error(f"--batches: the artifacts take batch 1..{MAX_BATCH}")
    if args.step == "compile":
        compile_all(args.out, args.models, args.dtypes, args.target, args.cuda_arch, args.tiny)
    elif args.step == "run":
        run_all(args.artifacts, args.batches, args.lengths, args.runs, args.device, args.out)
    else:
        import torch

        if not torch.cuda.is_available():
            parser.error("no CUDA device here: compile here with 'bench/cuda.py compile' and "
                         "run on the GPU machine with 'bench/cuda.py run' (bench/README.md)")
        workdir = Path(tempfile.mkdtemp(prefix="anyshape-cuda-bench-"))
        try:
            compile_all(workdir, args.models, args.dtypes, "cuda", args.cuda_arch, args.tiny)
            run_all(workdir, args.batches, args.lengths, args.runs, "cuda", args.out)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
