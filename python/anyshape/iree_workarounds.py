"""Rewrites of the IR given to IREE that keep IREE 3.13 from miscompiling it,
failing to compile it, or compiling it into slow code.

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

Products over two dynamic dims packed apart from their producer. With data
tiling, when a product's operand is computed and both its last two dims are
dynamic (attention's probabilities ``[heads, L, L]``, softmax or not), IREE
3.13 packs it for the product inside its producer's dispatch: the row
reduction and exponentials of ``exp(S - max(S)) @ V`` (attention once
anyshape's softmax rewrites have run), or the unpacking and scaling of
another product (``(y @ x^T * c) @ y``). That dispatch's CPU codegen then
fails ("'affine.delinearize_index' op no basis element may be statically
non-positive"; the form of MLIR's bug llvm/llvm-project#205288,
``targets.py``). A roberta-base classifier with its batch fixed at 1 fell
back to no data tiling and ran 2-3x slower than eager. An
``iree_tensor_ext.compute_barrier.start`` on such an operand keeps the
packing in a dispatch of its own, as a reshape that merges a dynamic batch
with the heads already did for attention; IREE's dispatch creation removes
it once dispatches are formed, so nothing of it is left at run time and the
values are unchanged. (A ``util.optimization_barrier`` separated the dispatches too, but
it stays in the program and splits its execution: roberta-base at L = 32
spent about 10 ms more per call outside its dispatches.)

Products whose operand is an elementwise function of another product's
result, with one dynamic dim (the GELU between a feed-forward block's two
linears once the batch is fixed: ``[1, L, 3072]``). IREE 3.13 then fuses the
first product's unpacking, the elementwise ops and the second product's
packing into one dispatch, and its code for that dispatch with a dynamic row
count is slow: every column of an 8x8 tile goes through a stack buffer and
back with a scalar loop. Roberta-base's 11 such dispatches took 15.1 ms per
call at L = 128, against 5.0 ms in the static build. The same barrier keeps
that packing apart: in the same profile the unpacking with the GELU then
took 4.9 ms, and the packing joined the separate packs (66 in all, 5.1 ms;
``bench/profile_dispatches.py``; the whole call is in the README). With the
batch dynamic too, a reshape of the two dynamic dims keeps them apart
already (MLIR moves a pack across a reshape only where the dims are
statically divisible by its tiles), so operands of more than one dynamic
dim are left as they are; there the rule finds only the feed-forward
block of the slice-hoisted last layer, one row per sequence (``[B, 1, H]``).
"""

from __future__ import annotations

from pathlib import Path

from anyshape.dialects import builtin_tensor_text, vtensor_shape
from anyshape.mlir import iree_bindings
from anyshape.passes.torch_ir import ELEMENTWISE

# Products, and the operands of each that IREE's data tiling packs (not a
# linear's bias or addmm's added term).
_PACKED_OPERANDS = {"torch.aten.bmm": (0, 1), "torch.aten.matmul": (0, 1), "torch.aten.mm": (0, 1),
                    "torch.aten.linear": (0, 1), "torch.aten.addmm": (1, 2)}
# Ops that only reshape. Between a packing and a producer of one dynamic dim
# (the elementwise rule below) IREE folds them away or moves the packing
# across them, so they do not keep the two apart.
_RESHAPES = ("torch.aten.flatten.using_ints", "torch.aten.unflatten.int", "torch.aten.view",
             "torch.aten.reshape", "torch.aten._unsafe_view")
# Dispatch creation does not fuse across it and removes it after; takes the
# dynamic sizes of its value (it is shape-aware).
_BARRIER = "iree_tensor_ext.compute_barrier.start"


def _packs_in_producer(ir, value, tensor_type) -> bool:
    """A computed operand whose last two dims are both dynamic, or one that
    ``_elementwise_of_product`` computes."""
    if isinstance(value.owner, ir.Block):
        return False
    if tensor_type.rank >= 2 and tensor_type.is_dynamic_dim(tensor_type.rank - 1) \
            and tensor_type.is_dynamic_dim(tensor_type.rank - 2):
        return True
    return _elementwise_of_product(ir, value)


def _producer(ir, value):
    """The op computing ``value``, looking through reshapes; None for an argument."""
    while not isinstance(value.owner, ir.Block):
        op = value.owner
        if op.name not in _RESHAPES:
            return op
        value = op.operands[0]
    return None


def _one_dynamic_dim(value) -> bool:
    shape = vtensor_shape(value.type)
    return shape is not None and shape[0].count(None) == 1


def _elementwise_of_product(ir, value) -> bool:
    """``value`` is, up to reshapes, the result of elementwise ops applied to a
    product's result, and that result has one dynamic dim before any reshape:
    IREE 3.13 would fuse the product's unpacking, those ops and the packing
    into one dispatch. With two dynamic dims (a dynamic batch and length)
    their reshape keeps the packing apart already; with none IREE's static
    code for the fused dispatch is fast."""
    op = _producer(ir, value)
    if op is None or op.name not in ELEMENTWISE or not _one_dynamic_dim(op.results[0]):
        return False
    pending, seen = [op], [op]
    while pending:
        op = pending.pop()
        for operand in op.operands:
            producer = _producer(ir, operand)
            if producer is None:
                continue
            if producer.name in _PACKED_OPERANDS:
                return True
            if producer.name in ELEMENTWISE and not any(producer == s for s in seen):
                seen.append(producer)
                pending.append(producer)
    return False


def separate_dynamic_operand_packing(in_file: Path, out_file: Path,
                                     text_file: Path | None = None) -> int:
    """Rewrite ``in_file`` (torch-dialect IR, the iree-input stage) into
    ``out_file`` (bytecode; ``text_file`` as text when given), with a compute
    barrier between each product and a computed operand that IREE 3.13 must
    pack on its own (``_packs_in_producer``). Returns how many operands got
    one."""
    ir = iree_bindings()
    with ir.Context():
        module = ir.Module.parse(Path(in_file).read_bytes())
        index = ir.IndexType.get()
        barriers = []  # (a product's operand, its value behind the barrier)

        def behind_barrier(value, before):
            for seen, separated in barriers:
                if seen == value:
                    return separated
            tensor_text = builtin_tensor_text(value.type)
            if tensor_text is None:
                return None
            tensor_type = ir.RankedTensorType(ir.Type.parse(tensor_text))
            if not _packs_in_producer(ir, value, tensor_type):
                return None
            with ir.InsertionPoint(before), before.location:
                builtin = ir.Operation.create("torch_c.to_builtin_tensor", results=[tensor_type],
                                              operands=[value]).result
                sizes = []
                for axis in range(tensor_type.rank):
                    if tensor_type.is_dynamic_dim(axis):
                        axis_value = ir.Operation.create(
                            "arith.constant", results=[index],
                            attributes={"value": ir.IntegerAttr.get(index, axis)}).result
                        sizes.append(ir.Operation.create("tensor.dim", results=[index],
                                                         operands=[builtin, axis_value]).result)
                kept = ir.Operation.create(_BARRIER, results=[tensor_type],
                                           operands=[builtin, *sizes]).result
                separated = ir.Operation.create("torch_c.from_builtin_tensor",
                                                results=[value.type], operands=[kept]).result
            barriers.append((value, separated))
            return separated

        def visit(op):
            for i in _PACKED_OPERANDS.get(op.name, ()):
                separated = behind_barrier(op.operands[i], op)
                if separated is not None:
                    op.operands[i] = separated
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit)
        with open(out_file, "wb") as f:
            module.operation.write_bytecode(f)
        if text_file is not None:
            with open(text_file, "w") as f:
                module.operation.print(file=f)
    return len(barriers)


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
