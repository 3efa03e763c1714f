"""`make demo`: a roberta-base-sized classifier compiled once, run at many lengths.

RobertaConfig() defaults (12 layers, hidden 768, random weights, 2 labels),
except max_position_embeddings=514 as in the roberta-base checkpoint: RoBERTa's
positions start after the padding index, so 512 tokens need 514 positions
(with the default 512, eager PyTorch itself fails above 510 tokens).

    python examples/roberta_demo.py [--lengths 1,16,...] [--all-lengths] [--out DIR]
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.export import Dim
from transformers import RobertaConfig, RobertaForSequenceClassification

import anyshape

MAX_LEN = 512


def inputs(length, seed):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 50265, (1, length), generator=generator)
    mask = torch.ones(1, length, dtype=torch.long)
    if length > 4:  # pad the last quarter, as a batch of mixed lengths would be
        mask[:, length - length // 4:] = 0
        ids[:, length - length // 4:] = 1
    return ids, mask


def timed(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return out, statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", default="1,7,32,128,256,512")
    parser.add_argument("--all-lengths", action="store_true",
                        help=f"check every length 1..{MAX_LEN} against eager (slow)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="out/roberta-base-demo")
    args = parser.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(torch.get_num_threads())
    model = RobertaForSequenceClassification(
        RobertaConfig(num_labels=2, max_position_embeddings=MAX_LEN + 2)).eval()
    params = sum(p.numel() for p in model.parameters())
    print(f"roberta-base-sized classifier: {params / 1e6:.0f}M parameters, random weights")

    seq = Dim("seq", min=1, max=MAX_LEN)
    ids, mask = inputs(16, 0)
    start = time.perf_counter()
    compiled = anyshape.compile(model, (ids,), {"attention_mask": mask},
                                dynamic_shapes={"input_ids": {1: seq}, "attention_mask": {1: seq}},
                                progress=True)
    print(f"compiled once for lengths 1..{MAX_LEN} in {time.perf_counter() - start:.0f}s "
          f"({compiled.target.name}, IREE {compiled.target.opt_level}"
          f"{', data tiling' if compiled.target.data_tiling else ', no data tiling'})")
    saved = compiled.save(args.out)
    size_mb = compiled.vmfb_path.stat().st_size / 1e6
    print(f"artifact saved to {saved}/ (module.vmfb {size_mb:.0f} MB, manifest.json)")

    lengths = range(1, MAX_LEN + 1) if args.all_lengths else [int(x) for x in args.lengths.split(",")]
    repeats = 1 if args.all_lengths else args.repeats
    print(f"\n{'length':>6}  {'max |anyshape - eager|':>22}  {'anyshape ms':>11}  {'eager ms':>9}")
    worst = 0.0
    for length in lengths:
        ids, mask = inputs(length, length)
        with torch.no_grad():
            expected, eager_s = timed(lambda: model(ids, attention_mask=mask).logits, repeats)
        got, ours_s = timed(lambda: compiled(ids, attention_mask=mask).logits, repeats)
        error = (got - expected).abs().max().item()
        worst = max(worst, error)
        print(f"{length:>6}  {error:>22.2e}  {ours_s * 1e3:>11.1f}  {eager_s * 1e3:>9.1f}", flush=True)
    print(f"\nworst error {worst:.2e} over {len(lengths)} lengths "
          f"({'OK' if worst <= 1e-4 else 'ABOVE 1e-4'})")
    return 0 if worst <= 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
