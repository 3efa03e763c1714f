// RUN: anyshape-opt %s -split-input-file -allow-unregistered-dialect -anyshape-canonicalize-shapes -convert-torch-to-linalg=allow-non-finites=false -canonicalize | FileCheck %s --check-prefix=NEST
// RUN: anyshape-opt %s -split-input-file -allow-unregistered-dialect -cse -mlir-print-ir-before=cse -o /dev/null 2>&1 | FileCheck %s --check-prefix=BEFORE
// RUN: not anyshape-opt %s -split-input-file -pass-pipeline='builtin.module(convert-torch-to-linalg)' 2>&1 | FileCheck %s --check-prefix=NO-NEST
// RUN: anyshape-opt %s -split-input-file -allow-unregistered-dialect -mlir-print-local-scope -mlir-print-debuginfo | FileCheck %s --check-prefix=PRINT
// RUN: anyshape-opt -show-dialects | FileCheck %s --check-prefix=DIALECTS

/// torch-mlir-opt's command line: one dash or two, a C++ pass as a flag with
/// its options, nested on the op it runs on (func.func) among anyshape's
/// Python passes; a textual pipeline is taken as written (no nesting, as
/// upstream); printing flags; the dialects torch-mlir-opt registers.

// NEST-LABEL: func.func @tanh
// NEST:         %[[IN:.*]] = torch_c.to_builtin_tensor %arg0
// NEST:         %[[OUT:.*]] = linalg.generic {{.*}} ins(%[[IN]] : tensor<?xf32>)
// NEST:           math.tanh
// NEST:         torch_c.from_builtin_tensor %[[OUT]]
// BEFORE:      // -----// IR Dump Before CSE{{.*}}cse
// BEFORE-NOT:  IR Dump Before {{.*}}canonicalize
// NO-NEST:     Can't add pass 'ConvertTorchToLinalg' restricted to 'func.func' on a PassManager intended to run on 'builtin.module', did you intend to nest?
func.func @tanh(%arg0: !torch.vtensor<[?],f32>) -> !torch.vtensor<[?],f32> {
  %0 = torch.aten.tanh %arg0 : !torch.vtensor<[?],f32> -> !torch.vtensor<[?],f32>
  return %0 : !torch.vtensor<[?],f32>
}

// -----

// NEST-LABEL: func.func @dialects
// NEST:         tm_tensor.scan
// NEST:         stablehlo.add
// NEST:         chlo.erf
// PRINT-LABEL: func.func @dialects
// PRINT:         "mystery.op"(%{{.*}}) : (tensor<3xf32>) -> tensor<3xf32> loc("{{.*}}mlir-opt-flags.mlir":[[# @LINE + 12]]:8)
func.func @dialects(%arg0: tensor<3xf32>, %arg1: tensor<3xf32>, %arg2: tensor<f32>) -> tensor<3xf32> {
  %0:2 = tm_tensor.scan dimension(0) inclusive(true) ins(%arg0 : tensor<3xf32>) outs(%arg1, %arg2 : tensor<3xf32>, tensor<f32>) {
  ^bb0(%a: f32, %b: f32):
    %s = arith.addf %a, %b : f32
    tm_tensor.yield %s : f32
  } -> tensor<3xf32>, tensor<f32>
  %1 = stablehlo.add %0#0, %arg0 : tensor<3xf32>
  %2 = chlo.erf %1 : tensor<3xf32> -> tensor<3xf32>
  return %2 : tensor<3xf32>
}
func.func @opaque(%arg0: tensor<3xf32>) -> tensor<3xf32> {
  %0 = "mystery.op"(%arg0) : (tensor<3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// DIALECTS: Available Dialects: {{.*}}chlo,{{.*}}ml_program,{{.*}}stablehlo,{{.*}}tm_tensor,torch,torch_c,tosa,{{.*}}vhlo
