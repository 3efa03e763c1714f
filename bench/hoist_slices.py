"""Latency with and without anyshape-hoist-slices, side by side in one run.

roberta-base sequence classification (reads features[:, 0, :]) and GPT-2 small
last-token logits (reads logits[:, -1, :]), batch 1, fp32, built from their
configs (random weights: latency does not depend on them). Each model is
compiled twice, once with the default pipeline and once without the pass;
at each length the two artifacts run alternately (warm-up, then medians of
``--runs``), so drift on the machine hits both alike.

    python bench/hoist_slices.py [--models roberta gpt2] [--lengths 128 512] [--runs 10]
                                 [--data-tiling {auto,on,off}]
                                 [--out bench/results] [--keep DIR] [--tiny]

``--data-tiling`` is ``compile``'s ``data_tiling`` for both artifacts: ``auto``
(default, ``None``: on for CPU unless IREE fails with it), ``on`` or ``off``;
the table says what each side got (with it, both run
``anyshape-data-tiling-forms``). ``--keep DIR`` saves the artifacts there (``<model>-with``,
``<model>-without``) for ``bench/profile_dispatches.py``.

Writes ``hoist_slices.md`` (``hoist_slices-data-tiling-<mode>.md`` for ``on``/``off``)
under ``--out`` and prints it.
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
from torch.export import Dim

import anyshape
from anyshape.passes.print_flops.flops import count_flops
from models import MODELS  # bench/models.py: the wrappers shared with bench/compare.py

WITHOUT = ["anyshape-canonicalize-shapes", "anyshape-lower"]


def _compile(model, max_len, passes, data_tiling):
    ids = torch.randint(3, 1000, (2, 8))  # batch 1 would be specialized by torch.export
    mask = torch.ones(2, 8, dtype=torch.long)
    dynamic = {"input_ids": {0: Dim("batch", min=1, max=8), 1: Dim("seq", min=1, max=max_len)},
               "attention_mask": {0: Dim("batch", min=1, max=8), 1: Dim("seq", min=1, max=max_len)}}
    start = time.perf_counter()
    module = anyshape.compile(model, (ids,), {"attention_mask": mask}, dynamic_shapes=dynamic,
                              passes=passes,
                              backend=anyshape.BackendOptions(data_tiling=data_tiling))
    return module, time.perf_counter() - start


def _time_ms(fn) -> tuple[float, float]:
    """(wall, CPU) milliseconds of one call; CPU time is this process's, all
    threads (IREE's workers run in it), so it is not inflated by time the
    virtual machine's host steals, which the wall time is."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return (time.perf_counter() - wall) * 1e3, (time.process_time() - cpu) * 1e3


def _cpu_ticks() -> tuple[int, int]:
    """(steal, total) jiffies of all CPUs so far (/proc/stat), or (0, 0)."""
    try:
        fields = [int(v) for v in open("/proc/stat").readline().split()[1:]]
    except OSError:
        return 0, 0
    return (fields[7] if len(fields) > 7 else 0), sum(fields)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=["roberta", "gpt2"], default=["roberta", "gpt2"])
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--data-tiling", choices=["auto", "on", "off"], default="auto",
                        help="data_tiling for both artifacts: auto (None, the default), on, off")
    parser.add_argument("--keep", type=Path, default=None,
                        help="save the artifacts under this directory")
    parser.add_argument("--tiny", action="store_true",
                        help="2 layers, hidden 64: a smoke test of this script, not a benchmark")
    args = parser.parse_args(argv)
    if args.runs < 10:
        parser.error(f"--runs: expected at least 10 (medians of 10 or more), got {args.runs}")
    torch.manual_seed(0)
    rows = []
    tiled = {}
    ticks_at_start = _cpu_ticks()
    # the two models whose outputs read one row (bench/models.py also has full-logits ones)
    chosen = [name for name in ("roberta-base classifier", "gpt2-small last-token logits")
              if name.split("-")[0] in args.models]
    for name, (build, max_len) in ((name, MODELS[name]) for name in chosen):
        model = build(tiny=args.tiny).eval()
        print(f"{name}: compiling with and without anyshape-hoist-slices", flush=True)
        data_tiling = {"auto": None, "on": True, "off": False}[args.data_tiling]
        with_pass, with_s = _compile(model, max_len, None, data_tiling)
        without_pass, without_s = _compile(model, max_len, WITHOUT, data_tiling)
        tiled[name] = (with_pass.target.data_tiling, without_pass.target.data_tiling)
        if args.keep is not None:
            stem = name.split()[0]
            with_pass.save(args.keep / f"{stem}-with")
            without_pass.save(args.keep / f"{stem}-without")
        flops_with = count_flops(with_pass.ir("anyshape-hoist-slices"))
        flops_without = count_flops(without_pass.ir("anyshape-canonicalize-shapes"))
        batch, seq = (next(s for s, root in flops_with.symbols.items() if root == (0, axis))
                      for axis in (0, 1))
        for length in args.lengths:
            ids = torch.randint(3, 1000, (1, length))
            mask = torch.ones(1, length, dtype=torch.long)
            with torch.no_grad():
                expected = model(ids, attention_mask=mask)
            for module in (with_pass, without_pass):  # warm-up, and a correctness check
                torch.testing.assert_close(module(ids, attention_mask=mask), expected,
                                           atol=1e-3, rtol=1e-3)
            samples = {"with": [], "without": []}
            for _ in range(args.runs):  # alternate, so both see the same machine state
                samples["with"].append(_time_ms(lambda: with_pass(ids, attention_mask=mask)))
                samples["without"].append(_time_ms(lambda: without_pass(ids, attention_mask=mask)))
            with_ms, without_ms = (statistics.median(w for w, _ in samples[k]) for k in ("with", "without"))
            with_cpu, without_cpu = (statistics.median(c for _, c in samples[k])
                                     for k in ("with", "without"))
            sizes = {batch.name: 1, seq.name: length}
            gflop_with, gflop_without = (r.evaluate(**sizes) / 1e9 for r in (flops_with, flops_without))
            rows.append((name, length, without_ms, with_ms, with_ms / without_ms,
                         without_cpu, with_cpu, with_cpu / without_cpu,
                         gflop_without, gflop_with, 1 - gflop_with / gflop_without))
            print(f"  L={length}: without {without_ms:.1f} ms, with {with_ms:.1f} ms "
                  f"({with_ms / without_ms:.3f}x); CPU time {without_cpu:.1f} ms, "
                  f"{with_cpu:.1f} ms ({with_cpu / without_cpu:.3f}x)", flush=True)
        print(f"  compile: {with_s:.0f} s with, {without_s:.0f} s without", flush=True)
    table = ["| model | L | without the pass (ms) | with the pass (ms) | ratio | "
             "CPU ms without | CPU ms with | CPU ratio | GFLOP without | GFLOP with | FLOPs saved |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, length, without_ms, with_ms, ratio, c0, c1, cpu_ratio, g0, g1, saved in rows:
        table.append(f"| {name} | {length} | {without_ms:.1f} | {with_ms:.1f} | {ratio:.3f} | "
                     f"{c0:.1f} | {c1:.1f} | {cpu_ratio:.3f} | {g0:.2f} | {g1:.2f} | {saved:.1%} |")
    steal, total = (end - start for end, start in zip(_cpu_ticks(), ticks_at_start))
    got = "; ".join(f"{name}: data tiling {'on' if w else 'off'} with the pass, "
                    f"{'on' if wo else 'off'} without" for name, (w, wo) in tiled.items())
    header = (f"batch 1, fp32, --data-tiling={args.data_tiling} ({got}; with it a side runs "
              f"anyshape-data-tiling-forms), medians of {args.runs} alternating runs (wall time, and the "
              f"process's CPU time over all its threads); "
              f"{platform.machine()}, {os.cpu_count()} cores; the host stole "
              f"{steal / max(total, 1):.0%} of CPU time during the run; "
              f"`python bench/hoist_slices.py --models {' '.join(args.models)} --runs {args.runs}"
              f"{'' if args.data_tiling == 'auto' else ' --data-tiling=' + args.data_tiling}"
              f"{' --tiny' if args.tiny else ''}`"
              f"{'; TINY models (2 layers, hidden 64): not a benchmark' if args.tiny else ''}")
    text = "\n".join([header, "", *table, ""])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"hoist_slices{'' if args.data_tiling == 'auto' else '-data-tiling-' + args.data_tiling}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
