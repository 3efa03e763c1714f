"""Latency at every sequence length: anyshape against onnxruntime, eager, inductor and IREE static.

A round-number table (32, 128, 512) hides what a user meets at L = 17 or 65:
anyshape's one dynamic build pays for whole tiles of rows, so its latency
steps where a static build's does not. This sweep times every L from 1 to
160 and a stride of 32 on to 512 (``--lengths`` to change), at batch 1 and
8, with the systems built once as ``compare.py`` builds them (anyshape with
a dynamic batch and length, onnxruntime from ``torch.onnx.export`` with
dynamic axes, eager, ``torch.compile(dynamic=True)``) and IREE static
compiled per shape at a few lengths only (``--static-lengths``: a build per
shape takes about 25 s).

In each (batch, L) every system is warmed up (2 calls, the first checked
against eager: beyond 1e-3 it shows WRONG), then runs ``--runs`` times
round-robin; a figure is the median. The report gives, per batch, the worst
anyshape / onnxruntime ratio and where, the largest step from L to L + 1 of
each system, and the whole table.

    python bench/sweep.py [--model roberta] [--batches 1 8] [--lengths ...]
        [--static-lengths 17 33 42 65 128] [--systems ...] [--runs 5] [--out bench/results]

Writes ``sweep.md``, ``sweep.json`` and ``sweep.png`` (latency against L,
one panel per batch) under ``--out``.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import shlex
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import compare  # noqa: E402  (sets OMP_WAIT_POLICY before torch is imported)
from compare import MODEL_KEYS, OPTIONAL_SYSTEMS, SYSTEMS, Cell  # noqa: E402

DEFAULT_LENGTHS = list(range(1, 161)) + list(range(192, 513, 32))
DEFAULT_STATIC = [17, 33, 42, 65, 128]
SWEEP_SYSTEMS = ["anyshape", "onnxruntime", "eager", "inductor", "iree-static"]
PEER = "onnxruntime"


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=list(MODEL_KEYS), default="roberta")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--lengths", type=int, nargs="+", default=DEFAULT_LENGTHS)
    parser.add_argument("--static-lengths", type=int, nargs="*", default=DEFAULT_STATIC,
                        help="lengths at which IREE static is compiled (one build per batch and L)")
    parser.add_argument("--systems", nargs="+", choices=SWEEP_SYSTEMS + OPTIONAL_SYSTEMS,
                        default=SWEEP_SYSTEMS,
                        help="anyshape-bf16 (matmul_precision='medium') and anyshape-iree-products (product_kernel='iree') run only when named")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--tiny", action="store_true",
                        help="2 layers, hidden 64: a smoke test of this script, not a benchmark")
    args = parser.parse_args(argv)
    if args.runs < 3:
        parser.error(f"--runs: expected at least 3 (a median), got {args.runs}")
    if min(args.batches) < 1 or min(args.lengths) < 1:
        parser.error("--batches and --lengths: expected positive sizes")
    missing = sorted(set(args.static_lengths) - set(args.lengths))
    if missing:
        parser.error(f"--static-lengths: expected lengths the sweep runs, got {missing}")
    args.systems = [s for s in SWEEP_SYSTEMS + OPTIONAL_SYSTEMS if s in args.systems]
    args.models = [args.model]
    args.data_tiling = None  # compile's default, as a user gets it
    return args


def sweep(args, workdir: Path, compiles: list) -> list[Cell]:
    name = MODEL_KEYS[args.model]
    model, max_len, base_task = compare.model_setup(args.model, args, workdir)

    def log(text):
        print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)

    def record_compile(system, built_for, result, note=""):
        compiles.append({"system": SYSTEMS[system], "built_for": built_for,
                         "seconds": result.get("seconds"), "error": result.get("error"), "note": note})

    lengths = [n for n in args.lengths if n <= max_len]
    # Inductor's first (cold) call: not at L = 1, which torch specializes.
    first = (args.batches[0], next((n for n in lengths if n > 1), lengths[0]))
    runners, failed, _ = compare.build_systems(args.model, model, args, workdir, base_task,
                                               record_compile, log, first)
    cells = []
    for batch in args.batches:
        for length in lengths:
            cell = Cell(name, batch, length)
            cells.append(cell)
            cell.errors.update({s: f"failed: {e}" for s, e in failed.items()})
            cell_runners = dict(runners)
            if "iree-static" in args.systems:
                if length in args.static_lengths:
                    log(f"batch {batch}, L {length}: compiling IREE static (child process)")
                    static, error = compare.build_static(
                        args.model, batch, length, args, workdir, base_task, record_compile,
                        workdir / f"static-{batch}x{length}")
                    if error:
                        cell.errors["iree-static"] = error
                    else:
                        cell_runners["iree-static"] = static
                else:
                    cell.errors["iree-static"] = "not built at this L"
            compare._measure(cell, model, cell_runners, args, record_compile)
            cell_runners = static = None  # unmaps this shape's static build
            gc.collect()
            compare._remove_tree(workdir / f"static-{batch}x{length}")
            log(f"batch {batch}, L {length}: " + ", ".join(
                f"{SYSTEMS[s]} {cell.ms(s):.2f}" for s in args.systems if cell.ms(s) is not None))
    return cells


def largest_step(cells: list[Cell], system: str):
    """The largest rise from L to L + 1 (ratio - 1) among consecutive lengths, and that L."""
    times = {c.length: c.ms(system) for c in cells}
    steps = [(times[n + 1] / times[n] - 1, n) for n in times
             if times.get(n) and times.get(n + 1)]
    return max(steps, default=None)


def render(args, cells: list[Cell], compiles: list[dict], header: str) -> str:
    systems = args.systems
    lines = [header, ""]
    for batch in args.batches:
        row_cells = [c for c in cells if c.batch == batch]
        lines += [f"## Batch {batch}", ""]
        ratios = [(c.ms("anyshape") / c.ms(PEER), c.length) for c in row_cells
                  if c.ms("anyshape") and c.ms(PEER)]
        if ratios:
            worst, best = max(ratios), min(ratios)
            above = sum(1 for r, _ in ratios if r > 1.0)
            lines.append(f"- anyshape / onnxruntime: worst {worst[0]:.2f} at L = {worst[1]}, best "
                         f"{best[0]:.2f} at L = {best[1]}; above 1.0 at {above} of {len(ratios)} lengths.")
        speedups = [c.ms("anyshape") / c.ms("anyshape-bf16") for c in row_cells
                    if c.ms("anyshape") and c.ms("anyshape-bf16")]
        if speedups:
            mean = math.exp(sum(math.log(x) for x in speedups) / len(speedups))
            diffs = [c.diffs["anyshape-bf16"] for c in row_cells if "anyshape-bf16" in c.diffs]
            lines.append(f"- anyshape's time / {SYSTEMS['anyshape-bf16']}'s: {mean:.2f} (geometric "
                         f"mean; {min(speedups):.2f} to {max(speedups):.2f} over {len(speedups)} "
                         f"lengths); its max |diff| vs eager up to {max(diffs):.1e}.")
        for system in systems:
            step = largest_step(row_cells, system)
            if step is not None:
                lines.append(f"- {SYSTEMS[system]}: largest step from L to L + 1: "
                             f"{step[0] * 100:+.0f} % at L = {step[1]} -> {step[1] + 1}.")
        head = ["L"] + [f"{SYSTEMS[s]} ms" for s in systems] + ["anyshape / onnxruntime"]
        lines += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for cell in row_cells:
            row = [str(cell.length)]
            for system in systems:
                ms = cell.ms(system)
                row.append(f"{ms:.2f}" if ms is not None else
                           ("" if cell.errors.get(system) == "not built at this L"
                            else compare._md(cell.errors.get(system, "not run"))))
            both = cell.ms("anyshape"), cell.ms(PEER)
            row.append(f"{both[0] / both[1]:.2f}" if all(both) else "")
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    lines += ["## Compiles", "", "| system | built for | s | note |", "|---|---|---|---|"]
    for entry in compiles:
        seconds = (f"failed: {compare._md(entry['error'])}" if entry.get("error") else
                   "n/a" if entry["seconds"] is None else f"{entry['seconds']:.1f}")
        lines.append(f"| {entry['system']} | {entry['built_for']} | {seconds} | "
                     f"{compare._md(entry['note'])} |")
    return "\n".join(lines) + "\n"


def plot(args, cells: list[Cell], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(args.batches), figsize=(7 * len(args.batches), 4.5),
                                squeeze=False)
    for axis, batch in zip(axes[0], args.batches):
        for system in args.systems:
            points = [(c.length, c.ms(system)) for c in cells
                      if c.batch == batch and c.ms(system) is not None]
            if points:
                static = system == "iree-static"
                axis.plot(*zip(*points), marker="o" if static else ".", linestyle="" if static else "-",
                          markersize=6 if static else 3, label=SYSTEMS[system])
        axis.set_title(f"{MODEL_KEYS[args.model]}, batch {batch}", fontsize=10)
        axis.set_xlabel("sequence length L")
        axis.set_ylabel(f"median ms ({args.runs} runs)")
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=8)
    figure.suptitle(f"CPU latency at every L, {args.threads} threads"
                    + (" (tiny model)" if args.tiny else ""))
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    command = shlex.join(["python", "bench/sweep.py", *argv])
    header = (f"# Latency at every length\n\n"
              f"{platform.machine()} ({compare._cpu_name()}), {os.cpu_count()} cores; {args.threads} "
              f"threads (torch, onnxruntime intra-op, IREE runtime); fp32, random weights"
              f"{', TINY model: not a benchmark' if args.tiny else ''}; medians of {args.runs} "
              f"round-robin runs after 2 warm-up calls; {time.strftime('%Y-%m-%d %H:%M')}; "
              f"{compare._versions()}.\n\nCommand: `{command}`\n\n"
              "anyshape: one build, dynamic batch 1..8 and L 1..max; IREE static: one build per "
              "(batch, L), at a few L only.")
    compiles: list[dict] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="anyshape-sweep-") as temp:
        cells = sweep(args, Path(temp), compiles)
    header += f" Whole run: {time.perf_counter() - started:.0f} s."
    text = render(args, cells, compiles, header)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sweep.md").write_text(text)
    (args.out / "sweep.json").write_text(json.dumps(
        {"command": command, "cells": [c.to_json() for c in cells], "compiles": compiles},
        indent=1) + "\n")
    plot(args, cells, args.out / "sweep.png")
    print(text)
    print(f"written: {args.out / 'sweep.md'}, {args.out / 'sweep.json'}, {args.out / 'sweep.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
