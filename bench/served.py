"""A served workload: requests of real-world lengths, one at a time and in padded groups of 8.

Users do not send round lengths. This replays a seeded stream of requests
whose lengths are long-tailed (most between 10 and 80 tokens, a few up to
512) through each system built as ``compare.py`` builds it, and reports
requests per second:

- one at a time: each request alone, batch 1, at its own length;
- batched: in arrival order, groups of ``--group`` requests padded to the
  group's longest (pad token 1, attention mask 0 there), as a server that
  batches without bucketing does.

``anyshape-packed`` is anyshape with ``padding="eliminate"``: the same
padded calls, its token-wise layers on the real tokens only.
``anyshape-bf16`` (only when named) is anyshape with
``matmul_precision="medium"``: bfloat16 products, checked against eager
within its own tolerance (``compare.TOLERANCES``). ``anyshape-iree-products``
(only when named) is anyshape with ``product_kernel="iree"``: IREE's own
products, which compute whole tiles of 16 rows, in place of anyshape's kernel.

The systems take turns request by request (group by group), each turn
starting one system later, so drift on the machine hits them alike; a
system's time is the sum of its calls. IREE static is not a system here: it
would need a build per shape the stream holds. Before the timed pass every
system runs the first few requests and the first group, checked against eager
(beyond 1e-3: WRONG, not timed), which also compiles inductor's graphs for
batch 1 and the group size.

    python bench/served.py [--model roberta] [--requests 300] [--group 8] [--seed 0]
        [--systems anyshape anyshape-packed onnxruntime eager inductor] [--out bench/results]

Writes ``served.md`` and ``served.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
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
from compare import MODEL_KEYS, OPTIONAL_SYSTEMS, SYSTEMS, TOLERANCE, TOLERANCES  # noqa: E402

SERVED_SYSTEMS = ["anyshape", "anyshape-packed", "onnxruntime", "eager", "inductor"]
PAD_ID = 1
CHECKED_REQUESTS = 4


def request_lengths(count: int, seed: int, max_len: int) -> list[int]:
    """Seeded lengths: a log-normal body (median 36) and a log-uniform tail from 80 to 512 (8 %)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    body = np.exp(rng.normal(np.log(36.0), 0.5, count))
    tail = np.exp(rng.uniform(np.log(80.0), np.log(512.0), count))
    lengths = np.where(rng.random(count) < 0.08, tail, body)
    return [int(n) for n in np.clip(np.rint(lengths), 4, max_len)]


def requests(lengths: list[int], seed: int):
    import torch

    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 1000, (1, n), generator=generator) for n in lengths]


def padded_group(group: list) -> tuple:
    import torch

    longest = max(ids.shape[1] for ids in group)
    ids = torch.full((len(group), longest), PAD_ID, dtype=torch.long)
    mask = torch.zeros((len(group), longest), dtype=torch.long)
    for row, request in enumerate(group):
        ids[row, :request.shape[1]] = request[0]
        mask[row, :request.shape[1]] = 1
    return ids, mask


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=list(MODEL_KEYS), default="roberta")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--systems", nargs="+", choices=SERVED_SYSTEMS + OPTIONAL_SYSTEMS,
                        default=SERVED_SYSTEMS,
                        help="anyshape-bf16 (matmul_precision='medium') and anyshape-iree-products (product_kernel='iree') run only when named")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--tiny", action="store_true",
                        help="2 layers, hidden 64: a smoke test of this script, not a benchmark")
    args = parser.parse_args(argv)
    if args.requests < args.group or args.group < 1:
        parser.error(f"--requests and --group: expected 1 <= group <= requests, "
                     f"got group {args.group}, requests {args.requests}")
    args.systems = [s for s in SERVED_SYSTEMS + OPTIONAL_SYSTEMS if s in args.systems]
    args.batches = [1, args.group]  # the batch sizes the builds must take
    args.data_tiling = None
    return args


def run_workload(calls: list[tuple], runners: dict, errors: dict) -> dict[str, float]:
    """Seconds per system over ``calls`` (``(ids, mask)``), taking turns call by call."""
    import torch

    active = [s for s in runners if s not in errors]
    seconds = dict.fromkeys(active, 0.0)
    with torch.no_grad():
        for index, (ids, mask) in enumerate(calls):
            turn = index % len(active) if active else 0
            for system in active[turn:] + active[:turn]:
                if system in errors:
                    continue
                try:
                    start = time.perf_counter()
                    runners[system](ids, mask)
                    seconds[system] += time.perf_counter() - start
                except Exception as error:  # noqa: BLE001
                    errors[system] = f"failed: {compare._brief(error)}"
    return {s: t for s, t in seconds.items() if s not in errors}


def check(calls: list[tuple], model, runners: dict, errors: dict, diffs: dict) -> None:
    """Each system against eager on ``calls`` (the warm-up)."""
    import torch

    with torch.no_grad():
        for ids, mask in calls:
            expected = model(ids, mask)
            for system, runner in runners.items():
                if system in errors:
                    continue
                try:
                    diff = compare._max_abs_diff(runner(ids, mask), expected)
                except Exception as error:  # noqa: BLE001
                    errors[system] = f"failed: {compare._brief(error)}"
                    continue
                diffs[system] = max(diffs.get(system, 0.0), diff)
                if not diff <= TOLERANCES.get(system, TOLERANCE):
                    errors[system] = f"WRONG: max |diff| vs eager {diff:.2e}"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    command = shlex.join(["python", "bench/served.py", *argv])
    compiles: list[dict] = []
    modes: dict[str, dict] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="anyshape-served-") as temp:
        workdir = Path(temp)
        model, max_len, base_task = compare.model_setup(args.model, args, workdir)

        def log(text):
            print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)

        def record_compile(system, built_for, result, note=""):
            compiles.append({"system": SYSTEMS[system], "built_for": built_for,
                             "seconds": result.get("seconds"), "error": result.get("error")})

        runners, failed, _ = compare.build_systems(args.model, model, args, workdir, base_task,
                                                   record_compile, log, (1, 17))
        lengths = request_lengths(args.requests, args.seed, max_len)
        singles = requests(lengths, args.seed)
        groups = [singles[i:i + args.group] for i in range(0, len(singles), args.group)]
        padded = [padded_group(group) for group in groups]
        plans = {"one at a time": [(ids, torch.ones_like(ids)) for ids in singles],
                 f"batched, groups of {args.group} padded to the longest": padded}
        for mode, calls in plans.items():
            errors = {s: f"failed: {e}" for s, e in failed.items()}
            diffs: dict[str, float] = {}
            mode_runners = {s: runners[s] for s in args.systems if s in runners}
            log(f"{mode}: checking against eager (warm-up)")
            check(calls[:CHECKED_REQUESTS] if mode == "one at a time" else calls[:1], model,
                  mode_runners, errors, diffs)
            log(f"{mode}: {len(calls)} calls, the systems taking turns")
            seconds = run_workload(calls, mode_runners, errors)
            modes[mode] = {"seconds": seconds, "errors": errors, "diffs": diffs,
                           "requests_per_s": {s: args.requests / t for s, t in seconds.items()}}
            log(f"{mode}: " + ", ".join(f"{SYSTEMS[s]} {args.requests / t:.1f} req/s"
                                        for s, t in seconds.items()))
    rows = sum(ids.shape[0] * ids.shape[1] for ids, _ in padded)
    padding = 1 - sum(lengths) / rows
    ordered = sorted(lengths)
    header = (f"# A served workload\n\n"
              f"{platform.machine()} ({compare._cpu_name()}), {os.cpu_count()} cores; {args.threads} "
              f"threads; {MODEL_KEYS[args.model]}, fp32, random weights"
              f"{', TINY model: not a benchmark' if args.tiny else ''}; "
              f"{time.strftime('%Y-%m-%d %H:%M')}; {compare._versions()}.\n\n"
              f"Command: `{command}`\n\n"
              f"{args.requests} requests (seed {args.seed}), lengths: median {statistics.median(lengths):.0f}, "
              f"10th percentile {ordered[len(ordered) // 10]}, 90th {ordered[len(ordered) * 9 // 10]}, "
              f"longest {ordered[-1]}; {sum(1 for n in lengths if 10 <= n <= 80) / len(lengths):.0%} "
              f"between 10 and 80 tokens. Batched in arrival order, {padding:.0%} of the token rows "
              f"computed are padding. Whole run: {time.perf_counter() - started:.0f} s.")
    lines = [header, "", "Requests per second (higher is better); in brackets the ratio to anyshape "
             "(above 1: faster than anyshape).", ""]
    head = ["system"] + list(modes)
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for system in args.systems:
        row = [SYSTEMS[system]]
        for result in modes.values():
            rate, base = result["requests_per_s"].get(system), result["requests_per_s"].get("anyshape")
            if rate is None:
                row.append(compare._md(result["errors"].get(system, "not run")))
            else:
                row.append(f"{rate:.1f}" + (f" ({rate / base:.2f}x)" if base and system != "anyshape" else ""))
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "## Compiles", "", "| system | built for | s |", "|---|---|---|"]
    for entry in compiles:
        seconds = (f"failed: {compare._md(entry['error'])}" if entry.get("error") else
                   "n/a" if entry["seconds"] is None else f"{entry['seconds']:.1f}")
        lines.append(f"| {entry['system']} | {entry['built_for']} | {seconds} |")
    text = "\n".join(lines) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "served.md").write_text(text)
    (args.out / "served.json").write_text(json.dumps(
        {"command": command, "lengths": lengths, "padding_fraction": padding, "modes": modes,
         "compiles": compiles}, indent=1) + "\n")
    print(text)
    print(f"written: {args.out / 'served.md'}, {args.out / 'served.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
