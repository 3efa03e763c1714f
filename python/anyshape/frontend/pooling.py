"""Pooling at dynamic sizes, in forms torch.export keeps symbolic and IREE compiles.

The upstream failures, each with its fix here:

- ``F.max_pool1d`` without indices, under ``no_grad`` on CPU (as anyshape
  exports), runs ATen's fast path, which reads the length as a plain number:
  torch.export fixes a dynamic length to the example's. While exporting,
  ``torch.max_pool1d`` is its with-indices form, whose sizes stay symbolic
  (``symbolic_max_pool1d``).
- torch-mlir lowers max pooling of batched inputs only ("failed to legalize
  operation 'torch.aten.max_pool2d'" for a [C, H, W] input): an unbatched
  input is pooled as a batch of one.
- torch-mlir's max pooling with indices compares integers with ``arith.cmpf``
  (2-D) or crashes (3-D); its 3-D pooling, max and average, is wrong at
  dynamic sizes where the depth leaves a remainder (and does not compile at
  static ones); its adaptive max pooling needs static window sizes. These are
  computed here from the windows gathered whole (``window_max``, with eager's
  choice of index, the first maximum or the last NaN; ``window_mean``).
- torch-mlir's 2-D average pooling with torch's default stride (``stride=()``,
  the kernel's) pools with another one, to a wrong shape: it is written out.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

import torch

from anyshape.frontend.layout_probes import static_guards
from anyshape.stages import Workaround

WORKAROUNDS = (
    Workaround(
        name='max_pool1d_with_indices_while_exporting', stage='export',
        where='symbolic_max_pool1d',
        upstream="torch 2.13's max_pool1d (CompositeImplicit, CPU without grad) reads the "
                 "input's length as an int: torch.export specializes a dynamic length "
                 "(\"You marked seq as dynamic but your code specialized it to be a constant\").",
        guard='test/python/frontend/test_pooling.py::test_max_pool1d_over_an_unbounded_length',
        remove_when="torch's max_pool1d keeps its sizes symbolic"),
    Workaround(
        name='pooling_batched_or_gathered', stage='export',
        where='decompositions (decomposition_table)',
        upstream="torch-mlir 20261001 lowers max pooling of batched inputs only, compares "
                 "integers with arith.cmpf in max_pool2d_with_indices (and crashes in "
                 "ConvertTorchToLinalg on max_pool3d_with_indices of integers), pools 3-D "
                 "wrongly at dynamic sizes (avg_pool3d and max_pool3d of depth 3 by 2), "
                 "lowers adaptive_max_pool2d only with static window sizes, and pools "
                 "avg_pool2d with stride=() to a wrong shape.",
        guard=('test/python/frontend/test_pooling.py::test_unbatched_max_pooling',
               'test/python/frontend/test_pooling.py::test_integer_max_pooling_with_indices',
               'test/python/frontend/test_pooling.py::test_3d_pooling_matches_eager',
               'test/python/frontend/test_pooling.py::test_adaptive_max_pooling_at_every_length',
               'test/python/test_opinfo_floor.py::test_floor[nn.functional.avg_pool2d-float32-4]'),
        remove_when="torch-mlir lowers these at dynamic sizes"),
)


@contextlib.contextmanager
def symbolic_max_pool1d() -> Iterator[None]:
    """Within: ``torch.max_pool1d`` (which ``F.max_pool1d`` and ``nn.MaxPool1d``
    call) is the values of ``torch.max_pool1d_with_indices``."""
    original = torch.max_pool1d

    def max_pool1d(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
        return torch.max_pool1d_with_indices(input, kernel_size, stride, padding, dilation,
                                             ceil_mode)[0]

    torch.max_pool1d = max_pool1d
    try:
        yield
    finally:
        torch.max_pool1d = original


def _without_size_guards(decomposition):
    """``decomposition`` with torch's ``guard_or_false`` / ``guard_or_true``
    answered statically: its windows are sized by the output length, and the
    stride choices of their broadcasts would otherwise record ``out != 1``,
    refusing the inputs short enough to pool to one position."""
    @functools.wraps(decomposition)
    def decompose(*args, **kwargs):
        with static_guards():
            return decomposition(*args, **kwargs)
    return decompose


def decompositions() -> dict:
    aten = torch.ops.aten
    rewritten = {}
    for op, spatial in ((aten.max_pool2d_with_indices.default, 2),
                        (aten.max_pool3d_with_indices.default, 3)):
        rewritten[op] = _without_size_guards(_max_pool_with_indices(op, spatial))
    for op, spatial in ((aten.max_pool2d.default, 2), (aten.max_pool3d.default, 3)):
        rewritten[op] = _max_pool(op, spatial)
    rewritten[aten.adaptive_max_pool2d.default] = _without_size_guards(_adaptive_max_pool2d)
    rewritten[aten.avg_pool2d.default] = _avg_pool2d
    rewritten[aten.avg_pool3d.default] = _without_size_guards(_avg_pool3d)
    return rewritten


def _as_list(value, spatial: int) -> list:
    value = list(value) if isinstance(value, (list, tuple)) else [value]
    return value * spatial if len(value) == 1 else value


def _windows(x, spatial: int, kernel_size, stride, padding, dilation, ceil_mode):
    kernel = _as_list(kernel_size, spatial)
    stride = _as_list(stride, spatial) if stride else kernel
    return [_pool_windows(x.shape[x.dim() - spatial + axis], k, s, p, d, ceil_mode)
            for axis, (k, s, p, d) in enumerate(zip(
                kernel, stride, _as_list(padding, spatial), _as_list(dilation, spatial)))]


def _max_pool_with_indices(op, spatial: int):
    def pool(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
        if x.dim() == spatial + 1:  # unbatched
            values, indices = op(x.unsqueeze(0), kernel_size, stride, padding, dilation,
                                 ceil_mode)
            return values.squeeze(0), indices.squeeze(0)
        if x.dtype.is_floating_point and spatial == 2:
            if not stride:  # the kernel's, written out for torch-mlir
                return op(x, kernel_size, kernel_size, padding, dilation, ceil_mode)
            return NotImplemented
        return window_max(x, _windows(x, spatial, kernel_size, stride, padding, dilation,
                                      ceil_mode))
    return pool


def _max_pool(op, spatial: int):
    with_indices = {2: torch.ops.aten.max_pool2d_with_indices.default,
                    3: torch.ops.aten.max_pool3d_with_indices.default}[spatial]

    def pool(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
        if x.dim() == spatial + 1 or not x.dtype.is_floating_point or spatial == 3:
            return with_indices(x, kernel_size, stride, padding, dilation, ceil_mode)[0]
        if not stride:
            return op(x, kernel_size, kernel_size, padding, dilation, ceil_mode)
        return NotImplemented
    return pool


def _avg_pool2d(x, kernel_size, stride=(), *rest, **kwargs):
    """torch-mlir pools with a stride other than the default (``stride=()``: the
    kernel's), to a wrong shape: written out."""
    if not stride:
        return torch.ops.aten.avg_pool2d.default(x, kernel_size, kernel_size, *rest, **kwargs)
    return NotImplemented


def _avg_pool3d(x, kernel_size, stride=(), padding=0, ceil_mode=False,
                count_include_pad=True, divisor_override=None):
    if x.dim() == 4:  # unbatched
        return _avg_pool3d(x.unsqueeze(0), kernel_size, stride, padding, ceil_mode,
                           count_include_pad, divisor_override).squeeze(0)
    windows = _windows(x, 3, kernel_size, stride, padding, 1, ceil_mode)
    padded = [positions < x.shape[x.dim() - 3 + axis] + pad
              for axis, ((positions, _), pad) in enumerate(zip(windows, _as_list(padding, 3)))]
    return window_mean(x, windows, count_include_pad, divisor_override, padded)


def _pool_windows(size, kernel: int, stride: int, padding: int, dilation: int,
                  ceil_mode: bool):
    """(positions [out, kernel], inside [out, kernel]) of a pooling's windows
    along a dim of ``size``: torch's output size, ceil mode's last window only
    where it starts inside the input or its left padding."""
    span = size + 2 * padding - dilation * (kernel - 1) - 1
    if ceil_mode:
        out = (span + stride - 1) // stride + 1
        out = out - ((out - 1) * stride >= size + padding)
    else:
        out = span // stride + 1
    positions = _grid(torch.arange(out) * stride - padding, torch.arange(kernel) * dilation)
    return positions, (positions >= 0) & (positions < size)


def _grid(column, row):
    """[len(column), len(row)]: ``column[i] + row[j]``. Expanded explicitly:
    torch's broadcasting of a size that may be 1 (an output length) against 1
    records that it is not, which would refuse the short inputs."""
    shape = (column.shape[0], row.shape[0])
    return column[:, None].expand(shape) + row[None, :].expand(shape)


def _adaptive_max_pool2d(x, output_size):
    sizes = x.shape[-2:]
    windows = [_adaptive_windows(size, out if out is not None else size)
               for size, out in zip(sizes, _as_list(output_size, 2))]
    if x.dim() == 3:
        values, indices = window_max(x.unsqueeze(0), windows)
        return values.squeeze(0), indices.squeeze(0)
    return window_max(x, windows)


def _adaptive_windows(size, out: int):
    """Adaptive pooling's windows along a dim of ``size``: window ``i`` is
    [floor(i * size / out), ceil((i + 1) * size / out)), at most ``size // out +
    2`` long; one element each where ``out`` is ``size`` (``None`` in the
    user's output size)."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    if statically_known_true(out == size):
        positions = torch.arange(size)[:, None]
        return positions, torch.ones_like(positions, dtype=torch.bool)
    index = torch.arange(out)
    starts = (index * size) // out
    ends = ((index + 1) * size + out - 1) // out
    positions = _grid(starts, torch.arange(size // out + 2))
    return positions, positions < ends[:, None].expand(positions.shape)


def _laid_out(table, axis: int, spatial: int, leading: int, windows_after: int):
    """``table`` [out, k] at out ``axis`` and window ``axis`` of a tensor with
    ``leading`` dims before the outputs and ``windows_after`` window dims after
    window ``axis``."""
    at = (None,) * (leading + axis) + (slice(None),) + (None,) * (spatial - 1) + \
        (slice(None),) + (None,) * windows_after
    return table[at]


def _over_windows(tables, windows):
    """Per spatial dim tables [out, k], each laid out over [out0, ..., k0, ...]."""
    spatial = len(windows)
    shape = [positions.shape[0] for positions, _ in windows] + \
        [positions.shape[1] for positions, _ in windows]
    return [_laid_out(table, axis, spatial, 0, spatial - 1 - axis).expand(shape)
            for axis, table in enumerate(tables)]


def _gathered(x, windows):
    """``x`` [*lead, *spatial] as [*lead, out0, ..., k0, ...], each window's
    elements (clamped into the input where it leaves it), gathered one spatial
    dim at a time and never reshaped: a reshape of a symbolic output size
    records guards (``out >= 2``) that refuse short inputs."""
    spatial = len(windows)
    lead = x.dim() - spatial
    sizes = x.shape[lead:]
    gathered = x
    for axis, (positions, _) in enumerate(windows):
        # [*lead, out0..out(axis-1), size(axis)..size(-1), k0..k(axis-1)]: k(axis) last
        gathered = gathered.unsqueeze(-1)
        shape = list(gathered.shape)
        shape[-1] = positions.shape[1]
        gathered = gathered.expand(shape)
        index = _laid_out(positions.clamp(0, sizes[axis] - 1), axis, spatial, lead, 0)
        shape[lead + axis] = positions.shape[0]
        gathered = gathered.gather(lead + axis, index.expand(shape))
    inside = None
    for valid in _over_windows([valid for _, valid in windows], windows):
        inside = valid if inside is None else inside & valid
    return gathered, inside


def window_max(x, windows):
    """The max over each window and its index into the flattened spatial dims,
    as eager's max pooling gives them: the first maximum, or the last NaN.
    ``x``: [N, C, *spatial]; ``windows``: per spatial dim, (positions [out,
    k], inside [out, k]) from ``_pool_windows`` or ``_adaptive_windows``."""
    spatial = len(windows)
    sizes = x.shape[x.dim() - spatial:]
    window_dims = tuple(range(-spatial, 0))
    gathered, inside = _gathered(x, windows)
    # Where each window element lies in the flattened input, and its place in
    # the window in row-major order (eager scans a window in that order).
    strides, slot_strides = [1] * spatial, [1] * spatial
    for axis in reversed(range(spatial - 1)):
        strides[axis] = strides[axis + 1] * sizes[axis + 1]
        slot_strides[axis] = slot_strides[axis + 1] * windows[axis + 1][0].shape[1]
    slot_count = slot_strides[0] * windows[0][0].shape[1]
    flat_position = sum(_over_windows(
        [positions * stride for (positions, _), stride in zip(windows, strides)], windows))
    slot = sum(_over_windows(
        [torch.arange(positions.shape[1])[None, :].expand(positions.shape) * stride
         for (positions, _), stride in zip(windows, slot_strides)], windows))
    if gathered.dtype.is_floating_point:
        nan = torch.isnan(gathered) & inside
        numbers = torch.where(inside & ~nan, gathered, float("-inf"))
    else:
        nan = None
        numbers = torch.where(inside, gathered, torch.iinfo(gathered.dtype).min)
    values = numbers.amax(window_dims, keepdim=True)
    chosen = torch.where((numbers == values) & inside, slot, slot_count).amin(
        window_dims, keepdim=True)
    if nan is not None:
        last_nan = torch.where(nan, slot, -1).amax(window_dims, keepdim=True)
        values = torch.where(last_nan >= 0, float("nan"), values)
        chosen = torch.where(last_nan >= 0, last_nan, chosen)
    indices = torch.where(slot == chosen, flat_position, 0).sum(window_dims)
    for _ in range(spatial):
        values = values.squeeze(-1)
    return values, indices


def window_mean(x, windows, count_include_pad: bool, divisor_override, padded):
    """Average pooling over ``windows`` (as ``window_max``'s), as eager computes
    it: the sum of the elements inside the input, over ``divisor_override``, or
    else the count of the window's positions inside the padded input
    (``padded``: per dim [out, k]) with ``count_include_pad``, inside the input
    without. Integers divide with truncation."""
    window_dims = tuple(range(-len(windows), 0))
    gathered, inside = _gathered(x, windows)
    total = torch.where(inside, gathered, torch.zeros((), dtype=gathered.dtype)).sum(
        window_dims, dtype=gathered.dtype)
    if divisor_override:
        divisor = torch.full((), divisor_override, dtype=torch.int64)
    else:
        within = inside
        if count_include_pad:
            within = None
            for valid in _over_windows(padded, windows):
                within = valid if within is None else within & valid
        divisor = within.to(torch.int64).sum(window_dims)
    if gathered.dtype.is_floating_point:
        return total / divisor.to(gathered.dtype)
    return torch.div(total, divisor, rounding_mode="trunc")
