"""Continuous batching against static batches and one request at a time, in one process.

A seeded stream of generation requests arrives in real time (Poisson, at
each ``--rates`` requests per second): prompts of long-tailed real lengths
(``served.request_lengths``: most 10 to 80 tokens, a few up to 512) and
outputs of 16 to 256 tokens (log-uniform), greedy, on GPT-2 small (random
weights, float32; ``--small``: a 2-layer one, for a quick look). The same
compiled generator serves it three ways:

- ``continuous``: ``anyshape.Scheduler`` (8 rows): requests join the running
  batch at the next step and leave when done;
- ``static-8``: whenever the generator is idle, the requests waiting (up to
  8) run as one left-padded ``generate`` call until its longest is done;
  a request that arrives meanwhile waits for the next call;
- ``one-at-a-time``: the same with batches of 1.

Per system: throughput (new tokens over the time from the first arrival to
the last token), time to first token (arrival to first token) and the time
between tokens, p50 and p99. No HTTP server is in the loop (issue 68's
``anyshape-serve`` will add one); the end token is off, so every request
gets its length.

    python bench/continuous_batching.py [--requests 32] [--rates 1 2 4] [--seed 0] [--small]
        [--out bench/results/continuous-batching]

Writes ``continuous-batching.md`` and ``.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from family_sweep import host_cpu  # noqa: E402
from served import request_lengths  # noqa: E402

SYSTEMS = ("continuous", "static-8", "one-at-a-time")
ROWS = 8


def workload(count: int, rate: float, seed: int, vocab: int):
    """(arrival s, prompt [length], new tokens) per request, in arrival order."""
    import numpy as np
    import torch

    rng = np.random.default_rng(seed)
    lengths = request_lengths(count, seed, 512)
    new = [int(n) for n in np.rint(np.exp(rng.uniform(np.log(16), np.log(256), count)))]
    arrivals = np.cumsum(rng.exponential(1.0 / rate, count))
    generator = torch.Generator().manual_seed(seed)
    return [(float(at), torch.randint(3, vocab, (n,), generator=generator), m)
            for at, n, m in zip(arrivals, lengths, new)]


class _Times:
    """A ``generate`` streamer: when each step's tokens came."""

    def __init__(self):
        self.steps: list[float] = []
        self._prompt_seen = False

    def put(self, value):
        if not self._prompt_seen:  # the first call passes the prompt
            self._prompt_seen = True
            return
        self.steps.append(time.monotonic())

    def end(self):
        pass


def run_continuous(generator, requests) -> list[list[float]]:
    import anyshape

    scheduler = anyshape.Scheduler(generator, rows=ROWS)
    start = time.monotonic()
    times: list[list[float]] = [[] for _ in requests]
    handles, arrived = {}, 0
    while arrived < len(requests) or scheduler.running or scheduler.waiting:
        now = time.monotonic() - start
        while arrived < len(requests) and requests[arrived][0] <= now:
            _, prompt, new = requests[arrived]
            handles[arrived] = scheduler.submit(prompt, max_new_tokens=new, eos_token_id=[])
            arrived += 1
        if not scheduler.running and not scheduler.waiting:
            time.sleep(max(0.0, requests[arrived][0] - now))
            continue
        scheduler.step()
        stamp = time.monotonic() - start
        for number, request in handles.items():
            while len(times[number]) < len(request.tokens):
                times[number].append(stamp)
    return times


def run_static(generator, requests, batch: int) -> list[list[float]]:
    import torch

    start = time.monotonic()
    times: list[list[float]] = [[] for _ in requests]
    arrived, served = 0, 0
    while served < len(requests):
        now = time.monotonic() - start
        while arrived < len(requests) and requests[arrived][0] <= now:
            arrived += 1
        if served == arrived:
            time.sleep(max(0.0, requests[arrived][0] - now))
            continue
        group = list(range(served, min(arrived, served + batch)))
        served = group[-1] + 1
        width = max(len(requests[n][1]) for n in group)
        ids = torch.zeros(len(group), width, dtype=torch.long)
        mask = torch.zeros(len(group), width, dtype=torch.long)
        for row, number in enumerate(group):
            prompt = requests[number][1]
            ids[row, width - len(prompt):] = prompt
            mask[row, width - len(prompt):] = 1
        streamer = _Times()
        generator.generate(ids, attention_mask=mask, pad_token_id=0, streamer=streamer,
                           max_new_tokens=max(requests[n][2] for n in group))
        for row, number in enumerate(group):
            times[number] = [t - start for t in streamer.steps[:requests[number][2]]]
    return times


def summary(requests, times) -> dict:
    tokens = sum(len(t) for t in times)
    first = min(at for at, _, _ in requests)
    last = max(t[-1] for t in times)
    ttft = [t[0] - at for (at, _, _), t in zip(requests, times)]
    gaps = [b - a for t in times for a, b in zip(t, t[1:])]

    def pct(values, q):
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]

    return {"tokens": tokens, "seconds": last - first, "tokens_per_s": tokens / (last - first),
            "ttft_p50_ms": 1e3 * statistics.median(ttft), "ttft_p99_ms": 1e3 * pct(ttft, 0.99),
            "itl_p50_ms": 1e3 * statistics.median(gaps), "itl_p99_ms": 1e3 * pct(gaps, 0.99)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--rates", type=float, nargs="+", default=[1.0, 2.0, 4.0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--small", action="store_true", help="a 2-layer GPT-2, for a quick look")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "continuous-batching")
    args = parser.parse_args(argv)

    import torch
    import transformers

    import anyshape

    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    # No end token: every request gets its length, in every system.
    config = transformers.GPT2Config(eos_token_id=None, **(dict(n_layer=2) if args.small else {}))
    model = transformers.GPT2LMHeadModel(config).eval()
    started = time.monotonic()
    generator = anyshape.compile_generator(model)
    compile_s = time.monotonic() - started
    results = []
    for rate in args.rates:
        requests = workload(args.requests, rate, args.seed, config.vocab_size)
        for system in SYSTEMS:
            run = {"continuous": lambda: run_continuous(generator, requests),
                   "static-8": lambda: run_static(generator, requests, ROWS),
                   "one-at-a-time": lambda: run_static(generator, requests, 1)}[system]
            row = {"rate": rate, "system": system, **summary(requests, run())}
            print(json.dumps(row), flush=True)
            results.append(row)
    command = "python bench/continuous_batching.py " + shlex.join(sys.argv[1:] if argv is None
                                                                   else argv)
    host = host_cpu()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "continuous-batching.json").write_text(json.dumps(
        {"host": host, "command": command, "compile_s": compile_s, "results": results}, indent=1))
    lines = [f"# Continuous batching, {'2-layer ' if args.small else ''}GPT-2 small, greedy",
             "", f"Host: {host}. Command: `{command}`. Compile: {compile_s:.0f} s.", "",
             "| rate (req/s) | system | tokens/s | TTFT p50 ms | TTFT p99 ms | "
             "between tokens p50 ms | p99 ms |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['rate']:g} | {r['system']} | {r['tokens_per_s']:.1f} | "
              f"{r['ttft_p50_ms']:.0f} | {r['ttft_p99_ms']:.0f} | {r['itl_p50_ms']:.1f} | "
              f"{r['itl_p99_ms']:.1f} |" for r in results]
    (args.out / "continuous-batching.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
