"""What an encoder-decoder's compile costs with its decoder's later layers
copied and with every layer traced, side by side.

Each variant compiles the same random-weight model (a T5 of t5-base's widths
by default: 12 encoder and 12 decoder layers, d_model 768) in a fresh
process, without the compile cache, one after the other, and reports
``compiled.stage_seconds``. "traced whole" is the same compile with
``repeated_layers.TRACED_LAYERS`` at the layer count, so that nothing is
copied.

    python bench/seq2seq_compile_cost.py [--layers 12] [--runs 1] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from family_sweep import host_cpu  # noqa: E402

_WORKER = """
import json, sys, time, warnings
import torch
import anyshape
from anyshape.frontend import repeated_layers
from transformers import AutoConfig, AutoModelForSeq2SeqLM

layers, whole = int(sys.argv[1]), sys.argv[2] == "whole"
if whole:
    repeated_layers.TRACED_LAYERS = layers
config = AutoConfig.for_model("t5")
config.num_layers = config.num_decoder_layers = layers
config.d_model, config.d_ff, config.num_heads, config.decoder_start_token_id = 768, 3072, 12, 0
torch.manual_seed(0)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    model = AutoModelForSeq2SeqLM.from_config(config).eval()
started = time.monotonic()
generator = anyshape.compile_generator(model, cache=False)
print(json.dumps({"compile": time.monotonic() - started,
                  "parameters": sum(p.numel() for p in model.parameters()),
                  "stages": generator.module.stage_seconds}))
"""


def run(layers: int, variant: str) -> dict:
    done = subprocess.run([sys.executable, "-c", _WORKER, str(layers), variant],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "seq2seq-compile-cost")
    args = parser.parse_args()
    rows = []
    for _ in range(args.runs):
        for variant in ("copied", "whole"):
            result = run(args.layers, variant)
            rows.append({"variant": variant, **result})
            print(variant, json.dumps(rows[-1]), flush=True)
    command = "python bench/seq2seq_compile_cost.py " + " ".join(sys.argv[1:])
    lines = [f"# An encoder-decoder's compile: decoder layers copied or traced whole "
             f"(T5, {args.layers} + {args.layers} layers, d_model 768)", "",
             f"Host: {host_cpu()}. Command: `{command.strip()}`.", "",
             "| decoder layers | compile s | export-steps | export | iree-compile |",
             "|---|---|---|---|---|"]
    for row in rows:
        stages = row["stages"]
        name = "4 traced, the rest copied" if row["variant"] == "copied" else "every one traced"
        lines.append(f"| {name} | {row['compile']:.1f} | {stages['export-steps']:.1f} | "
                     f"{stages['export']:.1f} | {stages['iree-compile']:.1f} |")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "seq2seq-compile-cost.md").write_text("\n".join(lines) + "\n")
    (args.out / "seq2seq-compile-cost.json").write_text(
        json.dumps({"host": host_cpu(), "command": command, "results": rows}, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
