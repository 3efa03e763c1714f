"""The step from L to L + 1, each pair of lengths timed in alternation.

``sweep.py`` times every system at one L, then moves to the next: on a shared
host whose speed drifts by tens of percent within a minute, the drift between
two neighbouring lengths can be larger than the step it is asked to show
(in one sweep onnxruntime "stepped" +99 % from 139 to 140). Here each round
times, for every system in turn, an untimed call and then L and L + 1 back to
back, so the two calls of a ratio T(L + 1) / T(L) are milliseconds apart.
The untimed call is there because a call right after another system's is
slower (that system's threads still spin, its weights fill the caches). Half
the rounds call L first, half L + 1 first; the step is the geometric mean of
the two halves' medians, minus 1, so that what a call leaves for the next one
cancels out.

The report also gives 1 / L, the step of a cost in proportion to the rows: a
product bound by arithmetic rather than by reading its weights grows by 1 / L
of its work per row (a model's fixed costs make its own step smaller).

    python bench/steps.py [--model roberta] [--lengths 1 2 ... 40] [--batch 1]
        [--systems anyshape onnxruntime] [--rounds 16] [--out bench/results/steps]

Writes ``steps.md`` and ``steps.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import compare  # noqa: E402  (sets OMP_WAIT_POLICY before torch is imported)
from compare import MODEL_KEYS, OPTIONAL_SYSTEMS, SYSTEMS  # noqa: E402

STEP_SYSTEMS = ["anyshape", "onnxruntime", "eager", "inductor"]
TARGET = 0.05  # issue 40: no step above 5 % from L to L + 1


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=list(MODEL_KEYS), default="roberta")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--lengths", type=int, nargs="+", default=list(range(1, 41)),
                        help="each L is timed against L + 1")
    parser.add_argument("--systems", nargs="+", choices=STEP_SYSTEMS + OPTIONAL_SYSTEMS,
                        default=["anyshape", "onnxruntime"])
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "steps")
    parser.add_argument("--tiny", action="store_true",
                        help="2 layers, hidden 64: a smoke test of this script, not a benchmark")
    args = parser.parse_args(argv)
    if args.rounds < 6 or args.rounds % 2:
        parser.error(f"--rounds: expected an even count of at least 6 (half in each order), "
                     f"got {args.rounds}")
    if args.batch < 1 or min(args.lengths) < 1:
        parser.error("--batch and --lengths: expected positive sizes")
    args.systems = [s for s in STEP_SYSTEMS + OPTIONAL_SYSTEMS if s in args.systems]
    args.batches = [args.batch]
    args.models = [args.model]
    args.data_tiling = None  # compile's default, as a user gets it
    return args


def time_call(runner, ids, mask) -> float:
    start = time.perf_counter()
    runner(ids, mask)
    return (time.perf_counter() - start) * 1e3


def measure_pair(runners: dict, model, batch: int, length: int, rounds: int) -> dict:
    """Per system: the step, its median in each order of the pair, and each length's
    fastest call."""
    import torch

    shapes = (length, length + 1)
    feeds = [compare.make_inputs(batch, n, seed=batch * 100_003 + n) for n in shapes]
    result = {}
    with torch.no_grad():
        expected = [model(*feed) for feed in feeds]
        for system, runner in runners.items():
            for feed, want in zip(feeds, expected):  # warm-up, checked against eager
                diff = compare._max_abs_diff(runner(*feed), want)
                if not diff <= compare.TOLERANCES.get(system, compare.TOLERANCE):
                    raise SystemExit(f"{SYSTEMS[system]} at {batch}x{feed[0].shape[1]}: "
                                     f"max |diff| vs eager {diff:.2e}")
                runner(*feed)
        ratios = {s: ([], []) for s in runners}  # rounds calling L first, L + 1 first
        fastest = {s: [float("inf")] * 2 for s in runners}
        for round_ in range(rounds):
            # The systems' order turns every two rounds, so that it does not go with the
            # pair's order, which turns every round.
            turn = (round_ // 2) % len(runners)
            order = list(runners)[turn:] + list(runners)[:turn]
            for system in order:
                pair = (0, 1) if round_ % 2 == 0 else (1, 0)
                # An untimed call first: the call right after another system's is slower
                # (that system's threads still spin, its weights fill the caches).
                runners[system](*feeds[pair[0]])
                times = [0.0, 0.0]
                for i in pair:
                    times[i] = time_call(runners[system], *feeds[i])
                    fastest[system][i] = min(fastest[system][i], times[i])
                ratios[system][round_ % 2].append(times[1] / times[0])
    for system in runners:
        by_order = [statistics.median(values) for values in ratios[system]]
        result[system] = {
            "step": math.sqrt(by_order[0] * by_order[1]) - 1,
            "by_order": [r - 1 for r in by_order],
            "fastest_ms": fastest[system],
        }
    return result


def render(args, rows: list[dict], header: str) -> str:
    systems = [s for s in args.systems if any(s in r["systems"] for r in rows)]
    lines = [header, ""]
    for system in systems:
        steps = [(r["systems"][system]["step"], r["L"]) for r in rows if system in r["systems"]]
        above = [(s, n) for s, n in steps if s > TARGET]
        beyond_rows = [(s, n) for s, n in above if s > 1 / n]
        worst = max(steps)
        lines.append(f"- {SYSTEMS[system]}: largest step {worst[0] * 100:+.1f} % at L = {worst[1]}; "
                     f"above {TARGET:.0%} at {len(above)} of {len(steps)} pairs"
                     + (f" ({', '.join(str(n) for _, n in above)})" if above else "")
                     + f"; above both {TARGET:.0%} and 1 / L at {len(beyond_rows)}"
                     + (f" ({', '.join(str(n) for _, n in beyond_rows)})" if beyond_rows else "")
                     + ".")
    head = ["L -> L + 1", "1 / L"]
    for system in systems:
        head += [f"{SYSTEMS[system]} step (L first, L + 1 first)", f"{SYSTEMS[system]} fastest ms"]
    lines += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [f"{row['L']} -> {row['L'] + 1}", f"{100 / row['L']:.1f} %"]
        for system in systems:
            found = row["systems"].get(system)
            if found is None:
                cells += ["", ""]
                continue
            first, second = found["by_order"]
            cells.append(f"{found['step'] * 100:+.1f} % ({first * 100:+.1f}, {second * 100:+.1f})")
            cells.append(" -> ".join(f"{ms:.2f}" for ms in found["fastest_ms"]))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    command = shlex.join(["python", "bench/steps.py", *argv])

    def log(text):
        print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)

    started = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory(prefix="anyshape-steps-") as temp:
        workdir = Path(temp)
        model, max_len, base_task = compare.model_setup(args.model, args, workdir)
        lengths = [n for n in args.lengths if n + 1 <= max_len]
        runners, failed, _ = compare.build_systems(
            args.model, model, args, workdir, base_task, lambda *_, **__: None, log,
            (args.batch, max(2, lengths[0])))
        if failed:
            raise SystemExit("; ".join(f"{SYSTEMS[s]}: {e}" for s, e in failed.items()))
        runners = {s: runners[s] for s in args.systems}
        for length in lengths:
            found = measure_pair(runners, model, args.batch, length, args.rounds)
            rows.append({"L": length, "systems": found})
            log(f"{length} -> {length + 1}: " + ", ".join(
                f"{SYSTEMS[s]} {v['step'] * 100:+.1f} %" for s, v in found.items()))
            gc.collect()
        del runners
    header = (f"# The step from L to L + 1, timed in alternation\n\n"
              f"{MODEL_KEYS[args.model]}, batch {args.batch}; {platform.machine()} "
              f"({compare._cpu_name()}), {os.cpu_count()} cores, {args.threads} threads; fp32, "
              f"random weights{', TINY model: not a benchmark' if args.tiny else ''}; "
              f"{time.strftime('%Y-%m-%d %H:%M')}; {compare._versions()}.\n\n"
              f"Command: `{command}`\n\n"
              f"A step is T(L + 1) / T(L) - 1 over {args.rounds} rounds, the two calls of each "
              "ratio adjacent in time: the geometric mean of the medians of the rounds that call "
              "L first and of those that call L + 1 first (each in brackets). 1 / L is the step "
              "of a cost proportional to the rows. Whole run: "
              f"{time.perf_counter() - started:.0f} s.")
    text = render(args, rows, header)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "steps.md").write_text(text)
    (args.out / "steps.json").write_text(json.dumps({"command": command, "rows": rows}, indent=1) + "\n")
    print(text)
    print(f"written: {args.out / 'steps.md'}, {args.out / 'steps.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
