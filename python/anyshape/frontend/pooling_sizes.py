"""The input sizes eager's pooling refuses, as conditions every call is checked against.

Eager raises where a pooled dim is shorter than the window ("Output size is
too small", "Invalid computed output size: 0") or a pooled or channel dim is
empty. torch.export records these conditions only where they can fail at
the sizes it assumes, 2 and up: a window of 2 over a dynamic length keeps
no condition, and the compiled module, which accepts 1 and 0, would return
an empty tensor. Read from the exported graph before it is decomposed (the
pooling ops are whole there), as conditions over the program's symbols with
the reason after a ``#`` (``runtime/size_conditions.py``).
"""

from __future__ import annotations

import torch

aten = torch.ops.aten

_WINDOWED = {  # op packet -> pooled dims, whether its arguments include a dilation
    aten.max_pool1d: (1, True), aten.max_pool1d_with_indices: (1, True),
    aten.max_pool2d: (2, True), aten.max_pool2d_with_indices: (2, True),
    aten.max_pool3d: (3, True), aten.max_pool3d_with_indices: (3, True),
    aten.avg_pool1d: (1, False), aten.avg_pool2d: (2, False), aten.avg_pool3d: (3, False),
}
_ADAPTIVE = {
    aten.adaptive_avg_pool1d: 1, aten.adaptive_avg_pool2d: 2, aten._adaptive_avg_pool2d: 2,
    aten.adaptive_avg_pool3d: 3, aten._adaptive_avg_pool3d: 3,
    aten.adaptive_max_pool1d: 1, aten.adaptive_max_pool2d: 2, aten.adaptive_max_pool3d: 3,
}


def pooled_size_conditions(graph: torch.fx.Graph,
                           lower_bounds: dict[str, int]) -> list[str]:
    """Each pooling's conditions on its input's sizes that can fail at sizes of
    at least ``lower_bounds`` (a symbol's declared min; 0 where not given),
    in graph order, without repeats."""
    conditions: list[str] = []
    for node in graph.nodes:
        if node.op != "call_function" or not hasattr(node.target, "overloadpacket"):
            continue
        packet = node.target.overloadpacket
        if packet not in _WINDOWED and packet not in _ADAPTIVE:
            continue
        x = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
        if not isinstance(x, torch.Tensor):
            continue
        name = packet.__name__.lstrip("_")
        if packet in _ADAPTIVE:
            spatial, needs = _ADAPTIVE[packet], None
        else:
            spatial, has_dilation = _WINDOWED[packet]
            needs = _shortest_inputs(spatial, has_dilation, *node.args[1:], **node.kwargs)
        # Eager refuses an empty dim anywhere but the batch (unbatched: nowhere).
        for axis in range(max(x.dim() - spatial - 1, 0), x.dim()):
            pooled = axis - (x.dim() - spatial)
            least = needs[pooled] if needs is not None and pooled >= 0 else 1
            if least <= 1:
                why = f"{name} of an empty dim: eager raises"
            else:
                why = f"{name}'s window needs {least} positions: eager raises 'Output size is too small'"
            condition = _condition(x.shape[axis], max(least, 1), lower_bounds)
            if condition is not None and f"{condition}  # {why}" not in conditions:
                conditions.append(f"{condition}  # {why}")
    return conditions


def _shortest_inputs(spatial: int, has_dilation: bool, kernel_size, stride=(), padding=0,
                     *rest, **kwargs) -> list[int]:
    """Per pooled dim, the shortest input with an output of at least 1, as
    eager computes it (``pooling_output_shape``)."""
    dilation = (rest[0] if rest else kwargs.get("dilation", 1)) if has_dilation else 1
    ceil_mode = rest[1 if has_dilation else 0] if len(rest) > (1 if has_dilation else 0) \
        else kwargs.get("ceil_mode", False)

    def per_dim(value, default):
        value = default if value in ((), [], None) else value
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        return values * spatial if len(values) == 1 else values

    kernels = per_dim(kernel_size, 1)
    strides = per_dim(stride, kernel_size)
    paddings, dilations = per_dim(padding, 0), per_dim(dilation, 1)
    needs = []
    for k, s, p, d in zip(kernels, strides, paddings, dilations):
        span = d * (k - 1) + 1
        # floor((n + 2p - span [+ s - 1 in ceil mode]) / s) + 1 >= 1
        needs.append(span - 2 * p - (s - 1 if ceil_mode else 0))
    return needs


def _condition(size, least: int, lower_bounds: dict[str, int]) -> str | None:
    """``size >= least`` in Python syntax over the symbols, or None where its
    symbol's least size meets it (a compound size is always checked)."""
    if isinstance(size, int):
        return None  # a static size: export ran it, and eager checked it then
    from torch.utils._sympy.printers import PythonPrinter

    expr = size.node.expr
    if expr.is_number:
        return None
    if expr.is_Symbol and lower_bounds.get(str(expr), 0) >= least:
        return None
    return f"{PythonPrinter().doprint(expr)} >= {least}"
