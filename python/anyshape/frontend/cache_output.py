"""A transformers model's key/value cache left out of a compiled forward pass.

HF's decoders return their cache (a ``DynamicCache``) whenever
``config.use_cache`` is true, which is their default. torch.export cannot
flatten it ("Found DynamicCache in output"), so ``anyshape.compile`` of
``LlamaForSequenceClassification`` as loaded failed at export (the plain
stack does too). A compiled forward pass has no use for the cache: generation
with one is ``anyshape.compile_generator``'s. So where torch refuses the cache and
the user did not pass ``use_cache``, the model is exported again with
``config.use_cache`` false (a keyword would be an input of the program), and
a warning says so.
"""

from __future__ import annotations

import contextlib
import inspect
import warnings

import torch


def cache_in_output(error: BaseException) -> bool:
    """torch.export's refusal of a transformers cache among the outputs."""
    return "Cache'> in output" in str(error)


def can_leave_out(model: torch.nn.Module, args: tuple, kwargs: dict) -> bool:
    """The cache comes from ``config.use_cache``, not from the user's arguments."""
    config = getattr(model, "config", None)
    if getattr(config, "use_cache", False) is not True or "use_cache" in kwargs:
        return False
    try:
        names = list(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return False
    return "use_cache" in names and names.index("use_cache") >= len(args)


def warn_left_out(model: torch.nn.Module, stacklevel: int) -> None:
    warnings.warn(
        f"model: {type(model).__name__}'s config has use_cache=True, so it returns its "
        f"key/value cache, which a compiled forward pass does not: compiled with "
        f"use_cache=False (set model.config.use_cache = False to say so; for generation "
        f"with a cache, anyshape.compile_generator)", UserWarning, stacklevel=stacklevel + 1)


@contextlib.contextmanager
def cache_left_out(model: torch.nn.Module, leave_out: bool):
    """Within: ``model.config.use_cache`` false where ``leave_out``; restored after."""
    if not leave_out:
        yield
        return
    model.config.use_cache = False
    try:
        yield
    finally:
        model.config.use_cache = True
