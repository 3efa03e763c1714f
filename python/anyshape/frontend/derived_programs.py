"""A program derived from another already exported and decomposed, without
tracing the model again.

Tracing is most of a compile's front half: ``torch.export`` and the
decomposition each propagate fake tensors with symbolic shapes through every
op of every layer (docs/benchmarks.md, "Compile cost"). A causal LM's step that returns the last position's
logits is the step that returns every position's, and one ``select`` after
it: ``selected_output`` builds it from the decomposed graph, where exporting it
again would trace the model twice more for one node.
"""

from __future__ import annotations

import torch
from torch.export.graph_signature import ExportGraphSignature, OutputKind, OutputSpec, TensorArgument


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
    graph = torch.fx.Graph()
    values: dict = {}
    returned, old_output = graph.graph_copy(program.graph, values, return_output_node=True)
    outputs = list(returned)
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
    graph.output(tuple(outputs)).meta.update(old_output.meta)
    graph.lint()
    module = torch.fx.GraphModule(program.graph_module, graph)
    module.meta.update(program.graph_module.meta)
    signature = ExportGraphSignature(
        input_specs=list(program.graph_signature.input_specs),
        output_specs=[OutputSpec(kind=spec.kind, arg=TensorArgument(name=selected.name),
                                 target=spec.target) if number == user[0] else spec
                      for number, spec in enumerate(specs)])
    return program._update(module, signature)
