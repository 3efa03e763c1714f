"""Where the test suite's CPU goes: a pytest plugin, and its report.

Each test's wall time, the CPU of the pytest process, and the CPU of the
processes it waited for (iree-compile, the command-line tools), one JSON file
per xdist worker. Run the suite with it, then read the table by module::

    PYTHONPATH=tools/dev .venv/bin/python -m pytest -n auto --dist loadscope \\
        -p test_cpu test/python          # writes $TEST_CPU_DIR (default /tmp/test-cpu)
    .venv/bin/python tools/dev/test_cpu.py report [--tests 10]

The child CPU is counted when a child is reaped (``RUSAGE_CHILDREN``), so a
tool started in one test and reaped in the next counts in the later one.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import time
from pathlib import Path

OUT = Path(os.environ.get("TEST_CPU_DIR", "/tmp/test-cpu"))
_rows: list[dict] = []


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


try:
    import pytest
except ImportError:  # the report needs no pytest
    pytest = None

if pytest is not None:
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        started, (own, children) = time.monotonic(), _cpu()
        yield
        own_after, children_after = _cpu()
        _rows.append({"id": item.nodeid, "wall": time.monotonic() - started,
                      "own": own_after - own, "children": children_after - children})

    def pytest_sessionfinish(session, exitstatus):
        if not _rows:
            return
        OUT.mkdir(parents=True, exist_ok=True)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        (OUT / f"{worker}.json").write_text(json.dumps(_rows))


def report(directory: Path, tests: int) -> None:
    rows = [row for path in sorted(directory.glob("*.json")) for row in json.loads(path.read_text())]
    if not rows:
        raise SystemExit(f"no results under {directory}: run pytest with -p test_cpu first")
    modules: dict[str, list[dict]] = collections.defaultdict(list)
    for row in rows:
        modules[row["id"].split("::")[0]].append(row)

    def cpu(group: list[dict]) -> float:
        return sum(row["own"] + row["children"] for row in group)

    total_own = sum(row["own"] for row in rows)
    total_children = sum(row["children"] for row in rows)
    print(f"{len(rows)} tests: {total_own:.0f} s CPU in pytest, {total_children:.0f} s in "
          f"its children, {sum(row['wall'] for row in rows):.0f} s of tests' wall time\n")
    print("| module | tests | wall s | CPU s (pytest + children) | share |")
    print("|---|---|---|---|---|")
    total = total_own + total_children
    for name, group in sorted(modules.items(), key=lambda kv: -cpu(kv[1])):
        own = sum(row["own"] for row in group)
        print(f"| `{name}` | {len(group)} | {sum(row['wall'] for row in group):.0f} | "
              f"{cpu(group):.0f} ({own:.0f} + {cpu(group) - own:.0f}) | "
              f"{100 * cpu(group) / total:.1f} % |")
    if tests:
        print(f"\nThe {tests} tests with the most CPU:")
        for row in sorted(rows, key=lambda row: -(row["own"] + row["children"]))[:tests]:
            print(f"  {row['own'] + row['children']:6.1f} s  {row['id']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    read = sub.add_parser("report", help="the table by module")
    read.add_argument("--dir", type=Path, default=OUT)
    read.add_argument("--tests", type=int, default=10, help="also list the N costliest tests")
    args = parser.parse_args()
    report(args.dir, args.tests)


if __name__ == "__main__":
    main()
