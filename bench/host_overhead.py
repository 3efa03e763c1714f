"""Per-token host work of ``generate`` besides the compiled step, by decoding mode.

``generate`` is HF's own loop over the compiled step (docs/generation.md):
each token it runs the step (the module call and the logits' copy to the
host), then HF's logits processors, stopping criteria and bookkeeping on the
host. This times both, per token, on GPT-2 small (random weights, float32,
a 17-token prompt at batch 1, up to 128 new tokens, the model's own end
token; no ``min_new_tokens``, whose processor scans the vocabulary every
step): the step's time is the sum of the module calls
(``CompiledModule.invoke``, ``move_rows`` and the logits' ``to_host``), the
host's the rest of ``generate``, and of that the logits processors' share
(HF's ``LogitsProcessorList`` calls: penalties, n-gram blocking, and
sampling's temperature, top-k and top-p, which transformers 5 runs as
processors too). Sampling's draw (``torch.multinomial`` over the
vocabulary: HF's seeded samples are its draws) and beam search's scoring
are HF's loop: in the host's time, not the processors'. Modes: greedy;
sampling with temperature, top-k and top-p; greedy with a repetition
penalty and n-gram blocking; 4 beams with n-gram blocking (whose step is 4
rows, and whose cache is reordered on the device each token: that call
counts as the step's).

    python bench/host_overhead.py [--rounds 5] [--new-tokens 128] [--out bench/results/host-overhead]

Each mode's figure is the median over ``--rounds`` calls, the modes taken in
turn each round.
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

MODES = {
    "greedy": {},
    "sampling (temperature, top-k, top-p)": dict(do_sample=True, temperature=0.8, top_k=50,
                                                 top_p=0.9),
    "greedy, repetition penalty, no_repeat_ngram_size=3": dict(repetition_penalty=1.2,
                                                               no_repeat_ngram_size=3),
    "4 beams, no_repeat_ngram_size=3": dict(num_beams=4, no_repeat_ngram_size=3),
}


def gpt2_small():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config()).eval()


class StepClock:
    """Seconds spent in the compiled module's calls and the copies of their
    results to the host, while installed."""

    def __init__(self, module):
        import iree.runtime as rt

        self.seconds = 0.0
        self._patches = [(type(module), "invoke"), (type(module), "move_rows"),
                         (rt.DeviceArray, "to_host")]
        self._originals = [getattr(owner, name) for owner, name in self._patches]
        for (owner, name), original in zip(self._patches, self._originals):
            setattr(owner, name, self._timed(original))

    def _timed(self, original):
        def timed(*args, **kwargs):
            began = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - began
        return timed

    def remove(self) -> None:
        for (owner, name), original in zip(self._patches, self._originals):
            setattr(owner, name, original)


class ProcessorClock(StepClock):
    """Seconds spent in HF's logits processors, while installed."""

    def __init__(self):
        from transformers.generation.logits_process import LogitsProcessorList

        self.seconds = 0.0
        self._patches = [(LogitsProcessorList, "__call__")]
        self._originals = [LogitsProcessorList.__call__]
        LogitsProcessorList.__call__ = self._timed(LogitsProcessorList.__call__)


def measure(generator, ids, new_tokens: int, options: dict) -> tuple[float, float, float]:
    """(ms per token in the step, ms per token on the host besides it, ms
    per token of that in the logits processors)."""
    clock, processors = StepClock(generator.module), ProcessorClock()
    try:
        torch.manual_seed(0)
        began = time.perf_counter()
        out = generator.generate(ids, max_new_tokens=new_tokens, **options)
        total = time.perf_counter() - began
    finally:
        clock.remove()
        processors.remove()
    made = out.shape[1] - ids.shape[1]  # fewer where the end token came first
    return (clock.seconds / made * 1e3, (total - clock.seconds) / made * 1e3,
            processors.seconds / made * 1e3)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--out", default=str(HERE / "results" / "host-overhead"))
    args = parser.parse_args(argv)

    import anyshape

    generator = anyshape.compile_generator(gpt2_small())
    ids = torch.randint(3, 50000, (1, 17), generator=torch.Generator().manual_seed(0))
    for options in MODES.values():  # first calls: imports, buffers
        generator.generate(ids, max_new_tokens=4, **options)
    samples = {mode: [] for mode in MODES}
    for _ in range(args.rounds):
        for mode, options in MODES.items():
            samples[mode].append(measure(generator, ids, args.new_tokens, options))
    rows = []
    for mode, values in samples.items():
        step = statistics.median(v[0] for v in values)
        host = statistics.median(v[1] for v in values)
        processors = statistics.median(v[2] for v in values)
        rows.append({"mode": mode, "step_ms": round(step, 3), "host_ms": round(host, 3),
                     "host_share_of_step": round(host / step, 4),
                     "processors_ms": round(processors, 3),
                     "processors_share_of_step": round(processors / step, 4)})
    result = {"host": host_cpu(), "model": "gpt2 (124M, random weights, float32)",
              "prompt": 17, "new_tokens": args.new_tokens, "rounds": args.rounds,
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "modes": rows}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "host_overhead.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [f"GPT-2 small, batch 1, 17-token prompt, up to {args.new_tokens} new tokens, "
             f"median of {args.rounds}; host: {result['host']}", "",
             "| mode | step ms/token | host ms/token | host / step | of which processors "
             "ms/token | processors / step |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['mode']} | {r['step_ms']:.3f} | {r['host_ms']:.3f} | "
              f"{100 * r['host_share_of_step']:.1f} % | {r['processors_ms']:.3f} | "
              f"{100 * r['processors_share_of_step']:.1f} % |" for r in rows]
    (out / "host_overhead.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
