"""Weights quantized at compile time (``BackendOptions(weights="int8"|"int4")``, issue 66).

Decode on a CPU reads every weight once per token, so its time is the weights'
bytes over memory bandwidth: int8 weights are a quarter of float32's bytes,
int4 (with a float16 scale per group of 32) about a seventh. Each weight is
quantized once here, in numpy, and stored quantized in the artifact, packed
in the panels of 16 output columns that the product kernel reads
(``kernels/quantized_panels.h``, which dequantizes them in its workers):

- int8: symmetric, one float32 scale per output column (CTranslate2's int8);
- int4: symmetric, one float16 scale per group of ``group_size`` k (32, 64
  or 128) per column, the value of largest magnitude mapped to -8 and the
  rest rounded into [-8, 7] (llama.cpp's Q4_0).

``dequantized`` is what the kernel computes with, for the tests' and
benchmarks' eager references.
"""

from __future__ import annotations

import dataclasses

import numpy as np

FORMATS = ("float32", "int8", "int4")
GROUP_SIZES = (32, 64, 128)
DEFAULT_GROUP_SIZE = 32
PANEL = 16  # the kernel's panel of output columns (linear_rows.PANEL)
_FLOAT16_MAX = float(np.finfo(np.float16).max)


class QuantizationError(ValueError):
    """A weight the format asked for cannot hold (the group size does not
    divide its k, values past int4's scales): the user's option, not a
    compiler failure."""


@dataclasses.dataclass(frozen=True)
class WeightFormat:
    """How products with a weight of the model store it: "float32" (as the
    model has it), "int8" or "int4" with ``group_size``. ``checkpoint``: the
    codes are a pre-quantized checkpoint's (frontend/prequantized.py): only
    weights that are exact images of codes in this format are stored so
    (``exact_codes``); the others stay float32, as the checkpoint kept them."""
    name: str = "float32"
    group_size: int | None = None
    checkpoint: str | None = None
    # "int8" (int4 weights) or "int16" (int8 weights): every product rounds
    # its rows so and multiplies in integers (BackendOptions.activations)
    activations: str = "float32"

    @property
    def quantized(self) -> bool:
        return self.name != "float32"

    @property
    def entry(self) -> str:
        """The kernel's entry points that compute with this format: its name,
        "int4i8" for int4 weights with int8 activations, or "int8i16" for int8
        weights with int16 activations."""
        if self.activations == "float32":
            return self.name
        return f"{self.name}i{self.activations[3:]}"


ACTIVATIONS = ("float32", "int8", "int16")
# The rows' integer format that each weight format's integer tiles take
# (kernels/quantized_panels.h: INTEGER_Q4, INTEGER_Q8).
INTEGER_ACTIVATIONS = {"int4": "int8", "int8": "int16"}


def weight_format(weights, group_size, checkpoint: str | None = None,
                  activations: str = "float32") -> WeightFormat:
    """The ``WeightFormat`` that ``BackendOptions(weights=..., group_size=...,
    activations=...)`` asks for, or a ValueError naming the argument."""
    if checkpoint is not None or activations != "float32":
        if activations not in ACTIVATIONS:
            raise ValueError(f"activations: expected one of "
                             f"{', '.join(map(repr, ACTIVATIONS))}, got {activations!r}")
        fmt = weight_format(weights, group_size)
        if activations != "float32" and INTEGER_ACTIVATIONS.get(fmt.name) != activations:
            pairs = "; ".join(f"{a!r} with weights={w!r}"
                              for w, a in INTEGER_ACTIVATIONS.items())
            raise ValueError(f"activations: {activations!r} does not go with "
                             f"weights={weights!r}; integer rows are {pairs}")
        return dataclasses.replace(fmt, checkpoint=checkpoint, activations=activations)
    if weights not in FORMATS:
        raise ValueError(f"weights: expected one of {', '.join(map(repr, FORMATS))}, "
                         f"got {weights!r}")
    if weights != "int4":
        if group_size is not None:
            raise ValueError(f"group_size: only int4 weights have groups (weights='int4'), "
                             f"got group_size={group_size!r} with weights={weights!r}")
        return WeightFormat(weights)
    if group_size is None:
        group_size = DEFAULT_GROUP_SIZE
    if isinstance(group_size, bool) or group_size not in GROUP_SIZES:
        raise ValueError(f"group_size: expected one of {', '.join(map(str, GROUP_SIZES))}, "
                         f"got {group_size!r}")
    return WeightFormat("int4", int(group_size))


def check_shape(fmt: WeightFormat, n: int, k: int, name: str) -> None:
    """A ValueError where ``fmt`` cannot hold a weight of n x k (``name``)."""
    if fmt.name == "int4" and k % fmt.group_size:
        raise QuantizationError(f"group_size: {fmt.group_size} does not divide k = {k}, the inputs of "
                         f"the product with weight {name} ({n} x {k}); use a group size that "
                         f"divides it, or weights='int8'")


def quantize(weight: np.ndarray, fmt: WeightFormat) -> tuple[np.ndarray, np.ndarray]:
    """(q, scales) of ``weight`` [n, k]: int8 q [n, k] and float32 scales [n]
    (int8), or q in [-8, 7] as int8 [n, k] and float16 scales [n, k / group]
    (int4). Rounding is to nearest, ties to even. Computed a run of rows at
    a time: each row's codes depend on that row alone, and the float
    temporaries of a whole 128256 x 4096 table (2 GiB each) would be the
    compile's peak memory."""
    w = np.asarray(weight)
    if w.ndim != 2:
        raise ValueError(f"weight: expected 2 dims [n, k], got shape {list(w.shape)}")
    n, k = w.shape
    if fmt.name not in ("int8", "int4"):
        raise ValueError(f"weights: {fmt.name!r} is not a quantized format")
    if fmt.name == "int4":
        check_shape(fmt, n, k, "given")
    rows = max(1, _ROWS_AT_ONCE_ELEMENTS // max(k, 1))
    first_q, first_scales = _quantized_rows(np.asarray(w[:rows], dtype=np.float32), fmt)
    if n <= rows:
        return first_q, first_scales
    # Each run written into its place: a concatenation of the runs was one
    # more pass over every code, and a second copy of them at its peak.
    q = np.empty((n, k), np.int8)
    scales = np.empty((n, *first_scales.shape[1:]), first_scales.dtype)
    q[:rows], scales[:rows] = first_q, first_scales
    for start in range(rows, n, rows):
        q[start:start + rows], scales[start:start + rows] = _quantized_rows(
            np.asarray(w[start:start + rows], dtype=np.float32), fmt)
    return q, scales


# Rows ``quantize`` takes at once: about 4 MiB of float32.
_ROWS_AT_ONCE_ELEMENTS = 1 << 20


def _quantized_rows(w: np.ndarray, fmt: WeightFormat) -> tuple[np.ndarray, np.ndarray]:
    if not np.isfinite(w).all():
        raise QuantizationError("weight: holds inf or NaN, which no scale can quantize")
    n, k = w.shape
    if fmt.name == "int8":
        scale = np.abs(w).max(axis=1, initial=0.0) / np.float32(127)
        q = np.rint(w / np.where(scale > 0, scale, 1)[:, None])
        return np.clip(q, -127, 127).astype(np.int8), scale.astype(np.float32)
    groups = w.reshape(n, k // fmt.group_size, fmt.group_size)
    at = np.abs(groups).argmax(axis=2)
    extreme = np.take_along_axis(groups, at[..., None], axis=2)[..., 0]
    scale = extreme / np.float32(-8)
    if np.abs(scale).max(initial=0.0) > _FLOAT16_MAX:
        raise QuantizationError(f"weight: values up to {np.abs(w).max():.3g} need int4 scales past "
                         f"float16's range ({_FLOAT16_MAX:g} x 8); use weights='int8'")
    scale16 = scale.astype(np.float16)
    stored = scale16.astype(np.float32)
    q = np.rint(groups / np.where(stored != 0, stored, 1)[..., None])
    return np.clip(q, -8, 7).astype(np.int8).reshape(n, k), scale16


# An int4 group's value of largest magnitude is its code times the scale: the
# codes it may be, -8 first (``quantize``'s choice), then by magnitude.
_EXTREME_CODES = (-8, 7, -7, 6, -6, 5, -5, 4, -4, 3, -3, 2, -2, 1, -1)
# An int8 image's codes times its scale are the values within this much of
# the scale (float32 rounding of a scale the checkpoint stored another way);
# a float weight rounded to codes is off by up to half of it.
_INT8_IMAGE_RESIDUAL = 2.0 ** -12


def exact_codes(weight: np.ndarray, fmt: WeightFormat) -> tuple[np.ndarray, np.ndarray] | None:
    """(q, scales) as ``quantize`` gives them, whose dequantized values are
    ``weight`` [n, k]: exactly for int4 (each group's scale a float16 the
    group's values are integer multiples of, in [-8, 7]), and to within
    float32 rounding of the scale for int8; None where ``weight`` is no such
    image (a float weight that was never quantized)."""
    w = np.asarray(weight, dtype=np.float32)
    n, k = w.shape
    if fmt.name == "int8":
        return _int8_codes(w)
    if fmt.name != "int4" or k % fmt.group_size:
        return None
    groups = w.reshape(n, k // fmt.group_size, fmt.group_size)
    at = np.abs(groups).argmax(axis=2)
    extreme = np.take_along_axis(groups, at[..., None], axis=2)[..., 0]
    codes = np.zeros(groups.shape, np.int8)
    scales = np.zeros(extreme.shape, np.float16)
    found = extreme == 0  # all-zero groups: codes 0, scale 0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for code in _EXTREME_CODES:
            scale16 = (extreme / np.float32(code)).astype(np.float16)
            scale = scale16.astype(np.float32)[..., None]
            q = np.rint(groups / np.where(scale != 0, scale, 1))
            exact = (np.abs(q) <= 8).all(axis=2) & (q <= 7).all(axis=2) & \
                (q * scale == groups).all(axis=2) & (scale[..., 0] != 0) & ~found
            codes[exact] = q[exact].astype(np.int8)
            scales[exact] = scale16[exact]
            found |= exact
            if found.all():
                return codes.reshape(n, k), scales
    return None


def _int8_codes(w: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``exact_codes`` of int8: each row's largest magnitude is its scale
    times 127 (``quantize``'s), or times a smaller code where the codes were
    rounded with a scale fixed before them (GPTQ's, ``anyshape.calibrated``)."""
    largest = np.abs(w).max(axis=1, initial=0.0)
    codes = np.zeros(w.shape, np.int8)
    scales = np.zeros(len(w), np.float32)
    found = largest == 0
    for code in range(127, 0, -1):
        scale = (largest / np.float32(code)).astype(np.float32)
        q = np.rint(w / np.where(scale > 0, scale, 1)[:, None])
        residual = np.abs(q * scale[:, None] - w).max(axis=1, initial=0.0)
        exact = (residual <= _INT8_IMAGE_RESIDUAL * scale) & (np.abs(q) <= 127).all(axis=1) & \
            ~found
        codes[exact] = q[exact].astype(np.int8)
        scales[exact] = scale[exact]
        found |= exact
        if found.all():
            return codes, scales
    return None


def dequantized(weight: np.ndarray, fmt: WeightFormat) -> np.ndarray:
    """``weight`` as the kernel computes with it: quantized, then scaled back
    to float32."""
    if not fmt.quantized:
        return np.asarray(weight, dtype=np.float32)
    q, scale = quantize(weight, fmt)
    if fmt.name == "int8":
        return q.astype(np.float32) * scale[:, None]
    n, k = q.shape
    groups = q.reshape(n, k // fmt.group_size, fmt.group_size).astype(np.float32)
    return (groups * scale.astype(np.float32)[..., None]).reshape(n, k)


def packed(weight: np.ndarray, fmt: WeightFormat,
           codes: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(panels, scales) of ``weight`` [n, k] as the kernel reads them, the
    columns past n zero: int8 panels [P, k, 16] and float32 scales [P * 16];
    int4 panels [P, k / 2, 16] of uint8 (k even in the low four bits, as
    q + 8) and float16 scales [P, k / group, 16]; int4 with int8
    activations (``nibble_quads``) [P, k / 8, 16, 4], byte [p, s, j, e]
    holding k 8 s + e in its low four bits and 8 s + e + 4 in its high ones.
    ``codes``: its (q, scales) where known (``exact_codes``), else
    ``quantize``'s."""
    q, scale = codes if codes is not None else quantize(weight, fmt)
    n, k = q.shape
    panels = -(-n // PANEL)
    pad = panels * PANEL - n
    if fmt.name == "int8":
        q = np.concatenate([q, np.zeros((pad, k), np.int8)])
        data = q.reshape(panels, PANEL, k).transpose(0, 2, 1)
        scales = np.concatenate([scale, np.zeros(pad, np.float32)])
        return np.ascontiguousarray(data), scales
    # q + 8 in one pass over the codes, the padding columns' 8 beside them: the
    # codes of an 8B model's weights are 8 G bytes, and each pass over them
    # was seconds of its compile (docs/benchmarks.md, eleventh session).
    biased = np.empty((panels * PANEL, k), np.uint8)
    np.add(q.view(np.uint8), np.uint8(8), out=biased[:n])  # [-8, 7] -> [0, 15], modulo 256
    biased[n:] = 8
    if nibble_quads(fmt):
        steps = biased.reshape(panels, PANEL, k // 8, 8)
        quads = np.left_shift(steps[..., 4:], 4)
        quads |= steps[..., :4]
        data = quads.transpose(0, 2, 1, 3)
    else:
        pairs = np.left_shift(biased[:, 1::2], 4)
        pairs |= biased[:, 0::2]
        data = pairs.reshape(panels, PANEL, k // 2).transpose(0, 2, 1)
    scales = np.concatenate([scale, np.zeros((pad, scale.shape[1]), np.float16)])
    scales = scales.reshape(panels, PANEL, -1).transpose(0, 2, 1)
    return np.ascontiguousarray(data), np.ascontiguousarray(scales)


def nibble_quads(fmt: WeightFormat) -> bool:
    """Whether ``packed`` lays ``fmt``'s int4 weights out in fours of k, for
    the integer tiles of the ``_q4i8`` entry points (kernels/quantized_panels.h):
    masked, a column's 32 bits are the four k that a byte dot product (AVX-512
    VNNI's vpdpbusd, or AVX2's vpmaddubsw and vpmaddwd) multiplies and sums."""
    return fmt.name == "int4" and fmt.activations == "int8"


@dataclasses.dataclass(frozen=True)
class QuantizableModule:
    """A module whose 2-D weight a compile with quantized weights stores as
    codes: an ``nn.Linear`` or HF's ``Conv1D`` (GPT-2's, its weight [k, n]:
    ``transposed``), or an ``nn.Embedding`` table (``table``)."""

    name: str
    module: object
    transposed: bool
    table: bool


def quantizable_modules(model) -> list[QuantizableModule]:
    """The modules of the torch ``model`` whose weights a compile with
    quantized weights quantizes, in ``named_modules`` order: the one list both
    ``reference_model`` and ``anyshape.calibrated`` take."""
    import torch

    found = []
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        if not isinstance(weight, torch.nn.Parameter) or weight.dim() != 2:
            continue
        conv1d = type(module).__name__ == "Conv1D"
        if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)) or conv1d:
            found.append(QuantizableModule(name, module, conv1d,
                                           isinstance(module, torch.nn.Embedding)))
    return found


def reference_model(model, fmt: WeightFormat):
    """A copy of the torch ``model`` whose weights are what a module compiled
    with ``fmt`` computes with: every weight ``quantizable_modules`` names,
    dequantized (tied weights stay tied). The eager reference of the tests
    and of the accuracy benchmarks (bench/quantized_accuracy.py)."""
    import copy

    import torch

    reference = copy.deepcopy(model)
    done = set()
    for found in quantizable_modules(reference):
        weight = found.module.weight
        if weight.data_ptr() in done:
            continue
        values = weight.detach().float().numpy()
        values = values.T if found.transposed else values
        result = dequantized(values, fmt)
        result = result.T if found.transposed else result
        with torch.no_grad():
            weight.copy_(torch.from_numpy(np.ascontiguousarray(result)).to(weight.dtype))
        done.add(weight.data_ptr())
    return reference
