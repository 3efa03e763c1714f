"""A module's signature read from the exported program: its inputs, what each
returned value is, its dims with their ranges, the user's names for them and
the conditions torch.export guards on (``runtime/signature.py`` holds the
signature the manifest records)."""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import torch

from anyshape.frontend.graph_fixes.symbolic_scalars import kind as scalar_kind
from anyshape.frontend.indexed_reads import indexed_reads, size_condition
from anyshape.runtime.index_bounds import IndexBound
from anyshape.runtime import size_conditions
from anyshape.runtime.signature import ModuleSignature, Symbol, TensorSpec, dtype_name, encode_tree


# Where ``prepare_program`` leaves conditions read before decomposing
# (``pooling_sizes.py``), in the graph module's meta.
SIZE_CONDITIONS = "anyshape.size_conditions"


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
    conditions += [c for c in program.graph_module.meta.get(SIZE_CONDITIONS, [])
                   if c not in conditions]
    return ModuleSignature(inputs, outputs, symbols, encode_tree(program.call_spec.out_spec),
                           writes, conditions,
                           input_tree=_nested_inputs(program, [spec.name for spec in inputs]),
                           index_bounds=_index_bounds(program, user_inputs))


def _index_bounds(program: torch.export.ExportedProgram, user_inputs: set[str]) -> list[IndexBound]:
    """The indexed reads the runtime checks (``frontend/indexed_reads.py``); the
    rest are unchecked yet (``indexed_reads.py``)."""
    bounds = []
    for read in indexed_reads(program.graph):
        if read.kind == "input" and read.input in user_inputs:
            bound = IndexBound(read.table, read.rows, read.low, input=read.input)
        elif read.kind == "sizes" and (condition := size_condition(read)) is not None:
            bound = IndexBound(read.table, read.rows, read.low, condition=condition)
        elif read.kind == "data" and read.bounds is not None and \
                (condition := size_condition(read)) not in (None, "False"):
            # (a bound past the table at every size is too loose to refuse by: unchecked)
            bound = IndexBound(read.table, read.rows, read.low, condition=condition,
                               from_data=True)
        else:
            continue
        if bound not in bounds:
            bounds.append(bound)
    return bounds


def _nested_inputs(program: torch.export.ExportedProgram, leaves: list[str]) -> dict:
    """``ModuleSignature.input_tree``: the arguments passed as lists, tuples or
    dicts, with the names torch.export gave their tensors (``past_0``, ...)."""
    args_spec, kwargs_spec = program.call_spec.in_spec.children()
    names = list(getattr(program.module_call_graph[0].signature, "forward_arg_names", None) or [])
    top = list(zip(names, args_spec.children())) + \
        list(zip(kwargs_spec.context or [], kwargs_spec.children()))
    if len(names) < args_spec.num_children or \
            sum(spec.num_leaves for _, spec in top) != len(leaves):
        return {}  # inputs that are not all tensors: passed flat, by their own names
    nested, at = {}, 0
    for name, spec in top:
        if not spec.is_leaf():
            if not _containers_only(spec):
                return {}
            nested[name] = {"tree": encode_tree(spec), "leaves": leaves[at:at + spec.num_leaves]}
        at += spec.num_leaves
    return nested


def _containers_only(spec) -> bool:
    return spec.is_leaf() or (spec.type in (list, tuple, dict) and
                              all(_containers_only(child) for child in spec.children()))


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
    of per-axis Dims (``Dim.AUTO`` and ``Dim.DYNAMIC`` have no name); an input
    that is a list or tuple of tensors (a cache's keys and values) has a spec
    per tensor, named ``past[0]``, ``past[1]``, ... as torch's sources name them.
    """
    if isinstance(dynamic_shapes, dict):
        per_input = dynamic_shapes.items()
    elif isinstance(dynamic_shapes, (list, tuple)):
        per_input = zip(input_names, dynamic_shapes)
    else:
        return {}
    declared: dict[tuple[str, int], str] = {}
    for input_name, spec in per_input:
        _declare(str(input_name), spec, declared)
    return declared


def _declare(name: str, spec: Any, declared: dict[tuple[str, int], str]) -> None:
    if isinstance(spec, (list, tuple)) and any(isinstance(s, (dict, list, tuple)) for s in spec):
        for index, inner in enumerate(spec):  # one spec per tensor of a nested input
            _declare(f"{name}[{index}]", inner, declared)
        return
    if not isinstance(spec, (dict, list, tuple)):
        return  # None, or a Dim or hint for a non-tensor input
    for axis, dim in (spec.items() if isinstance(spec, dict) else enumerate(spec)):
        label = getattr(dim, "__name__", None)
        if label is not None and isinstance(axis, int):
            declared[(name, axis)] = label


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
