"""Rewrites of IREE's own intermediate IR that keep IREE 3.13 from miscompiling.

Workload deduplication. When a dispatch's workload lists the same dynamic
size twice behind a different one (``[B, L, L]``: the score matrix of attention
with a dynamic batch and sequence length), IREE's ``FoldUniformOperands``
stream pass folds the duplicate away but renumbers its workload ordinal to 0,
so inside the executable the second ``L`` reads ``B``. Tiles past the first
are then never computed, silently: a softmax over ``[B, L, L]`` or a packed
matmul operand is wrong once ``L`` spans more tiles than ``B``. Giving every
repeated workload value its own SSA value (through ``util.optimization_barrier``)
at the flow level leaves nothing to fold; the values are the same at run
time, so the result is exact.
"""

from __future__ import annotations

from pathlib import Path

from anyshape.mlir import iree_bindings


def untie_duplicate_workloads(flow_file: Path, out_file: Path) -> int:
    """Rewrite ``flow_file`` (flow-phase IR) into ``out_file``; returns how many
    workload operands were made distinct."""
    ir = iree_bindings()
    with ir.Context():
        module = ir.Module.parse(Path(flow_file).read_bytes())
        count = 0

        def visit(op):
            nonlocal count
            if op.name != "flow.dispatch":
                return ir.WalkResult.ADVANCE
            workload_size = ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"])[0]
            seen = []
            for i in range(workload_size):
                value = op.operands[i]
                if any(value == other for other in seen):
                    with ir.InsertionPoint(op), op.location:
                        distinct = ir.Operation.create("util.optimization_barrier",
                                                       results=[value.type], operands=[value])
                    op.operands[i] = distinct.result
                    count += 1
                else:
                    seen.append(value)
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit)
        with open(out_file, "wb") as f:
            module.operation.write_bytecode(f)
    return count
