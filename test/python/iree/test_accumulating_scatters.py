"""Accumulating scatters of computed rows at dynamic sizes, against eager
(iree/workarounds.py, ``separate_accumulated_scatter_operands``).

Written as MoE experts write them (JetMoE's): tokens sorted by expert, each
row's result added back at its token's position with ``index_add``, a
``scatter_add`` of computed values along a dynamic dim, and segment
reductions as TAPAS writes them (``scatter_reduce(include_self=False)``,
graph_fixes/scatter_reduce_without_self.py).
"""

import shutil

import pytest
import torch
from torch.export import Dim

import anyshape

BARRIER = "iree_tensor_ext.compute_barrier.start"


class SortedRowsAddedBack(torch.nn.Module):
    def forward(self, x, experts):
        _, order = experts.flatten().sort(dim=0, stable=True)
        rows = order.div(2, rounding_mode="trunc")
        return torch.zeros_like(x).index_add(0, rows, torch.relu(x[rows]) * 2)


class ScatterAddOfComputedValues(torch.nn.Module):
    def forward(self, x, index):
        return torch.zeros(x.shape[0], 8).scatter_add(1, index % 8, torch.tanh(x))


def _compile(model, example, dims):
    return anyshape.compile(model.eval(), example, dynamic_shapes=dims)


def _sorted_rows_args(tokens: int):
    return torch.randn(tokens, 32), torch.randint(0, 4, (tokens, 2))


def test_index_add_of_computed_rows_matches_eager():
    model = SortedRowsAddedBack()
    compiled = _compile(model, _sorted_rows_args(16), ({0: Dim("tokens")}, {0: Dim("tokens")}))
    assert BARRIER in compiled.ir("iree-input")
    for tokens in (1, 7, 33):
        args = _sorted_rows_args(tokens)
        torch.testing.assert_close(compiled(*args), model(*args), rtol=1e-6, atol=1e-6)


def test_scatter_add_of_computed_values_matches_eager():
    model = ScatterAddOfComputedValues()
    rows, cols = Dim("rows"), Dim("cols")
    compiled = _compile(model, (torch.randn(4, 16), torch.randint(0, 100, (4, 16))),
                        ({0: rows, 1: cols}, {0: rows, 1: cols}))
    for shape in [(1, 1), (3, 17), (2, 65)]:
        args = torch.randn(shape), torch.randint(0, 100, shape)
        torch.testing.assert_close(compiled(*args), model(*args), rtol=1e-6, atol=1e-6)


def test_the_barrier_is_still_needed(monkeypatch, tmp_path):
    """IREE 3.13 as anyshape found it: without the barrier the scatter's dispatch
    needs a stack buffer of dynamic size. When this fails, IREE compiles the
    fused form and the workaround can go."""
    import anyshape.driver.iree_input

    def copy_unchanged(in_file, out_file, text_file=None):
        if in_file != out_file:
            shutil.copyfile(in_file, out_file)
        return 0

    monkeypatch.setattr(anyshape.driver.iree_input, "separate_accumulated_scatter_operands",
                        copy_unchanged)
    monkeypatch.setenv("ANYSHAPE_CACHE_DIR", str(tmp_path))  # the cache knows no patches
    with pytest.raises(anyshape.CompileError, match="unbounded stack allocations"):
        _compile(SortedRowsAddedBack(), _sorted_rows_args(16),
                 ({0: Dim("tokens")}, {0: Dim("tokens")}))


class SegmentReductions(torch.nn.Module):
    """Each reduction of values into 8 segments, segments no value lands in
    keeping their start value (TAPAS's ``_segment_reduce``), and an integer
    maximum along a dynamic dim."""

    def forward(self, values, segments, counts):
        start = torch.arange(8, dtype=torch.float32)
        floats = [start.scatter_reduce(0, segments, values * 2, reduce=reduce, include_self=False)
                  for reduce in ("sum", "prod", "mean", "amax", "amin")]
        ints = torch.zeros(counts.shape[0], 4, dtype=torch.int64).scatter_reduce(
            1, segments.view(-1, 1).remainder(4).expand(-1, 2)[:counts.shape[0]], counts,
            reduce="amax", include_self=False)
        return (*floats, ints)


def _segment_args(n: int):
    values = torch.randn(n)
    if n > 3:
        values[3] = float("nan")  # a NaN wins its segment's amax and amin, as in eager
    return values, torch.randint(0, 6, (n,)), torch.randint(-50, 50, (n, 2))


def test_scatter_reduce_without_self_matches_eager():
    """torch-mlir's two-scatter lowering of include_self=False did not compile at a
    dynamic size ("offset 0 is out-of-bounds"; TAPAS: "unbounded stack allocations")."""
    model = SegmentReductions()
    n = Dim("n")
    compiled = _compile(model, _segment_args(16), ({0: n}, {0: n}, {0: n}))
    for size in (1, 7, 33):
        args = _segment_args(size)
        for got, expected in zip(compiled(*args), model(*args)):
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5, equal_nan=True)
