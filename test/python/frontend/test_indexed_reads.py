"""Bounds on indices the module computes from the data (frontend/indexed_reads.py:
``data_bounds``), without compiling: torch.export's graph, classified."""

import torch
from torch.export import Dim

from anyshape.frontend.export import export_program
from anyshape.frontend.indexed_reads import indexed_reads, size_condition


class CountedPositions(torch.nn.Module):
    """RoBERTa's positions: counted from the ids, past the padding index."""

    def __init__(self, padding_idx=1, rows=40):
        super().__init__()
        self.padding_idx = padding_idx
        self.positions = torch.nn.Embedding(rows, 4, padding_idx=padding_idx)

    def forward(self, ids):
        mask = ids.ne(self.padding_idx).int()
        counted = (torch.cumsum(mask, dim=1).type_as(mask) + 0) * mask
        return self.positions(counted.long() + self.padding_idx)


class ScaledPositions(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.positions = torch.nn.Embedding(40, 4)

    def forward(self, x):
        return self.positions((x * 3.7).long())


class SignedCounts(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.positions = torch.nn.Embedding(40, 4)

    def forward(self, ids):
        return self.positions(torch.cumsum(ids - 5, dim=1))


def _reads(model, example):
    dims = ({0: Dim("batch"), 1: Dim("seq")},)
    return indexed_reads(export_program(model.eval(), (example,), None, dims).graph)


def test_positions_counted_from_the_ids_are_bounded_by_the_length():
    """/// padding_idx + seq at most: the table's 40 rows take seq <= 38."""
    (read,) = _reads(CountedPositions(), torch.randint(2, 9, (2, 5)))
    assert read.kind == "data"
    low, high = read.bounds
    assert low == 1 and str(high).endswith("+ 1")
    condition = size_condition(read)
    assert condition is not None and condition.endswith("<= 38"), condition


def test_negative_indices_from_floats_or_signed_counts_have_no_bound():
    """/// A truncated float, or a sum of values that can be negative: not bounded."""
    (scaled,) = _reads(ScaledPositions(), torch.rand(2, 5))
    (signed,) = _reads(SignedCounts(), torch.randint(2, 9, (2, 5)))
    assert scaled.kind == signed.kind == "data"
    assert scaled.bounds is None and signed.bounds is None
