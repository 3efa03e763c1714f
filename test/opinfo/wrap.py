"""An OpInfo sample as a module, its dynamic shapes, and its inputs at other sizes."""

from __future__ import annotations

import sympy
import torch
from torch.export import Dim
from torch.utils._pytree import tree_flatten, tree_unflatten
from torch.utils._sympy.numbers import int_oo


def make_module(op, sample) -> tuple[torch.nn.Module, tuple]:
    """A module calling ``op.op(sample.input, *sample.args, **sample.kwargs)``
    whose positional inputs are the sample's tensors (nested ones included);
    every other value is closed over, so it is a constant of the export."""
    flat, spec = tree_flatten((sample.input, sample.args, sample.kwargs))
    slots = [i for i, x in enumerate(flat) if isinstance(x, torch.Tensor)]
    inputs = tuple(flat[i] for i in slots)

    def call(*tensors):
        values = list(flat)
        for i, t in zip(slots, tensors):
            values[i] = t
        first, args, kwargs = tree_unflatten(values, spec)
        return op.op(first, *args, **kwargs)

    # A forward with one named parameter per input: torch.export binds
    # dynamic_shapes and anyshape names the inputs from its signature.
    names = [f"x{i}" for i in range(len(inputs))]
    namespace: dict = {}
    exec(f"def forward(self, {', '.join(names)}):\n"
         f"    return self.call({', '.join(names)})\n", namespace)
    module_type = type("OpInfoCase", (torch.nn.Module,), {"forward": namespace["forward"]})
    module = module_type()
    module.call = call
    return module.eval(), inputs


def dynamic_shapes(inputs: tuple) -> tuple:
    """Every dim of size > 1 dynamic with no bounds; ``Dim.AUTO`` lets export
    tie dims the op makes equal, and keep static one it needs fixed, where
    separate named Dims would make such an export fail."""
    return tuple({axis: Dim.AUTO for axis, size in enumerate(t.shape) if size > 1}
                 for t in inputs)


def input_shapes(program) -> list[tuple]:
    """Each user input's shape as export traced it: ints and sympy expressions."""
    user = set(program.graph_signature.user_inputs)
    shapes = []
    for node in program.graph.nodes:
        if node.op == "placeholder" and node.name in user:
            val = node.meta.get("val")
            if isinstance(val, torch.Tensor):
                shapes.append(tuple(d.node.expr if isinstance(d, torch.SymInt) else int(d)
                                    for d in val.shape))
    return shapes


def symbol_values(program, inputs: tuple) -> dict:
    """The value each symbol had in the traced example."""
    values = {}
    for shape, t in zip(input_shapes(program), inputs):
        for dim, size in zip(shape, t.shape):
            if isinstance(dim, sympy.Symbol):
                values[dim] = size
    return values


# Sizes other than the traced one, as functions of the traced value. Both grow
# every symbol and keep the order between symbols, so an index valid at the
# traced sizes stays valid and a size bounded by another stays bounded; the
# second is odd and about twice as large.
RESIZES = (("plus1", lambda n: n + 1), ("double_plus1", lambda n: 2 * n + 1))


def other_sizes(program, inputs: tuple) -> list[tuple[str, dict]]:
    """(name, {symbol: value}) for each resize the symbols' ranges admit."""
    traced = symbol_values(program, inputs)
    sizes = []
    for name, resize in RESIZES:
        chosen = {}
        for sym, value in traced.items():
            new = resize(value)
            bounds = program.range_constraints.get(sym)
            if bounds is not None:
                if bounds.upper not in (int_oo, sympy.oo) and new > int(bounds.upper):
                    new = int(bounds.upper)
                new = max(new, int(bounds.lower))
            chosen[sym] = new
        if chosen and chosen != traced:
            sizes.append((name, chosen))
    return sizes


def resized_inputs(program, inputs: tuple, values: dict) -> tuple | None:
    """The inputs at the symbol ``values``: each resized dim's values tiled (to
    grow) or cropped (to shrink) from the original's, so values keep their
    character (index tensors their range, masks their density). None when a
    shape is not an expression of the symbols alone."""
    out = []
    for shape, t in zip(input_shapes(program), inputs):
        new = t
        for axis, dim in enumerate(shape):
            if isinstance(dim, int):
                continue
            size = dim.subs(values)
            if not size.is_number:
                return None
            size = int(size)
            if size != new.shape[axis]:
                index = torch.arange(size) % new.shape[axis]
                new = new.index_select(axis, index)
        out.append(new.clone())
    return tuple(out)
