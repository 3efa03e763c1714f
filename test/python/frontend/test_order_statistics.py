"""Medians and k-th values over a dynamic dim, against eager, NaNs included."""

import pytest
import torch
from torch.export import Dim

import anyshape


class Medians(torch.nn.Module):
    def forward(self, x):
        median, median_index = torch.median(x, dim=-1)
        nanmedian, nanmedian_index = torch.nanmedian(x, dim=0, keepdim=True)
        return median, median_index, nanmedian, nanmedian_index, torch.median(x), \
            torch.nanmedian(x)


def _with_nans(rows: int, length: int) -> torch.Tensor:
    """Distinct values (the index of a tie is eager's choice, not a contract),
    a NaN in row 1, and row 2 all NaN."""
    x = torch.randperm(rows * length).reshape(rows, length).float()
    if rows > 1 and length > 1:
        x[1, length // 2] = float("nan")
    if rows > 2:
        x[2] = float("nan")
    return x


@pytest.fixture(scope="module")
def medians():
    return anyshape.compile(Medians().eval(), (_with_nans(3, 5),),
                            dynamic_shapes={"x": {0: Dim("rows"), 1: Dim("length")}})


@pytest.mark.parametrize("rows, length", [(1, 1), (3, 7), (4, 17), (5, 33), (2, 64)])
def test_medians_match_eager_at_every_length(medians, rows, length):
    x = _with_nans(rows, length)
    for got, want in zip(medians(x), Medians()(x)):
        torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)


class KthValue(torch.nn.Module):
    def forward(self, x):
        return torch.kthvalue(x, 1)


def test_kthvalue_of_a_single_number():
    """A 0-d tensor: topk along its one implicit dim."""
    x = torch.tensor(2.5)
    values, indices = anyshape.compile(KthValue().eval(), (x,))(x)
    assert values.shape == () and float(values) == 2.5 and int(indices) == 0
