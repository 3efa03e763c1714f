"""Quantized weights rounded against a model's own activations
(``anyshape.calibrated``, issue 66): GPTQ (Frantar et al., 2022) in the
formats of ``BackendOptions(weights="int4"|"int8")``.

Rounding each weight to its nearest code (what ``weights="int4"`` does on
its own) minimizes each weight's error. GPTQ minimizes each product's error
on the inputs the layer actually sees: it rounds one input column at a
time and moves the rounding error onto the columns not yet rounded, in
proportion to how the inputs correlate (the inverse of the Hessian
``X^T X`` of the calibration samples' inputs). The codes keep anyshape's
format exactly (symmetric groups, a float16 scale per group of k for int4;
one scale per output for int8), so the kernel is the same and only the
codes differ. Columns are taken in order of their inputs' energy
(act-order) with each group's scale fixed from the unrounded weights first,
so groups stay consecutive in k, as the kernel reads them.

Layers are rounded in the order the model calls them, each on the inputs
that the already rounded layers before it produce. Layers that read the
same input (a query, key and value) are rounded from one pass.

The result is a copy of the model whose weights are float32 images of
their codes: ``compile`` and ``compile_generator`` take its codes back
exactly (``quantized_weights.exact_codes``), as they take a GPTQ
checkpoint's (``prequantized.py``).
"""

from __future__ import annotations

import collections.abc
import copy
import dataclasses

import numpy as np
import torch

from anyshape.stages import progress_printer
from anyshape.iree.quantized_weights import (QuantizationError, WeightFormat, check_shape,
                                             dequantized, exact_codes, quantizable_modules,
                                             quantize, weight_format)

# GPTQ's dampening of the Hessian's diagonal, as a share of its mean (the
# paper's; 0.1 did no better on MiniLM: docs/quantized-weights.md).
DAMPENING = 0.01
# Columns updated together before the rest of the weight is (the paper's
# lazy batch): a multiple of every group size.
_BLOCK = 128
_SCALE_STEPS = 25
# A calibrated copy carries its format under this attribute (``marked_format``).
_MARK = "_anyshape_calibrated_weights"


class _Stop(Exception):
    """Ends a calibration pass once the layers it was for have their inputs."""


@dataclasses.dataclass
class _Layer:
    name: str
    module: torch.nn.Module
    transposed: bool  # HF's Conv1D: weight [k, n]

    def weight(self) -> torch.Tensor:
        w = self.module.weight.detach()
        return w.T if self.transposed else w

    def set_weight(self, values: torch.Tensor) -> None:
        with torch.no_grad():
            self.module.weight.copy_(values.T if self.transposed else values)


def calibrated(model: torch.nn.Module, samples, *, weights: str = "int4",
               group_size: int | None = None, progress=False) -> torch.nn.Module:
    """A copy of ``model`` whose quantizable weights (every ``nn.Linear``,
    HF ``Conv1D`` and ``nn.Embedding`` weight, as ``weights=`` quantizes them)
    are rounded to ``weights`` ("int4", with ``group_size`` 32, 64 or 128, or
    "int8") by GPTQ against the inputs each layer sees on ``samples``.
    Compile the copy as it is: ``anyshape.compile`` and ``compile_generator``
    store its codes (it needs no ``weights=``).

    ``samples``: a non-empty sequence of the model's inputs, each a tuple of
    positional arguments, a dict of keyword arguments (a tokenizer's output)
    or one tensor. Rows where a sample's ``attention_mask`` is 0 are left out
    of the statistics. Embedding tables have no inputs to calibrate against:
    they are rounded to nearest, as without calibration. A layer the samples
    never reach is rounded to nearest too."""
    fmt = weight_format(weights, group_size)
    if not fmt.quantized:
        raise ValueError(f"weights: calibration rounds to a quantized format, 'int8' or "
                         f"'int4'; got {weights!r}")
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    if getattr(getattr(model, "config", None), "quantization_config", None) is not None \
            or marked_format(model) is not None:
        raise ValueError("model: already quantized (it has a quantization_config, or it was "
                         "calibrated); calibrate the float model")
    samples = _checked_samples(samples)
    report = progress_printer(progress)
    copied = copy.deepcopy(model).eval()
    layers, tables = _quantizable(copied, fmt)
    for _, table in tables:
        values = table.weight.detach()
        with torch.no_grad():
            table.weight.copy_(torch.from_numpy(dequantized(values.numpy(), fmt)))
    pending = list(layers)
    while pending:
        statistics = _statistics(copied, pending, samples)
        if not statistics:
            break
        for layer, hessian in statistics:
            pending.remove(layer)
            if hessian is None:
                _round_to_nearest(layer, fmt, report, "only padded positions reach it")
                continue
            report(f"calibrating {layer.name} ({layer.weight().shape[0]} x "
                   f"{layer.weight().shape[1]}) to {fmt.name}")
            layer.set_weight(gptq(layer.weight(), hessian, fmt))
    for layer in pending:
        _round_to_nearest(layer, fmt, report, "the samples do not reach it")
    object.__setattr__(copied, _MARK, (fmt.name, fmt.group_size, len(layers) + len(tables)))
    return copied


def _round_to_nearest(layer: _Layer, fmt: WeightFormat, report, why: str) -> None:
    report(f"{layer.name}: rounded to nearest ({why})")
    layer.set_weight(torch.from_numpy(dequantized(layer.weight().numpy(), fmt)))


def marked_format(model) -> tuple[str, int | None, int] | None:
    """(weights, group_size, weights rounded) of a copy ``calibrated`` made."""
    return getattr(model, _MARK, None)


def _checked_samples(samples) -> list:
    if isinstance(samples, (torch.Tensor, collections.abc.Mapping)) or \
            not isinstance(samples, collections.abc.Iterable):
        raise TypeError(f"samples: expected a sequence of the model's inputs (each a tuple of "
                        f"arguments, a dict of keyword arguments or a tensor), got "
                        f"{type(samples).__name__}")
    samples = list(samples)
    if not samples:
        raise ValueError("samples: expected at least one of the model's inputs, got none")
    for index, sample in enumerate(samples):
        if not isinstance(sample, (torch.Tensor, tuple, list, collections.abc.Mapping)):
            raise TypeError(f"samples[{index}]: expected a tuple of arguments, a dict of "
                            f"keyword arguments or a tensor, got {type(sample).__name__}")
    return samples


def _quantizable(model, fmt: WeightFormat):
    """(layers, embedding tables) whose weights ``fmt`` quantizes, each
    weight once (a table tied to the LM head is the head's)."""
    layers, tables, seen = [], [], set()
    found = quantizable_modules(model)
    # The layers first: a table tied to the LM head is rounded as the head is.
    for each in sorted(found, key=lambda each: each.table):
        weight = each.module.weight
        if weight.dtype != torch.float32:
            raise ValueError(f"model: {each.name}.weight is {weight.dtype}; calibration rounds "
                             f"float32 weights (model.float() first)")
        if each.table:
            check_shape(fmt, *weight.shape, each.name)
        else:
            layer = _Layer(each.name, each.module, each.transposed)
            check_shape(fmt, *layer.weight().shape, each.name)
        if weight.data_ptr() in seen:
            continue
        seen.add(weight.data_ptr())
        if each.table:
            tables.append((each.name, each.module))
        else:
            layers.append(layer)
    if not layers:
        raise QuantizationError(f"model: no linear layer to calibrate (weights={fmt.name!r} "
                                f"quantizes nn.Linear and Conv1D weights)")
    return layers, tables


def _statistics(model, pending: list[_Layer], samples) -> list[tuple[_Layer, torch.Tensor]]:
    """The Hessians, over every sample, of the first pending layer the model
    calls and of the pending layers called right after it on the same input
    (the group is found on the first sample that reaches one); empty where
    no sample reaches a pending layer."""
    group: list[_Layer] = []
    state = {"fixed": False, "input": None, "seen": set(), "mask": None}
    sums: dict[str, torch.Tensor] = {}
    counts: dict[str, int] = {}

    def hook_for(layer: _Layer):
        def hook(module, inputs, output):
            x = inputs[0]
            if not state["fixed"]:
                if group and (layer in group or not _same(x, state["input"])):
                    raise _Stop
                if not group:
                    state["input"] = x
                group.append(layer)
            elif layer not in group or layer.name in state["seen"]:
                raise _Stop
            state["seen"].add(layer.name)
            rows = _rows(x.detach(), state["mask"])
            sums[layer.name] = sums.get(layer.name, 0) + rows.T @ rows
            counts[layer.name] = counts.get(layer.name, 0) + rows.shape[0]
            if state["fixed"] and len(state["seen"]) == len(group):
                raise _Stop
        return hook

    handles = [layer.module.register_forward_hook(hook_for(layer)) for layer in pending]
    try:
        with torch.no_grad():
            for sample in samples:
                state.update(seen=set(), input=None, mask=_attention_mask(sample))
                try:
                    _call(model, sample)
                except _Stop:
                    pass
                state["fixed"] = bool(group)
    finally:
        for handle in handles:
            handle.remove()
    # A layer whose every input row was padding has no statistics (None).
    return [(layer, sums[layer.name] / counts[layer.name] if counts.get(layer.name) else None)
            for layer in group]


def _same(x, y) -> bool:
    return isinstance(y, torch.Tensor) and x.shape == y.shape and \
        x.data_ptr() == y.data_ptr() and x.stride() == y.stride()


def _attention_mask(sample):
    if isinstance(sample, collections.abc.Mapping):
        mask = sample.get("attention_mask")
        return mask if isinstance(mask, torch.Tensor) else None
    return None


def _rows(x: torch.Tensor, mask) -> torch.Tensor:
    """A layer's input as rows [tokens, k] in float64, without the rows of
    padded positions where its leading dims are the mask's [batch, seq]."""
    if mask is not None and x.dim() == 3 and tuple(x.shape[:2]) == tuple(mask.shape):
        x = x[mask.bool()]
    return x.reshape(-1, x.shape[-1]).double()


def _call(model, sample):
    if isinstance(sample, torch.Tensor):
        return model(sample)
    if isinstance(sample, collections.abc.Mapping):
        return model(**sample)
    return model(*sample)


def gptq(weight: torch.Tensor, hessian: torch.Tensor, fmt: WeightFormat,
         dampening: float | None = None) -> torch.Tensor:
    """``weight`` [n, k] rounded to ``fmt``'s codes by GPTQ against the
    inputs' Hessian [k, k], as the float32 image of the codes (each group's
    float16 scale times its codes in [-8, 7] for int4; a float32 scale per
    output times codes in [-127, 127] for int8)."""
    w = weight.detach().double().clone()
    n, k = w.shape
    h = hessian.double().clone()
    # Inputs that were 0 on every sample: their columns round to nearest
    # (their error moves nowhere), not to 0, since other inputs may reach them.
    dead = torch.diagonal(h) == 0
    h[dead, dead] = 1
    dampening = DAMPENING if dampening is None else dampening
    h += dampening * torch.diagonal(h).mean() * torch.eye(k, dtype=h.dtype)
    group = fmt.group_size if fmt.name == "int4" else k
    scales = _scales(w, fmt)  # [n, k / group], fixed before any column moves
    order = torch.argsort(torch.diagonal(h), descending=True, stable=True)
    w, h = w[:, order], h[order][:, order]
    column_scales = scales[:, order // group]  # [n, k]
    upper = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)
    limit = 8 if fmt.name == "int4" else 127
    rounded = torch.zeros_like(w)
    for start in range(0, k, _BLOCK):
        end = min(start + _BLOCK, k)
        block = w[:, start:end].clone()
        errors = torch.zeros_like(block)
        inverse = upper[start:end, start:end]
        for j in range(end - start):
            scale = column_scales[:, start + j]
            codes = torch.clamp(torch.round(block[:, j] / torch.where(scale != 0, scale, 1)),
                                -limit, limit - 1 if fmt.name == "int4" else limit)
            rounded[:, start + j] = codes * scale
            error = (block[:, j] - rounded[:, start + j]) / inverse[j, j]
            block[:, j + 1:] -= error[:, None] * inverse[j, j + 1:][None, :]
            errors[:, j] = error
        w[:, end:] -= errors @ upper[start:end, end:]
    result = torch.empty_like(rounded)
    result[:, order] = rounded
    return result.float()


def _scales(w: torch.Tensor, fmt: WeightFormat) -> torch.Tensor:
    """The scales of the unrounded weight, as float64 [n, groups]: int8's
    (``quantize``'s), or for int4 of each group the float16 scale, from
    ``quantize``'s down to 3/4 of it, that rounds the group with the least
    squared error (a smaller scale clips the group's extreme to rounder
    codes for the rest)."""
    _, scale = quantize(w.float().numpy(), fmt)
    scale = torch.from_numpy(np.asarray(scale, dtype=np.float32)).double()
    if fmt.name == "int8":
        return scale[:, None]
    n, k = w.shape
    groups = w.reshape(n, k // fmt.group_size, fmt.group_size)
    best, least = scale, None
    for step in range(_SCALE_STEPS + 1):
        shrunk = (scale * (1 - 0.25 * step / _SCALE_STEPS)).half().double()
        safe = torch.where(shrunk != 0, shrunk, 1)[..., None]
        error = ((groups - torch.clamp(torch.round(groups / safe), -8, 7) * safe) ** 2).sum(-1)
        if least is None:
            least = error
        else:
            better = error < least
            best, least = torch.where(better, shrunk, best), torch.where(better, error, least)
    return best


def checked_images(model, fmt: WeightFormat) -> None:
    """A ValueError naming the first quantizable weight of a calibrated copy
    that is no longer an image of ``fmt``'s codes (changed after calibration)."""
    layers, tables = _quantizable(model, fmt)
    named = [(layer.name, layer.weight()) for layer in layers] + \
        [(name, table.weight.detach()) for name, table in tables]
    for name, values in named:
        if exact_codes(values.numpy(), fmt) is None:
            raise ValueError(f"model: {name}.weight is not {fmt.name} codes any more; it was "
                             f"changed after anyshape.calibrated rounded it (calibrate again)")
