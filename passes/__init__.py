"""anyshape's passes, one per module, and the registry the drivers resolve names in.

A pass registers itself with :func:`register`; ``DEFAULT_PIPELINE`` is what
``anyshape.compile(passes=None)`` runs, in order.
"""

from __future__ import annotations

from anyshape.passes.pass_api import ModulePass, PassFailure, apply_patterns

_REGISTRY: dict[str, type[ModulePass]] = {}

# The default anyshape pipeline, by pass argument: what `anyshape.compile(passes=None)`
# and `anyshape-compile` run, in this order.
DEFAULT_PIPELINE: list[str] = ["anyshape-canonicalize-shapes", "anyshape-hoist-slices",
                               "anyshape-defer-softmax-normalization",
                               "anyshape-logsumexp-softmax", "anyshape-lower"]


def register(cls: type[ModulePass]) -> type[ModulePass]:
    if not cls.argument.startswith("anyshape-"):
        raise ValueError(f"pass argument '{cls.argument}' must start with 'anyshape-'")
    if cls.argument in _REGISTRY and _REGISTRY[cls.argument] is not cls:
        raise ValueError(f"pass argument '{cls.argument}' of {cls.__qualname__}: expected a "
                         f"name no other pass has, got the argument of "
                         f"{_REGISTRY[cls.argument].__qualname__}, already registered")
    _REGISTRY[cls.argument] = cls
    return cls


def load_pass_file(path: str) -> None:
    """Run a Python file that registers more passes (the tools' ``--load-passes``).

    Raises OSError when the file cannot be read."""
    import runpy
    from pathlib import Path

    runpy.run_path(path, run_name=f"anyshape_plugin_{Path(path).stem}")


def registered_passes() -> dict[str, type[ModulePass]]:
    return dict(sorted(_REGISTRY.items()))


def lookup(argument: str) -> type[ModulePass]:
    try:
        return _REGISTRY[argument]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY)) or "none registered"
        raise KeyError(f"unknown anyshape pass '{argument}' (known: {known})") from None


__all__ = ["ModulePass", "PassFailure", "apply_patterns", "register", "registered_passes",
           "lookup", "load_pass_file", "DEFAULT_PIPELINE"]

# Each pass module registers its pass on import.
from anyshape.passes import (canonicalize_shapes, data_tiling_forms,  # noqa: E402,F401
                             defer_softmax_normalization, eliminate_padding, hoist_slices,
                             logsumexp_softmax, lower, print_flops)
