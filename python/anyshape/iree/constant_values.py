"""The value of a weight computed from the model's constants, on the host.

Weights reach the IREE input as literals over the importer's resource blobs,
read directly or through the views and joins the passes left: a transpose
(GPT-2's Conv1D, a tied LM head), a concatenation (``anyshape-data-tiling-
forms`` joins the Q, K and V weights that share an input), a slice, a view.
Quantizing a weight at compile time (``quantized_weights.py``) needs its
value: ``evaluate`` computes it in numpy from the blobs' arrays, for those
ops only, and a cast to float32 of a half-precision blob (a checkpoint's
weight kept as stored). Anything else gives None, and the product keeps its float32 weight.
"""

from __future__ import annotations

import re

import numpy as np

from anyshape.dialects import DTYPE_CASTS, vtensor_shape, widened_literal
from anyshape.passes.torch_ir.constants import constant_int, int_list

_RESOURCE_KEY = re.compile(r'dense_resource<("(?:[^"\\]|\\.)*"|[^>]+)>')


def resource_key(literal) -> str | None:
    """The blob name of a ``torch.vtensor.literal`` over a ``dense_resource``."""
    return attribute_resource_key(literal.attributes["value"])


def attribute_resource_key(attribute) -> str | None:
    """The blob name of a ``dense_resource`` attribute; None for another."""
    found = _RESOURCE_KEY.match(str(attribute))
    return None if found is None else found.group(1).strip('"')


def _list_items(value):
    op = value.owner
    if getattr(op, "name", None) != "torch.prim.ListConstruct":
        return None
    return list(op.operands)


def evaluate(value, arrays: dict) -> np.ndarray | None:
    """``value`` (a torch tensor of the IREE input) as a float32 array where
    it is a blob of ``arrays`` (resource name -> array), a float16 or
    bfloat16 blob cast to float32, or a view, transpose, slice or
    concatenation of such; else None."""
    op = value.owner
    name = getattr(op, "name", None)
    if name == "torch.vtensor.literal":
        key = resource_key(op)
        if key is None or key not in arrays:
            return None
        array = np.asarray(arrays[key])
        return array if array.dtype == np.float32 else None
    if name in ("torch.aten.t", "torch.aten.numpy_T"):
        inner = evaluate(op.operands[0], arrays)
        return None if inner is None else inner.T
    if name == "torch.aten.transpose.int":
        inner = evaluate(op.operands[0], arrays)
        dims = [constant_int(v) for v in op.operands[1:3]]
        if inner is None or None in dims:
            return None
        return np.swapaxes(inner, *dims)
    if name == "torch.aten.permute":
        inner = evaluate(op.operands[0], arrays)
        order = int_list(op.operands[1])
        return None if inner is None or order is None else np.transpose(inner, order)
    if name == "torch.aten.slice.Tensor":
        inner = evaluate(op.operands[0], arrays)
        dim, start, end, step = (constant_int(v) for v in op.operands[1:5])
        if inner is None or None in (dim, start, end, step) or step < 1:
            return None
        index = [slice(None)] * inner.ndim
        index[dim] = slice(start, end, step)
        return inner[tuple(index)]
    if name == "torch.aten.cat":
        items = _list_items(op.operands[0])
        dim = constant_int(op.operands[1])
        if items is None or dim is None:
            return None
        parts = [evaluate(item, arrays) for item in items]
        if any(part is None for part in parts):
            return None
        return np.concatenate(parts, axis=dim)
    if name in ("torch.aten.view", "torch.aten.reshape"):
        inner = evaluate(op.operands[0], arrays)
        sizes = int_list(op.operands[1])
        return None if inner is None or sizes is None else inner.reshape(sizes)
    if name in ("torch.aten.unsqueeze", "torch.aten.squeeze.dim"):
        inner = evaluate(op.operands[0], arrays)
        dim = constant_int(op.operands[1])
        if inner is None or dim is None:
            return None
        if name == "torch.aten.unsqueeze":
            return np.expand_dims(inner, dim)
        return np.squeeze(inner, dim) if inner.shape[dim] == 1 else inner
    if name in ("torch.aten.detach", "torch.aten.clone", "torch.aten.contiguous",
                "torch.aten.alias"):
        return evaluate(op.operands[0], arrays)
    # A weight kept in its checkpoint's half dtype and read through a cast
    # (frontend/checkpoint.py, ``quantized``): the float32 values of its blob.
    if name in DTYPE_CASTS:
        return _widened(op, arrays)
    return None


# What torch.export asserts of what such a cast reads (``erase_if_unused``).
_METADATA_ASSERTION = "torch.aten._assert_tensor_metadata"


# The ops ``evaluate`` computes (beside the literals), and what reads their
# constant operands.
_EVALUATED = frozenset((
    "torch.aten.t", "torch.aten.numpy_T", "torch.aten.transpose.int", "torch.aten.permute",
    "torch.aten.slice.Tensor", "torch.aten.cat", "torch.aten.view", "torch.aten.reshape",
    "torch.aten.unsqueeze", "torch.aten.squeeze.dim", "torch.aten.detach", "torch.aten.clone",
    "torch.aten.contiguous", "torch.aten.alias", *DTYPE_CASTS, "torch.prim.ListConstruct"))


def source_key(value) -> tuple | None:
    """What ``value`` is computed from, as ``evaluate`` reads it: the blob
    names and the ops on them, with their constant operands. In one module
    (where a blob name names one array) equal keys are equal values, known
    without computing or reading them: each function of a module reads the
    same weights again. None for a value ``evaluate`` does not compute."""
    op = value.owner
    name = getattr(op, "name", None)
    if name == "torch.vtensor.literal":
        key = resource_key(op)
        return None if key is None else ("blob", key, str(value.type))
    if name is not None and name.startswith("torch.constant."):
        return (name, str(op.attributes["value"]) if "value" in op.attributes else "")
    if name not in _EVALUATED:
        return None
    operands = [source_key(operand) for operand in op.operands]
    return None if None in operands else (name, str(value.type), *operands)


def _widened(op, arrays: dict) -> np.ndarray | None:
    """The float32 values of a cast to float32 of a float16 or bfloat16 blob
    (the importer hands bfloat16 over as its bits, int16); else None."""
    source = widened_literal(op.results[0])
    key = None if source is None else resource_key(source)
    if key is None or key not in arrays:
        return None
    array = np.asarray(arrays[key])
    element = vtensor_shape(source.results[0].type)[1]
    if element == "f16" and array.dtype == np.float16:
        return array.astype(np.float32)
    if element == "bf16" and array.dtype in (np.int16, np.uint16):
        bits = array.view(np.uint16).astype(np.uint32)
        bits <<= 16  # a bfloat16 is a float32's upper half
        return bits.view(np.float32)
    return None


def erase_if_unused(value) -> None:
    """Erase ``value``'s op, and the ops only it read, where nothing reads
    it any more (a weight replaced by its quantized copy). An assertion of
    its metadata is no read: torch.export asserts the dtype of what a
    ``.to()`` casts (a checkpoint's weight kept as stored), and a constant's
    dtype is its type's."""
    op = value.owner
    if not hasattr(op, "name"):
        return
    users = [use.owner for result in op.results for use in result.uses]
    if any(getattr(user, "name", None) != _METADATA_ASSERTION for user in users):
        return
    for user in _distinct(users):  # one assertion may read it twice
        user.erase()
    # Each operand once: a constant read twice (a cast's %none) would be
    # looked at again after its op was erased.
    operands = _distinct(list(op.operands))
    op.erase()
    for operand in operands:
        erase_if_unused(operand)


def _distinct(items: list) -> list:
    """``items`` in order, each once (compared, not hashed)."""
    kept = []
    for item in items:
        if not any(item == seen for seen in kept):
            kept.append(item)
    return kept
