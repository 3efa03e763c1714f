"""What a compiled module takes and returns, as plain JSON-able data.

Built from the exported program at compile time (``frontend/program_signature.py``) and stored in the artifact's
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

from anyshape.runtime.index_bounds import IndexBound

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
    # Outputs only. A Python scalar the model returns (a size, an ``.item()``):
    # "int", "float" or "bool", carried by the module as a 0-d tensor; or
    # "constant": a value fixed at export (``value``), which the module does
    # not compute.
    python: str | None = None
    value: Any = None

    def render_shape(self) -> str:
        return "(" + ", ".join(str(d) for d in self.dims) + ")"

    def describe(self) -> str:
        if self.python == "constant":
            return f"the constant {self.value!r}"
        if self.python:
            return f"a Python {self.python}"
        return f"{self.dtype} {self.render_shape()}"


@dataclasses.dataclass
class ModuleSignature:
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    symbols: dict[str, Symbol]
    output_tree: dict[str, Any]
    # Inputs the model updates in place (``x.add_(y)``, ``x[i] = v``): the
    # module's first results are their new values, in this order, which the
    # runtime writes back into the caller's tensors.
    input_writes: list[str] = dataclasses.field(default_factory=list)
    # Relations between input dims the model requires beyond their ranges
    # (``torch._check(x.shape[0] <= y.shape[0])``), over the symbols, in Python
    # syntax; the runtime checks them as eager does.
    conditions: list[str] = dataclasses.field(default_factory=list)
    # padding="eliminate": the input whose zeros mark padding; the module takes
    # two more arguments the runtime computes from it (``padding_indices``).
    padding_mask: str | None = None
    # ...and the module's function compiled without padding elimination (the
    # pass's ``dense`` twin), which the runtime calls when the mask has no zeros.
    padding_dense_entry: str | None = None
    # Inputs passed as lists, tuples or dicts of tensors (a decode step's
    # ``past``): each such argument's name -> {"tree": its structure
    # (``encode_tree``), "leaves": the names of its tensors among ``inputs``}.
    input_tree: dict[str, Any] = dataclasses.field(default_factory=dict)
    # Indices into the model's tables that the runtime checks before a call
    # (``runtime/index_bounds.py``): an input's values, or a size condition.
    index_bounds: list[IndexBound] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "inputs": [dataclasses.asdict(t) for t in self.inputs],
            "outputs": [_output_json(t) for t in self.outputs],
            "symbols": {k: dataclasses.asdict(s) for k, s in self.symbols.items()},
            "output_tree": self.output_tree,
            "input_writes": list(self.input_writes),
            "conditions": list(self.conditions),
            **({"padding_mask": self.padding_mask} if self.padding_mask else {}),
            **({"padding_dense_entry": self.padding_dense_entry}
               if self.padding_dense_entry else {}),
            **({"input_tree": self.input_tree} if self.input_tree else {}),
            **({"index_bounds": [dataclasses.asdict(b) for b in self.index_bounds]}
               if self.index_bounds else {}),
        }

    @classmethod
    def from_json(cls, data: dict) -> "ModuleSignature":
        return cls(
            inputs=[TensorSpec(**t) for t in data["inputs"]],
            outputs=[TensorSpec(**t) for t in data["outputs"]],
            symbols={k: Symbol(**s) for k, s in data["symbols"].items()},
            output_tree=data["output_tree"],
            input_writes=list(data.get("input_writes", [])),
            conditions=list(data.get("conditions", [])),
            padding_mask=data.get("padding_mask"),
            padding_dense_entry=data.get("padding_dense_entry"),
            input_tree=dict(data.get("input_tree", {})),
            index_bounds=[IndexBound(**b) for b in data.get("index_bounds", [])],
        )


def _output_json(spec: TensorSpec) -> dict:
    """A tensor output as before Python values were outputs (no python/value keys)."""
    data = dataclasses.asdict(spec)
    if spec.python is None:
        del data["python"], data["value"]
    return data


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


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
    if isinstance(spec.type, type) and issubclass(spec.type, tuple) and \
            hasattr(spec.type, "n_fields"):  # a structseq: torch.return_types.topk, ...
        return {"kind": "structseq", "module": spec.type.__module__,
                "qualname": spec.type.__qualname__, "children": children}
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
    if kind in ("tuple", "list", "structseq"):
        steps = [f"[{i}]" for i in range(len(tree["children"]))]
    elif kind == "dict":
        steps = [f"[{key!r}]" for key in tree["keys"]]
    else:
        steps = [f".{key}" for key in tree["keys"]]
    return [path for step, child in zip(steps, tree["children"])
            for path in leaf_paths(child, prefix + step)]


def flatten_argument(path: str, tree: dict[str, Any], value: Any) -> list:
    """The tensors of ``value``, an argument shaped as ``tree`` says (lists,
    tuples, dicts), in order; a clear error naming ``path`` where it is not."""
    kind = tree["kind"]
    if kind == "leaf":
        return [value]
    children = tree["children"]
    if kind in ("list", "tuple"):
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"argument '{path}': expected a {kind} of {len(children)} items, "
                            f"got {type(value).__name__}")
        if len(value) != len(children):
            raise ValueError(f"argument '{path}': expected a {kind} of {len(children)} items, "
                             f"got {len(value)}")
        return [leaf for index, (child, item) in enumerate(zip(children, value))
                for leaf in flatten_argument(f"{path}[{index}]", child, item)]
    if not isinstance(value, dict):
        raise TypeError(f"argument '{path}': expected a dict with keys {tree['keys']}, got "
                        f"{type(value).__name__}")
    if sorted(map(str, value)) != sorted(map(str, tree["keys"])):
        raise ValueError(f"argument '{path}': expected a dict with keys {tree['keys']}, got "
                         f"keys {list(value)}")
    return [leaf for key, child in zip(tree["keys"], children)
            for leaf in flatten_argument(f"{path}[{key!r}]", child, value[key])]


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
    if kind == "structseq":  # built from one sequence of its fields
        cls = _import_class(tree["module"], tree["qualname"])
        return tuple(values) if cls is None else cls(values)
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
