"""Per-dispatch CPU time of saved anyshape artifacts, side by side.

Runs each artifact under ``iree-benchmark-module`` with IREE's HAL profiling
(host execution events) and reads the bundle with ``iree-profile dispatch``:
for every dispatch function, how often it ran and how long it took per call
of the model. Dynamic dims are given by their labels (``batch=1 seq=128``);
every input is filled with one value (token id 5, mask 1), which is all the
timing depends on; ``--real N`` pads each row after its first N positions
(mask 0), for artifacts compiled with ``padding="eliminate"``.

    python bench/profile_dispatches.py ART_DIR [ART_DIR ...] --dims batch=1 seq=128 \
        [--real N] [--runs 5] [--rounds 3] [--top 15] [--function NAME]

Use it to see where a dynamic artifact loses time against a static one built
for the same shape. The artifacts are profiled in turn, ``--rounds`` times
(A, B, A, B, ...), and every figure is the median over the rounds: on a
shared host the speed drifts by tens of percent within minutes, so
artifacts profiled one after the other are not comparable (a dynamic
roberta-base at L = 512 profiled 7 % faster than another build that measured
7 % slower side by side). With two or more artifacts a last table puts them
side by side by dispatch kind: the name without its ``main$async_dispatch_N_``
prefix, which differs between builds, summed over the dispatches of a kind.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

# iree-base-runtime installs its tools as scripts beside this interpreter.
_TOOLS = Path(sys.executable).parent
_IREE_TYPES = {"int64": "i64", "int32": "i32", "float32": "f32", "float16": "f16", "bool": "i1"}
FILL = {"input_ids": 5}  # every other input: 1
PADDING_MASK = "attention_mask"  # --real: its first N positions per row are 1, the rest 0


def input_shapes(manifest: dict, sizes: dict[str, int]) -> list[tuple[str, list[int], str]]:
    """(name, shape, dtype) of each input of an artifact, its dynamic dims sized by label."""
    symbols = manifest["symbols"]
    shapes = []
    for spec in manifest["inputs"]:
        shape = []
        for dim in spec["dims"]:
            if isinstance(dim, int):
                shape.append(dim)
                continue
            label = symbols.get(dim, {}).get("label") or dim
            if label not in sizes and not symbols.get(dim, {}).get("label"):
                derived = _derived(dim, symbols, sizes)
                if derived is not None:  # a dim torch.export derived ("s11 + s70")
                    shape.append(derived)
                    continue
            if label not in sizes:
                raise SystemExit(f"--dims: no size for '{label}' (input '{spec['name']}'); "
                                 f"give {label}=N")
            shape.append(sizes[label])
        shapes.append((spec["name"], shape, spec["dtype"]))
    return shapes


def _derived(expr: str, symbols: dict, sizes: dict[str, int]) -> int | None:
    """The size of a derived dim (an expression of labelled symbols), or None."""
    from anyshape.runtime.compiled_module import _evaluate

    values = {name: sizes[s.get("label") or name] for name, s in symbols.items()
              if (s.get("label") or name) in sizes}
    try:
        return _evaluate(expr, values)
    except Exception:  # noqa: BLE001  not an expression: the caller names the missing size
        return None


def parse_dims(parser: argparse.ArgumentParser, items: list[str]) -> dict[str, int]:
    """``--dims`` (``batch=1 seq=128``) as label -> size; a malformed item is a usage error."""
    sizes = {}
    for item in items:
        label, _, value = item.partition("=")
        if not value.isdigit():
            parser.error(f"--dims: expected LABEL=N, got '{item}'")
        sizes[label] = int(value)
    return sizes


def _inputs(manifest: dict, sizes: dict[str, int], tmp: Path,
            real: int | None) -> tuple[str, list[str]]:
    """(the function to run, its input flags): the runtime's choice of function
    for an artifact compiled with padding="eliminate" (its dense twin when no
    position is padding), and the indices it computes from the mask."""
    import numpy as np

    flags, extra = [], []
    entry = manifest["entry"]
    for name, shape, dtype in input_shapes(manifest, sizes):
        element = _IREE_TYPES.get(dtype)
        if element is None:
            raise SystemExit(f"input '{name}': dtype {dtype} not supported here")
        if name == PADDING_MASK and real is not None:
            mask = (np.arange(shape[1])[None] < real).repeat(shape[0], 0).astype(np.int64)
            np.save(tmp / "mask.npy", mask)
            flags.append(f"--input=@{tmp / 'mask.npy'}")
        else:
            mask = np.ones(shape, np.int64)
            flags.append(f"--input={'x'.join(map(str, shape))}x{element}={FILL.get(name, 1)}")
        if name != manifest.get("padding_mask"):
            continue
        if manifest.get("padding_dense_entry") and mask.all():
            entry = manifest["padding_dense_entry"]
            continue
        from anyshape.runtime.compiled_module import padding_indices

        for index, array in enumerate(padding_indices(name, mask)):
            np.save(tmp / f"padding{index}.npy", array)
            extra.append(f"--input=@{tmp / f'padding{index}.npy'}")
    return entry, flags + extra


def profile(artifact: Path, sizes: dict[str, int], runs: int,
            real: int | None = None, function: str | None = None) -> tuple[float, list[dict]]:
    """(wall ms per call, per-dispatch rows sorted by time) for one artifact."""
    manifest = json.loads((artifact / "manifest.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        bundle = Path(tmp) / "profile.ireeprof"
        entry, inputs = _inputs(manifest, sizes, Path(tmp), real)
        entry = function or entry
        run = subprocess.run(
            [str(_TOOLS / "iree-benchmark-module"), "--device=local-task",
             f"--module={artifact / manifest['vmfb']}", f"--function={entry}",
             *inputs, f"--benchmark_min_time={runs}x",
             "--device_profiling_mode=host-execution", f"--device_profiling_output={bundle}"],
            capture_output=True, text=True, check=True)
        wall_ms = next(float(line.split()[1]) for line in run.stdout.splitlines()
                       if line.startswith("BM_"))
        listing = subprocess.run([str(_TOOLS / "iree-profile"), "dispatch", "--format=jsonl", str(bundle)],
                                 capture_output=True, text=True, check=True).stdout
    rows = []
    for line in listing.splitlines():
        row = json.loads(line)
        if "total_ns" not in row:
            continue
        rows.append({"name": row["key"], "calls": row["count"] / runs,
                     "ms": row["total_ns"] / 1e6 / runs})
    return wall_ms, sorted(rows, key=lambda r: -r["ms"])


_ORDINAL = re.compile(r"^.*?_dispatch_\d+_")


def kind(name: str) -> str:
    """A dispatch's name without its per-build ordinal (``main$async_dispatch_37_``)."""
    return _ORDINAL.sub("", name)


def medians(samples: list[tuple[float, list[dict]]]) -> tuple[float, list[dict]]:
    """The per-round profiles of one artifact as one: median wall time, and per
    dispatch the median time over the rounds (0 in a round it did not run)."""
    names = {row["name"] for _, rows in samples for row in rows}
    merged = []
    for name in names:
        found = [next((r for r in rows if r["name"] == name), None) for _, rows in samples]
        merged.append({"name": name,
                       "calls": statistics.median(r["calls"] if r else 0.0 for r in found),
                       "ms": statistics.median(r["ms"] if r else 0.0 for r in found)})
    return (statistics.median(wall for wall, _ in samples),
            sorted(merged, key=lambda r: -r["ms"]))


def by_kind(rows: list[dict]) -> dict[str, tuple[float, float]]:
    """kind -> (calls, ms) summed over an artifact's dispatches of that kind."""
    kinds: dict[str, tuple[float, float]] = {}
    for row in rows:
        calls, ms = kinds.get(kind(row["name"]), (0.0, 0.0))
        kinds[kind(row["name"])] = (calls + row["calls"], ms + row["ms"])
    return kinds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifacts", type=Path, nargs="+")
    parser.add_argument("--dims", nargs="+", required=True, metavar="LABEL=N")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3,
                        help="profiles of each artifact, taken in turn; figures are medians")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--real", type=int, metavar="N",
                        help="attention_mask is 1 at the first N positions of each row and "
                             "0 after them (default: 1 everywhere)")
    parser.add_argument("--function", metavar="NAME",
                        help="run the module's function NAME (one that compile's entries added, "
                             "such as a generator's decode_one) on the entry's inputs")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.runs < 1:
        parser.error(f"--rounds and --runs: expected at least 1, got {args.rounds} and {args.runs}")
    sizes = parse_dims(parser, args.dims)
    samples = {artifact: [] for artifact in args.artifacts}
    for _ in range(args.rounds):
        for artifact in args.artifacts:
            samples[artifact].append(profile(artifact, sizes, args.runs, args.real,
                                              args.function))
    results = {artifact: medians(samples[artifact]) for artifact in args.artifacts}
    print(f"medians of {args.rounds} rounds of {args.runs} calls, the artifacts in turn")
    for artifact, (wall_ms, rows) in results.items():
        total = sum(r["ms"] for r in rows)
        print(f"\n{artifact}: {wall_ms:.1f} ms per call (wall), dispatches {total:.1f} ms "
              f"(summed over threads' spans) in {sum(r['calls'] for r in rows):.0f} dispatches")
        print("| dispatch | calls | ms per model call | share |\n|---|---|---|---|")
        for row in rows[:args.top]:
            print(f"| {row['name']} | {row['calls']:.0f} | {row['ms']:.1f} | {row['ms'] / total:.1%} |")
    if len(results) > 1:
        kinds = {artifact: by_kind(rows) for artifact, (_, rows) in results.items()}
        names = sorted({k for table in kinds.values() for k in table},
                       key=lambda k: -max(table.get(k, (0, 0))[1] for table in kinds.values()))
        print("\nside by side, ms per model call (calls) by dispatch kind")
        print("| dispatch kind | " + " | ".join(str(a) for a in results) + " |")
        print("|---|" + "---|" * len(results))
        print("| (wall) | " + " | ".join(f"{wall:.1f}" for wall, _ in results.values()) + " |")
        for name in names[:args.top]:
            cells = [kinds[a].get(name) for a in results]
            print(f"| {name} | " + " | ".join(
                "-" if c is None else f"{c[1]:.1f} ({c[0]:.0f})" for c in cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
