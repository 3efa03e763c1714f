"""`make coverage`: PyTorch's OpInfo database through anyshape and the plain stack.

Every OpInfo (all variants), float32 and int64 where the op supports them on
CPU, up to ``--max-samples-per-op`` samples each, seeded; each case in a
worker process (``test/opinfo/``), at most two at a time. Writes one JSON
line per case to ``--out`` and the summary (Markdown) to ``--summary`` and
stdout. ``python -m opinfo.summary FILE`` (with ``test/`` on the path)
prints the summary of a results file again.

    python bench/coverage.py --ops 'nn.functional.*' --dtypes float32 --limit 20
    python bench/coverage.py --cases add-float32-5 cumsum-int64-0
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "test"))

from opinfo import cases as opinfo_cases  # noqa: E402
from opinfo.pool import run_cases  # noqa: E402
from opinfo.summary import read, summarize  # noqa: E402

# Per OpInfo and dtype, the sample with the most dims of size > 1 and one more
# from the rest: 2,128 cases. One sample each (1,104 cases) took 25 minutes on
# 2 cores (1.37 s a case, beside other compiles), so this is about 50.
DEFAULT_SAMPLES_PER_OP = 2
MAX_WORKERS = 2  # the machines this runs on have 2 cores, shared with other compiles


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", nargs="*", help="OpInfo full names or globs (default: all)")
    parser.add_argument("--dtypes", nargs="*", choices=list(opinfo_cases.DTYPES),
                        help="default: float32 int64")
    parser.add_argument("--max-samples-per-op", type=int, default=DEFAULT_SAMPLES_PER_OP,
                        help="per OpInfo and dtype; 0: every sample (default: %(default)s)")
    parser.add_argument("--cases", nargs="*", help="run these case ids instead")
    parser.add_argument("--shard", help="I/N: the I-th (from 0) of N interleaved shards")
    parser.add_argument("--limit", type=int, help="at most this many cases")
    parser.add_argument("--workers", type=int, default=MAX_WORKERS)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per case")
    parser.add_argument("--out", default="/tmp/opinfo-coverage.jsonl")
    parser.add_argument("--summary", help="also write the summary here")
    parser.add_argument("--list", action="store_true", help="print the case ids and stop")
    args = parser.parse_args(argv)
    if not 1 <= args.workers <= MAX_WORKERS:
        parser.error(f"--workers: expected 1 to {MAX_WORKERS}, got {args.workers}")
    return args


def select(args) -> tuple[list[str], list]:
    if args.cases:
        return list(args.cases), []
    per_op = args.max_samples_per_op or None
    chosen, skipped = opinfo_cases.enumerate_cases(args.ops, args.dtypes, per_op)
    if args.shard:
        index, count = (int(x) for x in args.shard.split("/"))
        chosen = chosen[index::count]
    if args.limit is not None:
        chosen = chosen[:args.limit]
    return chosen, skipped


def main(argv=None) -> None:
    args = parse_args(argv)
    chosen, skipped = select(args)
    if args.list:
        print("\n".join(chosen))
        return
    command = "python bench/coverage.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    print(f"{len(chosen)} cases, {len(skipped)} samples not applicable; results in {out}",
          file=sys.stderr)
    with open(out, "w") as f:
        f.write(json.dumps({"run": {"command": command, "workers": args.workers,
                                    "cases": len(chosen), "not_applicable": skipped}}) + "\n")
        count = 0

        def on_result(record: dict) -> None:
            nonlocal count
            count += 1
            f.write(json.dumps(record) + "\n")
            f.flush()
            status = " ".join(f"{s}={record.get(s, {}).get('status', '-')}"
                              for s in ("anyshape", "plain"))
            print(f"[{count}/{len(chosen)} {time.monotonic() - started:.0f}s] {record['case']}: "
                  f"{record.get('na') and 'n/a: ' + record['na'] or status}",
                  file=sys.stderr, flush=True)

        run_cases(chosen, workers=args.workers, timeout=args.timeout,
                  log_path=out.with_suffix(".log"), on_result=on_result)
        f.write(json.dumps({"done": {"wall_seconds": time.monotonic() - started}}) + "\n")
    text = summarize(*read(out))
    if args.summary:
        Path(args.summary).write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
