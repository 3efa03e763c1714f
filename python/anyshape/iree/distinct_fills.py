"""Give every in-place write into a filled tensor a fill of its own.

IREE 3.13 (plain stack too) miscompiles two in-place ops (a scatter, an
index_fill, a sort) that write into fills of one shape: ``zeros_like(x)``
twice, each scattered into. Stream first gives each writer its own copy of
the fill (it clones operand-free producers to their consumers), then a later
CSE merges those identical dispatches back into one value after copy-on-write
was materialized, so both writers write one buffer and the second result is
never written (beam's group-limited router, ``zeros_like(scores).scatter_(1,
groups, 1)`` once per MoE layer, was 0.31 off eager; the same bug gave MoE
routers' two sorts of one shape wrong indices, ``packed_sort_keys``).

At the flow level, each tied (in-place) operand whose producer is a dispatch
with no tensor operands (a fill, an iota), up to reshapes, gets its own copy
of that dispatch, calling its own copy of the executable: dispatches of two
executables are not identical, so no CSE merges them. A fill is cheap, and
each writer needed a buffer of its own anyway.
"""

from __future__ import annotations

from anyshape.stages import Workaround

# Views between a producer and the in-place op, cloned along with it.
_VIEWS = ("flow.tensor.reshape", "flow.tensor.bitcast")


def _segments(ir, op) -> tuple[int, int]:
    """(start, length) of a ``flow.dispatch``'s arguments among its operands."""
    sizes = ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"])
    return sizes[0], sizes[1]


def _tied_arguments(ir, op) -> list[int]:
    """The argument positions a ``flow.dispatch`` writes in place."""
    tied = op.attributes["tied_operands"]
    return [ir.IntegerAttr(t).value for t in tied if ir.IntegerAttr(t).value >= 0]


def _operand_free_producer(ir, value):
    """(producer dispatch, views from it to ``value``) when ``value`` is, up to
    reshapes, a result of a dispatch that reads no tensor; else None."""
    views = []
    while not isinstance(value.owner, ir.Block):
        op = value.owner
        if op.name in _VIEWS:
            views.append(op)
            value = op.operands[0]
            continue
        if op.name != "flow.dispatch":
            return None
        start, length = _segments(ir, op)
        if any(isinstance(op.operands[i].type, ir.RankedTensorType)
               for i in range(start, start + length)):
            return None
        return op, views[::-1]
    return None


class _Executables:
    """Copies of executables under fresh, deterministic names."""

    def __init__(self, ir, module):
        self.ir = ir
        self.by_name = {}
        for op in module.body.operations:
            if op.operation.name == "flow.executable":
                self.by_name[ir.StringAttr(op.attributes["sym_name"]).value] = op.operation
        self.taken = set(self.by_name)
        self.last_copy = {}  # copies follow their original, in order

    def copy(self, entry_point):
        """A copy of ``entry_point``'s executable (its export and function
        renamed too); the new entry point."""
        ir = self.ir
        executable_name = entry_point.value[0]
        export_name = entry_point.value[1]
        original = self.by_name[executable_name]
        suffix = 1
        while f"{executable_name}_fill{suffix}" in self.taken:
            suffix += 1
        new_executable = f"{executable_name}_fill{suffix}"
        new_export = f"{export_name}_fill{suffix}"
        self.taken.add(new_executable)
        with ir.InsertionPoint.after(self.last_copy.get(executable_name, original)):
            clone = original.clone()
        self.last_copy[executable_name] = clone
        clone.attributes["sym_name"] = ir.StringAttr.get(new_executable)
        for op in clone.regions[0].blocks[0].operations:
            if op.operation.name == "flow.executable.export" and \
                    ir.StringAttr(op.attributes["sym_name"]).value == export_name:
                function = ir.FlatSymbolRefAttr(op.attributes["function_ref"]).value \
                    if "function_ref" in op.attributes else export_name
                op.attributes["sym_name"] = ir.StringAttr.get(new_export)
                op.attributes["function_ref"] = ir.FlatSymbolRefAttr.get(new_export)
            elif op.operation.name == "builtin.module":
                inner = op
        for op in inner.regions[0].blocks[0].operations:
            if op.operation.name == "func.func" and \
                    ir.StringAttr(op.attributes["sym_name"]).value == function:
                op.attributes["sym_name"] = ir.StringAttr.get(new_export)
        return ir.SymbolRefAttr.get([new_executable, new_export])


def give_in_place_writes_their_own_fills(ir, module) -> int:
    """Rewrite ``module`` (flow-phase IR) as the module docstring says; the
    number of in-place writes given a fill of their own."""
    writers = []

    def visit(op):
        if op.name == "flow.dispatch" and _tied_arguments(ir, op):
            writers.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    executables = _Executables(ir, module)
    given = 0
    replaced, copied = [], {}
    for writer in writers:
        start, _ = _segments(ir, writer)
        for position in _tied_arguments(ir, writer):
            operand = writer.operands[start + position]
            found = _operand_free_producer(ir, operand)
            if found is None:
                continue
            producer, views = found
            if all(len(list(result.uses)) <= 1 for op in (producer, *views)
                   for result in op.results):
                continue  # the writer's alone: nothing to merge it with
            entry_points = producer.attributes["entry_points"]
            if len(entry_points) != 1:
                continue
            with ir.InsertionPoint(writer):
                fill = producer.clone()
                fill.attributes["entry_points"] = ir.ArrayAttr.get(
                    [executables.copy(ir.SymbolRefAttr(entry_points[0]))])
                value = fill.results[_result_number(producer, views, operand)]
                for view in views:
                    view = view.clone()
                    view.operands[0] = value
                    value = view.results[0]
            writer.operands[start + position] = value
            given += 1
            replaced.extend(op for op in (*views[::-1], producer) if op not in replaced)
            copied.setdefault(ir.SymbolRefAttr(entry_points[0]).value[0])
    _erase_replaced(ir, module, replaced, {name: executables.by_name[name] for name in copied})
    return given


def _result_number(producer, views, operand) -> int:
    first = views[0].operands[0] if views else operand
    for number, result in enumerate(producer.results):
        if result == first:
            return number
    raise AssertionError("the producer does not compute the operand")


def _erase_replaced(ir, module, replaced, executables) -> None:
    """Drop the fills (and views) whose every use got a copy, then the
    executables no dispatch calls any more."""
    for op in replaced:  # each chain listed from the writer's end back to its fill
        if all(not list(result.uses) for result in op.results):
            op.erase()
    called = set()

    def calls(op):
        if op.name == "flow.dispatch":
            for entry in op.attributes["entry_points"]:
                called.add(ir.SymbolRefAttr(entry).value[0])
        return ir.WalkResult.ADVANCE

    module.operation.walk(calls)
    for name in executables:
        if name not in called:
            executables[name].erase()


WORKAROUNDS = (Workaround(
    name="in_place_writes_get_their_own_fills", stage="iree-input",
    where="give_in_place_writes_their_own_fills, run by iree.workarounds.rewrite_flow",
    upstream="IREE 3.13 (plain stack too): two in-place ops (scatter, index_fill, scatter_add) "
             "into fills of one shape write one buffer: stream clones the fill dispatch to its "
             "consumers, and a CSE after copy-on-write merges the copies back, so the second "
             "result is never written (beam with batched_mm experts 0.31 off eager).",
    guard=("test/python/iree/test_in_place_writes.py::test_in_place_writes_into_zeros_of_one_shape_as_eager",
           "test/iree/workarounds.mlir"),
    remove_when="when two in-place writes into zeros_like of one shape match eager with the "
                "rewrite off (the guard passes without it)"),)
