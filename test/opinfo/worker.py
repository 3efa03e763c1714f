"""A worker process: reads requests, runs cases, writes JSON lines.

Started by ``pool`` as ``python -m opinfo.worker``. Each request is a line
``{"case": id, "stacks": [...], "plain_when_anyshape_fails": bool}`` on stdin. The answers go to the stdout the
worker was started with, one JSON object a line: ``{"stage": ...}`` before
each stage, ``{"partial": {stack: result}}`` as each stack finishes, and
``{"result": record}`` at the end, so that when IREE takes the process down
the pool knows where, and keeps what had finished. Anything a library prints
goes to stderr instead, so it cannot interleave with the answers.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
import warnings


def main() -> None:
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    warnings.simplefilter("ignore")

    import torch

    torch.set_num_threads(1)
    from opinfo.run_case import run_case

    def send(message: dict) -> None:
        answers.write(json.dumps(message) + "\n")
        answers.flush()

    # The pool's own test: a worker that dies at this stage, as IREE can make it.
    abort_at = os.environ.get("OPINFO_ABORT_AT")

    def progress(stage: str, partial: dict | None = None) -> None:
        send({"partial": partial} if partial is not None else {"stage": stage})
        if stage == abort_at:
            os.abort()

    send({"ready": os.getpid()})
    for line in sys.stdin:
        request = json.loads(line)
        try:
            record = run_case(request["case"], request.get("stacks", ("anyshape", "plain")),
                              progress, request.get("plain_when_anyshape_fails", False))
        except Exception as error:  # a harness bug: kept in the results, not fatal
            record = {"case": request["case"],
                      "harness_error": "".join(traceback.format_exception(error))[-3000:]}
        send({"result": record})


if __name__ == "__main__":
    main()
