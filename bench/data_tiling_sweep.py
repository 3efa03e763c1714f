"""Data tiling against eager on the slice-hoisting property test's random programs.

Each program (``test/python/random_programs.py``, seeds ``--seeds A B``, hidden
size ``--hidden``) is compiled alone with ``data_tiling=True`` (no fallback)
and the default passes, then run at four shapes up to the programs' largest
(batch 4, L 32) and compared with eager. Prints one line per program (exact,
or IREE's first error, or the worst error) and a summary; exits 1 if any
program compiled and came out wrong.

    python bench/data_tiling_sweep.py --hidden 32 --seeds 0 45

Not a benchmark: the evidence behind ``iree/flags.py``'s data-tiling notes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "test" / "python"))

SHAPES = [(1, 4), (2, 9), (3, 17), (4, 32)]
TOLERANCE = 1e-3  # on |got - want| / (1 + |want|)


def _as_list(value):
    return list(value) if isinstance(value, (list, tuple)) else [value]


def worst_error(module, program, hidden: int, seed: int) -> float:
    from random_programs import inputs

    worst = 0.0
    for batch, length in SHAPES:
        args = inputs(batch, length, hidden, seed)
        with torch.no_grad():
            want = _as_list(program(*args))
        for got, expected in zip(_as_list(module(*args)), want, strict=True):
            got, expected = torch.as_tensor(got).double(), expected.double()
            if got.numel():
                error = ((got - expected).abs() / (1 + expected.abs())).nan_to_num(0).max().item()
                worst = max(worst, error)
    return worst


def main(argv=None) -> int:
    import anyshape
    from random_programs import Bundle, dynamic_shapes, generate, inputs

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--seeds", type=int, nargs=2, default=[0, 45], metavar=("FIRST", "END"))
    args = parser.parse_args(argv)
    counts = {"exact": 0, "compile error": 0, "wrong": 0}
    for seed in range(*args.seeds):
        program = Bundle([generate(seed, args.hidden)]).eval()
        try:
            module = anyshape.compile(program, inputs(2, 8, args.hidden, 0),
                                      dynamic_shapes=dynamic_shapes(),
                                      backend=anyshape.BackendOptions(data_tiling=True))
        except anyshape.CompileError as error:
            counts["compile error"] += 1
            print(f"program {seed}: compile error: {error.diagnostic.splitlines()[0]}", flush=True)
            continue
        worst = worst_error(module, program, args.hidden, seed)
        verdict = "wrong" if worst > TOLERANCE else "exact"
        counts[verdict] += 1
        print(f"program {seed}: {verdict} (worst relative error {worst:.1e})", flush=True)
    print(f"hidden {args.hidden}, programs {args.seeds[0]}..{args.seeds[1] - 1}: "
          + ", ".join(f"{n} {k}" for k, n in counts.items()))
    return 1 if counts["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
