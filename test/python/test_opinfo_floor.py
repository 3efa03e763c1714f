"""The floor on a fixed seeded sample of PyTorch's OpInfo database (``test/opinfo/``).

``SAMPLE_OPS`` OpInfos drawn with ``random.Random(SAMPLE_SEED)``, float32
and int64 where each supports them, one sample each (the one with the most
dims of size > 1), every such dim dynamic and unbounded; and ``PINNED``
cases, one per cause of a known failure. Each case runs
through anyshape and the plain stack (torch.export, torch-mlir's importer,
IREE with anyshape's flags, no anyshape passes) in two worker processes, and
is one test id, which asserts: anyshape gives no wrong answer; if the plain
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

from opinfo import cases as opinfo_cases  # noqa: E402
from opinfo.pool import run_cases  # noqa: E402

SAMPLE_SEED = 0
SAMPLE_OPS = 50
WORKERS = 2
TIMEOUT = 120.0

# One case per cause of a known failure that the seeded sample misses (from
# `make coverage`), so that each fix shows here.
PINNED = [
    "topk-float32-0",                  # torch.return_types output
    "nonzero-float32-12",              # data-dependent output size
    "uniform-float32-2",               # updates its input in place
    "item-float32-0",                  # a Python number as output
    "cumulative_trapezoid-float32-0",  # anyshape-lower's IR fails in IREE
    "softmax.with_dtype-float32-4",    # float64 output
    "byte-float32-4",                  # uint8 output
]

# Known failures, each a strict xfail whose reason names the cause: a fix
# turns it into an XPASS, which fails until it is removed here.
_STRUCTSEQ = ("anyshape: signature.encode_tree refuses torch.return_types structseq outputs "
              "(TypeError 'a pytree node without field names'); the plain stack passes")
KNOWN = {
    "topk-float32-0": _STRUCTSEQ,
    "nonzero-float32-12": "anyshape: canonicalize_shapes size_int compares builder.root(u0) = None "
                          "with an MLIR value (TypeError __eq__) for a data-dependent size; the "
                          "plain stack passes",
    "uniform-float32-2": "anyshape: refuses a forward that updates its input in place "
                         "(ValueError); the plain stack passes",
    "item-float32-0": "anyshape: refuses a non-tensor output (TypeError 'only tensor outputs'); "
                      "the plain stack passes",
    "cumulative_trapezoid-float32-0": "anyshape: with anyshape-lower's facts IREE fails "
                                      "('linalg.generic' op write affecting operations on "
                                      "global resources ...); the plain stack passes",
    "softmax.with_dtype-float32-4": "anyshape: float64 output demoted to f32 by IREE; the call "
                                    "raises IREE's IndexError (buffer view byte length), not a "
                                    "clear error (the plain stack fails the same way)",
    "byte-float32-4": "anyshape: a uint8 output comes back int8 (IREE's signless i8); the plain "
                      "stack too",
    "meshgrid.variadic_tensors-float32-6": "anyshape: structural_reshapes casts a 0-d view "
                                           "input to [1,1,1] (tensor_static_info_cast rank "
                                           "mismatch); the plain stack passes",
    "meshgrid.variadic_tensors-int64-6": "anyshape: structural_reshapes casts a 0-d view input "
                                         "to [1,1,1] (tensor_static_info_cast rank mismatch); "
                                         "the plain stack passes",
    "linalg.svdvals-float32-18": "anyshape: torch-mlir's import error (NotImplementedError: "
                                 "sympy Min) comes out of compile unwrapped, not a CompileError",
    "div.trunc_rounding-int64-5": "IREE: SIGFPE running int64 division with dynamic dims under "
                                  "--iree-llvmcpu-vector-pproc-strategy=peel (anyshape's flag; "
                                  "both stacks; runs without it)",
    "logcumsumexp-float32-0": "torch-mlir/IREE: inf where eager gives 10000 (exp overflows), "
                              "both stacks",
}


def floor_cases() -> list[str]:
    names = random.Random(SAMPLE_SEED).sample(opinfo_cases.op_names(), SAMPLE_OPS)
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
            run_cases(wanted, workers=WORKERS, timeout=TIMEOUT)}


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
    # The module docstring and `make test`'s time budget assume this many.
    assert 60 <= len(CASES) <= 100, len(CASES)


def test_known_failures_are_cases():
    # An xfail whose case left the sample (an op_db change) would guard nothing.
    assert set(KNOWN) <= set(CASES), set(KNOWN) - set(CASES)
