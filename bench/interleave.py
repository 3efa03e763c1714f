"""Whole-call latency of saved anyshape artifacts, run in turn in one process.

Loads every artifact, then calls them round-robin ``--rounds`` times (A, B,
C, A, B, C, ...; each round starts one artifact later) on the same inputs and
prints each one's median and its ratio to the first. Dynamic dims are given
by their labels (``batch=1 seq=128``); inputs are filled as
``profile_dispatches.py`` fills them (token id 5, every other input 1).

    python bench/interleave.py STATIC_DIR DYNAMIC_DIR [...] --dims batch=1 seq=128 [--rounds 25]

Use it to compare builds of one model (a static one for the shape first):
on a shared host the speed drifts by tens of percent within minutes, so only
calls interleaved like this are comparable. ``compare.py`` does the same
across systems; this measures the artifacts it does not build.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from profile_dispatches import FILL, input_shapes, parse_dims  # noqa: E402


def inputs(artifact: Path, sizes: dict[str, int]) -> dict[str, np.ndarray]:
    manifest = json.loads((artifact / "manifest.json").read_text())
    return {name: np.full(shape, FILL.get(name, 1), dtype=dtype)
            for name, shape, dtype in input_shapes(manifest, sizes)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifacts", type=Path, nargs="+")
    parser.add_argument("--dims", nargs="+", required=True, metavar="LABEL=N")
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--threads", type=int, default=None,
                        help="IREE CPU threads (default: one per available core)")
    args = parser.parse_args(argv)
    if args.rounds < 3:
        parser.error(f"--rounds: expected at least 3, got {args.rounds}")
    sizes = parse_dims(parser, args.dims)

    import anyshape

    modules = [anyshape.load(a, threads=args.threads) for a in args.artifacts]
    feeds = [inputs(a, sizes) for a in args.artifacts]
    for module, feed in zip(modules, feeds):  # warm-up: loads the module, first-call work
        module(**feed)
    times: list[list[float]] = [[] for _ in modules]
    for round_ in range(args.rounds):
        for k in range(len(modules)):
            i = (round_ + k) % len(modules)
            start = time.perf_counter()
            modules[i](**feeds[i])
            times[i].append((time.perf_counter() - start) * 1e3)
    base = statistics.median(times[0])
    dims = " ".join(f"{label}={n}" for label, n in sizes.items())
    print(f"{dims}: median ms of {args.rounds} interleaved rounds, ratio to {args.artifacts[0]}")
    print("| artifact | ms | ratio |\n|---|---|---|")
    for artifact, samples in zip(args.artifacts, times):
        ms = statistics.median(samples)
        print(f"| {artifact} | {ms:.1f} | {ms / base:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
