"""A decoder's step traced with a few of its layers, the rest copied in the graph.

A causal LM's N decoder layers (and an encoder-decoder's, in its decoder
step) are one module class N times over weights of the same shapes, and
``torch.export`` and its decomposition trace each of
them again: about a second per layer of GPT-2 small on 2 cores, most of a
generator's front half (docs/benchmarks.md, "Compile cost"). Here the step
is exported and decomposed with its first ``TRACED_LAYERS`` layers only (the
model's layer list cut short for the trace, then put back), and the
decomposed graph of its last traced layer is copied once for each layer
after it, reading that layer's weights and cache. The result is the program
a trace of all N layers gives, node for node
(``test_repeated_layers.py`` compares the two).

Four are traced because the first layer's graph may hold nodes the later
ones share (a size computed on first use, T5's position table), so the
copied layer's template is checked against the one before it, and that
one's against its own predecessor: the copies read the layer before them as
the template reads its own. The layers before the template's predecessor
are traced, and may differ from the rest. Where anything differs (layers of
other classes, attributes, hooks or weight shapes, a weight shared with
anything else, mixed
``config.layer_types``, two traced layers' graphs, a layer reading a layer
two back, the model's end reading anything but the last layer), or the
shortened model fails to trace, the step is traced whole, as before: only
the compile's time depends on this, and the progress report says why.

What no check here can see: a layer whose forward branches on one
particular later index in code, not through an attribute (``if
self.layer_idx == 7``); arithmetic on the index shows as different
constants in the two traced layers. None of the HF decoder families checked
branches so (docs/generation.md lists them). And torch.export's guards that relate the
later layers' cache sizes to the others' are not written out: those sizes
share the traced caches' symbols, which the runtime checks for every input.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import re

import torch
from torch.export.graph_signature import (ExportGraphSignature, InputKind, InputSpec, OutputKind,
                                          OutputSpec, TensorArgument)

from anyshape.frontend.derived_programs import _graph_module

TRACED_LAYERS = 4
# The step's module holds the model as its ``model`` attribute (step.py).
_STEP_PREFIX = "model."


class LayersDiffer(Exception):
    """Why the step's layers cannot be copied from one traced layer."""


def layer_stack(model: torch.nn.Module, layers: int, within: str = "") -> str:
    """The dotted name of ``model``'s list of its ``layers`` decoder layers
    (under its submodule ``within``, where given), alike (class, submodules,
    weight shapes, attributes) from the last traced one on, without hooks
    and without weights shared with anything else. The layers before it are
    traced, and may differ (T5's first holds the position table the others
    read)."""
    prefix = f"{within}." if within else ""
    found = [name for name, module in model.named_modules()
             if isinstance(module, torch.nn.ModuleList) and len(module) == layers
             and name.startswith(prefix)]
    if len(found) != 1:
        raise LayersDiffer(f"{len(found)} module lists of {layers} layers")
    stack = model.get_submodule(found[0])
    template = _description(stack[layers - 1])
    for index, layer in enumerate(stack):
        if index < TRACED_LAYERS - 1:
            continue
        if not _alike(_description(layer), index, template, layers - 1):
            raise LayersDiffer(f"layer {index} of {found[0]} differs from layer {layers - 1}")
    # A weight a layer shares (tied to another layer's, or to the model's)
    # is one input of the whole trace, and would be one per layer here.
    names: dict[int, list[str]] = {}
    for name, tensor in (*model.named_parameters(remove_duplicate=False),
                         *model.named_buffers(remove_duplicate=False)):
        names.setdefault(id(tensor), []).append(name)
    for shared in names.values():
        if len(shared) > 1 and any(name.startswith(found[0] + ".") for name in shared):
            raise LayersDiffer(f"{shared[0]} is also {', '.join(shared[1:])}")
    return found[0]


# Attributes that are each layer's own index (HF's ``layer_idx``).
_INDEX_ATTRIBUTE = re.compile(r"layer_?(idx|id|index|number|num)")
_PLAIN = (int, float, str, bool, type(None), torch.dtype, torch.device)
_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
          "_state_dict_hooks", "_load_state_dict_pre_hooks")


def _plain(value) -> bool:
    if isinstance(value, (tuple, list)):
        return all(_plain(item) for item in value)
    if isinstance(value, dict):
        return all(_plain(key) and _plain(item) for key, item in value.items())
    return type(value) in _PLAIN


def _description(layer: torch.nn.Module) -> list:
    """What the trace of ``layer`` depends on besides its weights' values:
    its modules' classes, weight shapes and dtypes, hooks, and attributes:
    plain values by value, any other object by identity (a config shared by
    every layer is alike; a function or object of each layer's own is not)."""
    described = []
    for name, module in layer.named_modules():
        if any(getattr(module, hooks, None) for hooks in _HOOKS):
            raise LayersDiffer(f"a hook on {type(module).__name__} {name or '(the layer)'}")
        attributes = {key: value if _plain(value) else ("object", id(value))
                      for key, value in sorted(vars(module).items())
                      if not key.startswith("_") and not isinstance(value, torch.Tensor)}
        tensors = [(key, tuple(tensor.shape), tensor.dtype)
                   for key, tensor in (*module.named_parameters(recurse=False),
                                       *module.named_buffers(recurse=False))]
        described.append((name, type(module).__qualname__, attributes, tensors))
    return described


def _alike(first: list, first_index: int, second: list, second_index: int) -> bool:
    """Two layers' descriptions the same, but for an index attribute that is
    each layer's own index."""
    if [(n, k, sorted(a), t) for n, k, a, t in first] != \
            [(n, k, sorted(a), t) for n, k, a, t in second]:
        return False
    return all(a[key] == b[key] or (_INDEX_ATTRIBUTE.fullmatch(key) is not None
                                    and (a[key], b[key]) == (first_index, second_index))
               for (_, _, a, _), (_, _, b, _) in zip(first, second) for key in a)


@contextlib.contextmanager
def first_layers(model: torch.nn.Module, stack_name: str, count: int):
    """``model`` with only the first ``count`` layers of its list (and its
    config saying so), put back on exit."""
    stack = model.get_submodule(stack_name)
    config = model.config
    kept_modules = stack._modules
    kept_config = {key: getattr(config, key) for key in ("num_hidden_layers", "layer_types")
                   if getattr(config, key, None) is not None}
    try:
        stack._modules = dict(list(kept_modules.items())[:count])
        if "num_hidden_layers" in kept_config:
            config.num_hidden_layers = count
        if "layer_types" in kept_config:
            config.layer_types = list(kept_config["layer_types"])[:count]
        yield
    finally:
        stack._modules = kept_modules
        for key, value in kept_config.items():
            setattr(config, key, value)


def decomposed_step(model: torch.nn.Module, layers: int, trace, report=None, *,
                    within: str = "", leading_inputs: int = 3,
                    cache_groups: int = 1) -> torch.export.ExportedProgram:
    """``trace(count)`` (the step over the first ``count`` layers, exported and
    decomposed) for all ``layers``: traced with ``TRACED_LAYERS`` and the rest
    copied where the layers are alike, else traced whole. ``report`` (a
    progress printer) is told why where they are not. The step's inputs:
    ``leading_inputs`` tensors, then ``cache_groups`` runs of two per layer
    (a causal LM's cache; an encoder-decoder's own cache, then the
    cross-attention's), named ``cache_0`` on; the layers: the list under
    ``within`` (a submodule's name; all of ``model`` by default)."""
    def whole(reason: str):
        if report is not None:
            report(f"  tracing every layer: {reason}")
        return trace(layers)

    if layers <= TRACED_LAYERS:
        return trace(layers)
    kinds = {kind for config in (model.config, getattr(model.config, "text_config", None))
             for kind in (getattr(config, "layer_types", None) or ())}
    if len(kinds) > 1:
        return whole(f"layers of {len(kinds)} types ({', '.join(sorted(kinds))})")
    try:
        stack_name = layer_stack(model, layers, within)
    except LayersDiffer as error:
        return whole(str(error))
    named = {**dict(model.named_parameters(remove_duplicate=False)),
             **dict(model.named_buffers(remove_duplicate=False))}
    tensors = {_STEP_PREFIX + name: tensor for name, tensor in named.items()}
    try:
        with first_layers(model, stack_name, TRACED_LAYERS):
            traced = trace(TRACED_LAYERS)
        return _Copier(traced, _STEP_PREFIX + stack_name, layers, tensors, leading_inputs,
                       cache_groups).program()
    except Exception as error:  # noqa: BLE001  only time depends on it: the whole trace decides
        # A model cut short may fail where it whole does not, and the graph
        # may hold what the copier does not know: traced whole, its own
        # errors are the user's to read.
        return whole(f"{type(error).__name__}: {str(error)[:200]}")


class _Copier:
    """The traced program's graph with its last layer copied up to ``layers``."""

    def __init__(self, traced, stack_path: str, layers: int, tensors: dict, leading: int,
                 groups: int):
        self.traced, self.layers, self.tensors = traced, layers, tensors
        self.stack_path, self.leading, self.groups = stack_path, leading, groups
        self.last = TRACED_LAYERS - 1
        self._layer_pattern = re.compile(rf"{re.escape(stack_path)}\.(\d+)(?:\.|$)")
        self._segment()
        self._check_alike(self.last - 1, self.last)
        self._check_ends()

    # Where each node belongs.

    def _layer_of_path(self, path: str):
        match = self._layer_pattern.match(path)
        return int(match.group(1)) if match else None

    def _layer_of(self, node) -> int | None:
        if node.op == "placeholder":
            return self.owner.get(node)
        for path, _ in (node.meta.get("nn_module_stack") or {}).values():
            layer = self._layer_of_path(path)
            if layer is not None:
                return layer
        return None

    def _segment(self) -> None:
        signature = self.traced.graph_signature
        by_name = {spec.arg.name: spec for spec in signature.input_specs}
        users = [spec.arg.name for spec in signature.input_specs
                 if spec.kind == InputKind.USER_INPUT]
        self.owner, self.input_role = {}, {}
        for node in self.traced.graph.nodes:
            if node.op != "placeholder":
                continue
            spec = by_name[node.name]
            if spec.kind == InputKind.USER_INPUT:
                position = users.index(node.name) - self.leading
                if position >= 0:
                    group, place = divmod(position, 2 * TRACED_LAYERS)
                    if node.name != f"cache_{position}" or group >= self.groups:
                        raise LayersDiffer(f"cache input {node.name}")
                    self.owner[node] = place // 2
                    self.input_role[node] = ("cache", (group, place % 2))
            elif spec.target is not None:
                layer = self._layer_of_path(spec.target)
                if layer is not None:
                    self.owner[node] = layer
                    self.input_role[node] = (spec.kind, spec.target.replace(
                        f"{self.stack_path}.{layer}.", f"{self.stack_path}.#.", 1))
        self.nodes = {layer: [] for layer in range(TRACED_LAYERS)}
        self.prefix, self.suffix = [], []
        seen = -1
        for node in self.traced.graph.nodes:
            if node.op in ("placeholder", "output"):
                continue
            if node.op != "call_function":
                raise LayersDiffer(f"{node.op} node {node.name}")
            layer = self._layer_of(node)
            if layer is None:
                (self.prefix if seen < 0 else self.suffix).append(node)
            elif layer < seen or self.suffix or layer not in self.nodes:
                raise LayersDiffer(f"node {node.name} of layer {layer} out of order")
            else:
                seen = layer
                self.nodes[layer].append(node)
        if any(not nodes for nodes in self.nodes.values()):
            raise LayersDiffer("a traced layer with no nodes")
        self.index = {node: (layer, position) for layer, nodes in self.nodes.items()
                      for position, node in enumerate(nodes)}

    def _relative(self, value, layer: int):
        """A node argument of a node of ``layer``, written relative to it."""
        if not isinstance(value, torch.fx.Node):
            return value
        if value in self.index:
            owner, position = self.index[value]
            if owner == layer:
                return ("own", position)
            if owner == layer - 1:
                return ("previous", position)
            # Computed once by an earlier layer and read by the later ones
            # (the copies then read it too): alike only where both read it.
            return ("shared", value)
        if value in self.owner:
            if self.owner[value] != layer:
                raise LayersDiffer(f"layer {layer} reads {value.name} of layer "
                                   f"{self.owner[value]}")
            return ("input", self.input_role[value])
        return ("shared", value)

    def _form(self, node, layer: int):
        relative = lambda value: self._relative(value, layer)  # noqa: E731
        return (node.target, torch.fx.node.map_aggregate(node.args, relative),
                torch.fx.node.map_aggregate(node.kwargs, relative))

    def _check_alike(self, first: int, second: int) -> None:
        if len(self.nodes[first]) != len(self.nodes[second]):
            raise LayersDiffer(f"layers {first} and {second} traced to "
                               f"{len(self.nodes[first])} and {len(self.nodes[second])} nodes")
        for a, b in zip(self.nodes[first], self.nodes[second]):
            if self._form(a, first) != self._form(b, second):
                raise LayersDiffer(f"layers {first} and {second} differ at {a.name}, {b.name}")
        if any(node.meta.get("unbacked_bindings") for node in self.nodes[second]):
            raise LayersDiffer(f"layer {second} binds data-dependent sizes")

    def _check_ends(self) -> None:
        """The model's start and end read no input of the last traced layer
        (which, read as ``layers[-1]``, is another layer's in a whole trace;
        the earlier layers' are theirs in both, as their sizes), and its end
        reads the last layer's nodes or what that layer reads as shared: the
        later layers' copies then give it what a whole trace would."""
        shared = {value for node in self.nodes[self.last] for value in node.all_input_nodes
                  if self._relative(value, self.last)[0] == "shared"}
        for node in (*self.prefix, *self.suffix):
            for value in node.all_input_nodes:
                if self.owner.get(value) == self.last:
                    raise LayersDiffer(f"{node.name} reads {value.name}, an input of layer "
                                       f"{self.owner[value]}")
                if value in self.index and self.index[value][0] != self.last and \
                        value not in shared:
                    raise LayersDiffer(f"{node.name} reads layer {self.index[value][0]}")

    # The program with every layer.

    def _cache_name(self, layer: int, group: int, place: int) -> str:
        return f"cache_{2 * self.layers * group + 2 * layer + place}"

    def _target_of(self, relative_target: str, layer: int) -> str:
        return relative_target.replace(f"{self.stack_path}.#.", f"{self.stack_path}.{layer}.", 1)

    def program(self) -> torch.export.ExportedProgram:
        traced, last = self.traced, self.last
        graph = torch.fx.Graph()
        env: dict = {}
        inputs = {}  # (layer, relative) -> the placeholder
        specs = []
        old_specs = {spec.arg.name: spec for spec in traced.graph_signature.input_specs}
        placeholders = [node for node in traced.graph.nodes if node.op == "placeholder"]
        users = 0
        for number, node in enumerate(placeholders):
            group = [(node, None)]
            following = placeholders[number + 1] if number + 1 < len(placeholders) else None
            # After the last traced layer's run of inputs of one kind, the
            # later layers' runs, as a trace of every layer orders them.
            if self.owner.get(node) == last and (
                    following is None or self.owner.get(following) != last
                    or old_specs[following.name].kind != old_specs[node.name].kind):
                run = []
                for earlier in reversed(placeholders[:number + 1]):
                    if self.owner.get(earlier) != last or \
                            old_specs[earlier.name].kind != old_specs[node.name].kind:
                        break
                    run.insert(0, earlier)
                group += [(template, layer) for layer in range(last + 1, self.layers)
                          for template in run]
            for template, layer in group:
                spec = old_specs[template.name]
                if layer is None:
                    role = self.input_role.get(template)
                    # A later group's caches follow every layer's of the groups before.
                    new = graph.placeholder(self._cache_name(self.owner[template], *role[1])
                                            if role and role[0] == "cache" else template.name)
                    new.meta = copy.copy(template.meta)
                    env[template] = new
                    target = spec.target
                else:
                    kind, relative = self.input_role[template]
                    if kind == "cache":
                        name, target = self._cache_name(layer, *relative), None
                    else:
                        target = self._target_of(relative, layer)
                        if target not in self.tensors:
                            raise LayersDiffer(f"no tensor {target}")
                        name = _renamed_input(template.name, spec.target, target)
                        if name == template.name:
                            raise LayersDiffer(f"input name {template.name}")
                    new = graph.placeholder(name)
                    new.meta = copy.copy(template.meta)
                    inputs[(layer, self.input_role[template])] = new
                if spec.kind == InputKind.USER_INPUT:
                    new.meta["desc"] = _with(new.meta.get("desc"), idx=users)
                    users += 1
                elif target is not None and target != spec.target:
                    new.meta["desc"] = _with(new.meta.get("desc"), target=target)
                specs.append(InputSpec(kind=spec.kind, arg=TensorArgument(name=new.name),
                                       target=target, persistent=spec.persistent))

        copies = {layer: [] for layer in range(self.layers)}

        copied = graph.node_copy  # its meta a shallow copy of the template's

        for node in self.prefix:
            env[node] = copied(node, lambda value: env[value])
        for layer in range(TRACED_LAYERS):
            for node in self.nodes[layer]:
                env[node] = copied(node, lambda value: env[value])
                copies[layer].append(env[node])
        for layer in range(TRACED_LAYERS, self.layers):
            def argument(value, layer=layer):
                kind, where = self._relative(value, last)
                if kind == "own":
                    return copies[layer][where]
                if kind == "previous":
                    return copies[layer - 1][where]
                if kind == "input":
                    return inputs[(layer, where)]
                return env[value]

            for node in self.nodes[last]:
                new = copied(node, argument)
                new.meta["nn_module_stack"] = _renamed_stack(
                    node.meta.get("nn_module_stack"), f"{self.stack_path}.{last}",
                    f"{self.stack_path}.{layer}")
                copies[layer].append(new)
        for node in self.suffix:
            env[node] = copied(node, lambda value: copies[self.layers - 1][self.index[value][1]]
                               if self.index.get(value, (None,))[0] == last else env[value])

        outputs, output_specs = self._outputs(env, copies)
        old_output = next(node for node in traced.graph.nodes if node.op == "output")
        module = _graph_module(traced, graph, outputs, old_output)
        signature = ExportGraphSignature(input_specs=specs, output_specs=output_specs)
        state_dict, constants = {}, dict(traced.constants)
        for spec in specs:
            if spec.kind == InputKind.PARAMETER or (spec.kind == InputKind.BUFFER
                                                    and spec.persistent):
                state_dict[spec.target] = traced.state_dict.get(spec.target,
                                                                self.tensors.get(spec.target))
            elif spec.kind == InputKind.BUFFER and spec.target not in constants:
                constants[spec.target] = self.tensors[spec.target]
        program = torch.export.ExportedProgram(
            root=module, graph=module.graph, graph_signature=signature, state_dict=state_dict,
            range_constraints=dict(traced.range_constraints),
            module_call_graph=self._call_graph(), example_inputs=None, constants=constants,
            verifiers=traced.verifiers)
        program._guards_code = list(traced._guards_code)
        return program

    def _outputs(self, env, copies):
        outputs, specs = [], []
        old = next(node for node in self.traced.graph.nodes if node.op == "output").args[0]
        mutations = {}
        for value, spec in zip(old, self.traced.graph_signature.output_specs):
            if spec.kind == OutputKind.USER_INPUT_MUTATION:
                match = re.fullmatch(r"cache_(\d+)", spec.target or "")
                if not match or self.index.get(value, (None,))[0] != int(match.group(1)) // 2:
                    raise LayersDiffer(f"output {spec.target}")
                mutations[int(match.group(1))] = value
            elif spec.kind != OutputKind.USER_OUTPUT:
                raise LayersDiffer(f"output of kind {spec.kind.name}")
            elif value in self.index:
                raise LayersDiffer(f"output {value.name} of layer {self.index[value][0]}")
        if sorted(mutations) != list(range(2 * TRACED_LAYERS)):
            raise LayersDiffer(f"cache writes {sorted(mutations)}")
        for cache in range(2 * self.layers):
            layer = cache // 2
            if layer < TRACED_LAYERS:
                value = env[mutations[cache]]
            else:
                value = copies[layer][self.index[mutations[2 * self.last + cache % 2]][1]]
            outputs.append(value)
            specs.append(OutputSpec(kind=OutputKind.USER_INPUT_MUTATION,
                                    arg=TensorArgument(name=value.name), target=f"cache_{cache}"))
        for value, spec in zip(old, self.traced.graph_signature.output_specs):
            if spec.kind == OutputKind.USER_OUTPUT:
                outputs.append(env[value])
                specs.append(OutputSpec(kind=spec.kind, arg=TensorArgument(name=env[value].name),
                                        target=None))
        return outputs, specs

    def _call_graph(self) -> list:
        """The traced program's module call graph with the later layers'
        entries and the step's signature over every layer's cache."""
        from torch.utils import _pytree

        prefix = f"{self.stack_path}.{self.last}"
        template = [entry for entry in self.traced.module_call_graph
                    if entry.fqn == prefix or entry.fqn.startswith(prefix + ".")]
        in_template = {id(entry) for entry in template}
        entries = []
        for number, entry in enumerate(self.traced.module_call_graph):
            entries.append(copy.deepcopy(entry))
            following = self.traced.module_call_graph[number + 1:number + 2]
            if id(entry) in in_template and not (following and id(following[0]) in in_template):
                entries += [dataclasses.replace(copy.deepcopy(each), fqn=f"{self.stack_path}."
                                                f"{layer}{each.fqn[len(prefix):]}")
                            for layer in range(TRACED_LAYERS, self.layers) for each in template]
        root = entries[0]
        if root.fqn != "" or root.signature is None:
            raise LayersDiffer("the step's call signature")
        names = list(root.signature.forward_arg_names)
        arguments = names[:self.leading] + [f"cache_{index}" for index in
                                            range(2 * self.groups * self.layers)]
        signature = dataclasses.replace(
            root.signature, forward_arg_names=arguments,
            in_spec=_pytree.tree_flatten((tuple(arguments), {}))[1])
        entries[0] = dataclasses.replace(root, signature=signature)
        return entries


def _underscored(target: str) -> str:
    return target.replace(".", "_")


def _renamed_input(name: str, old_target: str, new_target: str) -> str:
    """A weight's placeholder ``name`` for ``new_target`` in place of
    ``old_target``: torch.export names it by its target, underscored, and
    lowercased (T5's ``SelfAttention``), where that names nothing else."""
    for old, new in ((_underscored(old_target), _underscored(new_target)),
                     (_underscored(old_target).lower(), _underscored(new_target).lower())):
        if old in name:
            return name.replace(old, new, 1)
    return name


def _with(descriptor, **fields):
    if descriptor is None or not dataclasses.is_dataclass(descriptor):
        return descriptor
    known = {field.name for field in dataclasses.fields(descriptor)}
    return dataclasses.replace(descriptor, **{key: value for key, value in fields.items()
                                              if key in known})


def _renamed_stack(stack, old: str, new: str):
    if not stack:
        return stack
    renamed = {}
    for key, (path, kind) in stack.items():
        if path == old or path.startswith(old + "."):
            path = new + path[len(old):]
            key = key.replace(old, new, 1)
        renamed[key] = (path, kind)
    return renamed
