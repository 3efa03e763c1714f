"""Long-lived worker processes that run cases and survive their crashes.

A worker that dies (a segfault or abort in IREE or torch-mlir) or passes the
per-case timeout is replaced; its case is recorded as ``crash`` or
``timeout`` for the stack that was running, keeping what the worker had
reported, and a stack that had not run yet is run again in the new worker.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Callable, Iterable

from opinfo.cases import parse_case_id
from opinfo.classify import CRASH, TIMEOUT
from opinfo.run_case import STACKS

HERE = Path(__file__).resolve().parent
# A worker is replaced after this many cases, so that what compiled modules,
# caches and allocators keep stays bounded over a long run.
CASES_PER_WORKER = 150


class _Worker:
    def __init__(self, log):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(HERE.parent), os.environ.get("PYTHONPATH", "")]),
            "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen([sys.executable, "-m", "opinfo.worker"], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=log, start_new_session=True)
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.buffer = b""
        self.ready = False
        self.done = 0
        self.request: dict | None = None
        self.record: dict = {}
        self.stage = "start"
        self.deadline = float("inf")

    def send(self, request: dict, timeout: float) -> None:
        op, dtype, index = parse_case_id(request["case"])
        self.record = {"case": request["case"], "op": op, "dtype": dtype, "index": index}
        self.request, self.stage = request, "start"
        self.deadline = time.monotonic() + timeout
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        self.proc.stdin.flush()

    def read(self) -> list[dict] | None:
        """The complete messages that arrived; None at end of file (the worker died)."""
        try:
            chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
        except BlockingIOError:
            return []
        if not chunk:
            return None
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def _lost(record: dict, request: dict, stage: str, how: str, detail: str) -> tuple[dict, list]:
    """The record of a case whose worker was lost during ``stage``, and the
    stacks still to run in a new worker."""
    stack = stage.split(":")[0]
    failure = {"status": "fail", "stage": stage, "cause": how, "error": detail, "clear": False,
               "type": how}
    stacks = list(request.get("stacks", STACKS))
    if stack in stacks:
        record[stack] = failure
        rest = [s for s in stacks[stacks.index(stack) + 1:] if s not in record]
        return record, rest
    # Before either stack (eager, the export that picks the sizes): the case's own.
    for s in stacks:
        record.setdefault(s, failure)
    return record, []


def run_cases(cases: Iterable[str], workers: int = 2, timeout: float = 120.0,
              log_path: str | os.PathLike | None = None,
              on_result: Callable[[dict], None] = lambda record: None,
              plain_when_anyshape_fails: bool = False) -> list[dict]:
    """Run ``cases`` on ``workers`` processes; ``on_result`` gets each finished
    record (in completion order); returns them all. ``plain_when_anyshape_fails``:
    as ``run_case`` takes it."""
    queue = deque({"case": c, "stacks": list(STACKS),
                   "plain_when_anyshape_fails": plain_when_anyshape_fails} for c in cases)
    partial: dict[str, dict] = {}  # case -> what is known while a stack runs again
    log = open(log_path, "ab") if log_path else subprocess.DEVNULL
    selector = selectors.DefaultSelector()
    pool: list[_Worker] = []
    results: list[dict] = []

    def start() -> _Worker:
        worker = _Worker(log)
        selector.register(worker.proc.stdout, selectors.EVENT_READ, worker)
        pool.append(worker)
        return worker

    def retire(worker: _Worker) -> None:
        selector.unregister(worker.proc.stdout)
        pool.remove(worker)
        worker.kill()

    def finish(record: dict) -> None:
        merged = {**partial.pop(record["case"], {}), **record}
        results.append(merged)
        on_result(merged)

    def lose(worker: _Worker, how: str, detail: str) -> None:
        record, rest = _lost({**partial.get(worker.request["case"], {}), **worker.record},
                             worker.request, worker.stage, how, detail)
        retire(worker)
        if rest:
            partial[record["case"]] = record
            queue.appendleft({"case": record["case"], "stacks": rest})
        else:
            finish(record)

    try:
        for _ in range(workers):
            start()
        while queue or any(w.request for w in pool):
            for worker in list(pool):
                if worker.ready and worker.request is None and queue:
                    if worker.done >= CASES_PER_WORKER:
                        retire(worker)
                        start()
                        continue
                    worker.send(queue.popleft(), timeout)
            now = time.monotonic()
            wait = min([w.deadline for w in pool if w.request] or [now + 5.0]) - now
            for key, _ in selector.select(timeout=max(0.05, min(wait, 5.0))):
                worker = key.data
                messages = worker.read()
                if messages is None:
                    if worker.request:
                        code = worker.proc.wait()
                        lose(worker, CRASH, f"worker died ({_describe_exit(code)}) during "
                                            f"{worker.stage}")
                    else:
                        retire(worker)
                    start()
                    continue
                for message in messages:
                    if "ready" in message:
                        worker.ready = True
                    elif "stage" in message:
                        worker.stage = message["stage"]
                    elif "partial" in message:
                        worker.record.update(message["partial"])
                    elif "result" in message:
                        record = {**worker.record, **message["result"]}
                        worker.request, worker.done = None, worker.done + 1
                        worker.deadline = float("inf")
                        finish(record)
            now = time.monotonic()
            for worker in list(pool):
                if worker.request and now > worker.deadline:
                    lose(worker, TIMEOUT, f"no result after {timeout:.0f}s, during {worker.stage}")
                    start()
    finally:
        for worker in list(pool):
            retire(worker)
        if log_path:
            log.close()
    return results


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"
