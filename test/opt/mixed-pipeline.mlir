// RUN: anyshape-opt %s --load-passes=%test_passes --split-input-file \
// RUN:   --pass-pipeline='builtin.module(anyshape-test-fold-double-neg, func.func(canonicalize), cse)' \
// RUN:   | FileCheck %s
// RUN: anyshape-opt %s --load-passes=%test_passes --split-input-file \
// RUN:   --anyshape-test-fold-double-neg --cse --mlir-print-ir-after-all 2>&1 >/dev/null \
// RUN:   | FileCheck %s --check-prefix=PRINT

/// A Python-defined anyshape pass runs inside the MLIR pass manager between
/// C++ passes: one pipeline, with IR printing after each pass.

// PRINT: IR Dump After TestFoldDoubleNegation: anyshape-test-fold-double-neg
// PRINT: IR Dump After CSE

// CHECK-LABEL: func.func @double_negation
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,4],f32>)
// CHECK: %[[T:.*]] = torch.aten.tanh %[[X]]
// CHECK: return %[[T]]
func.func @double_negation(%arg0: !torch.vtensor<[?,4],f32>) -> !torch.vtensor<[?,4],f32> {
  %0 = torch.aten.neg %arg0 : !torch.vtensor<[?,4],f32> -> !torch.vtensor<[?,4],f32>
  %1 = torch.aten.neg %0 : !torch.vtensor<[?,4],f32> -> !torch.vtensor<[?,4],f32>
  %2 = torch.aten.tanh %1 : !torch.vtensor<[?,4],f32> -> !torch.vtensor<[?,4],f32>
  return %2 : !torch.vtensor<[?,4],f32>
}

// -----

/// One negation is not a pair: it must stay.
// CHECK-LABEL: func.func @negative_single_negation
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,4],f32>)
// CHECK: %[[N:.*]] = torch.aten.neg %[[X]]
// CHECK: return %[[N]]
func.func @negative_single_negation(%arg0: !torch.vtensor<[?,4],f32>) -> !torch.vtensor<[?,4],f32> {
  %0 = torch.aten.neg %arg0 : !torch.vtensor<[?,4],f32> -> !torch.vtensor<[?,4],f32>
  return %0 : !torch.vtensor<[?,4],f32>
}
