"""pow and atan2 at signed zeros, infinities, NaN and negative bases, exactly as eager.

IREE 3.13's float math expansions are right only for finite positive inputs
(``(-2.0) ** x`` gave 0, ``0 ** 0`` NaN, ``atan2(0, 0)`` NaN);
``anyshape.frontend.graph_fixes.edge_value_math`` rewrites the ops around them."""

import math

import pytest
import torch
from torch.export import Dim

import anyshape

# Every test here builds with IREE: `make check` skips the module before exporting.
pytestmark = pytest.mark.builds_after_export

SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -1.5, 2.0, -2.0, 3.0, -3.0,
           math.inf, -math.inf, math.nan]


class PowForms(torch.nn.Module):
    def forward(self, y, x):
        return (y ** 2, y ** 3, y ** 0.5, y ** -0.5, y ** -1, y ** -2, y ** 1.5, y ** -1.5,
                2.0 ** x, (-2.0) ** x, 0.0 ** x, torch.pow(y, x), torch.float_power(y, x),
                torch.atan2(y, x), torch.atan2(x, y))


def grid(dtype):
    values = torch.tensor(SPECIAL, dtype=dtype)
    y, x = torch.meshgrid(values, values, indexing="ij")
    return y.flatten(), x.flatten()


def assert_same_values(got, expected, what):
    assert got.dtype == expected.dtype, what
    same = (got == expected) | (got.isnan() & expected.isnan())
    close = (got - expected).abs() <= 1e-6 * expected.abs()
    zero_sign = (got == 0) & (expected == 0) & (torch.signbit(got) != torch.signbit(expected))
    wrong = (~(same | close)) | zero_sign
    assert not wrong.any(), f"{what}: {int(wrong.sum())} values differ, first at index " \
                            f"{int(wrong.nonzero()[0])}: {got[wrong][:4].tolist()} against eager " \
                            f"{expected[wrong][:4].tolist()}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_pow_and_atan2_at_edge_values_as_eager(dtype):
    model = PowForms().eval()
    y, x = grid(dtype)
    compiled = anyshape.compile(model, (y, x), dynamic_shapes={"y": {0: Dim("n")}, "x": {0: Dim("n")}})
    for got, expected, index in zip(compiled(y, x), model(y, x), range(100)):
        assert_same_values(got, expected, f"output {index}")
    # Another length: the rewrite is elementwise, at any size.
    y, x = y[:7], x[:7].flip(0)
    for got, expected, index in zip(compiled(y, x), model(y, x), range(100)):
        assert_same_values(got, expected, f"output {index} at length 7")


class AlibiSlopes(torch.nn.Module):
    """BLOOM's ALiBi slopes: a float 0-d base to integer powers. The rewrite tests
    the base's sign with ``lt.Scalar(base, 0)``, which torch-mlir's folder (in
    anyshape's passes and in IREE's torch input alike) read as an integer once
    the base was a literal (issue 36; passes/torch_ir/mixed_comparisons.py)."""

    def forward(self, x):
        base = torch.tensor(2 ** -(2 ** -(2 - 3)), dtype=torch.float32)
        return x * torch.pow(base, torch.arange(1, 5, dtype=torch.int32))


@pytest.mark.parametrize("passes", [None, []], ids=["default-passes", "no-passes"])
def test_power_of_a_float_literal_base_as_eager(passes):
    model = AlibiSlopes().eval()
    compiled = anyshape.compile(model, (torch.randn(3, 4),),
                                dynamic_shapes={"x": {0: Dim("rows")}}, passes=passes)
    x = torch.randn(7, 4)
    torch.testing.assert_close(compiled(x), model(x), atol=1e-6, rtol=1e-6)


def test_atan2_of_integers_at_the_origin():
    """The OpInfo case that found it: integer inputs, computed in float32."""
    class Atan2(torch.nn.Module):
        def forward(self, y, x):
            return torch.atan2(y, x)

    y, x = torch.tensor([[0, 1, -3], [0, 0, 2]]), torch.tensor([[0, 0, 0], [-4, 5, 0]])
    compiled = anyshape.compile(Atan2(), (y, x), dynamic_shapes={"y": {1: Dim("n")}, "x": {1: Dim("n")}})
    assert_same_values(compiled(y, x), Atan2()(y, x), "atan2")


class Rank0Softmax(torch.nn.Module):
    def forward(self, x):
        return (torch.softmax(x, 0), torch.log_softmax(x, -1),
                torch.softmax(x, 0, dtype=torch.float64), torch.log_softmax(x, 0, dtype=torch.float64))


def test_rank0_softmax_as_eager():
    """IREE 3.13 never finished compiling softmax of a 0-d tensor."""
    model = Rank0Softmax().eval()
    compiled = anyshape.compile(model, (torch.tensor(0.7),))
    for value in [0.7, -3.0, math.inf, -math.inf, math.nan]:
        x = torch.tensor(value)
        for got, expected, index in zip(compiled(x), model(x), range(10)):
            assert_same_values(got, expected, f"output {index} at {value}")


class Variances(torch.nn.Module):
    def forward(self, x):
        return (torch.var(x, dim=0), torch.std(x), torch.var_mean(x, 1)[0],
                torch.std_mean(x, 1, correction=2)[0], torch.var(x, dim=0, correction=0))


@pytest.mark.parametrize("size", [(0, 3), (3, 0), (1, 3), (2, 1), (2, 5)])
def test_variance_of_fewer_elements_than_the_correction_is_nan(size):
    """Eager divides by max(0, N - correction): NaN for an empty dim, where
    IREE's 0 / (0 - 1) gave -0.0."""
    model = Variances().eval()
    compiled = anyshape.compile(model, (torch.randn(3, 4),),
                                dynamic_shapes={"x": {0: Dim("b"), 1: Dim("n")}})
    x = torch.randn(*size)
    for got, expected, index in zip(compiled(x), model(x), range(10)):
        torch.testing.assert_close(got, expected, equal_nan=True, msg=lambda m: f"output {index}: {m}")


class LogCumSumExp(torch.nn.Module):
    def forward(self, x):
        return torch.logcumsumexp(x, 0), torch.logcumsumexp(x, -1)


@pytest.mark.parametrize("bounded", [False, True])
def test_logcumsumexp_beyond_exps_range(bounded):
    """torch-mlir's log(cumsum(exp(x))) gave inf past exp's range (x = 10000);
    one subtracted maximum would give -inf for prefixes far below it."""
    rows = Dim("rows", max=64) if bounded else Dim("rows")
    model = LogCumSumExp().eval()
    compiled = anyshape.compile(model, (torch.randn(5, 5),),
                                dynamic_shapes={"x": {0: rows, 1: Dim("cols")}})
    for size in [(1, 1), (5, 5), (3, 17), (33, 2)]:
        x = torch.randn(*size) * 100
        x[0, 0], x[-1, -1] = 10000.0, -math.inf
        if size[1] > 2:
            x[-1, :3] = torch.tensor([-1000.0, 0.0, 1000.0])
        for got, expected in zip(compiled(x), model(x)):
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-4, equal_nan=True)


class Det(torch.nn.Module):
    def forward(self, x):
        return torch.linalg.det(x)


def test_det_with_a_zero_pivot_is_an_error_not_nan():
    """torch-mlir eliminates without row pivoting: a zero pivot made NaN, for
    singular matrices (eager 0) and regular ones ([[0, 1], [1, 0]]: eager -1)."""
    compiled = anyshape.compile(Det(), (torch.randn(3, 5, 5),),
                                dynamic_shapes={"x": {0: Dim("b"), 1: Dim("n"), 2: Dim("n")}})
    x = torch.randn(4, 6, 6)
    torch.testing.assert_close(compiled(x), Det()(x), rtol=1e-4, atol=1e-5)
    swapped = torch.tensor([[[0.0, 1.0], [1.0, 0.0]]])
    with pytest.raises(anyshape.RunError, match="linalg.det: a matrix has a zero pivot"):
        compiled(swapped)
    # A NaN the matrix holds is the determinant's, as eager's.
    x[1, 2, 3] = math.nan
    assert compiled(x)[1].isnan() and Det()(x)[1].isnan()
