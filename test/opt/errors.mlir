// RUN: not anyshape-opt %s --split-input-file 2>&1 | FileCheck %s --check-prefix=PARSE
// RUN: not anyshape-opt %s --split-input-file --load-passes=%test_passes \
// RUN:   --anyshape-test-fail-on=op-name=torch.aten.tanh 2>&1 | FileCheck %s --check-prefix=PASS
// RUN: not anyshape-opt %s --split-input-file --anyshape-no-such-pass 2>&1 | FileCheck %s --check-prefix=UNKNOWN

/// Failures print file:line:col diagnostics on stderr and exit non-zero; the
/// line numbers are those of the whole file even with --split-input-file.

// PASS: errors.mlir:[[# @LINE + 3]]:8: error: anyshape-test-fail-on: found torch.aten.tanh
// UNKNOWN: anyshape-opt: Unknown command line argument '--anyshape-no-such-pass' (anyshape passes: anyshape-canonicalize-shapes,
func.func @fails_in_pass(%arg0: !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32> {
  %0 = torch.aten.tanh %arg0 : !torch.vtensor<[4],f32> -> !torch.vtensor<[4],f32>
  return %0 : !torch.vtensor<[4],f32>
}

// -----

// PARSE: errors.mlir:[[# @LINE + 2]]:26: error: expected non-function type
func.func @bad_type() {
  %0 = arith.constant 1 : i33x
  return
}
