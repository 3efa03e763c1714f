"""Inputs a model updates in place, written into the caller's buffers (``BackendOptions(in_place_writes=True)``).

Up to the IREE input a function returns the new value of every input the
model updates in place (``frontend/program_signature.output_roles``: the writes come first
among its results), so that anyshape's passes see value semantics only. For
IREE the function is then given torch's own form of an in-place update, the
one torch-mlir's importer emits for a mutated user input: the argument
becomes a mutable ``!torch.tensor``, read once with ``torch.copy.to_vtensor``,
and its new value is stored with ``torch.overwrite.tensor.contents`` instead
of returned. IREE's torch input then ties the new value to the argument's
buffer (``hal.tensor.alias``): the producer of the new value (a
``slice_scatter`` of the new rows, ``flow.tensor.update``) writes into the
caller's buffer, and the call writes only the rows that changed.

IREE 3.13 also puts the aliased value into the function's closing
``hal.tensor.barrier``, which its stream allocation turns into a copy of the
whole buffer (iree-org/iree#19735): a key/value cache of capacity C was copied
every step, C rows, not the one new row. ``drop_aliased_values_from_barriers``
(run on the flow-phase IR between iree-compile's two runs) takes the aliased
values out of the barrier. The barrier still joins every result, and the
buffer's writes precede them: the function's results are computed from the
updated value (the step attends over the cache it wrote).
"""

from __future__ import annotations

from pathlib import Path

from anyshape.mlir import iree_bindings, rewrite_with_iree_bindings
from anyshape.stages import Workaround
from anyshape.iree.torch_ir_builders import matches

_TO_VTENSOR = "torch.copy.to_vtensor"
_OVERWRITE = "torch.overwrite.tensor.contents"
_STATIC_INFO_CAST = "torch.tensor_static_info_cast"


def write_inputs_in_place(module, written: dict[str, list[int]]) -> int:
    """In each ``func.func`` named in ``written`` (function name -> the input
    positions its first results are the new values of, in order), those
    inputs become mutable and are overwritten; the results go. ``module`` is
    an ``iree.compiler.ir`` module. Returns how many inputs were rewritten."""
    ir = iree_bindings()
    count = 0
    for op in module.body.operations:
        function = op.operation
        if function.name != "func.func":
            continue
        name = ir.StringAttr(function.attributes["sym_name"]).value
        positions = written.get(name)
        if positions:
            _rewrite_function(ir, function, name, positions)
            count += len(positions)
    return count


def write_inputs_in_place_file(in_file: Path, out_file: Path, written: dict[str, list[int]],
                               text_file: Path | None = None) -> int:
    """``write_inputs_in_place`` from ``in_file`` (IREE-input IR, bytecode or
    text) to ``out_file`` (bytecode), and to ``text_file`` as text when given."""
    def rewrite(ir, module) -> int:
        count = write_inputs_in_place(module, written)
        if not module.operation.verify():
            raise ValueError("the module with inputs written in place does not verify")
        return count

    return rewrite_with_iree_bindings(in_file, out_file, text_file, rewrite)


def _mutable_type(ir, vtensor_type):
    text = str(vtensor_type)
    if not text.startswith("!torch.vtensor<"):
        raise ValueError(f"expected a !torch.vtensor input to update in place, got {text}")
    return ir.Type.parse("!torch.tensor<" + text[len("!torch.vtensor<"):])


def _rewrite_function(ir, function, name: str, positions: list[int]) -> None:
    block = function.regions[0].blocks[0]
    returned = block.operations[len(block.operations) - 1]
    if returned.name != "func.return" or len(returned.operands) < len(positions):
        raise ValueError(f"@{name}: expected a func.return of the {len(positions)} updated "
                         f"inputs' new values first")
    arguments = list(block.arguments)
    if any(p < 0 or p >= len(arguments) for p in positions) or \
            len(set(positions)) != len(positions):
        raise ValueError(f"@{name}: input positions {positions} do not fit its "
                         f"{len(arguments)} arguments")
    values = {}
    with ir.InsertionPoint(block.operations[0]), function.location:
        for position in positions:
            argument = arguments[position]
            value_type = argument.type
            argument.set_type(_mutable_type(ir, value_type))
            read = ir.Operation.create(_TO_VTENSOR, results=[value_type], operands=[argument])
            argument.replace_all_uses_except(read.results[0], read)
            values[position] = value_type
    new_values = list(returned.operands)[:len(positions)]
    kept = list(returned.operands)[len(positions):]
    with ir.InsertionPoint(returned), returned.location:
        for position, value in zip(positions, new_values):
            if value.type != values[position]:
                value = ir.Operation.create(_STATIC_INFO_CAST, results=[values[position]],
                                            operands=[value]).results[0]
            ir.Operation.create(_OVERWRITE, results=[], operands=[value, arguments[position]])
        ir.Operation.create("func.return", results=[], operands=kept)
    returned.erase()
    old_type = ir.FunctionType(ir.TypeAttr(function.attributes["function_type"]).value)
    function.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
        [argument.type for argument in arguments], list(old_type.results)[len(positions):]))
    if "res_attrs" in function.attributes:
        kept_attrs = list(ir.ArrayAttr(function.attributes["res_attrs"]))[len(positions):]
        function.attributes["res_attrs"] = ir.ArrayAttr.get(kept_attrs)


def drop_aliased_values_from_barriers(ir, module) -> int:
    """Flow-phase IR: each ``hal.tensor.barrier`` stops joining a value that a
    ``hal.tensor.alias`` produced, where another value it joins was computed
    from that alias's source (so it is ready only after the write: module
    docstring). An alias nothing else in the barrier depends on stays, with
    its copy: without it the fence could signal before the write is done.
    Returns how many values were taken out."""
    barriers = [op for op, _ in matches(ir, module, ("hal.tensor.barrier",), lambda op: True)]
    dropped = 0
    for barrier in barriers:
        sources = list(barrier.operands)[:-1]  # the last operand is the signal fence
        kept = [i for i, value in enumerate(sources) if not _is_alias(ir, value)]
        reached = _computed_into(ir, [sources[k] for k in kept])
        aliased = [i for i in range(len(sources)) if i not in kept and
                   not list(barrier.results[i].uses) and
                   sources[i].owner.operands[0] in reached]
        if not aliased:
            continue
        kept = [i for i in range(len(sources)) if i not in aliased]
        with ir.InsertionPoint(barrier), barrier.location:
            replacement = ir.Operation.create(
                "hal.tensor.barrier", results=[barrier.results[i].type for i in kept],
                operands=[sources[i] for i in kept] + [barrier.operands[len(sources)]],
                attributes={a.name: a.attr for a in barrier.attributes})
        for new_index, i in enumerate(kept):
            barrier.results[i].replace_all_uses_with(replacement.results[new_index])
        barrier.erase()
        dropped += len(aliased)
    return dropped


def _is_alias(ir, value) -> bool:
    return not isinstance(value.owner, ir.Block) and value.owner.name == "hal.tensor.alias"


def _computed_into(ir, values) -> set:
    """``values`` and every value they are computed from, through the ops of
    their function (operands, not nested regions): one walk for all the
    aliases a barrier joins."""
    reached, seen_ops, pending = set(), set(), list(values)
    while pending:
        current = pending.pop()
        reached.add(current)
        if isinstance(current.owner, ir.Block):
            continue
        op = current.owner.operation
        if op in seen_ops:
            continue
        seen_ops.add(op)
        pending.extend(op.operands)
    return reached


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys
    import tempfile

    parser = argparse.ArgumentParser(
        prog="python -m anyshape.iree.in_place_writes",
        description="Write a function's updated inputs in place (the iree-input stage's last "
                    "rewrite): its first results become overwrites of those inputs")
    parser.add_argument("input", help="torch-dialect IR as IREE is given it, text or bytecode")
    parser.add_argument("--written", action="append", required=True, metavar="FUNC=I,J",
                        help="a function and the positions of the inputs its first results "
                             "are the new values of, in order")
    parser.add_argument("-o", "--output", help="bytecode to write (default: text on stdout)")
    args = parser.parse_args(argv)
    written = {}
    for item in args.written:
        name, _, positions = item.partition("=")
        written[name] = [int(p) for p in positions.split(",") if p]
    try:
        if args.output is not None:
            write_inputs_in_place_file(Path(args.input), Path(args.output), written)
        else:
            with tempfile.TemporaryDirectory(prefix="anyshape-in-place-") as scratch:
                text = Path(scratch) / "out.mlir"
                write_inputs_in_place_file(Path(args.input), Path(scratch) / "out.mlirbc",
                                           written, text)
                sys.stdout.write(text.read_text())
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


WORKAROUNDS = (
    Workaround(
        name='aliased_values_out_of_barriers', stage='iree-input',
        where='drop_aliased_values_from_barriers (between the flow phase and the rest)',
        upstream="IREE 3.13's torch input puts each input updated in place into the "
                 "function's closing hal.tensor.barrier, and stream allocation turns that "
                 "barrier into a copy of the whole buffer (iree-org/iree#19735, 'Convert "
                 "barriers into copies during allocation'): a cache of capacity C was copied "
                 "every decode step. The aliased values are taken out of the barrier.",
        guard='test/python/generation/test_generate.py::test_a_step_writes_only_its_new_rows',
        remove_when="(inferred) when IREE's stream allocation aliases a barrier's aliased "
                    "value instead of copying it"),
)
