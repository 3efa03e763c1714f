"""Quantized weights (``BackendOptions(weights="int8"|"int4")``, issue 66).

The quantizer (``iree/quantized_weights.py``) is held to its rounding bounds
and its packed layout to an unpacking written here; the kernel's int8 and
int4 entry points (``kernels/quantized_panels.h``, each ISA's code, run from
the objects modules link) to float64 products with the dequantized weights;
compiled models and generators to eager on a copy of the model whose weights
are the dequantized ones (``reference_model``), and to HF's ``generate`` on
that copy, token for token.
"""

import ctypes
import dataclasses
import json
import re

import numpy as np
import pytest
import torch
from torch.export import Dim

import anyshape
from anyshape.iree import quantized_weights as qw
from anyshape.iree.kernels import build, linear_rows
from kernel_objects import linked_object

KERNEL, UNAVAILABLE = build.kernel_object(linear_rows.SOURCE)
needs_kernel = pytest.mark.skipif(KERNEL is None, reason=f"kernel unavailable: {UNAVAILABLE}")
INT8, INT4 = qw.WeightFormat("int8"), qw.WeightFormat("int4", 32)
FORMATS = [INT8, INT4, qw.WeightFormat("int4", 64), qw.WeightFormat("int4", 128)]


def _weights(rng, n, k):
    """Normal weights with what real ones have too: a column of outliers, a
    row of zeros, a row of one sign."""
    w = rng.standard_normal((n, k)).astype(np.float32)
    w[:, 3] *= 40
    w[1] = 0
    w[2] = np.abs(w[2])
    return w


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f"{f.name}-{f.group_size}")
def test_quantized_values_are_within_half_a_step(fmt):
    """Every value is within half its scale of the weight (int4's clamped
    +8, the negative of a group's extreme, within one scale); int8's scale
    maps a row's largest magnitude to 127, int4's a group's to -8; zeros stay
    zero."""
    w = _weights(np.random.default_rng(0), 37, 256)
    q, scale = qw.quantize(w, fmt)
    deq = qw.dequantized(w, fmt)
    if fmt.name == "int8":
        step = scale[:, None]
        assert q.min() >= -127 and q.max() <= 127
        np.testing.assert_allclose(scale, np.abs(w).max(axis=1) / 127, rtol=1e-6)
        assert np.all(np.abs(w - deq) <= step / 2 * (1 + 1e-5) + 1e-30)
    else:
        step = np.repeat(np.abs(scale.astype(np.float32)), fmt.group_size, axis=1)
        assert q.min() >= -8 and q.max() <= 7
        groups = q.reshape(37, -1, fmt.group_size)
        wide = np.abs(w).reshape(37, -1, fmt.group_size)
        extreme = np.take_along_axis(groups, wide.argmax(axis=2)[..., None], axis=2)
        assert np.all((extreme == -8) | (wide.max(axis=2, keepdims=True) == 0))
        error = np.abs(w - deq)
        clamped = q == 7
        assert np.all(error[~clamped] <= step[~clamped] / 2 * (1 + 1e-3))
        assert np.all(error <= step * (1 + 1e-3))
    assert np.all(deq[1] == 0) and np.isfinite(deq).all()


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f"{f.name}-{f.group_size}")
def test_quantizing_a_run_of_rows_at_a_time_gives_the_whole_weights_codes(fmt, monkeypatch):
    """/// quantize takes about 4 MiB of rows at a time (an 8B model's
    /// embedding table whole would need 2 GiB per temporary): runs of 5 rows,
    /// and a last one shorter, give the codes and scales of the whole at once;
    /// an inf in a later run is still refused."""
    w = _weights(np.random.default_rng(3), 37, 256)
    whole = qw.quantize(w, fmt)
    monkeypatch.setattr(qw, "_ROWS_AT_ONCE_ELEMENTS", 5 * 256)
    runs = qw.quantize(w, fmt)
    for got, want in zip(runs, whole):
        assert got.dtype == want.dtype and np.array_equal(got, want)
    w[33, 7] = np.inf
    with pytest.raises(qw.QuantizationError, match="holds inf or NaN"):
        qw.quantize(w, fmt)


@pytest.mark.parametrize("fmt", [INT8, INT4, qw.WeightFormat("int4", 128),
                                 qw.WeightFormat("int4", 64, activations="int8")],
                         ids=lambda f: f"{f.name}-{f.group_size}-{f.activations}")
def test_packed_panels_unpack_to_the_quantized_values(fmt):
    """Panels of 16 output columns, the last padded: int8 [P, k, 16] with a
    scale per column; int4 two k to a byte (k even low, as q + 8) with a
    float16 scale per group and column, [P, k / group, 16]; int4 for int8
    activations in fours of k, [P, k / 8, 16, 4], byte e of a column's step
    s holding k 8 s + e low and 8 s + e + 4 high."""
    w = _weights(np.random.default_rng(1), 37, 256)
    q, scale = qw.quantize(w, fmt)
    data, scales = qw.packed(w, fmt)
    panels = 3
    if fmt.name == "int8":
        assert data.shape == (panels, 256, 16) and data.dtype == np.int8
        unpacked = data.transpose(0, 2, 1).reshape(panels * 16, 256)
        assert scales.shape == (panels * 16,)
        np.testing.assert_array_equal(scales[:37], scale)
    else:
        low = (data & 15).astype(np.int8) - 8
        high = (data >> 4).astype(np.int8) - 8
        if qw.nibble_quads(fmt):
            assert data.shape == (panels, 32, 16, 4) and data.dtype == np.uint8
            steps = np.concatenate([low, high], axis=3)  # [P, k / 8, 16, 8]: k 8 s + 0..7
            unpacked = steps.transpose(0, 2, 1, 3).reshape(panels * 16, 256)
        else:
            assert data.shape == (panels, 128, 16) and data.dtype == np.uint8
            unpacked = np.stack([low, high], axis=2).reshape(panels, 256, 16).transpose(0, 2, 1)
            unpacked = unpacked.reshape(panels * 16, 256)
        assert scales.shape == (panels, 256 // fmt.group_size, 16)
        np.testing.assert_array_equal(
            scales.transpose(0, 2, 1).reshape(panels * 16, -1)[:37], scale)
    np.testing.assert_array_equal(unpacked[:37], q)
    assert not unpacked[37:].any()


def _host_library(tmp_path, isa: str):
    kernel = linked_object(linear_rows.SOURCE, isa, tmp_path)
    pointer, size = ctypes.c_void_p, ctypes.c_size_t
    for name, constants in (("q8", 3), ("q4", 4), ("q4i8", 4), ("q8i16", 3)):
        getattr(kernel, f"anyshape_linear_rows_{name}").argtypes = \
            [pointer, size] * 5 + [size] * (constants + 4)
        getattr(kernel, f"anyshape_linear_rows_{name}_no_bias").argtypes = \
            [pointer, size] * 4 + [size] * (constants + 4)
    return kernel


@pytest.mark.parametrize("isa", ["avx512vnni", "avx512", "avx2", "portable"])
def test_every_path_computes_every_row_count(tmp_path, isa):
    """Rows 1 to 4 (the tiles that dequantize in registers: 1 or 2 rows by
    two panels, 3 or 4 by one), 5 and up (blocks of 256 k dequantized on the
    stack, taken by the float32 tiles: 15, 16, 33, 193 take each of their
    paths), n with a partial last panel and an odd panel count, k within one
    block and over several (the last short), int8 and int4 in each group
    size, with and without a bias, over one workgroup and 3 x 2: each against
    the float64 product with the dequantized weights."""
    kernel = _host_library(tmp_path, isa)
    rng = np.random.default_rng(0)
    for fmt in FORMATS:
        for k, n in [(384, 37), (128, 19), (1152, 40)]:
            w = _weights(rng, n, k)
            bias = rng.standard_normal(n).astype(np.float32)
            data, scales = qw.packed(w, fmt)
            deq = qw.dequantized(w, fmt).astype(np.float64)
            for m in [1, 2, 3, 4, 5, 7, 15, 16, 17, 33, 193]:
                x = rng.standard_normal((m, k)).astype(np.float32)
                want = x @ deq.T
                magnitude = np.abs(x) @ np.abs(deq).T + np.abs(bias)
                bound = 2 * (k + 1) * 2.0 ** -24 * magnitude
                for nx, ny, with_bias, y in _over_workgroups(kernel, fmt, x, data, scales, bias,
                                                             n):
                    error = np.abs(y - (want + bias if with_bias else want))
                    assert (error <= bound).all(), (isa, fmt, k, n, m, nx, with_bias,
                                                    np.nanmax(error))


def _rounded_rows(x, largest_code=127):
    """x [m, k] (k a multiple of 32) as the _q4i8 (_q8i16) entry points
    round it: each block of 32 k to int8 (int16) codes by one float32 scale,
    its largest magnitude to ``largest_code``, and those scales."""
    m, k = x.shape
    blocks = x.reshape(m, k // 32, 32)
    largest = np.abs(blocks).max(axis=2)
    inverse = np.where(largest > 0, np.float32(largest_code) / np.where(largest > 0, largest, 1),
                       np.float32(0)).astype(np.float32)
    codes = np.rint((blocks * inverse[..., None]).astype(np.float32))
    return codes.astype(np.int64), (largest / np.float32(largest_code)).astype(np.float32)


def _integer_product(x, w, fmt):
    """The integer rows' product in float64: the weights' and the rows' codes
    (int8 rows for int4 weights, int16 for int8) multiplied exactly, each
    block of 32 k scaled by its row's scale, then each group (int4) or
    column (int8) by its weights'. int8's k past the last whole block are
    the rows' own values, as the kernel takes them."""
    q, w_scale = qw.quantize(w, fmt)
    m, k = x.shape
    n = w.shape[0]
    whole = k // 32 * 32
    codes, x_scale = _rounded_rows(x[:, :whole], 127 if fmt.name == "int4" else 32767)
    per_block = np.einsum("mbj,nbj->mnb", codes.reshape(m, k // 32, 32).astype(np.float64),
                          q[:, :whole].reshape(n, k // 32, 32).astype(np.float64))
    per_block *= x_scale.astype(np.float64)[:, None, :]
    if fmt.name == "int8":
        rest = x[:, whole:].astype(np.float64) @ q[:, whole:].T.astype(np.float64)
        return (per_block.sum(axis=2) + rest) * w_scale.astype(np.float64)[None]
    per_group = per_block.reshape(m, n, k // fmt.group_size, -1).sum(axis=3)
    return (per_group * w_scale.astype(np.float64)[None]).sum(axis=2)


@pytest.mark.parametrize("isa", ["avx512vnni", "avx512", "avx2", "portable"])
def test_integer_rows_compute_what_their_rounding_gives(tmp_path, isa):
    """The _q4i8 entry points: every row count with AVX2 (a decode step's
    and a prefill's), rounded to int8 per block of 32 k, against float64 on
    the same codes (the integer parts exact, the scaling within float32
    rounding); the portable code as the _q4 entry points (float32 rows). In
    each group size, a partial last panel, over one workgroup and 3 x 2, with
    and without a bias, rows over more than one set of 12 rounded at a time
    (30), and k over more than one chunk of rounded rows (4224: 4 rows round
    4096 k at a time; 16512: 1 row, 16384). The rounding's own error: within
    half a step of each block's rows, times the weights'."""
    kernel = _host_library(tmp_path, isa)
    integer_isa = isa != "portable"
    rng = np.random.default_rng(3)
    for fmt in FORMATS[1:]:
        fmt = dataclasses.replace(fmt, activations="int8")  # packed in fours of k
        for k, n in [(384, 37), (128, 19), (4224, 19), (16512, 19)]:
            w = _weights(rng, n, k)
            bias = rng.standard_normal(n).astype(np.float32)
            data, scales = qw.packed(w, fmt)
            deq = qw.dequantized(w, fmt).astype(np.float64)
            # 13 over 2 workgroups of rows: 12 and 1, a run of a longer product's rows
            for m in [1, 2, 3, 4, 5, 13, 17, 30]:
                x = rng.standard_normal((m, k)).astype(np.float32)
                x[0, :32] *= 30  # a block with an outlier row value
                integer = integer_isa
                want = _integer_product(x, w, fmt) if integer else x @ deq.T
                magnitude = np.abs(x) @ np.abs(deq).T + np.abs(bias)
                bound = 2 * (k + 1) * 2.0 ** -24 * magnitude
                for nx, ny, with_bias, y in _over_workgroups(kernel, fmt, x, data, scales, bias,
                                                             n, name="q4i8"):
                    error = np.abs(y - (want + bias if with_bias else want))
                    assert (error <= bound).all(), (isa, fmt, k, n, m, nx, with_bias,
                                                    np.nanmax(error))
                if integer:  # each row value off by at most half its block's step
                    half_step = np.abs(x).reshape(m, k // 32, 32).max(axis=2) / 254
                    weights = np.abs(deq).reshape(n, k // 32, 32).sum(axis=2)
                    rounding = np.abs(want - x @ deq.T)
                    assert 0 < rounding.max() and \
                        (rounding <= (half_step @ weights.T) * (1 + 1e-6)).all()


@pytest.mark.parametrize("isa", ["avx512vnni", "avx512", "avx2", "portable"])
def test_int16_rows_of_int8_weights_compute_what_their_rounding_gives(tmp_path, isa):
    """The _q8i16 entry points: every row count with AVX2, rounded to int16
    per block of 32 k, the k past the last whole block in float32, against
    float64 on the same codes; the portable code as the _q8 entry points. k
    of whole blocks and with a rest of 17, over more than one chunk of
    rounded rows (8209: 1 row rounds 8192 k at a time, 2 rows 4096), rows
    over more than one set of 12 (30), a partial last panel, over one
    workgroup and 3 x 2, with and without a bias. The
    rounding's own error: within half a step of each block's rows (1/65534
    of its largest magnitude), times the weights'."""
    kernel = _host_library(tmp_path, isa)
    integer_isa = isa != "portable"
    rng = np.random.default_rng(4)
    for k, n in [(384, 37), (113, 19), (8209, 19)]:
        w = _weights(rng, n, k)
        bias = rng.standard_normal(n).astype(np.float32)
        data, scales = qw.packed(w, INT8)
        deq = qw.dequantized(w, INT8).astype(np.float64)
        for m in [1, 2, 3, 4, 5, 17, 30]:
            x = rng.standard_normal((m, k)).astype(np.float32)
            x[0, :32] *= 30  # a block with an outlier row value
            integer = integer_isa
            want = _integer_product(x, w, INT8) if integer else x @ deq.T
            magnitude = np.abs(x) @ np.abs(deq).T + np.abs(bias)
            bound = 2 * (k + 1) * 2.0 ** -24 * magnitude
            for nx, ny, with_bias, y in _over_workgroups(kernel, INT8, x, data, scales, bias, n,
                                                         name="q8i16"):
                error = np.abs(y - (want + bias if with_bias else want))
                assert (error <= bound).all(), (isa, k, n, m, nx, with_bias, np.nanmax(error))
            if integer:
                whole = k // 32 * 32
                half_step = np.abs(x[:, :whole]).reshape(m, -1, 32).max(axis=2) / 65534
                weights = np.abs(deq[:, :whole]).reshape(n, -1, 32).sum(axis=2)
                rounding = np.abs(want - x @ deq.T)
                # 1 %: a code's own float32 rounding of x times 32767 / largest
                assert 0 < rounding.max() and \
                    (rounding <= (half_step @ weights.T) * 1.01).all()


def test_vnni_integer_tiles_compute_the_avx2_tiles_floats_to_the_bit(tmp_path):
    """/// An artifact runs the AVX2 tiles on an AVX2 host and the VNNI ones on
    an AVX-512 VNNI host: both take the same exact integer sums and the same
    float operations after them, so their outputs are equal to the bit. int4
    with int8 rows and int8 with int16 rows, 1 to 5, 13 and 30 rows (VNNI's
    tiles of 3 and 4 rows take two panels, AVX2's one), each group size, k
    over several chunks of rounded rows, a partial last panel, with and
    without a bias, over one workgroup and 3 x 2."""
    vnni, avx2 = _host_library(tmp_path, "avx512vnni"), _host_library(tmp_path, "avx2")
    rng = np.random.default_rng(5)
    cases = [(dataclasses.replace(fmt, activations="int8"), "q4i8") for fmt in FORMATS[1:]]
    cases.append((INT8, "q8i16"))
    for fmt, name in cases:
        for k, n in [(384, 37), (4224, 19), (8209 if fmt.name == "int8" else 16512, 19)]:
            w = _weights(rng, n, k)
            bias = rng.standard_normal(n).astype(np.float32)
            data, scales = qw.packed(w, fmt)
            for m in [1, 2, 3, 4, 5, 13, 30]:
                x = rng.standard_normal((m, k)).astype(np.float32)
                x[0, :32] *= 30
                for (nx, with_bias, y), (_, _, _, y2) in zip(
                        ((nx, b, y) for nx, _, b, y in
                         _over_workgroups(vnni, fmt, x, data, scales, bias, n, name=name)),
                        _over_workgroups(avx2, fmt, x, data, scales, bias, n, name=name)):
                    assert np.isfinite(y).all()
                    np.testing.assert_array_equal(y.view(np.int32), y2.view(np.int32),
                                                  err_msg=str((name, fmt, k, m, nx, with_bias)))


def test_avx512_direct_tiles_compute_the_avx2_tiles_floats_to_the_bit(tmp_path):
    """/// The float32 rows of a decode step (1 to 4) on int8 and int4 weights:
    AVX-512's direct tiles take each lane's operations in the AVX2 tiles'
    order, so an artifact computes the same floats on either host. Each group size, k
    not a multiple of the unrolled steps (int8), a partial last panel and an
    odd panel count, with and without a bias, over one workgroup and 3 x 2."""
    wide, avx2 = _host_library(tmp_path, "avx512"), _host_library(tmp_path, "avx2")
    rng = np.random.default_rng(6)
    for fmt in FORMATS:
        for k, n in [(384, 37), (1152, 40), (258 if fmt.name == "int8" else 256, 19)]:
            w = _weights(rng, n, k)
            bias = rng.standard_normal(n).astype(np.float32)
            data, scales = qw.packed(w, fmt)
            for m in [1, 2, 3, 4]:
                x = rng.standard_normal((m, k)).astype(np.float32)
                for (nx, _, with_bias, y), (_, _, _, y2) in zip(
                        _over_workgroups(wide, fmt, x, data, scales, bias, n),
                        _over_workgroups(avx2, fmt, x, data, scales, bias, n)):
                    assert np.isfinite(y).all()
                    np.testing.assert_array_equal(y.view(np.int32), y2.view(np.int32),
                                                  err_msg=str((fmt, k, n, m, nx, with_bias)))


@pytest.mark.parametrize("isa", ["avx512vnni", "avx2"])
def test_an_integer_rows_floats_do_not_depend_on_the_rows_beside_it(tmp_path, isa):
    """/// A request's output must not change with what is batched beside it:
    each row of a product of 2 to 30 rows (a decode step at batch 2, a
    prefill), computed in integers, equals that row's product alone to the
    bit, over one workgroup and 3 x 2, with k over several chunks of rounded
    rows (whose size goes with the row count). int4 with int8 rows and int8
    with int16 rows."""
    kernel = _host_library(tmp_path, isa)
    rng = np.random.default_rng(6)
    for fmt, name, k in [(dataclasses.replace(INT4, activations="int8"), "q4i8", 4224),
                         (INT8, "q8i16", 8209)]:
        n = 37
        w = _weights(rng, n, k)
        bias = rng.standard_normal(n).astype(np.float32)
        data, scales = qw.packed(w, fmt)
        x = rng.standard_normal((30, k)).astype(np.float32)
        alone = {with_bias: np.concatenate([
            _product(kernel, fmt, x[i:i + 1], data, scales, bias if with_bias else None, n, name)
            for i in range(30)]) for with_bias in (True, False)}
        for m in [2, 3, 5, 13, 30]:
            for nx, ny, with_bias, y in _over_workgroups(kernel, fmt, x[:m], data, scales,
                                                         bias, n, name=name):
                np.testing.assert_array_equal(y.view(np.int32),
                                              alone[with_bias][:m].view(np.int32),
                                              err_msg=str((name, m, nx, ny, with_bias)))


def _product(kernel, fmt, x, data, scales, bias, n, name):
    y = np.full((x.shape[0], n), np.nan, np.float32)
    _call(kernel, fmt, x, data, scales, bias, y, 0, 1, 0, 1, name=name)
    return y


def _over_workgroups(kernel, fmt, x, data, scales, bias, n, name=None):
    """(nx, ny, with_bias, y) of the product over one workgroup and 3 x 2,
    with and without the bias."""
    for nx, ny in [(1, 1), (3, 2)]:
        for with_bias in (True, False):
            y = np.full((x.shape[0], n), np.nan, np.float32)
            for gy in range(ny):
                for gx in range(nx):
                    _call(kernel, fmt, x, data, scales, bias if with_bias else None,
                          y, gx, nx, gy, ny, name=name)
            yield nx, ny, with_bias, y


def _call(kernel, fmt, x, data, scales, bias, y, gx, nx, gy, ny, name=None):
    m, k = x.shape
    n = y.shape[1]
    name = name or ("q8" if fmt.name == "int8" else "q4")
    arguments = [x.ctypes.data, 0, data.ctypes.data, 0, scales.ctypes.data, 0] + \
        ([bias.ctypes.data, 0] if bias is not None else []) + [y.ctypes.data, 0, m, n, k] + \
        ([fmt.group_size] if fmt.name == "int4" else []) + [gx, nx, gy, ny]
    entry = f"anyshape_linear_rows_{name}" + ("" if bias is not None else "_no_bias")
    getattr(kernel, entry)(*arguments)


@pytest.mark.parametrize("backend, message", [
    (dict(weights="int3"), "weights: expected one of 'float32', 'int8', 'int4', got 'int3'"),
    (dict(weights="int4", group_size=48), "group_size: expected one of 32, 64, 128, got 48"),
    (dict(weights="int8", group_size=32), "group_size: only int4 weights have groups"),
    (dict(weights="int4", product_kernel="iree"), "product_kernel='iree' asks for IREE's"),
    (dict(weights="int8", activations="int8"),
     "activations: 'int8' does not go with weights='int8'; integer rows are 'int8' with "
     "weights='int4'; 'int16' with weights='int8'"),
    (dict(weights="int4", activations="int16"),
     "activations: 'int16' does not go with weights='int4'"),
    (dict(activations="int8"), "activations: 'int8' does not go with weights='float32'"),
    (dict(weights="int4", activations="int4"),
     "activations: expected one of 'float32', 'int8', 'int16', got 'int4'"),
    # a CPU with AVX-512 BF16, where "medium" is taken
    (dict(weights="int8", matmul_precision="medium", target_cpu="sapphirerapids"),
     "not with matmul_precision='medium'"),
])
def test_bad_weight_options_are_named_before_the_export(backend, message):
    model = torch.nn.Linear(64, 8)
    with pytest.raises(ValueError) as error:
        anyshape.compile(model, (torch.randn(2, 64),),
                         backend=anyshape.BackendOptions(**backend))
    assert message in str(error.value)


def test_quantized_weights_are_refused_for_cuda():
    with pytest.raises(ValueError, match=r"weights: 'int4' is computed by anyshape's CPU kernel, "
                                         r"which CUDA targets do not have yet; got target='cuda'"):
        anyshape.compile(torch.nn.Linear(64, 8), (torch.randn(2, 64),), target="cuda",
                         backend=anyshape.BackendOptions(weights="int4"))


class _TiedModel(torch.nn.Module):
    """Every form a weight reaches a product in: an embedding tied to the LM
    head, linear layers with and without a bias (the head), GPT-2's Conv1D
    ([k, n] with addmm), a plain mm, and a fused Q, K and V (three linears of
    one input, which the data-tiling forms join: a concatenation of weights,
    computed part by part)."""

    def __init__(self, vocab=301, d=64):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.q = torch.nn.Linear(d, d)
        self.k = torch.nn.Linear(d, d)
        self.v = torch.nn.Linear(d, d)
        self.conv_weight = torch.nn.Parameter(torch.randn(d, 96) / 8)
        self.conv_bias = torch.nn.Parameter(torch.randn(96))
        self.mm_weight = torch.nn.Parameter(torch.randn(96, d) / 10)
        self.head = torch.nn.Linear(d, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        h = self.embed(ids)
        h = torch.tanh(self.q(h) + self.k(h) * self.v(h))
        rows = h.reshape(-1, h.shape[-1])
        rows = torch.mm(torch.relu(torch.addmm(self.conv_bias, rows, self.conv_weight)),
                        self.mm_weight)
        return self.head(rows.reshape(h.shape))


def _reference(model, fmt):
    """``reference_model``'s copy, and the weights of addmm and mm, which
    are read [k, n], dequantized along k as the module quantizes them."""
    reference = qw.reference_model(model, fmt)
    assert reference.head.weight is reference.embed.weight
    with torch.no_grad():
        for weight in (reference.conv_weight, reference.mm_weight):
            weight.copy_(torch.from_numpy(qw.dequantized(weight.numpy().T, fmt).T.copy()))
    return reference


@pytest.fixture(scope="module", params=[INT8, INT4], ids=["int8", "int4"])
def tied(request):
    torch.manual_seed(0)
    model = _TiedModel().eval()
    fmt = request.param
    module = anyshape.compile(model, (torch.randint(0, 301, (2, 9)),),
                              dynamic_shapes={"ids": {0: Dim("batch"), 1: Dim("seq")}},
                              backend=anyshape.BackendOptions(weights=fmt.name,
                                                              group_size=fmt.group_size))
    return model, module, fmt


@needs_kernel
@pytest.mark.builds_after_export
def test_every_weight_is_quantized_and_matches_eager_on_its_dequantized_copy(tied):
    """Batch 1 and 3, sequences of 1, 7, 17 and 33: every output within
    float32 rounding of eager on the dequantized copy, and the quantizing
    visibly changes them (it is no float32 module)."""
    model, module, fmt = tied
    reference = _reference(model, fmt)
    for shape in [(1, 1), (1, 7), (3, 17), (1, 33)]:
        ids = torch.randint(0, 301, shape)
        got = np.asarray(module(ids.numpy()))
        with torch.no_grad():
            want, plain = reference(ids).numpy(), model(ids).numpy()
        scale = np.abs(want).max()
        assert np.abs(got - want).max() <= 2e-5 * scale, shape
        assert np.abs(got - plain).max() > 1e-3 * scale, shape


@needs_kernel
@pytest.mark.builds_after_export
def test_the_artifact_stores_each_weight_quantized_once(tied):
    """No float32 copy of a quantized weight is left in the IREE input, the
    tied table is one blob for both its reads, and the products call the
    quantized entry point."""
    _, module, fmt = tied
    text = module.ir("iree-input")
    entry = "_q8" if fmt.name == "int8" else "_q4"
    assert re.search(rf"@linear_rows{entry}(_no_bias)?\b", text)
    assert "torch.aten.embedding" not in text
    assert not re.search(r"dense_resource<(embed|[qkv]|head)\.weight>", text)
    assert not re.search(r"dense_resource<(conv_weight|mm_weight)>", text)
    blobs = set(re.findall(r"dense_resource<(quantized\.\d+)\.panels>", text))
    # embed and head (one), q, k and v (each part of the joined product), conv_weight, mm_weight
    assert len(blobs) == 6, blobs


@needs_kernel
@pytest.mark.builds_after_export
def test_quantized_weights_without_data_tiling():
    """data_tiling=False, as the build IREE retries after a failed data-tiled
    one is: the products still run the kernel with int4 weights (they were
    IREE's float32 ones, then no product was left to quantize), within float32
    rounding of eager on the dequantized copy."""
    torch.manual_seed(0)
    model = _TiedModel().eval()
    module = anyshape.compile(model, (torch.randint(0, 301, (2, 9)),),
                              dynamic_shapes={"ids": {0: Dim("batch"), 1: Dim("seq")}},
                              backend=anyshape.BackendOptions(weights="int4", data_tiling=False))
    assert re.search(r"@linear_rows_q4(_no_bias)?\b", module.ir("iree-input"))
    reference = _reference(model, INT4)
    ids = torch.randint(0, 301, (3, 17))
    with torch.no_grad():
        want = reference(ids).numpy()
    assert np.abs(np.asarray(module(ids.numpy())) - want).max() <= 2e-5 * np.abs(want).max()


@needs_kernel
@pytest.mark.builds_after_export
def test_int8_activations_round_every_row():
    """activations="int8": every product calls the _q4i8 entry points,
    whose rounding of the rows moves the outputs off eager on the
    dequantized copy by a bounded amount (a few tenths of a percent of the
    output's magnitude here), a decode step's rows and a prefill's alike."""
    for rows, error in _integer_row_errors(INT4, "int8", "q4i8"):
        assert 1e-4 < error < 3e-2, (rows, error)


@needs_kernel
@pytest.mark.builds_after_export
def test_int16_activations_round_every_row():
    """activations="int16" with int8 weights: every product calls the _q8i16
    entry points, whose rounding of the rows (1/65534 of a block's largest
    magnitude) keeps the outputs near eager on the dequantized copy, but
    off float32 rounding of it."""
    for rows, error in _integer_row_errors(INT8, "int16", "q8i16"):
        assert 2e-7 < error <= 3e-4, (rows, error)


def _integer_row_errors(fmt, activations, entry):
    """_TiedModel compiled with ``fmt``'s weights and ``activations``, which
    must call the ``linear_rows_<entry>`` entry points: (rows, largest error
    relative to the output's magnitude) against eager on the dequantized copy,
    for products of 1 to 51 rows."""
    torch.manual_seed(0)
    model = _TiedModel().eval()
    module = anyshape.compile(model, (torch.randint(0, 301, (2, 9)),),
                              dynamic_shapes={"ids": {0: Dim("batch"), 1: Dim("seq")}},
                              backend=anyshape.BackendOptions(weights=fmt.name,
                                                              activations=activations))
    assert re.search(rf"@linear_rows_{entry}(_no_bias)?\b", module.ir("iree-input"))
    assert module.target.activations == activations
    reference = _reference(model, fmt)
    errors = []
    for shape in [(1, 1), (1, 3), (2, 2), (4, 1), (1, 5), (3, 17), (1, 33)]:
        ids = torch.randint(0, 301, shape)
        with torch.no_grad():
            want = reference(ids).numpy()
        error = np.abs(np.asarray(module(ids.numpy())) - want).max() / np.abs(want).max()
        errors.append((shape[0] * shape[1], error))
    return errors


def test_a_group_size_that_does_not_divide_k_names_the_weight():
    if KERNEL is None:
        pytest.skip(UNAVAILABLE)
    model = torch.nn.Sequential(torch.nn.Linear(64, 80), torch.nn.ReLU(), torch.nn.Linear(80, 8))
    with pytest.raises(qw.QuantizationError,
                       match=r"group_size: 64 does not divide k = 80, the inputs of the product "
                             r"with weight '_2\.weight' \(8 x 80\)"):
        anyshape.compile(model, (torch.randn(2, 64),),
                         backend=anyshape.BackendOptions(weights="int4", group_size=64))


def test_a_model_without_products_to_quantize_is_refused():
    if KERNEL is None:
        pytest.skip(UNAVAILABLE)

    class NoWeights(torch.nn.Module):
        def forward(self, x):
            return torch.softmax(x, -1) * 2

    with pytest.raises(qw.QuantizationError, match=r"weights: 'int8' asked for, but the model "
                                                   r"has no product with a weight"):
        anyshape.compile(NoWeights(), (torch.randn(2, 64),),
                         backend=anyshape.BackendOptions(weights="int8"))


@needs_kernel
@pytest.mark.builds_after_export
def test_external_parameters_hold_the_quantized_weights(tmp_path):
    """With params="external" the archive holds the packed weights and their
    scales, and no float32 copy; the artifact loads and runs as built."""
    torch.manual_seed(0)
    model = _TiedModel().eval()
    module = anyshape.compile(model, (torch.randint(0, 301, (1, 9)),),
                              dynamic_shapes={"ids": {1: Dim("seq")}},
                              backend=anyshape.BackendOptions(weights="int8", params="external"))
    module.save(tmp_path / "artifact")
    manifest = json.loads((tmp_path / "artifact" / "manifest.json").read_text())
    text = json.dumps(manifest)
    assert "quantized.0.panels" in text and "embed.weight" not in text
    loaded = anyshape.load(tmp_path / "artifact")
    ids = torch.randint(0, 301, (1, 13))
    with torch.no_grad():
        want = _reference(model, INT8)(ids).numpy()
    got = np.asarray(loaded(ids.numpy()))
    assert np.abs(got - want).max() <= 2e-5 * np.abs(want).max()


@needs_kernel
@pytest.mark.builds_after_export
def test_int4_weights_make_the_artifact_about_a_seventh(tmp_path):
    """A model whose bytes are its weights: the int4 artifact is under a
    sixth of the float32 one (4.5 bits a weight, with float16 scales), int8
    under a third. 32 MB of float32 weights, so that the kernels' code (about
    0.25 MB with the AVX-512 variants) does not decide the ratio."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                                torch.nn.Linear(4096, 1024)).eval()
    sizes = {}
    for weights in ("float32", "int8", "int4"):
        module = anyshape.compile(model, (torch.randn(3, 1024),),
                                  dynamic_shapes={"input": {0: Dim("rows")}},
                                  backend=anyshape.BackendOptions(weights=weights))
        sizes[weights] = module.save(tmp_path / weights).joinpath("module.vmfb").stat().st_size
    assert sizes["int4"] < sizes["float32"] / 6, sizes
    assert sizes["int8"] < sizes["float32"] / 3, sizes
