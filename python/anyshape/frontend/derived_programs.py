"""A program derived from another already exported and decomposed, without
tracing the model again.

Tracing is most of a compile's front half: ``torch.export`` and the
decomposition each propagate fake tensors with symbolic shapes through every
op of every layer (docs/benchmarks.md, "Compile cost"). A causal LM's step
that returns the last position's logits is the step that returns every
position's, and one ``select`` after it: ``selected_output`` builds it from
the decomposed graph, where exporting it again would trace the model twice
more for one node. A step for a fixed
batch and one new token is that step with two of its sizes fixed:
``specialized`` propagates fake tensors of those sizes through the decomposed
graph once, where exporting and decomposing it again traces it twice.
"""

from __future__ import annotations

import copy

import sympy
import torch
from torch.export.graph_signature import (ExportGraphSignature, InputKind, OutputKind, OutputSpec,
                                          TensorArgument)


def selected_output(program: torch.export.ExportedProgram, dim: int,
                    index: int) -> torch.export.ExportedProgram:
    """``program`` (decomposed: ``export.prepare_program``'s) with its one tensor
    output replaced by ``output.select(dim, index)``; its in-place writes of
    inputs stay as they are. The graph is copied: ``program`` is unchanged."""
    specs = program.graph_signature.output_specs
    user = [number for number, spec in enumerate(specs) if spec.kind == OutputKind.USER_OUTPUT]
    if len(user) != 1 or not isinstance(specs[user[0]].arg, TensorArgument):
        raise ValueError(f"program: expected one tensor output to select from, got outputs "
                         f"{[spec.kind.name for spec in specs]}")
    graph, outputs, old_output = _graph_copy(program)
    chosen = outputs[user[0]]
    rank = chosen.meta["val"].dim()
    if not -rank <= dim < rank:
        raise ValueError(f"dim: expected a dim of the {rank}-d output, got {dim}")
    selected = graph.call_function(torch.ops.aten.select.int, (chosen, dim, index))
    # Its fake value, under the program's own fake mode and shape environment,
    # as tracing would have recorded it.
    selected.meta["val"] = torch.ops.aten.select.int(chosen.meta["val"], dim, index)
    for key in ("stack_trace", "nn_module_stack", "source_fn_stack"):
        if key in chosen.meta:
            selected.meta[key] = chosen.meta[key]
    outputs[user[0]] = selected
    module = _graph_module(program, graph, outputs, old_output)
    signature = ExportGraphSignature(
        input_specs=list(program.graph_signature.input_specs),
        output_specs=[OutputSpec(kind=spec.kind, arg=TensorArgument(name=selected.name),
                                 target=spec.target) if number == user[0] else spec
                      for number, spec in enumerate(specs)])
    return program._update(module, signature)


def specialized(program: torch.export.ExportedProgram,
                sizes: dict[tuple[int, int], int]) -> torch.export.ExportedProgram:
    """``program`` (decomposed) with the symbolic sizes ``sizes`` names fixed:
    (user input position, axis) -> its size. Each symbol fixed is fixed
    wherever it occurs; the others stay symbolic, with their ranges and the
    guards ``program`` was traced under. The graph is copied and its fake
    values propagated again: ``program`` is unchanged."""
    from torch._guards import detect_fake_mode
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    placeholders = [node for node in program.graph.nodes if node.op == "placeholder"]
    source_env = detect_fake_mode([node.meta.get("val") for node in placeholders]).shape_env
    fixed = _fixed_symbols(program, placeholders, source_env, sizes)
    hints = getattr(source_env, "backed_var_to_val", None) or source_env.var_to_val
    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    renamed: dict = dict(fixed)
    new_hints: dict = {}
    ranges: dict = {}

    def size(value):
        if not isinstance(value, torch.SymInt):
            return value
        expression = value.node.expr
        for old in sorted(expression.free_symbols - renamed.keys(), key=str):
            # The source's sources: the new guards then name the same input sizes.
            new = env.create_symbol(int(hints[old]), source_env.var_to_sources[old][0],
                                    dynamic_dim=DimDynamic.DYNAMIC)
            # Traced under the source's tracing range (sizes 0 and 1 left out
            # by torch's assumption); declared with its declared range.
            traced = source_env.var_to_range[old]
            env.constrain_symbol_range(new, compiler_min=traced.lower, compiler_max=traced.upper)
            renamed[old], new_hints[new] = new, hints[old]
            ranges[new] = program.range_constraints.get(old, traced)
        expression = expression.xreplace(renamed)
        if expression.is_number:
            return int(expression)
        return env.create_symintnode(expression, hint=int(expression.xreplace(new_hints)))

    inputs = []
    for node in placeholders:
        value = node.meta["val"]
        if isinstance(value, torch.Tensor):
            with mode:
                value = torch.empty_strided([size(d) for d in value.shape],
                                            [size(d) for d in value.stride()],
                                            dtype=value.dtype, device=value.device)
        inputs.append(size(value))
    module = _graph_module(program, *_graph_copy(program))
    with mode:
        FakeTensorProp(module, mode).propagate_dont_convert_inputs(*inputs)
    _tensor_metadata_from_values(module.graph)
    _fold_fixed_scalars(module.graph)
    derived = torch.export.ExportedProgram(
        root=module, graph=module.graph, graph_signature=copy.deepcopy(program.graph_signature),
        state_dict=program.state_dict, range_constraints=ranges,
        module_call_graph=copy.deepcopy(program.module_call_graph), example_inputs=None,
        constants=program.constants, verifiers=program.verifiers)
    # The guards ``program`` was traced under hold for the derived one too
    # (written over input sizes, they read the fixed sizes as numbers).
    derived._guards_code = list(program._guards_code) + \
        [code for code in derived._guards_code if code not in program._guards_code]
    return derived


def _graph_copy(program) -> tuple[torch.fx.Graph, list, torch.fx.Node]:
    """A copy of ``program``'s graph without its output node: the graph, the
    copied values it returned, and the old output node (for its meta)."""
    graph = torch.fx.Graph()
    returned, old_output = graph.graph_copy(program.graph, {}, return_output_node=True)
    return graph, list(returned), old_output


def _graph_module(program, graph: torch.fx.Graph, outputs: list,
                  old_output: torch.fx.Node) -> torch.fx.GraphModule:
    """``graph`` returning ``outputs``, as a module over ``program``'s
    attributes with its graph module's meta."""
    graph.output(tuple(outputs)).meta.update(old_output.meta)
    graph.lint()
    module = torch.fx.GraphModule(program.graph_module, graph)
    module.meta.update(program.graph_module.meta)
    return module


def _fixed_symbols(program, placeholders, source_env, sizes) -> dict:
    """Each symbol ``sizes`` fixes -> its value, checked against its range and
    against the guards ``program`` was traced under."""
    users = [spec.arg.name for spec in program.graph_signature.input_specs
             if spec.kind == InputKind.USER_INPUT]
    by_name = {node.name: node for node in placeholders}
    fixed = {}
    for (position, axis), value in sorted(sizes.items()):
        if not 0 <= position < len(users):
            raise ValueError(f"sizes: expected user input positions 0..{len(users) - 1}, "
                             f"got {position}")
        shape = by_name[users[position]].meta["val"].shape
        if not 0 <= axis < len(shape):
            raise ValueError(f"sizes: expected an axis of input {position}'s {len(shape)} dims, "
                             f"got {axis}")
        dim = shape[axis]
        if not isinstance(dim, torch.SymInt) or not isinstance(dim.node.expr, sympy.Symbol):
            raise ValueError(f"sizes: expected a symbolic size at input {position}, axis {axis}; "
                             f"it is {dim}")
        symbol = dim.node.expr
        bounds = program.range_constraints.get(symbol, source_env.var_to_range[symbol])
        if not bounds.lower <= value <= bounds.upper:
            raise ValueError(f"sizes: expected input {position}'s axis {axis} within "
                             f"[{bounds.lower}, {bounds.upper}], got {value}")
        if fixed.get(symbol, value) != value:
            raise ValueError(f"sizes: input {position}'s axis {axis} is the size fixed at "
                             f"{fixed[symbol]} elsewhere, got {value}")
        fixed[symbol] = sympy.Integer(value)
    for guard in source_env.guards:
        if guard.expr.xreplace(fixed) == sympy.false:
            raise ValueError(f"sizes: {dict(sorted(sizes.items()))} breaks the guard "
                             f"{guard.expr} the program was traced under")
    return fixed


def _fold_fixed_scalars(graph: torch.fx.Graph) -> None:
    """Size arithmetic whose value the fixed sizes decide (``sym_size``, ``sub``,
    ...) written as its number, as torch.export writes a static size; the
    checks of it that hold removed. torch-mlir's importer takes a scalar node
    only with a symbolic value."""
    for node in list(graph.nodes):
        value = node.meta.get("val")
        if node.op != "call_function" or type(value) not in (int, float, bool):
            continue
        node.replace_all_uses_with(value)
        graph.erase_node(node)
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target is torch.ops.aten._assert_scalar.default \
                and isinstance(node.args[0], bool):
            if not node.args[0]:
                raise ValueError(f"sizes: the program's check fails at them: {node.args[1]}")
            graph.erase_node(node)
    graph.lint()


def _tensor_metadata_from_values(graph: torch.fx.Graph) -> None:
    """Each node's ``tensor_meta`` (what torch-mlir's importer types a value by)
    from its propagated fake value, where it had one."""
    from torch.fx.node import map_aggregate
    from torch.fx.passes.shape_prop import _extract_tensor_metadata

    for node in graph.nodes:
        if "tensor_meta" in node.meta and "val" in node.meta:
            node.meta["tensor_meta"] = map_aggregate(
                node.meta["val"],
                lambda value: _extract_tensor_metadata(value)
                if isinstance(value, torch.Tensor) else value)
