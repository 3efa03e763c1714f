"""In-place writes (scatter, scatter_add, index_fill) into fills of one shape
give eager's results, several in one module.

IREE 3.13 (the plain stack too) wrote two such writes into one buffer and left
the second result unwritten: beam with ``experts_implementation="batched_mm"``
was 0.31 off eager (anyshape/iree/distinct_fills.py has the cause and the way
around it)."""

import pytest
import torch
from torch.export import Dim

import anyshape


class WritesIntoFills(torch.nn.Module):
    """Beam's group-limited router marks its chosen groups with
    ``zeros_like(scores).scatter_(1, groups, 1)``, once per MoE layer; the
    other in-place ops into ``zeros_like`` take the same path."""

    def forward(self, scores, first, second):
        marked_first = torch.zeros_like(scores)
        marked_first.scatter_(1, first, 1)
        marked_second = torch.zeros_like(scores)
        marked_second.scatter_(1, second, 1)
        ones = torch.ones_like(first, dtype=scores.dtype)
        counted_first = torch.zeros_like(scores).scatter_add(1, first, ones)
        counted_second = torch.zeros_like(scores).scatter_add(1, second, ones)
        filled_first = torch.zeros_like(scores).index_fill(1, first[0], 1.0)
        filled_second = torch.zeros_like(scores).index_fill(1, second[0], 1.0)
        zeros = torch.zeros_like(scores)  # written in place and read
        return (marked_first, marked_second, counted_first, counted_second, filled_first,
                filled_second, zeros.scatter(1, first, 2.0), zeros + scores)


def _inputs(rows: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, 4, generator=g), torch.randint(0, 4, (rows, 2), generator=g),
            torch.randint(0, 4, (rows, 2), generator=g))


@pytest.fixture(scope="module")
def writes_into_fills():
    rows = Dim("rows")
    return anyshape.compile(WritesIntoFills(), _inputs(5, 0),
                            dynamic_shapes=({0: rows}, {0: rows}, {0: rows}))


@pytest.mark.parametrize("rows", [1, 3, 7, 33])
def test_in_place_writes_into_zeros_of_one_shape_as_eager(writes_into_fills, rows):
    x = _inputs(rows, rows)
    names = ["scatter first", "scatter second", "scatter_add first", "scatter_add second",
             "index_fill first", "index_fill second", "scatter into a read fill", "the read"]
    for name, got, expected in zip(names, writes_into_fills(*x), WritesIntoFills()(*x),
                                   strict=True):
        assert torch.equal(got, expected), f"{name} at {rows} rows: {got} against eager " \
                                           f"{expected}"


class WritesAlongTheLastDim(torch.nn.Module):
    """PhiMoE's router masks its first expert with ``torch.scatter(scores, -1,
    experts, -inf)``: at a negative dim torch-mlir's scatter lowering crashed
    iree-compile."""

    def forward(self, scores, index):
        ones = torch.ones_like(index, dtype=scores.dtype)
        return (torch.scatter(scores, -1, index, float("-inf")),
                torch.scatter(scores, -1, index, ones * 3),
                torch.scatter_add(scores, -1, index, ones),
                torch.scatter_reduce(scores, -1, index, ones, "amax"),
                torch.scatter(scores.unsqueeze(-1).repeat(1, 1, 2), -2, index.unsqueeze(-1), 5.0))


def test_writes_along_a_negative_dim_as_eager():
    rows = Dim("rows")
    example = _inputs(5, 0)[:2]
    compiled = anyshape.compile(WritesAlongTheLastDim(), example,
                                dynamic_shapes=({0: rows}, {0: rows}))
    for n in (1, 7):
        x = _inputs(n, n)[:2]
        for got, expected in zip(compiled(*x), WritesAlongTheLastDim()(*x), strict=True):
            assert torch.equal(got, expected), f"at {n} rows: {got} against eager {expected}"
