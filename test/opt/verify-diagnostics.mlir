// RUN: anyshape-opt %s --split-input-file --verify-diagnostics --load-passes=%test_passes \
// RUN:   --anyshape-test-fail-on=op-name=torch.aten.tanh | FileCheck %s
// RUN: sed -e 's/{{found torch.aten.tanh}}/{{found something else}}/' \
// RUN:   -e 's/{{expected non-function type}}/{{expected a miracle}}/' %s \
// RUN:   | not anyshape-opt - --split-input-file --verify-diagnostics --load-passes=%test_passes \
// RUN:   --anyshape-test-fail-on=op-name=torch.aten.tanh 2>&1 | FileCheck %s --check-prefix=MISMATCH

/// --verify-diagnostics checks diagnostics against `expected-*` comments, as
/// mlir-opt's does: met expectations pass (exit 0; the chunks that succeed are
/// printed), and both an unexpected diagnostic and an unmet expectation fail,
/// each reported at its line.

// MISMATCH-DAG: <stdin>:[[# @LINE + 3]]:8: error: unexpected error: anyshape-test-fail-on: found torch.aten.tanh
// MISMATCH-DAG: <stdin>:[[# @LINE + 2]]:{{[0-9]+}}: error: expected error "found something else" was not produced
func.func @pass_refusal(%arg0: !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32> {
  %0 = torch.aten.tanh %arg0 : !torch.vtensor<[4],f32> -> !torch.vtensor<[4],f32> // expected-error {{found torch.aten.tanh}}
  return %0 : !torch.vtensor<[4],f32>
}

// -----

// MISMATCH-DAG: <stdin>:[[# @LINE + 4]]:26: error: unexpected error: expected non-function type
// MISMATCH-DAG: <stdin>:[[# @LINE + 2]]:6: error: expected error "expected a miracle" was not produced
func.func @parse_error() {
  // expected-error@+1 {{expected non-function type}}
  %0 = arith.constant 1 : i33x
  return
}

// -----

// CHECK-LABEL: func.func @no_diagnostics
func.func @no_diagnostics() {
  return
}
