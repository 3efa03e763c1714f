"""`make opt-compat`: torch-mlir's lit tests with torch-mlir-opt, then with
anyshape-opt in its place; fails when a test that passes with the reference
does not pass with anyshape-opt.

    python tools/dev/opt-compat/run.py /path/to/torch-mlir [--jobs N]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run_suite(source: Path, driver: str, out_dir: Path, jobs: int | None) -> dict[str, str]:
    results = out_dir / f"{driver}.json"
    command = [str(Path(sys.executable).parent / "lit"), str(HERE), "-q",
               f"-Dtorch_mlir_src={source}", f"-Ddriver={driver}", f"-Dexec_root={out_dir}",
               "-o", str(results)]
    if jobs:
        command.append(f"-j{jobs}")
    subprocess.run(command, check=False)
    return {t["name"].split(" :: ", 1)[1]: t["code"]
            for t in json.loads(results.read_text())["tests"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("torch_mlir_src", type=Path, help="a torch-mlir checkout (with test/)")
    parser.add_argument("--jobs", type=int)
    args = parser.parse_args(argv)
    if not (args.torch_mlir_src / "test").is_dir():
        parser.error(f"torch_mlir_src: expected a torch-mlir checkout holding test/, "
                     f"got {args.torch_mlir_src}")
    with tempfile.TemporaryDirectory() as tmp:
        reference = run_suite(args.torch_mlir_src.resolve(), "torch-mlir-opt", Path(tmp), args.jobs)
        ours = run_suite(args.torch_mlir_src.resolve(), "anyshape-opt", Path(tmp), args.jobs)
    passed = sorted(t for t, code in reference.items() if code == "PASS")
    regressions = [t for t in passed if ours.get(t) != "PASS"]
    print(f"{len(reference)} tests: torch-mlir-opt passes {len(passed)}, anyshape-opt passes "
          f"{sum(code == 'PASS' for code in ours.values())}, "
          f"{sum(ours.get(t) == 'PASS' for t in passed)} of the reference's {len(passed)}")
    for test in sorted(set(reference) - set(passed)):
        print(f"  fails with torch-mlir-opt too: {test} ({reference[test]}; anyshape-opt: "
              f"{ours.get(test)})")
    for test in regressions:
        print(f"  REGRESSION: {test} passes with torch-mlir-opt, not with anyshape-opt "
              f"({ours.get(test)})")
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
