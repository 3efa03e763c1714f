"""Tensor-to-scalar comparisons whose two sides are of different number kinds,
rewritten so that torch-mlir's folder never sees one.

Workaround of an upstream bug. torch-mlir's folder of ``aten.{eq,ne,lt,le,gt,ge}.Scalar``
(``comparisonScaleFolder`` in ``lib/Dialect/Torch/IR/TorchOps.cpp``, torch-mlir
20261001, unchanged at 0029fc2e1) picks its branch by the kind of the scalar and
reads the tensor literal as that kind:
- a float literal against an int scalar is read as an integer. The result is
  garbage that differs from process to process: BLOOM's ALiBi slopes
  (``lt(0.25, 0)`` folded to true, issue 36);
- an integer or bool literal against a float scalar crashes the compiler.

Every greedy run folds every op, and a comparison's tensor may become a literal
in the middle of a run, so each such comparison is rewritten right after import
(``importer.import_program``: IREE's torch input folds with the same folder,
also when no anyshape pass runs) and before every greedy run
(``pass_api.apply_patterns``: IR given to ``anyshape-opt``, and comparisons a
pass creates), the same value either way:
- a float tensor against an int scalar: a constant int becomes the float that
  the lowering would have converted it to (rounded once, to the tensor's
  precision); any other int goes through ``aten.Float.Scalar``;
- an integer or bool tensor against a float scalar: the tensor is converted
  to float32 first. That is PyTorch's type promotion for a Python float (the
  default dtype), so it is also what eager computes.

Guarded by ``test/passes/mixed-comparisons.mlir``,
``test_edge_value_math.py::test_power_of_a_float_literal_base_as_eager`` and
``test_deterministic_compile.py`` (BLOOM). It can go when the folder checks
the tensor's element type.
"""

from __future__ import annotations

from anyshape.dialects import vtensor_shape
from anyshape.mlir import ir, torch_ops
from anyshape.passes.torch_ir.constants import (bool_constant, constant_int, float_constant,
                                                int_constant, none_constant)
from anyshape.passes.torch_ir.values import defining_op, is_a, typed, vtensor_type
from anyshape.stages import Workaround

COMPARISONS = (torch_ops.AtenEqScalarOp, torch_ops.AtenNeScalarOp, torch_ops.AtenLtScalarOp,
               torch_ops.AtenLeScalarOp, torch_ops.AtenGtScalarOp, torch_ops.AtenGeScalarOp)

# Significand bits (the leading one included) of the float dtypes.
_SIGNIFICAND_BITS = {"f64": 53, "f32": 24, "f16": 11, "bf16": 8}
_TORCH_FLOAT32 = 6


def rounded(value: int, bits: int) -> int:
    """``value`` rounded to ``bits`` significant bits, ties to even: what an
    int-to-float conversion of that precision gives, exactly, as an int (which
    a double holds exactly for ``bits`` <= 53)."""
    magnitude = abs(value)
    shift = magnitude.bit_length() - bits
    if shift <= 0:
        return value
    quotient, remainder = divmod(magnitude, 1 << shift)
    half = 1 << (shift - 1)
    if remainder > half or (remainder == half and quotient & 1):
        quotient += 1
    return (quotient << shift) * (1 if value >= 0 else -1)


def _float_of(scalar: ir.Value, dtype: str) -> ir.Value:
    number = constant_int(scalar)
    if number is not None:
        return float_constant(float(rounded(number, _SIGNIFICAND_BITS.get(dtype, 53))))
    return torch_ops.AtenFloatScalarOp(scalar).result


def _as_float32(tensor: ir.Value) -> ir.Value:
    sizes = vtensor_shape(tensor.type)[0]
    return torch_ops.AtenToDtypeOp(vtensor_type(sizes, "f32"), tensor,
                                   int_constant(_TORCH_FLOAT32), bool_constant(False),
                                   bool_constant(False), none_constant()).result


def _is_float(dtype: str) -> bool:
    return dtype in _SIGNIFICAND_BITS


def _scalar_is_float(scalar: ir.Value) -> bool | None:
    kind = str(scalar.type)
    if kind == "!torch.float":
        return True
    if kind == "!torch.int":
        return False
    producer = defining_op(scalar)  # a !torch.number: its constant says which
    if is_a(producer, torch_ops.ConstantFloatOp):
        return True
    if is_a(producer, torch_ops.ConstantIntOp):
        return False
    return None


def mend_mixed_comparisons(root: ir.Operation) -> int:
    """Rewrite every mixed-kind comparison under ``root``; returns how many."""
    mixed = []

    def visit(op):
        if is_a(op, *COMPARISONS):
            mixed.append(op.operation)
        return ir.WalkResult.ADVANCE

    root.walk(visit)
    count = 0
    for op in mixed:
        tensor, scalar = typed(op).self_, typed(op).other
        shape, scalar_is_float = vtensor_shape(tensor.type), _scalar_is_float(scalar)
        if shape is None or scalar_is_float is None or _is_float(shape[1]) == scalar_is_float:
            continue
        with ir.InsertionPoint(op), op.location:
            if scalar_is_float:
                op.operands[0] = _as_float32(tensor)
            else:
                op.operands[1] = _float_of(scalar, shape[1])
        count += 1
    return count


# Workarounds of upstream bugs here (docs/workarounds.md, anyshape/stages.py).
WORKAROUNDS = (
    Workaround(
        name='mixed_kind_comparisons', stage='torch-ir',
        where='mend_mixed_comparisons (called in importer.import_program and '
              'pass_api.apply_patterns)',
        upstream="torch-mlir's folder of aten.{eq,ne,lt,le,gt,ge}.Scalar (comparisonScaleFolder "
                 'in lib/Dialect/Torch/IR/TorchOps.cpp, torch-mlir 20261001, unchanged at '
                 "0029fc2e1) reads the tensor literal as the scalar's kind: a float literal "
                 "against an int scalar folds to process-dependent garbage (BLOOM's ALiBi "
                 "lt(0.25, 0) -> true, this project's issue 36); an int/bool literal against a "
                 'float scalar crashes the compiler.',
        guard=('test/passes/mixed-comparisons.mlir',
               'test/python/frontend/test_edge_value_math.py::test_power_of_a_float_literal_base_as_eager',
               'test/python/test_deterministic_compile.py::test_two_fresh_processes_give_one_artifact[bloom-1e-05]'),
        remove_when="when the folder checks the tensor's element type"),
)
