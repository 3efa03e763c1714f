"""Passes that exist to test the pass infrastructure (as upstream MLIR's test passes do).

Loaded with ``anyshape-opt --load-passes=test/lib/test_passes.py`` and
imported by the pytest suite; never part of the product pipeline.
"""

import dataclasses

from anyshape.mlir import ir
from anyshape.passes import ModulePass, PassFailure, apply_patterns, register


def _fold_double_negation(op, rewriter) -> bool:
    source = op.operands[0]
    producer = source.owner
    if not isinstance(producer, ir.OpView) or producer.operation.name != "torch.aten.neg":
        return False
    rewriter.replace_op(op, [producer.operands[0]])
    return True


@register
@dataclasses.dataclass
class TestFoldDoubleNegation(ModulePass):
    """neg(neg(x)) -> x, through the pattern adapter and the greedy driver."""

    argument = "anyshape-test-fold-double-neg"
    description = "Test pass: rewrite torch.aten.neg(torch.aten.neg(x)) to x"

    def apply(self, module_op):
        apply_patterns(module_op, [("torch.aten.neg", _fold_double_negation)])


@register
@dataclasses.dataclass
class TestFailOnOp(ModulePass):
    """Fails at the first op named ``op_name``: exercises failure reporting."""

    argument = "anyshape-test-fail-on"
    description = "Test pass: fail with a diagnostic at the first op named op-name"
    op_name: str = "torch.aten.neg"

    def apply(self, module_op):
        found = []

        def visit(op):
            if op.name == self.op_name and not found:
                found.append(op)
            return ir.WalkResult.ADVANCE

        module_op.walk(visit)
        if found:
            raise PassFailure(f"found {self.op_name}", found[0].location)


@register
@dataclasses.dataclass
class TestDropOp(ModulePass):
    """Replaces every ``op_name`` op by its first operand: a wrong rewrite (for an op
    that is not the identity), which translation validation must catch."""

    argument = "anyshape-test-drop-op"
    description = "Test pass: replace each op named op-name by its first operand (wrong on purpose)"
    op_name: str = "torch.aten.tanh"

    def apply(self, module_op):
        def drop(op, rewriter) -> bool:
            rewriter.replace_op(op, [op.operands[0]])
            return True

        apply_patterns(module_op, [(self.op_name, drop)])
