"""Prompt-lookup decoding against plain greedy decoding, tokens/s.

``generate(..., prompt_lookup_num_tokens=k)`` drafts up to k tokens by
finding the last tokens' n-gram earlier in the sequence and verifies them in
one step of k + 1 tokens (``verify_draft``, docs/generation.md). It pays
where the output copies spans of its input. GPT-2 small (random weights,
float32, batch 1, 128 new tokens, greedy), two inputs:

- ``copying``: a 333-token random prompt whose greedy continuation falls
  into loops, as a random model's does: after the first loop the output
  copies itself, the high copy rate of a summary that copies its source;
- ``nothing copied``: the same prompt with ``no_repeat_ngram_size=1`` (both
  runs), so that no token repeats and no draft is ever found: what the
  assisted loop costs when it cannot help.

Both runs give the same tokens (checked). Figures: the median over
``--rounds`` calls, the two runs of an input taken in turn; "per step" is
the new tokens over the model's calls.

    python bench/prompt_lookup.py [--rounds 5] [--new-tokens 128] [--draft 10] [--out bench/results/prompt-lookup]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from family_sweep import host_cpu  # noqa: E402
from host_overhead import gpt2_small  # noqa: E402

INPUTS = {"copying": {}, "nothing copied": dict(no_repeat_ngram_size=1)}


def timed_call(generator, ids, options: dict) -> tuple[float, torch.Tensor, int]:
    """(seconds, output, the module's calls) of one ``generate``."""
    module = generator.module
    calls = [0]
    original = type(module).invoke

    def counted(self, arrays, entry=None):
        calls[0] += 1
        return original(self, arrays, entry=entry)

    type(module).invoke = counted
    try:
        began = time.perf_counter()
        out = generator.generate(ids, **options)
        return time.perf_counter() - began, out, calls[0]
    finally:
        type(module).invoke = original


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--prompt", type=int, default=333)
    parser.add_argument("--draft", type=int, default=10, help="prompt_lookup_num_tokens")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "prompt-lookup")
    args = parser.parse_args()

    import anyshape

    generator = anyshape.compile_generator(gpt2_small())
    ids = torch.randint(0, 50257, (1, args.prompt), generator=torch.Generator().manual_seed(0))
    base = dict(max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens)
    rows = []
    for name, extra in INPUTS.items():
        plain, lookup = {**base, **extra}, {**base, **extra,
                                            "prompt_lookup_num_tokens": args.draft}
        timed_call(generator, ids, plain)  # warm: the first call of each entry
        timed_call(generator, ids, lookup)
        times = {"greedy": [], "prompt lookup": []}
        outputs, calls = {}, {}
        for _ in range(args.rounds):
            for run, options in (("greedy", plain), ("prompt lookup", lookup)):
                seconds, outputs[run], calls[run] = timed_call(generator, ids, options)
                times[run].append(seconds)
        if not torch.equal(outputs["greedy"], outputs["prompt lookup"]):
            raise SystemExit(f"{name}: prompt lookup's tokens differ from greedy's")
        rate = {run: args.new_tokens / statistics.median(times[run]) for run in times}
        rows.append({"input": name, "greedy_tokens_per_s": rate["greedy"],
                     "prompt_lookup_tokens_per_s": rate["prompt lookup"],
                     "speedup": rate["prompt lookup"] / rate["greedy"],
                     "tokens_per_step": args.new_tokens / calls["prompt lookup"]})
        print(rows[-1], flush=True)
    host = host_cpu()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "prompt_lookup.json").write_text(json.dumps(
        {"host": host, "args": {k: str(v) for k, v in vars(args).items()}, "rows": rows},
        indent=1) + "\n")
    lines = [f"Host: {host}. GPT-2 small, random weights, float32, batch 1, "
             f"{args.prompt}-token prompt, {args.new_tokens} new tokens, greedy, "
             f"prompt_lookup_num_tokens={args.draft}; median of {args.rounds}.", "",
             "| input | greedy tokens/s | prompt lookup tokens/s | ratio | tokens per step |",
             "|---|---|---|---|---|"]
    lines += [f"| {r['input']} | {r['greedy_tokens_per_s']:.1f} | "
              f"{r['prompt_lookup_tokens_per_s']:.1f} | {r['speedup']:.2f}x | "
              f"{r['tokens_per_step']:.2f} |" for r in rows]
    (args.out / "prompt_lookup.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
