"""Latency with and without anyshape-hoist-slices, side by side in one run.

roberta-base sequence classification (reads features[:, 0, :]) and GPT-2 small
last-token logits (reads logits[:, -1, :]), batch 1, fp32, built from their
configs (random weights: latency does not depend on them). Each model is
compiled twice, once with the default pipeline and once without the pass;
at each length the two artifacts run alternately (warm-up, then medians of
``--runs``), so drift on the machine hits both alike.

    python bench/hoist_slices.py [--lengths 128 512] [--runs 10] [--out bench/results]

Writes ``hoist_slices.md`` (the table) under ``--out`` and prints it.
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
from anyshape.flops import count_flops

WITHOUT = ["anyshape-canonicalize-shapes", "anyshape-lower"]


class Logits(torch.nn.Module):
    """A HuggingFace model's logits as a tensor; ``position``: only that token's."""

    def __init__(self, model, position: int | None = None):
        super().__init__()
        self.model, self.position = model, position

    def forward(self, input_ids, attention_mask):
        logits = self.model(input_ids, attention_mask=attention_mask).logits
        return logits if self.position is None else logits[:, self.position, :]


def roberta_base():
    from transformers import RobertaConfig, RobertaForSequenceClassification

    return Logits(RobertaForSequenceClassification(
        RobertaConfig(max_position_embeddings=514)))


def gpt2_small():
    from transformers import GPT2Config, GPT2LMHeadModel

    return Logits(GPT2LMHeadModel(GPT2Config(use_cache=False)), position=-1)


MODELS = {"roberta-base classifier": (roberta_base, 512),
          "gpt2-small last-token logits": (gpt2_small, 1024)}


def _compile(model, max_len, passes):
    ids = torch.randint(3, 1000, (2, 8))  # batch 1 would be specialized by torch.export
    mask = torch.ones(2, 8, dtype=torch.long)
    dynamic = {"input_ids": {0: Dim("batch", min=1, max=8), 1: Dim("seq", min=1, max=max_len)},
               "attention_mask": {0: Dim("batch", min=1, max=8), 1: Dim("seq", min=1, max=max_len)}}
    start = time.perf_counter()
    module = anyshape.compile(model, (ids,), {"attention_mask": mask}, dynamic_shapes=dynamic,
                              passes=passes)
    return module, time.perf_counter() - start


def _time_ms(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args(argv)
    if args.runs < 10:
        parser.error(f"--runs: expected at least 10 (medians of 10 or more), got {args.runs}")
    torch.manual_seed(0)
    rows = []
    for name, (build, max_len) in MODELS.items():
        model = build().eval()
        print(f"{name}: compiling with and without anyshape-hoist-slices", flush=True)
        with_pass, with_s = _compile(model, max_len, None)
        without_pass, without_s = _compile(model, max_len, WITHOUT)
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
            with_ms, without_ms = (statistics.median(samples[k]) for k in ("with", "without"))
            sizes = {batch.name: 1, seq.name: length}
            gflop_with, gflop_without = (r.evaluate(**sizes) / 1e9 for r in (flops_with, flops_without))
            rows.append((name, length, without_ms, with_ms, with_ms / without_ms,
                         gflop_without, gflop_with, 1 - gflop_with / gflop_without))
            print(f"  L={length}: without {without_ms:.1f} ms, with {with_ms:.1f} ms "
                  f"({with_ms / without_ms:.3f}x)", flush=True)
        print(f"  compile: {with_s:.0f} s with, {without_s:.0f} s without", flush=True)
    table = ["| model | L | without the pass (ms) | with the pass (ms) | ratio | GFLOP without | "
             "GFLOP with | FLOPs saved |", "|---|---|---|---|---|---|---|---|"]
    for name, length, without_ms, with_ms, ratio, g0, g1, saved in rows:
        table.append(f"| {name} | {length} | {without_ms:.1f} | {with_ms:.1f} | {ratio:.3f} | "
                     f"{g0:.2f} | {g1:.2f} | {saved:.1%} |")
    header = (f"batch 1, fp32, medians of {args.runs} alternating runs; "
              f"{platform.machine()}, {os.cpu_count()} cores; "
              f"`python bench/hoist_slices.py --runs {args.runs}`")
    text = "\n".join([header, "", *table, ""])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "hoist_slices.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
