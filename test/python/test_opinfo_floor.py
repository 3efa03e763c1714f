"""The floor on a fixed seeded sample of PyTorch's OpInfo database (``test/opinfo/``).

``SAMPLE_OPS`` OpInfos drawn with ``random.Random(SAMPLE_SEED)``, float32
and int64 where each supports them, one sample each (the one with the most
dims of size > 1), every such dim dynamic and unbounded; and ``PINNED``
cases, one per cause of a known failure. Each case runs
through anyshape and, where anyshape does not pass, the plain stack
(torch.export, torch-mlir's importer, IREE with anyshape's flags, no anyshape
passes; a case anyshape passes asks nothing of it) in two worker processes,
and is one test id, which asserts: anyshape gives no wrong answer; if the plain
stack passes, anyshape passes; a module anyshape cannot compile or run gets
a clear error (a CompileError, or a ValueError/TypeError with a message).
torch.export's refusals are its own errors, the same on both stacks.
``make coverage`` runs the whole database.
"""

from __future__ import annotations

import os
import random
import sys

import pytest

# torch.testing._internal (op_db) imports expecttest, which torch does not install.
pytest.importorskip("expecttest", reason="the OpInfo database needs expecttest: "
                                         "pip install expecttest")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from extent import quick_or_full  # noqa: E402
from opinfo import cases as opinfo_cases  # noqa: E402
from opinfo.pool import run_cases  # noqa: E402

SAMPLE_SEED = 0
# 25 OpInfos in the quick extent, 50 in the full one (extent.py).
FULL_SAMPLE_OPS = 50
SAMPLE_OPS = quick_or_full(25, FULL_SAMPLE_OPS)
WORKERS = 2
TIMEOUT = 120.0

# Cases of causes the seeded sample misses (from `make coverage`), each fixed
# once; pinned so that the fix stays.
PINNED = [
    "topk-float32-0",                  # a torch.return_types output
    "nonzero-float32-12",              # a data-dependent output size
    "uniform-float32-2",               # updates its input in place
    "item-float32-0",                  # a Python number as output
    "cumulative_trapezoid-float32-0",  # IREE fails with the argument dim ranges
    "softmax.with_dtype-float32-4",    # a float64 output
    "byte-float32-4",                  # a uint8 output of values from 128 up
    "meshgrid.variadic_tensors-float32-6",  # a 0-d tensor viewed as [1, 1, 1]
    "div.trunc_rounding-int64-5",      # integer division with dynamic dims (SIGFPE)
    "reshape-float32-0",               # dynamic dims reshaped to static sizes
    "bincount-int64-0",                # IREE fails with the argument dim ranges
    "index_select-float32-0",          # dim 0 of a 0-d tensor
    "nn.functional.linear_cross_entropy-float32-0",  # data tiling of [1, K] @ [K, N]
    "nn.functional.embedding_bag-float32-3",  # torch-mlir drops per_sample_weights
    "scatter_reduce.mean-int64-1",     # torch-mlir's integer mean rounds toward 0
    "logcumsumexp-float32-0",          # torch-mlir's log(cumsum(exp(x))) overflowed
    "atan2-int64-5",                   # IREE's atan2(0, 0) was NaN
    "nn.functional.pad.reflect-float32-0",  # a size at aten.sub.Tensor's Tensor operand
    "nn.functional.interpolate.nearest-float32-2",  # floor(L * 1.7) on IREE's host
    "softmax-float32-6",               # softmax of a 0-d tensor never compiled
    "nn.functional.avg_pool2d-float32-4",  # stride=() pooled with another stride
    "var-float32-14",                  # the variance of an empty tensor was -0.0
]

# Known failures, each a strict xfail whose reason names the cause: a fix
# turns it into an XPASS, which fails until it is removed here.
KNOWN: dict[str, str] = {}


def floor_cases() -> list[str]:
    # The full extent's draw, cut: the quick extent's OpInfos are among the full one's.
    names = random.Random(SAMPLE_SEED).sample(opinfo_cases.op_names(), FULL_SAMPLE_OPS)[:SAMPLE_OPS]
    # Exact names, in op_db's order (a name is a glob without wildcards).
    drawn = opinfo_cases.enumerate_cases(names, None, 1)[0]
    return drawn + [case for case in PINNED if case not in drawn]


CASES = floor_cases()


@pytest.fixture(scope="module")
def records(request):
    """Every selected case, run once through the worker pool (the cases that
    ``-k`` leaves out are not run)."""
    wanted = [item.callspec.params["case"] for item in request.session.items
              if getattr(item, "originalname", None) == "test_floor"]
    return {record["case"]: record for record in
            run_cases(wanted, workers=WORKERS, timeout=TIMEOUT, plain_when_anyshape_fails=True)}


@pytest.mark.builds_in_subprocess
@pytest.mark.parametrize("case", [
    pytest.param(case, id=case,
                 marks=[pytest.mark.xfail(strict=True, reason=KNOWN[case])] if case in KNOWN else [])
    for case in CASES])
def test_floor(case, records):
    record = records[case]
    assert "harness_error" not in record, record.get("harness_error")
    if "na" in record:
        pytest.skip(f"not applicable: {record['na']}")
    ours, floor = record["anyshape"], record["plain"]
    where = f"{case}: sample {record.get('sample')}"
    assert ours.get("stage") != "numerics", f"{where}: anyshape {ours['error']}"
    if floor["status"] == "pass":
        assert ours["status"] == "pass", \
            f"{where}: the plain stack passes, anyshape fails at {ours['stage']}: {ours['error']}"
    if ours["status"] == "fail":
        assert ours["clear"], f"{where}: unclear {ours['type']} at {ours['stage']}: {ours['error']}"


def test_sample_is_the_documented_size():
    # `make test`'s time budget assumes this many (quick extent), `make test-full`'s more.
    low, high = quick_or_full((40, 70), (60, 100))
    assert low <= len(CASES) <= high, len(CASES)


def test_known_failures_are_cases():
    # An xfail whose case left the sample (an op_db change) would guard nothing.
    assert set(KNOWN) <= set(CASES), set(KNOWN) - set(CASES)
