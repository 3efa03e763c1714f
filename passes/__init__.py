"""anyshape's passes, one per module (or per package, for a pass with helpers of
its own), and the registry the drivers resolve names in.

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
    builtin = _BUILTIN.get(cls.argument)
    if builtin is not None and cls.__module__ != f"anyshape.passes.{builtin}":
        _import_builtin(cls.argument)
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


# anyshape's own passes by argument, and the module under anyshape.passes that
# registers each (a pass with helpers of its own is a package, registered by its
# pass_ module): imported on first use, so a driver running only upstream passes
# starts without sympy.
_BUILTIN: dict[str, str] = {
    "anyshape-canonicalize-shapes": "canonicalize_shapes.pass_",
    "anyshape-data-tiling-forms": "data_tiling_forms",
    "anyshape-defer-softmax-normalization": "defer_softmax_normalization",
    "anyshape-eliminate-padding": "eliminate_padding.pass_",
    "anyshape-hoist-slices": "hoist_slices",
    "anyshape-logsumexp-softmax": "logsumexp_softmax",
    "anyshape-lower": "lower",
    "anyshape-print-flops": "print_flops.pass_",
}


def _import_builtin(argument: str) -> None:
    if argument in _BUILTIN and argument not in _REGISTRY:
        import importlib

        importlib.import_module(f"anyshape.passes.{_BUILTIN[argument]}")


def registered_passes() -> dict[str, type[ModulePass]]:
    for argument in _BUILTIN:
        _import_builtin(argument)
    return dict(sorted(_REGISTRY.items()))


def is_registered(argument: str) -> bool:
    return argument in _REGISTRY or argument in _BUILTIN


def lookup(argument: str) -> type[ModulePass]:
    _import_builtin(argument)
    try:
        return _REGISTRY[argument]
    except KeyError:
        known = ", ".join(sorted(set(_REGISTRY) | set(_BUILTIN))) or "none registered"
        raise KeyError(f"unknown anyshape pass '{argument}' (known: {known})") from None


__all__ = ["ModulePass", "PassFailure", "apply_patterns", "register", "registered_passes",
           "is_registered", "lookup", "load_pass_file", "DEFAULT_PIPELINE"]
