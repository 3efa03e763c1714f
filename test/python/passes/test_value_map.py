"""Facts kept per ``ir.Value`` die with the value (``torch_ir.values.ValueMap``).

The bindings compare values by the address of their storage, and an erased
op's address is soon given to a new op: a plain dict handed that new value the
erased one's dims (issue 36's hunt for results that depend on memory)."""

import pytest

from anyshape.mlir import ir, torch_ops
from anyshape.dialects import new_context
from anyshape.passes.pass_api import apply_patterns
from anyshape.passes.torch_ir.shape_analysis import ShapeAnalysis
from anyshape.passes.torch_ir.values import IDENTITY, ValueMap, forget_identities

SOURCE = """
func.func @f(%arg0: !torch.vtensor<[?,?],f32>) -> !torch.vtensor<[?,?],f32> {
  %0 = torch.aten.neg %arg0 : !torch.vtensor<[?,?],f32> -> !torch.vtensor<[?,?],f32>
  %1 = torch.aten.neg %0 : !torch.vtensor<[?,?],f32> -> !torch.vtensor<[?,?],f32>
  return %1 : !torch.vtensor<[?,?],f32>
}
"""


def _cancel_double_negation(op, rewriter) -> bool:
    producer = op.operands[0].owner
    if isinstance(producer, ir.Block) or producer.name != "torch.aten.neg":
        return False
    rewriter.replace_op(op, [producer.operands[0]])
    return True


def test_an_erased_values_dims_are_not_a_new_values():
    with new_context(), ir.Location.unknown():
        module = ir.Module.parse(SOURCE)
        func = module.body.operations[0].operation
        analysis = ShapeAnalysis(func)
        block = func.regions[0].blocks[0]
        erased = list(block.operations)[1].results[0]  # %1, which the pattern replaces
        tensor_type = erased.type  # read now: after the erasure only its address is valid
        analysis.dims[erased] = ["not", "these"]
        apply_patterns(func, [(torch_ops.AtenNegOp, _cancel_double_negation)])
        reused = False
        with ir.InsertionPoint.at_block_begin(block):
            for _ in range(64):
                new = torch_ops.AtenNegOp(tensor_type, block.arguments[0]).result
                reused |= new == erased
                assert analysis.dims.get(new) != ["not", "these"]
        if not reused:
            pytest.skip("no new op took the erased op's address here: nothing to tell apart")


def test_value_map_entries_stay_with_their_op_and_leave_no_trace():
    with new_context(), ir.Location.unknown():
        module = ir.Module.parse(SOURCE)
        block = module.body.operations[0].operation.regions[0].blocks[0]
        first, second = (op.results[0] for op in list(block.operations)[:2])
        facts = ValueMap()
        facts[block.arguments[0]], facts[first], facts[second] = "argument", "first", "second"
        second.owner.operation.operands[0] = block.arguments[0]  # a rewrite of its operand
        assert (facts[block.arguments[0]], facts[first], facts[second], len(facts)) == \
            ("argument", "first", "second", 3)
        forget_identities(module.operation)
        assert IDENTITY not in str(module)
