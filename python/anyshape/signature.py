"""What a compiled module takes and returns, as plain JSON-able data.

Built from the exported program at compile time and stored in the artifact's
manifest; the runtime checks every call against it and rebuilds the model's
output structure from it. Needs only torch (and sympy, which torch carries),
never the compilers.
"""

from __future__ import annotations

import dataclasses
import importlib
import warnings
from typing import Any

import torch

SCHEMA_VERSION = 1


@dataclasses.dataclass
class Symbol:
    name: str              # the torch.export symbol (s0, s43, ...)
    min: int | None
    max: int | None        # None: unbounded
    label: str | None = None   # the user's torch.export.Dim name, where known

    def describe(self) -> str:
        label = f"'{self.label}'" if self.label else self.name
        hi = "inf" if self.max is None else str(self.max)
        return f"{label} in [{self.min}, {hi}]"


@dataclasses.dataclass
class TensorSpec:
    name: str
    dtype: str                     # torch dtype name: float32, int64, bool, ...
    dims: list[int | str]          # int: static; str: a symbol or an expression over symbols

    def render_shape(self) -> str:
        return "(" + ", ".join(str(d) for d in self.dims) + ")"


@dataclasses.dataclass
class ModuleSignature:
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    symbols: dict[str, Symbol]
    output_tree: dict[str, Any]

    def to_json(self) -> dict:
        return {
            "inputs": [dataclasses.asdict(t) for t in self.inputs],
            "outputs": [dataclasses.asdict(t) for t in self.outputs],
            "symbols": {k: dataclasses.asdict(s) for k, s in self.symbols.items()},
            "output_tree": self.output_tree,
        }

    @classmethod
    def from_json(cls, data: dict) -> "ModuleSignature":
        return cls(
            inputs=[TensorSpec(**t) for t in data["inputs"]],
            outputs=[TensorSpec(**t) for t in data["outputs"]],
            symbols={k: Symbol(**s) for k, s in data["symbols"].items()},
            output_tree=data["output_tree"],
        )


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _dim_entry(size) -> int | str:
    if isinstance(size, int):
        return size
    expr = size.node.expr if isinstance(size, torch.SymInt) else size
    if getattr(expr, "is_number", False):
        return int(expr)
    return str(expr)


def _bound(value) -> int | None:
    """A range end as an int, or None for no bound: torch's ``int_oo`` (the upper
    end of every ``Dim`` declared without a max) and sympy's infinities, on
    which ``int()`` raises."""
    import sympy
    from torch.utils._sympy.numbers import int_oo

    if value is None or value in (int_oo, -int_oo, sympy.oo, -sympy.oo):
        return None
    return int(value)


def signature_from_program(program: torch.export.ExportedProgram,
                           dim_labels: dict[str, str] | None = None) -> ModuleSignature:
    sig = program.graph_signature
    user_inputs = set(sig.user_inputs)
    inputs = []
    for node in program.graph.nodes:
        if node.op != "placeholder" or node.name not in user_inputs:
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise TypeError(
                f"input '{node.name}': only tensor inputs can vary at run time, got "
                f"{type(val).__name__}; pass Python values through a wrapper module")
        inputs.append(TensorSpec(node.name, dtype_name(val.dtype), [_dim_entry(d) for d in val.shape]))

    output_node = next(n for n in program.graph.nodes if n.op == "output")
    outputs = []
    for i, arg in enumerate(output_node.args[0]):
        val = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg
        if not isinstance(val, torch.Tensor):
            raise TypeError(f"output {i}: only tensor outputs are supported, got {type(val).__name__}")
        outputs.append(TensorSpec(f"output_{i}", dtype_name(val.dtype), [_dim_entry(d) for d in val.shape]))

    labels = dim_labels or {}
    symbols = {}
    for sym, rng in program.range_constraints.items():
        name = str(sym)
        symbols[name] = Symbol(name, _bound(rng.lower), _bound(rng.upper), labels.get(name))
    return ModuleSignature(inputs, outputs, symbols, encode_tree(program.call_spec.out_spec))


def dim_labels_from(program: torch.export.ExportedProgram, dynamic_shapes: Any) -> dict[str, str]:
    """Map export symbols to the user's ``Dim`` names, where ``dynamic_shapes`` says them.

    Handles the usual forms: a dict keyed by input name, or a tuple/list in
    input order, each entry a ``{axis: Dim}`` dict or a list of per-axis Dims.
    """
    if dynamic_shapes is None:
        return {}
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    names = list(program.graph_signature.user_inputs)
    if isinstance(dynamic_shapes, dict):
        per_input = dynamic_shapes.items()
    elif isinstance(dynamic_shapes, (list, tuple)):
        per_input = zip(names, dynamic_shapes)
    else:
        return {}
    labels = {}
    for input_name, axes in per_input:
        node = placeholders.get(input_name)
        if node is None or not isinstance(axes, (dict, list, tuple)):
            continue  # None, or a Dim or hint for a non-tensor input
        items = axes.items() if isinstance(axes, dict) else enumerate(axes)
        shape = node.meta["val"].shape
        for axis, dim in items:
            label = getattr(dim, "__name__", None)
            if label is None or not isinstance(axis, int) or axis >= len(shape):
                continue
            entry = _dim_entry(shape[axis])
            if isinstance(entry, str) and entry.isidentifier():
                labels.setdefault(entry, label)
    return labels


# --- output structure -------------------------------------------------------

def encode_tree(spec) -> dict[str, Any]:
    """A pytree spec as JSON: leaves, tuples, lists, dicts, and keyed classes
    (dataclasses such as HuggingFace's ModelOutput, namedtuples)."""
    if spec.is_leaf():
        return {"kind": "leaf"}
    children = [encode_tree(c) for c in spec.children()]
    if spec.type in (tuple, list):
        return {"kind": spec.type.__name__, "children": children}
    if spec.type is dict:
        return {"kind": "dict", "keys": list(spec.context), "children": children}
    keys = spec.context
    if (dataclasses.is_dataclass(spec.type) and isinstance(keys, (list, tuple)) and len(keys) == 2
            and all(isinstance(part, (list, tuple)) for part in keys)):
        # torch's register_dataclass: [fields with values, fields that are None]
        return {"kind": "class", "module": spec.type.__module__, "qualname": spec.type.__qualname__,
                "keys": list(keys[0]), "none_keys": list(keys[1]), "children": children}
    if isinstance(keys, (list, tuple)) and all(isinstance(k, str) for k in keys):
        return {"kind": "class", "module": spec.type.__module__,
                "qualname": spec.type.__qualname__, "keys": list(keys), "children": children}
    if hasattr(spec.type, "_fields"):  # namedtuple
        return {"kind": "class", "module": spec.type.__module__,
                "qualname": spec.type.__qualname__, "keys": list(spec.type._fields),
                "children": children}
    raise TypeError(f"output: expected tensors in tuples, lists, dicts, dataclasses or "
                    f"namedtuples, got a {spec.type.__qualname__} (a pytree node without field "
                    f"names, which a loaded module cannot rebuild)")


def leaf_paths(tree: dict[str, Any], prefix: str = "") -> list[str]:
    """How to reach each leaf of the rebuilt output, in order: ``.logits``,
    ``[0]``, ``["key"]`` ('' for a lone tensor)."""
    kind = tree["kind"]
    if kind == "leaf":
        return [prefix]
    if kind in ("tuple", "list"):
        steps = [f"[{i}]" for i in range(len(tree["children"]))]
    elif kind == "dict":
        steps = [f"[{key!r}]" for key in tree["keys"]]
    else:
        steps = [f".{key}" for key in tree["keys"]]
    return [path for step, child in zip(steps, tree["children"])
            for path in leaf_paths(child, prefix + step)]


def decode_tree(tree: dict[str, Any], leaves: list) -> Any:
    """Rebuild the model's output structure around ``leaves`` (consumed in order)."""
    return _decode(tree, iter(leaves))


def _decode(tree, it):
    kind = tree["kind"]
    if kind == "leaf":
        return next(it)
    values = [_decode(c, it) for c in tree["children"]]
    if kind == "tuple":
        return tuple(values)
    if kind == "list":
        return values
    fields = dict(zip(tree["keys"], values))
    if kind == "dict":
        return fields
    fields.update(dict.fromkeys(tree.get("none_keys", ())))
    cls = _import_class(tree["module"], tree["qualname"])
    return fields if cls is None else cls(**fields)


_warned_classes: set[str] = set()


def _import_class(module_name: str, qualname: str):
    path = f"{module_name}.{qualname}"
    try:
        obj = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        return obj
    except (ImportError, AttributeError):
        if path not in _warned_classes:
            _warned_classes.add(path)
            warnings.warn(f"output class {path} cannot be imported here; returning a dict "
                          f"with its fields instead", stacklevel=4)
        return None
