"""Max pooling at dynamic sizes, against eager (frontend/pooling.py).

Run as users write it: ``nn.MaxPool1d`` over a convolution's output with an
unbounded ``Dim("seq")``, unbatched inputs, integer inputs with indices, and
adaptive pooling, at odd lengths and at lengths that pool to one position.
"""

import pytest
import torch
from torch.export import Dim

import anyshape

# Every test here builds with IREE: `make check` skips the module before exporting.
pytestmark = pytest.mark.builds_after_export

F = torch.nn.functional
LENGTHS = (1, 2, 7, 17, 33, 65)


class TextCNN(torch.nn.Module):
    """A convolution over the tokens, max-pooled along the length."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(50, 8)
        self.conv = torch.nn.Conv1d(8, 6, 3, padding=1)
        self.pool = torch.nn.MaxPool1d(3, stride=2, padding=1)

    def forward(self, ids):
        return self.pool(torch.relu(self.conv(self.embed(ids).transpose(1, 2))))


def _assert_same(got, want):
    for g, w in zip(torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(want)):
        assert g.shape == w.shape and g.dtype == w.dtype
        torch.testing.assert_close(g, w, equal_nan=True, rtol=1e-6, atol=1e-6)


def test_max_pool1d_over_an_unbounded_length():
    """Without indices, ATen's CPU path read the length as a plain number:
    torch.export fixed it to the example's."""
    model = TextCNN().eval()
    compiled = anyshape.compile(model, (torch.randint(0, 50, (2, 16)),),
                                dynamic_shapes={"ids": {0: Dim("batch"), 1: Dim("seq")}})
    for batch, length in [(1, 1), (3, 2), (1, 7), (2, 17), (1, 33), (2, 65)]:
        ids = torch.randint(0, 50, (batch, length))
        _assert_same(compiled(ids), model(ids))


class Pool(torch.nn.Module):
    def __init__(self, pool):
        super().__init__()
        self.pool = pool

    def forward(self, x):
        return self.pool(x)


def _compile_over_every_dim(pool, example):
    dims = {axis: Dim(f"d{axis}") for axis in range(example.dim())}
    return anyshape.compile(Pool(pool).eval(), (example,), dynamic_shapes={"x": dims})


def test_unbatched_max_pooling():
    """torch-mlir lowers batched max pooling only: [C, L] and [C, H, W] pool as
    a batch of one."""
    pool1d = _compile_over_every_dim(
        lambda x: F.max_pool1d(x, 3, 2, 1, return_indices=True), torch.randn(4, 9))
    pool2d = _compile_over_every_dim(
        lambda x: F.max_pool2d(x, (3, 2), (2, 1), (1, 1), dilation=(1, 2)), torch.randn(3, 9, 9))
    for length in LENGTHS:
        x = torch.randn(5, length)
        _assert_same(pool1d(x), F.max_pool1d(x, 3, 2, 1, return_indices=True))
        if length >= 3:  # a dilated width-2 kernel spans 3 columns
            x = torch.randn(2, length, length + 1)
            _assert_same(pool2d(x), F.max_pool2d(x, (3, 2), (2, 1), (1, 1), dilation=(1, 2)))


def test_max_pool2d_down_to_one_position():
    """Inputs that pool to one output position: torch recorded out_h * out_w > 1
    from a layout probe of the pooled result."""
    compiled = anyshape.compile(
        Pool(lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True)).eval(),
        (torch.randn(2, 1, 9, 9),),
        dynamic_shapes={"x": {0: Dim("batch"), 2: Dim("height"), 3: Dim("width")}})
    for height, width in [(1, 1), (2, 1), (1, 2), (2, 2), (7, 17)]:
        x = torch.randn(2, 1, height, width)
        _assert_same(compiled(x), F.max_pool2d(x, 3, 2, 1, return_indices=True))


@pytest.mark.parametrize("spatial", [1, 2, 3])
def test_integer_max_pooling_with_indices(spatial):
    """torch-mlir compared integers with arith.cmpf (2-D) and crashed (3-D).
    Values from a small range tie often: the index is eager's, the first maximum."""
    pool = {1: lambda x: F.max_pool1d(x, 3, 2, 1, return_indices=True),
            2: lambda x: F.max_pool2d(x, 3, 2, 0, ceil_mode=True, return_indices=True),
            3: lambda x: F.max_pool3d(x, (2, 3, 2), 2, 1, return_indices=True)}[spatial]
    compiled = _compile_over_every_dim(pool, torch.randint(-4, 4, (2, 3) + (9,) * spatial))
    for length in (2, 3, 7, 12):
        x = torch.randint(-4, 4, (1, 2) + (length,) * spatial)
        x[..., 0] = torch.iinfo(torch.int64).min  # as low as the padding
        _assert_same(compiled(x), pool(x))


def test_adaptive_max_pooling_at_every_length():
    """torch-mlir lowers adaptive max pooling only with static window sizes.
    Windows overlap where the length does not divide; a NaN wins its windows."""
    def pool(x):
        return (F.adaptive_max_pool1d(x.flatten(2), 3, return_indices=True),
                F.adaptive_max_pool2d(x, (2, 3), return_indices=True),
                F.adaptive_max_pool2d(x[0], 4))
    compiled = _compile_over_every_dim(pool, torch.randn(2, 3, 5, 9))
    for height, width in [(1, 1), (1, 3), (2, 7), (5, 17), (4, 33)]:
        x = torch.randn(2, 3, height, width)
        x[1, 2, 0, width // 2] = float("nan")
        _assert_same(compiled(x), pool(x))


def test_3d_pooling_matches_eager():
    """torch-mlir's 3-D pooling was wrong at dynamic sizes (and did not compile
    at static ones) where the depth leaves a remainder: gathered windows instead."""
    def pool(x):
        return (F.avg_pool3d(x, 2),
                F.avg_pool3d(x, 2, 1, 1, count_include_pad=False),
                F.avg_pool3d(x, (1, 2, 2), divisor_override=5),
                F.max_pool3d(x, 2, return_indices=True),
                F.max_pool3d(x[0], (2, 3, 2), 1, 1))
    compiled = _compile_over_every_dim(pool, torch.randn(2, 3, 3, 8, 8))
    for depth, height, width in [(3, 8, 8), (2, 2, 3), (5, 7, 17), (3, 33, 4)]:
        x = torch.randn(2, 3, depth, height, width)
        _assert_same(compiled(x), pool(x))


def test_an_input_shorter_than_the_window_is_refused_as_eager_refuses():
    """torch.export assumes sizes of 2 and up, so a window of 2 left no condition
    in the program: the compiled module returned an empty tensor at length 1,
    and at 0 channels, where eager raises."""
    def pool(x):
        return F.max_pool1d(x, 2), F.avg_pool2d(x.unsqueeze(1), (1, 2)), F.adaptive_avg_pool1d(x, 3)
    compiled = _compile_over_every_dim(pool, torch.randn(2, 4, 16))
    for shape in [(1, 4, 2), (3, 1, 7), (0, 2, 5)]:
        x = torch.randn(shape)
        _assert_same(compiled(x), pool(x))
    for shape, expected in [((2, 4, 1), r"d2 >= 2 \(max_pool1d\w*'s window needs 2 positions: "
                                         r"eager raises 'Output size is too small'\), got "
                                         r"argument 'x' dim 2 = 1"),
                            ((2, 4, 0), r"got argument 'x' dim 2 = 0"),
                            ((2, 0, 4), r"d1 >= 1 \(\w+ of an empty dim: eager raises\), got "
                                        r"argument 'x' dim 1 = 0")]:
        x = torch.randn(shape)
        with pytest.raises(RuntimeError):
            pool(x)
        with pytest.raises(ValueError, match=expected):
            compiled(x)
