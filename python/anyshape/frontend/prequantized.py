"""Pre-quantized HF checkpoints (issue 66): a model whose config carries a
``quantization_config`` compiles with its own codes.

- GPTQ, 4 bits, symmetric, in groups of 32, 64 or 128 without act-order (as
  GPTQModel loads it: ``qweight`` packs eight codes of k per int32, a float16
  scale per group, zero points all 8): anyshape's int4 format is exactly that,
  a float16 scale per group of codes in [-8, 7].
- bitsandbytes 8-bit (LLM.int8's ``Linear8bitLt``): int8 codes with one
  scale per output row, ``SCB / 127``: anyshape's int8 format.

Each quantized linear layer is swapped, for the export, for an ``nn.Linear``
whose float32 weight is its codes times its scales, an exact image of them
(int4: a float16 times a code in [-8, 7] is a float32 exactly). The IREE
layer recovers the codes from the image (``quantized_weights.exact_codes``)
instead of quantizing it: the artifact holds the checkpoint's codes, and the
weights the checkpoint kept in float (an LM head) stay float32. Other formats
(AWQ's zero points, bitsandbytes' 4-bit NF4/FP4, asymmetric or act-order
GPTQ, other bit widths) are refused with an error naming them.
"""

from __future__ import annotations

import contextlib
import dataclasses

import torch

from anyshape.iree.quantized_weights import GROUP_SIZES


@dataclasses.dataclass(frozen=True)
class CheckpointWeights:
    """A pre-quantized model's format: ``method`` ("gptq", "bitsandbytes"),
    anyshape's ``weights`` ("int4", "int8") and ``group_size``."""
    method: str
    weights: str
    group_size: int | None
    layers: int

    def backend(self, backend):
        """``backend`` (a BackendOptions or None) with this format's weights,
        or a ValueError where the user asked for another."""
        from anyshape.options import BackendOptions

        backend = backend or BackendOptions()
        asked = (backend.weights, backend.group_size)
        if asked not in (("float32", None), (self.weights, self.group_size),
                         (self.weights, None)):
            raise ValueError(
                f"weights: the model is a {self.method} checkpoint of {self._described()} "
                f"weights, which it compiles with; got weights={backend.weights!r}, "
                f"group_size={backend.group_size!r} (leave them unset, or load the float "
                f"checkpoint to quantize it another way)")
        return dataclasses.replace(backend, weights=self.weights, group_size=self.group_size,
                                   weights_from=self.method)

    def _described(self) -> str:
        return self.weights + (f" (groups of {self.group_size})" if self.group_size else "")


def quantization_method(model) -> tuple[str, object] | None:
    """(method, quantization_config) of a model whose HF config has one."""
    config = getattr(model, "config", None)
    quantization = getattr(config, "quantization_config", None)
    if quantization is None:
        return None
    method = _field(quantization, "quant_method")
    return str(getattr(method, "value", method)).lower(), quantization


def _field(quantization, name):
    if isinstance(quantization, dict):
        return quantization.get(name)
    return getattr(quantization, name, None)


def is_quantized(model) -> bool:
    """Whether ``model`` carries its own codes: a pre-quantized checkpoint, or
    a copy ``anyshape.calibrated`` rounded."""
    from anyshape.frontend.calibration import marked_format

    return quantization_method(model) is not None or marked_format(model) is not None


def calibrated_weights(model, dtype) -> CheckpointWeights | None:
    """The format of a copy ``anyshape.calibrated`` rounded (its weights
    checked to be its codes still), or None for any other model."""
    from anyshape.frontend.calibration import checked_images, marked_format
    from anyshape.iree.quantized_weights import weight_format

    marked = marked_format(model)
    if marked is None:
        return None
    weights, group_size, count = marked
    _check_float32(model, set(), dtype, "calibrated")
    checked_images(model, weight_format(weights, group_size))
    return CheckpointWeights("calibrated", weights, group_size, count)


@contextlib.contextmanager
def float_images(model, dtype=None):
    """Within: ``model``'s quantized linear layers swapped for float32
    ``nn.Linear`` images of their codes, and a ``CheckpointWeights`` (None
    for a model that is not pre-quantized); the layers are put back after.
    ``dtype``: what the caller compiles the rest of the model in (None: the
    model's own), which must be float32."""
    found = quantization_method(model)
    if found is None:
        calibrated = calibrated_weights(model, dtype)
        yield calibrated
        return
    method, quantization = found
    if method == "gptq":
        readers = _gptq_reader(quantization)
    elif method == "bitsandbytes":
        readers = _bitsandbytes_reader(quantization)
    else:
        why = (" (its groups have zero points, which anyshape's int4 format, symmetric groups, "
               "does not hold)") if method == "awq" else ""
        raise NotImplementedError(
            f"model: a pre-quantized checkpoint of quant_method {method!r}{why}, which anyshape "
            f"does not read; it reads GPTQ (4-bit, symmetric, groups of 32, 64 or 128, no act-order) "
            f"and bitsandbytes 8-bit. Load the float checkpoint and compile it with "
            f"backend=anyshape.BackendOptions(weights='int8' or 'int4')")
    weights, group_size, image_of = readers
    swaps = []
    for parent_name, parent in model.named_modules():
        for name, child in parent.named_children():
            image = image_of(child, f"{parent_name}.{name}".lstrip("."))
            if image is not None:
                swaps.append((parent, name, child, image))
    if not swaps:
        raise ValueError(f"model: its config says {method} quantization, but none of its "
                         f"layers holds {method} codes")
    _check_float32(model, {id(child) for _, _, child, _ in swaps}, dtype, method)
    try:
        for parent, name, _, image in swaps:
            setattr(parent, name, image)
        yield CheckpointWeights(method, weights, group_size, len(swaps))
    finally:
        for parent, name, child, _ in swaps:
            setattr(parent, name, child)


def _check_float32(model, swapped: set, dtype, method: str) -> None:
    if dtype is not None:
        if dtype != torch.float32:
            raise ValueError(f"dtype: a {method} checkpoint computes in float32 from its codes; "
                             f"expected torch.float32 or None, got {dtype}")
        return
    for module in model.modules():
        if id(module) in swapped:
            continue
        for name, tensor in [*module.named_parameters(recurse=False),
                             *module.named_buffers(recurse=False)]:
            if tensor.is_floating_point() and tensor.dtype != torch.float32:
                raise ValueError(
                    f"dtype: a {method} checkpoint computes in float32 from its codes, and the "
                    f"model's other weights are {tensor.dtype} ({type(module).__name__}.{name}); "
                    f"pass dtype=torch.float32")


def _linear(module, weight: torch.Tensor) -> torch.nn.Linear:
    out_features, in_features = weight.shape
    bias = getattr(module, "bias", None)
    linear = torch.nn.Linear(in_features, out_features, bias=bias is not None,
                             dtype=torch.float32)
    with torch.no_grad():
        linear.weight.copy_(weight)
        if bias is not None:
            linear.bias.copy_(bias.detach().float())
    return linear.requires_grad_(False)


def _gptq_reader(quantization):
    bits, group_size = _field(quantization, "bits"), _field(quantization, "group_size")
    sym, desc_act = _field(quantization, "sym"), _field(quantization, "desc_act")
    if bits != 4:
        raise NotImplementedError(f"model: a {bits}-bit GPTQ checkpoint; anyshape reads 4-bit "
                                  f"GPTQ (its int4 format)")
    if sym is False:
        raise NotImplementedError(
            "model: an asymmetric GPTQ checkpoint (sym=False: a zero point per group), which "
            "anyshape's int4 format (symmetric groups) does not hold")
    if group_size not in GROUP_SIZES:
        raise NotImplementedError(f"model: a GPTQ checkpoint in groups of {group_size}; anyshape's "
                                  f"int4 groups are {', '.join(map(str, GROUP_SIZES))}")

    def image_of(module, name: str):
        if not all(hasattr(module, a) for a in ("qweight", "qzeros", "scales", "g_idx")):
            return None
        return _linear(module, _gptq_weight(module, name, group_size, desc_act))

    return "int4", group_size, image_of


def _gptq_weight(module, name: str, group_size: int, desc_act) -> torch.Tensor:
    """The float32 image [n, k] of a GPTQ layer's codes: scale * (code - 8)."""
    if getattr(module, "planar", False) or module.qweight.dtype != torch.int32 or \
            getattr(module, "bits", 4) != 4:
        raise NotImplementedError(f"model: {name} ({type(module).__name__}) packs its GPTQ codes "
                                  f"in a layout anyshape does not read (32-bit words of eight "
                                  f"4-bit codes)")
    shifts = torch.arange(0, 32, 4, dtype=torch.int32)
    codes = (module.qweight.unsqueeze(1) >> shifts[None, :, None]) & 15  # [k/8, 8, n]
    codes = codes.reshape(-1, module.qweight.shape[1])
    zeros = (module.qzeros.unsqueeze(2) >> shifts[None, None, :]) & 15
    zeros = zeros.reshape(module.qzeros.shape[0], -1)[:, :module.scales.shape[1]]
    k, n = codes.shape
    groups = torch.arange(k, dtype=torch.int32) // group_size
    if not torch.equal(module.g_idx.to(torch.int32).cpu(), groups):
        raise NotImplementedError(
            f"model: {name}'s GPTQ groups are permuted (act-order, desc_act={desc_act}), which "
            f"anyshape's int4 format (consecutive groups of k) does not hold")
    if not bool((zeros == 8).all()):
        raise NotImplementedError(
            f"model: {name}'s GPTQ zero points are not all 8 (asymmetric groups), which "
            f"anyshape's int4 format does not hold")
    scales = module.scales.detach().to(torch.float16).float()[groups.long()]  # [k, n]
    weight = (scales * (codes - 8).float()).T.contiguous()
    _agrees_with_own(module, weight, name)
    return weight


def _agrees_with_own(module, weight: torch.Tensor, name: str) -> None:
    """A NotImplementedError where the layer's own dequantization disagrees
    with the image (a packing this reading misreads), beyond float16 rounding."""
    own = getattr(module, "dequantize_weight", None)
    if own is None:
        return
    with torch.no_grad():
        reference = own().float().T  # GPTQ layers dequantize to [k, n]
    if reference.shape != weight.shape or not torch.allclose(
            reference, weight, rtol=2 ** -10, atol=float(weight.abs().max()) * 2 ** -14):
        raise NotImplementedError(
            f"model: {name} ({type(module).__name__}): its own dequantized weight differs from "
            f"the GPTQ codes as anyshape reads them; its packing is not one anyshape reads")


def _bitsandbytes_reader(quantization):
    if _field(quantization, "load_in_4bit"):
        kind = _field(quantization, "bnb_4bit_quant_type") or "4-bit"
        raise NotImplementedError(
            f"model: a bitsandbytes 4-bit checkpoint ({kind}), whose codes index a table of "
            f"floats, which anyshape's int4 format (integers times a scale) does not hold; it "
            f"reads bitsandbytes 8-bit")

    def image_of(module, name: str):
        weight = getattr(module, "weight", None)
        if weight is None or weight.dtype != torch.int8:
            return None
        scb = getattr(weight, "SCB", None)
        if scb is None:
            scb = getattr(getattr(module, "state", None), "SCB", None)
        if scb is None:
            raise NotImplementedError(f"model: {name} ({type(module).__name__}) holds int8 "
                                      f"weights without their scales (SCB)")
        scale = scb.detach().float() / 127
        return _linear(module, weight.detach().float() * scale[:, None])

    return "int8", None, image_of
