"""The bound on a dim that a model's config implies, where torch.export asks for it.

BERT and its kin slice their position table (``position_ids[:, :seq]``), so
torch.export needs ``seq <= max_position_embeddings`` and refuses an unbounded
``Dim("seq")``, suggesting ``seq = Dim('seq', max=512)``. That bound is no
choice of the user's: the model has no position beyond it. Where every fix
torch suggests is such a max on one of the user's own dims, and the max is a
position count the model's config states, ``export_program`` exports again
with it and says so (``DimBoundedByConfig``); ``strict_dims=True`` refuses
instead, as torch does. Any other suggestion (a min, a relation between dims,
a bound the config does not state) is the user's to decide and stays an error.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from torch.export import Dim
from torch.export.dynamic_shapes import _DerivedDim

from anyshape.frontend.hf import POSITIONS_AFTER_PADDING

# Config fields that count positions, as transformers' configs name them.
POSITION_FIELDS = ("max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length",
                   "max_source_positions", "max_target_positions", "max_seq_len")

# One line of torch's "Suggested fixes:", as torch 2.13 prints a plain dim.
_FIX = re.compile(r"(\w+) = Dim\('(\w+)'(?:, min=(\d+))?(?:, max=(\d+))?\)")


@dataclasses.dataclass(frozen=True)
class Bound:
    """A max applied to the user's dim ``dim``, and the config field it comes from."""
    dim: str
    max: int
    source: str


def config_limits(model) -> dict[int, str]:
    """The position counts the first config among ``model``'s modules states:
    count -> how the config states it."""
    config = next((module.config for module in model.modules()
                   if getattr(module, "config", None) is not None), None)
    if config is None:
        return {}
    limits: dict[int, str] = {}
    padded = getattr(config, "model_type", None) in POSITIONS_AFTER_PADDING
    pad = getattr(config, "pad_token_id", None)
    for field in POSITION_FIELDS:
        value = getattr(config, field, None)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            continue
        limits.setdefault(value, f"config.{field} = {value}")
        if padded and isinstance(pad, int) and value - pad - 1 > 0:
            limits.setdefault(value - pad - 1, f"config.{field} - config.pad_token_id - 1 = "
                                               f"{value} - {pad} - 1, positions after the padding "
                                               f"index")
    return limits


def suggested_fixes(text: str) -> list[str]:
    """The lines of torch.export's "Suggested fixes:" block, empty if none."""
    if "Suggested fixes:" not in text:
        return []
    block = text[text.index("Suggested fixes:") + len("Suggested fixes:"):].split("\n\n")[0]
    return [line.strip() for line in block.splitlines() if line.strip()]


def bounded(error_text: str, model, dynamic_shapes: Any,
            violated: list[tuple[str, Any]] = ()) -> tuple[Any, list[Bound]] | None:
    """``dynamic_shapes`` with the maxes torch.export suggests in ``error_text``
    applied, and those maxes; None unless every suggestion lowers the max of a
    plain dim of the user's to a position count of the model's config.

    Where torch suggests nothing (it cannot solve ``seq == 2048 - max(0, 2048 - seq)``
    for a bound), ``violated`` (``export_diagnostics.violated_conditions``) decides:
    each condition must hold at a position count of the config and fail one past
    it; the next export then shows whether it holds at every size up to there."""
    fixes = suggested_fixes(error_text) or _fixes_at_the_boundary(violated, config_limits(model))
    if not fixes:
        return None
    declared: dict[str, Any] = {}
    roots: set[str] = set()
    for dim in dims_in(dynamic_shapes):
        if isinstance(dim, _DerivedDim):
            roots.add(dim.root.__name__)
        else:
            declared[dim.__name__] = dim
    limits = config_limits(model)
    bounds = []
    for line in fixes:
        match = _FIX.fullmatch(line)
        if match is None or match[1] != match[2] or match[4] is None:
            return None
        name, low, high = match[2], match[3], int(match[4])
        dim = declared.get(name)
        if dim is None or name in roots or high not in limits:
            return None
        if low is not None and int(low) != dim.min:
            return None
        if not dim.max > high:  # a max the user chose below the config's stays theirs
            return None
        bounds.append(Bound(name, high, limits[high]))
    if not bounds:
        return None
    new = {bound.dim: Dim(bound.dim, min=declared[bound.dim].min, max=bound.max)
           for bound in bounds}
    return _replaced(dynamic_shapes, new), bounds


def _fixes_at_the_boundary(violated: list[tuple[str, Any]], limits: dict[int, str]) -> list[str]:
    """torch's fix lines (``seq = Dim('seq', max=2048)``) for conditions that flip
    from true to false just past one of ``limits``; empty unless every condition does."""
    maxes: dict[str, int] = {}
    for name, holds_at in violated:
        flips = [limit for limit in sorted(limits)
                 if holds_at(limit) is True and holds_at(limit + 1) is False]
        if len(flips) != 1 or maxes.setdefault(name, flips[0]) != flips[0]:
            return []
    return [f"{name} = Dim('{name}', max={high})" for name, high in maxes.items()]


def dims_in(shapes: Any):
    if isinstance(shapes, Dim):
        yield shapes
    elif isinstance(shapes, dict):
        for value in shapes.values():
            yield from dims_in(value)
    elif isinstance(shapes, (list, tuple)):
        for value in shapes:
            yield from dims_in(value)


def _replaced(shapes: Any, new: dict[str, Any]) -> Any:
    if isinstance(shapes, Dim) and not isinstance(shapes, _DerivedDim):
        return new.get(shapes.__name__, shapes)
    if isinstance(shapes, dict):
        return {key: _replaced(value, new) for key, value in shapes.items()}
    if isinstance(shapes, (list, tuple)):
        return type(shapes)(_replaced(value, new) for value in shapes)
    return shapes
