// RUN: anyshape-opt %s --split-input-file | anyshape-opt --split-input-file | FileCheck %s

/// Valid forms of anyshape.iota_like round-trip (generic form: the dialect is
/// IRDL-defined from Python).

// CHECK-LABEL: func.func @iota_dynamic
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?,8],f32>)
// CHECK: "anyshape.iota_like"(%[[X]]) {dim = 1 : i64} : (!torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[?],si64>
func.func @iota_dynamic(%arg0: !torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[?],si64> {
  %0 = "anyshape.iota_like"(%arg0) {dim = 1 : i64} : (!torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[?],si64>
  return %0 : !torch.vtensor<[?],si64>
}

// -----

/// A static dim gives a static result; si32 is allowed.
// CHECK-LABEL: func.func @iota_static
// CHECK: "anyshape.iota_like"(%{{.*}}) {dim = 2 : i64} : (!torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[8],si32>
func.func @iota_static(%arg0: !torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[8],si32> {
  %0 = "anyshape.iota_like"(%arg0) {dim = 2 : i64} : (!torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[8],si32>
  return %0 : !torch.vtensor<[8],si32>
}
