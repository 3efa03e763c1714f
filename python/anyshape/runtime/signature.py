"""What a compiled module takes and returns, as plain JSON-able data.

Built from the exported program at compile time and stored in the artifact's
manifest; the runtime checks every call against it and rebuilds the model's
output structure from it. Needs only torch (and sympy, which torch carries),
never the compilers.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import warnings
from typing import Any, NamedTuple

import torch

from anyshape.runtime import size_conditions

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
        )


def _output_json(spec: TensorSpec) -> dict:
    """A tensor output as before Python values were outputs (no python/value keys)."""
    data = dataclasses.asdict(spec)
    if spec.python is None:
        del data["python"], data["value"]
    return data


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

    outputs, writes = [], []
    for role, value, written in output_roles(program):
        if role == "write":
            writes.append(written)
            continue
        name = f"output_{len(outputs)}"
        if role == "constant":
            outputs.append(TensorSpec(name, "", [], python="constant", value=value))
        elif role == "scalar":
            scalar = scalar_kind(value.meta["val"])
            outputs.append(TensorSpec(name, SCALAR_DTYPES[scalar], [], python=scalar))
        else:
            val = value.meta["val"]
            outputs.append(TensorSpec(name, dtype_name(val.dtype), [_dim_entry(d) for d in val.shape]))

    labels = dim_labels or {}
    symbols = {}
    for sym, rng in ordered_range_constraints(program):
        name = str(sym)
        symbols[name] = Symbol(name, _bound(rng.lower), _bound(rng.upper), labels.get(name))
    dims = {(spec.name, axis): dim for spec in inputs for axis, dim in enumerate(spec.dims)}
    conditions = size_conditions.from_guards(getattr(program, "_guards_code", None) or [],
                                             dims, list(symbols))
    return ModuleSignature(inputs, outputs, symbols, encode_tree(program.call_spec.out_spec),
                           writes, conditions)


def ordered_range_constraints(program: torch.export.ExportedProgram) -> list[tuple]:
    """``program.range_constraints`` in the order the inputs' dims name them:
    input by input, axis by axis, a derived dim's root symbols (by name) before
    the derived dim; any other entry after them, by name.

    torch.export adds the roots of derived dims (``2*A``, ``B+1``) while iterating
    a set of sympy symbols, so its own order changes with ``PYTHONHASHSEED``; the
    manifest and the imported ``torch.symbolic_int`` ops follow this order instead."""
    constraints = program.range_constraints
    order: list = []

    def add(key) -> None:
        if key in constraints and key not in order:
            order.append(key)

    def natural(key):
        return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(key))]

    for node in program.graph.nodes:
        val = node.meta.get("val") if node.op == "placeholder" else None
        for dim in val.shape if isinstance(val, torch.Tensor) else ():
            if isinstance(dim, torch.SymInt):
                for root in sorted(dim.node.expr.free_symbols, key=natural):
                    add(root)
                add(dim.node.expr)
    for key in sorted(constraints, key=natural):
        add(key)
    return [(key, constraints[key]) for key in order]


# The 0-d tensor that carries a Python scalar output through the module.
SCALAR_DTYPES = {"int": "int64", "float": "float64", "bool": "bool"}
_CONSTANT_TYPES = (int, float, bool, str, type(None))


def scalar_kind(value) -> str | None:
    """'int', 'float' or 'bool' for a (symbolic) Python scalar, else None."""
    from anyshape.frontend.graph_fixes.symbolic_scalars import kind

    return kind(value)


class Returned(NamedTuple):
    role: str              # "write", "tensor", "scalar" or "constant"
    value: Any             # the graph's node, or the constant
    input: str | None = None  # "write": the input updated in place


def output_roles(program: torch.export.ExportedProgram) -> list[Returned]:
    """What each value the exported graph returns is, in order: "write" for the
    new value of an input updated in place, "tensor", "scalar" for a Python
    int, float or bool computed at run time, "constant" for one fixed at
    export. State updated in place (a buffer, a parameter) is refused: a
    compiled module's weights are constants."""
    from torch.export.graph_signature import OutputKind

    output_node = next(n for n in program.graph.nodes if n.op == "output")
    state = {OutputKind.BUFFER_MUTATION: "buffer", OutputKind.PARAMETER_MUTATION: "parameter"}
    updated = [f"{state[spec.kind]} '{spec.target}'" for spec in
               program.graph_signature.output_specs if spec.kind in state]
    if updated:
        raise ValueError(
            f"model: expected a forward that updates no state in place (a compiled module "
            f"holds its weights and buffers as constants, with no state across calls), got "
            f"in-place updates of {', '.join(updated)}; in training mode, batch norm updates "
            f"its running statistics: call model.eval() first (or pass such state as an "
            f"input, which the module updates as eager does)")
    roles = []
    for number, (spec, arg) in enumerate(zip(program.graph_signature.output_specs,
                                             output_node.args[0])):
        if spec.kind == OutputKind.USER_INPUT_MUTATION:
            roles.append(Returned("write", arg, spec.target))
        elif spec.kind == OutputKind.TOKEN:
            raise ValueError("model: expected a forward without side effects, got ops torch.export "
                             "orders by effect tokens (with_effects: error checks such as "
                             "linalg's, prints), which neither torch-mlir nor a compiled module "
                             "keeps")
        elif spec.kind != OutputKind.USER_OUTPUT:
            raise ValueError(f"model: expected outputs and in-place updates of inputs, got "
                             f"output {number} of kind {spec.kind.name}")
        elif isinstance(arg, torch.fx.Node) and isinstance(arg.meta.get("val"), torch.Tensor):
            roles.append(Returned("tensor", arg))
        elif isinstance(arg, torch.fx.Node) and scalar_kind(arg.meta.get("val")):
            roles.append(Returned("scalar", arg))
        elif not isinstance(arg, torch.fx.Node) and isinstance(arg, _CONSTANT_TYPES):
            roles.append(Returned("constant", arg))
        else:
            got = type(arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg).__name__
            raise TypeError(f"output {number - sum(r.role == 'write' for r in roles)}: expected a "
                            f"tensor, a Python int, float, bool, str or None, got {got}")
    return roles


def declared_dims(dynamic_shapes: Any, input_names: list[str]) -> dict[tuple[str, int], str]:
    """(input name, axis) -> the name of the user's ``Dim`` there.

    Handles the usual forms: a dict keyed by input name, or a tuple/list in
    input order (``input_names``), each entry a ``{axis: Dim}`` dict or a list
    of per-axis Dims (``Dim.AUTO`` and ``Dim.DYNAMIC`` have no name).
    """
    if isinstance(dynamic_shapes, dict):
        per_input = dynamic_shapes.items()
    elif isinstance(dynamic_shapes, (list, tuple)):
        per_input = zip(input_names, dynamic_shapes)
    else:
        return {}
    declared = {}
    for input_name, axes in per_input:
        if not isinstance(axes, (dict, list, tuple)):
            continue  # None, or a Dim or hint for a non-tensor input
        for axis, dim in (axes.items() if isinstance(axes, dict) else enumerate(axes)):
            label = getattr(dim, "__name__", None)
            if label is not None and isinstance(axis, int):
                declared[(input_name, axis)] = label
    return declared


def dim_labels_from(program: torch.export.ExportedProgram, dynamic_shapes: Any) -> dict[str, str]:
    """Map export symbols to the user's ``Dim`` names, where ``dynamic_shapes`` says them."""
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    labels = {}
    names = list(program.graph_signature.user_inputs)
    for (input_name, axis), label in declared_dims(dynamic_shapes, names).items():
        node = placeholders.get(input_name)
        shape = node.meta["val"].shape if node is not None else ()
        if axis < len(shape):
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
