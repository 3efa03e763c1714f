"""Give every repeat of a value in a dispatch's workload an SSA value of its own.

When a dispatch's workload lists one dynamic size twice behind a different
one (``[B, L, L]``: attention's scores with a dynamic batch and length), IREE
3.13's ``FoldUniformOperands`` stream pass folds the repeat away but
renumbers its workload ordinal to 0, so inside the executable the second
``L`` reads ``B`` and tiles past the first are silently never computed.
The n-th repeat of a value reads the value's n-th copy through
``util.optimization_barrier``, which nothing folds; at run time the copies
are the value itself, so results are exact.

Where the copies go decides how IREE schedules the call. A barrier is not
work IREE's streams can carry, so one between two dispatches ends the
execution region there: placed before each dispatch, the copies split
roberta-base's call into 34 command buffers, each with its own submission,
fences and transient allocations. So each value's copies are made once and
shared by every dispatch, placed right after the value is defined, and the
value's own computation (index arithmetic, pure) is moved up to just below
its operands' definitions first, so that the copies of a size computed from
the inputs' dims sit ahead of every dispatch.
"""

from __future__ import annotations

from anyshape.iree.torch_ir_builders import matches

# Pure ops on sizes that may move up within their block: they read only
# their operands, and a block runs all of its ops or none.
_MOVABLE_PREFIXES = ("arith.", "affine.apply", "affine.min", "affine.max")
_BARRIER = "util.optimization_barrier"


def untie_repeated_workloads(ir, module) -> int:
    """Rewrite every ``flow.dispatch`` in ``module`` (flow-phase IR) whose
    workload repeats a value; the number of workload operands replaced."""
    dispatches = [op for op, _ in matches(ir, module, ("flow.dispatch",), lambda op: True)]
    copies: list[tuple[object, list]] = []  # (value, its copies), in the order first met
    untied = 0
    for dispatch in dispatches:
        workload_size = ir.DenseI32ArrayAttr(dispatch.attributes["operandSegmentSizes"])[0]
        seen = []
        for i in range(workload_size):
            value = dispatch.operands[i]
            repeats = sum(value == other for other in seen)
            seen.append(value)
            if repeats:
                dispatch.operands[i] = _copy(ir, copies, value, repeats)
                untied += 1
    return untied


def _copy(ir, copies, value, nth):
    """The ``nth`` (1-based) copy of ``value``, made where none is yet."""
    made = next((made for original, made in copies if original == value), None)
    if made is None:
        made = []
        copies.append((value, made))
        if not isinstance(value.owner, ir.Block):
            _move_up(ir, value.owner)
    owner = value.owner
    defined_by_op = not isinstance(owner, ir.Block)
    while len(made) < nth:
        # Created before the block's first op or the definition, then moved
        # after the definition or the last copy (no insertion point "after").
        with ir.InsertionPoint(owner if defined_by_op else owner.operations[0]), value.location:
            barrier = ir.Operation.create(_BARRIER, results=[value.type], operands=[value])
        if made:
            barrier.move_after(made[-1].owner)
        elif defined_by_op:
            barrier.move_after(owner)
        made.append(barrier.result)
    return made[nth - 1]


def _movable(op) -> bool:
    return op.name.startswith(_MOVABLE_PREFIXES) and len(op.regions) == 0


def _move_up(ir, op) -> None:
    """Move ``op``, when it is pure size arithmetic, and the same arithmetic it
    reads in its block, up to just below the last of its operands' definitions
    there (the block's start when none is in it)."""
    op = op.operation
    if not _movable(op):
        return
    block = op.block
    for operand in op.operands:
        producer = operand.owner
        if not isinstance(producer, ir.Block) and producer.operation.block == block:
            _move_up(ir, producer)
    ops = list(block.operations)
    latest = -1
    for operand in op.operands:
        producer = operand.owner
        if isinstance(producer, ir.Block) or producer.operation.block != block:
            continue
        latest = max(latest, next(i for i, other in enumerate(ops)
                                  if other == producer.operation))
    if latest < 0:
        if ops[0] != op:
            op.move_before(ops[0])
    elif ops[latest + 1] != op:
        op.move_after(ops[latest])
