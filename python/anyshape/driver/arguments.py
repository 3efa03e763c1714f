"""``anyshape.compile``'s arguments checked, and its options made a ``Target``:
everything that can be refused before the (slow) export is refused here,
naming the argument, what was expected and what was given."""

from __future__ import annotations

import dataclasses
import re
from typing import Sequence

from anyshape.driver.pipeline import make_anyshape_pass
from anyshape.iree.flags import Target, products_target, with_weights
from anyshape.options import BackendOptions
from anyshape.passes import DEFAULT_PIPELINE
from anyshape.runtime.compiled_module import available_cores, check_threads


def check_model_and_inputs(model, args, kwargs, dtype, entries: dict | None) -> dict:
    """The ``entries`` (name -> ExportedProgram), checked with ``model`` and its
    example inputs."""
    import torch

    exported_already = isinstance(model, torch.export.ExportedProgram)
    if exported_already and (args is not None or kwargs):
        raise TypeError("args: expected none with an ExportedProgram (it was exported with its "
                        f"example inputs), got {type(args).__name__}")
    if exported_already and dtype is not None:
        raise ValueError(f"dtype: expected None with an ExportedProgram (it is compiled in the "
                         f"dtypes it was exported in), got {dtype}")
    if not exported_already and args is None:
        raise TypeError("args: expected the example inputs (a tuple of tensors), got None")
    entries = dict(entries or {})
    for name, entry_program in entries.items():
        if not isinstance(entry_program, torch.export.ExportedProgram):
            raise TypeError(f"entries['{name}']: expected a torch.export.ExportedProgram, "
                            f"got {type(entry_program).__name__}")
        if name == "main" or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(name)):
            raise ValueError(f"entries: expected function names (identifiers other than "
                             f"'main'), got {name!r}")
    return entries


def target_from(target: str, backend: BackendOptions, padding: str | None) -> Target:
    """The ``Target`` that ``target`` and ``backend`` (resolved) ask for."""
    compile_target = products_target(target, backend)
    if not isinstance(backend.outer_dim_concat, bool):
        raise TypeError(f"outer_dim_concat: expected True or False, got "
                        f"{backend.outer_dim_concat!r}")
    if not backend.outer_dim_concat:
        compile_target = dataclasses.replace(compile_target, outer_dim_concat=False)
    compile_target = with_weights(compile_target, backend.weights, backend.group_size,
                                  backend.weights_from, backend.activations)
    if not isinstance(backend.in_place_writes, bool):
        raise TypeError(f"in_place_writes: expected True or False, got "
                        f"{backend.in_place_writes!r}")
    if backend.in_place_writes:
        if padding is not None:
            # The dense twin eliminate-padding adds is a function the rewrite
            # of the updated inputs (iree/in_place_writes.py) is not told of.
            raise ValueError(f"in_place_writes: not supported together with "
                             f"padding={padding!r}; use one or the other")
        compile_target = dataclasses.replace(compile_target, in_place_writes=True)
    check_threads(backend.threads)
    if compile_target.name == "cpu":
        compile_target = dataclasses.replace(compile_target,
                                             workers=backend.threads or available_cores())
    if backend.params not in ("inline", "external"):
        raise ValueError(f"params: expected 'inline' or 'external', got {backend.params!r}")
    return compile_target


def pass_names_from(passes: Sequence[str] | None, padding: str | None) -> list[str]:
    """The pass pipeline ``passes`` names (None: the default one), each pass
    made once so that unknown names and bad options fail before the export."""
    if isinstance(passes, str):
        raise TypeError(f"passes: expected a list of pass names (or None: the default "
                        f"pipeline), got the string {passes!r}; write [{passes!r}]")
    pass_names = list(DEFAULT_PIPELINE if passes is None else passes)
    if padding not in (None, "eliminate"):
        raise ValueError(f"padding: expected None or 'eliminate', got {padding!r}")
    for name in pass_names:
        make_anyshape_pass(name)
    return pass_names


# bfloat16 is not offered: numpy has no bfloat16, and the runtime passes arrays
# through numpy.
_FLOAT_DTYPES = ("float32", "float16")


def in_dtype(dtype, model, args, kwargs):
    import copy

    import torch
    from torch.utils._pytree import tree_map

    if not isinstance(dtype, torch.dtype) or str(dtype).removeprefix("torch.") not in _FLOAT_DTYPES:
        raise ValueError(f"dtype: expected one of torch.{', torch.'.join(_FLOAT_DTYPES)} (or "
                         f"None: as the model is), got {dtype!r}")
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")

    def cast(value):
        return value.to(dtype) if isinstance(value, torch.Tensor) and value.is_floating_point() \
            else value

    return copy.deepcopy(model).to(dtype), tree_map(cast, args), tree_map(cast, kwargs)


