"""Rewrites of the IR given to IREE that keep IREE 3.13 from miscompiling it,
failing to compile it, or compiling it into slow code: distinct SSA values for
repeated workload sizes (IREE's FoldUniformOperands renumbers them), a
compute barrier between a product and an operand IREE would pack inside its
producer's dispatch (llvm/llvm-project#205288's form; guarded by
test_data_tiling.py::test_packing_barrier_is_still_needed), float64 math IREE's
CPU code lacks computed in float32, integer divisions in dispatches kept from
dividing by 0. Why each, with figures: docs/iree-notes.md. Each runs alone on a
file (``main``), which test/iree/workarounds.mlir checks.
Remove each when IREE > 3.13 compiles the original form correctly and as fast.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

from anyshape.dialects import builtin_tensor_text, vtensor_shape
from anyshape.iree.distinct_fills import give_in_place_writes_their_own_fills
from anyshape.iree.distinct_workloads import untie_repeated_workloads
from anyshape.iree.in_place_writes import drop_aliased_values_from_barriers
from anyshape.iree.shared_initializers import share_identical_initializers
from anyshape.mlir import (iree_bindings, operations_in, rewrite_with_iree_bindings,
                           write_bytecode)
from anyshape.passes.torch_ir.ops import ELEMENTWISE
from anyshape.stages import Workaround

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
        module = ir.Module.parseFile(str(in_file))
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
            separated = _barrier_before(ir, value, tensor_type, before)
            barriers.append((value, separated))
            return separated

        def visit(op):
            for i in _PACKED_OPERANDS.get(op.name, ()):
                separated = behind_barrier(op.operands[i], op)
                if separated is not None:
                    op.operands[i] = separated
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit)
        write_bytecode(module, out_file)
        if text_file is not None:
            with open(text_file, "w") as f:
                module.operation.print(file=f)
    return len(barriers)


def _barrier_before(ir, value, tensor_type, before):
    """``value`` behind a compute barrier (``_BARRIER``) inserted before ``before``."""
    index = ir.IndexType.get()
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
        return ir.Operation.create("torch_c.from_builtin_tensor", results=[value.type],
                                   operands=[kept]).result


# Scatters that add into their target, and where their index tensors and
# values are among the operands (index_put's indices are one list operand).
_ACCUMULATING_SCATTERS = {"torch.aten.index_put": (1, 2), "torch.aten.index_put.hacked_twin": (1, 2),
                          "torch.aten._index_put_impl": (1, 2), "torch.aten.scatter_add": (2, 3)}


def has_accumulating_scatters(module) -> bool:
    """Whether ``module`` (either bindings') has an op of ``_ACCUMULATING_SCATTERS``."""
    return any(op.name in _ACCUMULATING_SCATTERS for op in operations_in(module.operation))


def separate_accumulated_scatter_operands(in_file: Path, out_file: Path,
                                          text_file: Path | None = None) -> int:
    """Rewrite ``in_file`` (torch-dialect IR) into ``out_file`` with a compute
    barrier between each accumulating scatter (``index_add``, ``index_put``
    with ``accumulate=True``, ``scatter_add``) and each of its index and value
    tensors that is computed and has a dynamic dim. IREE 3.13 fuses their
    producers into the scatter's dispatch, whose code then needs a buffer of
    dynamic size on the stack ("'memref.alloca' op expected no unbounded stack
    allocations"; JetMoE's experts, the plain stack too). Returns how many
    operands got one."""
    def rewrite(ir, module) -> int:
        separated = []

        def behind_barrier(value, before):
            if isinstance(value.owner, ir.Block):
                return None
            tensor_text = builtin_tensor_text(value.type)
            if tensor_text is None:
                return None
            tensor_type = ir.RankedTensorType(ir.Type.parse(tensor_text))
            if not any(tensor_type.is_dynamic_dim(a) for a in range(tensor_type.rank)):
                return None
            separated.append(value)
            return _barrier_before(ir, value, tensor_type, before)

        def accumulates(op) -> bool:
            if op.name == "torch.aten.scatter_add":
                return True
            flag = op.operands[3].owner
            return not isinstance(flag, ir.Block) and flag.name == "torch.constant.bool" and \
                ir.BoolAttr(flag.attributes["value"]).value

        def visit(op):
            if op.name not in _ACCUMULATING_SCATTERS or not accumulates(op):
                return ir.WalkResult.ADVANCE
            indices, values = _ACCUMULATING_SCATTERS[op.name]
            listed = op.operands[indices].owner
            if not isinstance(listed, ir.Block) and listed.name == "torch.prim.ListConstruct":
                for i, index_tensor in enumerate(listed.operands):
                    kept = behind_barrier(index_tensor, listed)
                    if kept is not None:
                        listed.operands[i] = kept
            else:
                kept = behind_barrier(op.operands[indices], op)
                if kept is not None:
                    op.operands[indices] = kept
            kept = behind_barrier(op.operands[values], op)
            if kept is not None:
                op.operands[values] = kept
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit)
        return len(separated)

    return rewrite_with_iree_bindings(in_file, out_file, text_file, rewrite)


# Float64 math that IREE 3.13's CPU backend lowers to C library calls its
# linker does not have ("iree-lld: error: undefined symbol: tanh"; arith.remf
# too, "fmod"), or not at all (math.erf: "failed to legalize operation"):
# exp, log, pow, sqrt, expm1, log1p, sinh, cosh and the rest have float64 code
# of their own.
F64_MATH_IN_F32 = ("math.tanh", "math.sin", "math.cos", "math.tan", "math.asin", "math.acos",
                   "math.atan", "math.atan2", "math.erf", "math.erfc")
# ... and float64 logarithms to a base, which become the natural one (float64
# code) times a constant; in float32 IREE lacks log10f too.
_LOG_BASES = {"math.log2": 2.0, "math.log10": 10.0}


def rewrite_flow(flow_file: Path, out_file: Path, f64_math_in_f32: bool,
                 text_file: Path | None = None) -> "FlowRewrite":
    """Rewrite ``flow_file`` (flow-phase IR) into ``out_file`` (bytecode;
    ``text_file`` as text when given): repeated dispatch
    workload values made distinct (the module docstring) and, with
    ``f64_math_in_f32`` (the CPU), the float64 math of ``F64_MATH_IN_F32``
    computed in float32 and widened back: what IREE's default demotion of
    float64 did to every value, here only to those ops (everything else
    float64 stays float64); and, in dispatches, integer divisions by a
    divisor that is never 0 (``_INTEGER_DIVISIONS``); each in-place write into
    a fill given a fill of its own (``distinct_fills``); inputs written in
    place kept out of the closing barrier (``in_place_writes``); an
    initializer's value computed again by another initializer kept once
    (``shared_initializers``)."""
    ir = iree_bindings()
    with ir.Context():
        # From the file, not a copy of it: MLIR then maps it, and the weights'
        # blobs borrow the mapping (read into a buffer, each blob was copied
        # out of it: twice the weights' bytes in this process).
        module = ir.Module.parseFile(str(flow_file))
        f64, f32 = ir.F64Type.get(), ir.F32Type.get()
        narrowed = 0

        def narrow(op):
            nonlocal narrowed
            with ir.InsertionPoint(op), op.location:
                operands = [ir.Operation.create("arith.truncf", results=[f32],
                                                operands=[v]).result for v in op.operands]
                attributes = {op.attributes[i].name: op.attributes[i].attr
                              for i in range(len(op.attributes))}
                result = ir.Operation.create(op.name, results=[f32], operands=operands,
                                             attributes=attributes)
                wide = ir.Operation.create("arith.extf", results=[f64],
                                           operands=[result.result]).result
            op.results[0].replace_all_uses_with(wide)
            op.erase()
            narrowed += 1

        def remainder(op):
            """fmod as a - b * trunc(a / b), in float64: narrowed to float32 it
            would lose the dividend's low bits."""
            nonlocal narrowed
            a, b = op.operands
            with ir.InsertionPoint(op), op.location:
                quotient = ir.Operation.create("arith.divf", results=[f64], operands=[a, b]).result
                whole = ir.Operation.create("math.trunc", results=[f64], operands=[quotient]).result
                product = ir.Operation.create("arith.mulf", results=[f64], operands=[b, whole]).result
                rest = ir.Operation.create("arith.subf", results=[f64], operands=[a, product]).result
            op.results[0].replace_all_uses_with(rest)
            op.erase()
            narrowed += 1

        def logarithm(op):
            nonlocal narrowed
            with ir.InsertionPoint(op), op.location:
                natural = ir.Operation.create("math.log", results=[f64],
                                              operands=[op.operands[0]]).result
                scale = ir.Operation.create("arith.constant", results=[f64], attributes={
                    "value": ir.FloatAttr.get(f64, 1 / math.log(_LOG_BASES[op.name]))}).result
                scaled = ir.Operation.create("arith.mulf", results=[f64],
                                             operands=[natural, scale]).result
            op.results[0].replace_all_uses_with(scaled)
            op.erase()
            narrowed += 1

        rewrites = {"arith.remf": remainder, **dict.fromkeys(F64_MATH_IN_F32, narrow),
                    **dict.fromkeys(_LOG_BASES, logarithm)}
        found = []
        divides = []

        def visit(op):
            if op.name in _INTEGER_DIVISIONS and _in_loop_body(ir, op):
                divides.append(op)
            if f64_math_in_f32 and op.name in rewrites and len(op.results) == 1 and \
                    op.results[0].type == f64:
                found.append(op)
            return ir.WalkResult.ADVANCE

        untied = untie_repeated_workloads(ir, module)
        module.operation.walk(visit)
        filled = give_in_place_writes_their_own_fills(ir, module)
        unbarriered = drop_aliased_values_from_barriers(ir, module)
        shared = share_identical_initializers(ir, module)
        for op in found:  # erased after the walk, not during it
            rewrites[op.name](op)
        for op in divides:
            divisor = op.operands[1]
            with ir.InsertionPoint(op), op.location:
                zero, one = (ir.Operation.create(
                    "arith.constant", results=[divisor.type],
                    attributes={"value": ir.IntegerAttr.get(divisor.type, v)}).result
                    for v in (0, 1))
                is_zero = ir.Operation.create(
                    "arith.cmpi", results=[ir.IntegerType.get_signless(1)],
                    operands=[divisor, zero],
                    attributes={"predicate": ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                                                0)}).result
                op.operands[1] = ir.Operation.create("arith.select", results=[divisor.type],
                                                     operands=[is_zero, one, divisor]).result
        write_bytecode(module, out_file)
        if text_file is not None:
            with open(text_file, "w") as f:
                module.operation.print(file=f)
    return FlowRewrite(untied, narrowed, len(divides), filled, unbarriered, shared)


class FlowRewrite(NamedTuple):
    untied: int    # dispatch workload operands made distinct
    narrowed: int  # float64 math ops rewritten
    guarded: int   # integer divisions given a divisor that is never 0
    filled: int    # in-place writes given a fill of their own (distinct_fills)
    unbarriered: int = 0  # inputs written in place taken out of a barrier (in_place_writes)
    shared: int = 0  # initializers' globals computed again elsewhere, shared (shared_initializers)


# Elementwise integer division in a dispatch. With dynamic dims IREE 3.13's
# CPU code divides the lanes past the end of a partial vector too, by what is
# there (zeros), and the process dies of SIGFPE (int64
# ``div(rounding_mode='trunc')`` of two [5, 10, 5] tensors with dynamic dims,
# no divisor 0; with or without peeling; static shapes run). A divisor of 0
# becomes 1 before each such division, which leaves every real element as it
# was unless its divisor really is 0: eager raises ZeroDivisionError there,
# and the module gives the dividend.
_INTEGER_DIVISIONS = ("arith.divsi", "arith.divui", "arith.remsi", "arith.remui",
                      "arith.floordivsi", "arith.ceildivsi", "arith.ceildivui")


def _in_loop_body(ir, op) -> bool:
    """Whether ``op`` computes elements (in a ``linalg`` op's body), not an
    index or a size."""
    parent = op.parent
    return parent is not None and parent.name.startswith("linalg.") and \
        not isinstance(op.results[0].type, ir.IndexType)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m anyshape.iree.workarounds",
                                     description="Run one of the IREE 3.13 workarounds on a file")
    commands = parser.add_subparsers(dest="command", required=True)
    packing = commands.add_parser(
        "separate-packing", help="a compute barrier between each product and an operand IREE "
                                 "would pack inside its producer's dispatch (the iree-input stage)")
    packing.add_argument("input", help="torch-dialect IR (after anyshape-lower), text or bytecode")
    scatters = commands.add_parser(
        "separate-scatters", help="a compute barrier between each accumulating scatter and its "
                                  "computed index and value tensors (the iree-input stage)")
    scatters.add_argument("input", help="torch-dialect IR (after anyshape-lower), text or bytecode")
    flow = commands.add_parser(
        "rewrite-flow", help="distinct repeated workload values, integer divisions by 0 "
                             "guarded, a fill for each in-place write, and with --f64-math-in-f32 float64 math in float32 (the "
                             "IR between iree-compile's two runs)")
    flow.add_argument("input", help="flow-phase IR (iree-compile --compile-to=flow), text or "
                                    "bytecode")
    flow.add_argument("--f64-math-in-f32", action="store_true",
                      help="float64 math IREE's CPU code lacks in float32 (the CPU target)")
    for command in (packing, scatters, flow):
        command.add_argument("-o", "--output", help="bytecode to write (default: the rewritten "
                                                    "IR as text on stdout)")
    args = parser.parse_args(argv)

    def rewrite(out_file: Path, text_file: Path | None) -> str:
        if args.command == "separate-packing":
            count = separate_dynamic_operand_packing(Path(args.input), out_file, text_file)
            return f"kept {count} products' operands apart from their packing"
        if args.command == "separate-scatters":
            count = separate_accumulated_scatter_operands(Path(args.input), out_file, text_file)
            return f"kept {count} accumulating scatters' operands apart from their producers"
        done = rewrite_flow(Path(args.input), out_file, args.f64_math_in_f32, text_file)
        return (f"made {done.untied} repeated dispatch workload sizes distinct, computed "
                f"{done.narrowed} float64 math ops in float32, guarded {done.guarded} "
                f"integer divisions, gave {done.filled} in-place writes a fill of their own")

    try:
        if args.output is not None:
            print(rewrite(Path(args.output), None))
        else:
            with tempfile.TemporaryDirectory(prefix="anyshape-workarounds-") as scratch:
                text = Path(scratch) / "out.mlir"
                summary = rewrite(Path(scratch) / "out.mlirbc", text)
                sys.stdout.write(text.read_text().rstrip("\n") + "\n")
            print(summary, file=sys.stderr)
    except (OSError, iree_bindings().MLIRError) as error:
        print(f"anyshape.iree.workarounds: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())


# Workarounds of upstream bugs here (docs/workarounds.md, anyshape/stages.py).
WORKAROUNDS = (
    Workaround(
        name='accumulating_scatter_barrier', stage='iree-input',
        where='separate_accumulated_scatter_operands',
        upstream="IREE 3.13 fuses the producers of an accumulating scatter's index and value "
                 "tensors (index_add, index_put with accumulate=True, scatter_add) into the "
                 "scatter's dispatch; with a dynamic dim its CPU code needs a stack buffer of "
                 "dynamic size (\"'memref.alloca' op expected no unbounded stack "
                 "allocations\"; JetMoE's experts; the plain stack fails too). A "
                 "compute_barrier keeps them apart.",
        guard=('test/python/iree/test_accumulating_scatters.py::test_the_barrier_is_still_needed',
               'test/python/iree/test_accumulating_scatters.py::test_index_add_of_computed_rows_matches_eager',
               'test/iree/workarounds.mlir'),
        remove_when='when IREE > 3.13 compiles the fused form (test_the_barrier_is_still_needed '
                    'then fails)'),
    Workaround(
        name='packing_barrier_two_dynamic_dims', stage='iree-input',
        where='separate_dynamic_operand_packing (_packs_in_producer)',
        upstream='With data tiling, IREE 3.13 packs a computed product operand whose last two '
                 "dims are dynamic inside its producer's dispatch, whose CPU codegen fails "
                 '("\'affine.delinearize_index\' op no basis element may be statically '
                 'non-positive": the form of MLIR\'s bug llvm/llvm-project#205288); a '
                 'compute_barrier keeps the packing apart.',
        guard=('test/python/iree/test_data_tiling.py::test_packing_barrier_is_still_needed',
               'test/python/iree/test_data_tiling.py::test_exponentials_of_a_static_batch_are_packed_apart',
               'test/python/iree/test_data_tiling.py::test_program_22_is_data_tiled',
               'test/iree/workarounds.mlir'),
        remove_when='when IREE > 3.13 compiles the original form '
                    '(test_packing_barrier_is_still_needed then fails)'),
    Workaround(
        name='packing_barrier_elementwise_of_product', stage='iree-input',
        where='separate_dynamic_operand_packing (_elementwise_of_product)',
        upstream="With one dynamic dim IREE 3.13 fuses a product's unpacking, elementwise ops (a "
                 "GELU) and the next product's packing into one dispatch whose dynamic code is "
                 "slow (roberta-base's 11 such dispatches 15.1 ms vs 5.0 ms static). Performance "
                 'workaround.',
        guard=('test/python/iree/test_data_tiling.py::test_feed_forward_barrier_is_still_needed',
               'test/python/iree/test_data_tiling.py::test_feed_forward_of_one_dynamic_dim_packs_apart_from_its_elementwise_ops',
               'test/iree/workarounds.mlir'),
        remove_when='when IREE no longer fuses unpack+elementwise+pack '
                    '(test_feed_forward_barrier_is_still_needed then fails)'),
    Workaround(
        name='untie_repeated_workload', stage='iree-input',
        where='distinct_workloads.untie_repeated_workloads, run by rewrite_flow from'
              ' iree.invocation.compile_with_iree (two iree-compile'
              ' runs around the flow phase)',
        upstream="IREE 3.13's FoldUniformOperands stream pass folds a repeated dynamic workload "
                 'value but renumbers its ordinal to 0, so inside the executable the second L of '
                 '[B, L, L] reads B and tiles past the first are silently not computed; each '
                 'repeat is made distinct with util.optimization_barrier at the flow level.',
        guard='test/iree/workarounds.mlir',
        remove_when='when IREE > 3.13 compiles the original form correctly (module docstring)'),
    Workaround(
        name='f64_math_in_f32_on_cpu', stage='iree-input',
        where='rewrite_flow (narrow, remainder, logarithm; F64_MATH_IN_F32)',
        upstream="IREE 3.13's CPU backend lowers float64 tanh/sin/cos/tan/asin/acos/atan/atan2 to"
                 ' C library calls its linker lacks ("iree-lld: error: undefined symbol: tanh"; '
                 'arith.remf: "fmod"), or not at all (math.erf: "failed to legalize operation"); '
                 'those are computed in float32, fmod as a - b*trunc(a/b) in float64, log2/log10 '
                 'as log times a constant.',
        guard=('test/iree/workarounds.mlir',
               'test/python/frontend/test_edge_value_math.py::test_pow_and_atan2_at_edge_values_as_eager[dtype1]'),
        remove_when="when IREE > 3.13's CPU backend has float64 code for them (module docstring)"),
    Workaround(
        name='integer_division_divisor_guard', stage='iree-input',
        where='rewrite_flow (_INTEGER_DIVISIONS, _in_loop_body)',
        upstream="With dynamic dims IREE 3.13's CPU code divides the lanes past the end of a "
                 'partial vector too, by zeros, and the process dies of SIGFPE (int64 '
                 "div(rounding_mode='trunc') of [5, 10, 5] tensors; with or without peeling); a "
                 'divisor of 0 becomes 1.',
        guard=('test/python/test_opinfo_floor.py::test_floor[div.trunc_rounding-int64-5]',
               'test/iree/workarounds.mlir'),
        remove_when='when IREE > 3.13 compiles the original form correctly (module docstring)'),
)
