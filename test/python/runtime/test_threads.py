"""``threads=``: the CPU worker threads a module runs on.

IREE's CPU driver fixes its worker count for the whole process, so each check
runs in a fresh interpreter that loads the saved artifact.
"""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import anyshape

_RUN = textwrap.dedent("""
    import os, sys
    import torch
    import anyshape
    from models import roberta_inputs

    threads = None if sys.argv[2] == "default" else int(sys.argv[2])
    before = len(os.listdir("/proc/self/task"))
    module = anyshape.load(sys.argv[1], threads=threads)
    ids, mask = roberta_inputs(1, 5)
    module(ids, attention_mask=mask)
    print(len(os.listdir("/proc/self/task")) - before)
    try:
        anyshape.load(sys.argv[1], threads=(threads or os.cpu_count()) + 1)(ids, attention_mask=mask)
    except ValueError as error:
        print(error)
""")


@pytest.fixture(scope="module")
def artifact(compiled_roberta, tmp_path_factory):
    return compiled_roberta.save(tmp_path_factory.mktemp("threads") / "artifact")


def _run(artifact, threads):
    helpers = Path(__file__).resolve().parents[1]  # models.py, for the child process
    run = subprocess.run([sys.executable, "-c", _RUN, str(artifact), str(threads)],
                         capture_output=True, text=True, cwd=helpers, check=True)
    started, message = run.stdout.strip().splitlines()
    return int(started), message


@pytest.mark.skipif(not __import__("os").path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_threads_sets_the_worker_count(artifact):
    one, message = _run(artifact, 1)
    three, _ = _run(artifact, 3)
    assert three - one == 2, f"threads=1 started {one} threads, threads=3 started {three}"
    assert "already runs CPU modules with 1 threads" in message and "got 2" in message


def test_threads_must_be_positive(compiled_roberta):
    with pytest.raises(ValueError, match=r"threads: expected a positive int .* got 0"):
        anyshape.load(compiled_roberta.save(compiled_roberta.vmfb_path.parent / "t"), threads=0)
