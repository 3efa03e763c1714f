"""The OpInfo floor's harness (``test/opinfo/``) catches what it is there to catch:
wrong answers, a worker that dies, and failures put down to the right cause."""

from __future__ import annotations

import os
import sys

import pytest
import torch

# torch.testing._internal (op_db) imports expecttest, which torch does not install.
pytest.importorskip("expecttest", reason="the OpInfo database needs expecttest: "
                                         "pip install expecttest")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from opinfo import classify, compare, wrap  # noqa: E402
from opinfo.cases import enumerate_cases, parse_case_id, sample_of  # noqa: E402
from opinfo.pool import run_cases  # noqa: E402


@pytest.mark.parametrize("got, why", [
    (torch.tensor([1.0, 2.0, 3.001]), "max abs error"),
    (torch.tensor([1.0, float("nan"), 3.0]), "NaN in one only"),
    (torch.tensor([1.0, 2.0, float("inf")]), "max abs error"),
    (torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64), "dtype"),
    (torch.tensor([1.0, 2.0]), "shape"),
])
def test_a_float_difference_is_a_mismatch(got, why):
    assert why in compare.mismatch([got], [torch.tensor([1.0, 2.0, 3.0])])


def test_rounding_is_not_a_mismatch():
    expected = torch.tensor([1000.0, float("nan"), float("-inf"), 0.0])
    got = expected + torch.tensor([1e-3, 0.0, 0.0, 5e-5])
    assert compare.mismatch([got], [expected]) is None


def test_integers_compare_exactly():
    assert "1 of 3" in compare.mismatch([torch.tensor([1, 2, 4])], [torch.tensor([1, 2, 3])])


def test_random_outputs_compare_shape_and_dtype():
    assert compare.mismatch([torch.rand(3)], [torch.rand(3)], random=True) is None
    assert "shape" in compare.mismatch([torch.rand(4)], [torch.rand(3)], random=True)


def test_case_ids_round_trip():
    cases, _ = enumerate_cases(["nn.functional.interpolate.nearest-exact"], ["float32"], 2)
    assert len(cases) == 2
    op_name, dtype, _ = parse_case_id(cases[0])
    assert (op_name, dtype) == ("nn.functional.interpolate.nearest-exact", "float32")


def test_resized_inputs_keep_the_values_and_the_ties():
    op, sample = sample_of("index_select-int64-2")  # x [5, 5], dim -1, index [5]
    module, inputs = wrap.make_module(op, sample)
    program = torch.export.export(module, inputs, dynamic_shapes=wrap.dynamic_shapes(inputs),
                                  strict=False)
    (name, values), *_ = wrap.other_sizes(program, inputs)
    resized = wrap.resized_inputs(program, inputs, values)
    assert name == "plus1" and all(size == 6 for t in resized for size in t.shape)
    # Tiled: the first rows and columns as they were, the new ones repeat them.
    assert torch.equal(resized[0][:5, :5], inputs[0]) and torch.equal(resized[1][5], inputs[1][0])
    module(*resized)  # the index stays in range


def test_iree_torch_input_failures_are_torch_mlir_gaps():
    message = "error: failed to legalize operation 'torch.aten.bucketize.Tensor'"
    assert classify.iree_compile_cause(message) == classify.TORCH_MLIR
    assert classify.iree_compile_cause("error: 'memref.alloca' op expected no unbounded "
                                       "stack allocations") == classify.IREE


@pytest.mark.parametrize("plain_when_anyshape_fails", [False, True])
def test_a_dead_worker_is_a_crash_and_the_other_stack_still_runs(monkeypatch,
                                                                plain_when_anyshape_fails):
    monkeypatch.setenv("OPINFO_ABORT_AT", "anyshape:compile")
    (record,) = run_cases(["add-float32-5"], workers=1, timeout=120,
                          plain_when_anyshape_fails=plain_when_anyshape_fails)
    assert record["anyshape"]["cause"] == classify.CRASH
    assert "SIGABRT" in record["anyshape"]["error"]
    assert record["plain"]["status"] == "pass"


def test_the_floor_leaves_the_plain_stack_out_where_anyshape_passes():
    # The floor asks nothing of the plain stack there (test_opinfo_floor.py).
    (record,) = run_cases(["add-float32-5"], workers=1, timeout=120,
                          plain_when_anyshape_fails=True)
    assert record["anyshape"]["status"] == "pass"
    assert record["plain"] == {"status": "not-run", "why": "anyshape passed"}


def test_a_call_outside_the_exported_sizes_is_torch_exports():
    """torch.export fixed the dim (or recorded a condition): anyshape's refusal
    at other sizes is right, and the cause is the export."""
    specialized = ValueError("argument 'x0' dim 1: expected size 3 (static), got 4; "
                             "shape (6, 4), expected (s4, 3)")
    condition = ValueError("arguments: expected sizes with ((s58) // 2) == 1 (a condition)")
    assert classify.call_failure(specialized) == classify.EXPORT
    assert classify.call_failure(condition) == classify.EXPORT
