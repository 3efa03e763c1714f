// RUN: %PYTHON -m anyshape.iree.dim_facts %s | FileCheck %s

// The `anyshape.dims` argument facts `anyshape-lower` writes, stated in IREE's
// own ops before IREE sees the module (the stage 'iree-input').

/// IREE's torch input would state a bound symbol's minimum as 1: the argument's
/// dim gets `util.assume.int` with the real range, tied to the argument's
/// value, and every use of the argument reads the tied value; the attribute goes.
// CHECK-LABEL: func.func @real_minimum
// CHECK-SAME: (%[[X:[^:]*]]: !torch.vtensor<[2,?],f32>) ->
// CHECK: %[[T:.+]] = torch_c.to_builtin_tensor %[[X]] : !torch.vtensor<[2,?],f32> -> tensor<2x?xf32>
// CHECK: %[[C1:.+]] = arith.constant 1 : index
// CHECK: %[[D:.+]] = tensor.dim %[[T]], %[[C1]] : tensor<2x?xf32>
// CHECK: %[[A:.+]] = util.assume.int %[[D]]<umin = 16, umax = 512> : index
// CHECK: %[[TIED:.+]] = flow.tensor.tie_shape %[[T]] : tensor<2x?xf32>{%[[A]]}
// CHECK: %[[Y:.+]] = torch_c.from_builtin_tensor %[[TIED]] : tensor<2x?xf32> -> !torch.vtensor<[2,?],f32>
// CHECK: torch.aten.tanh %[[Y]]
// CHECK-NOT: anyshape.dims
func.func @real_minimum(%arg0: !torch.vtensor<[2,?],f32> {anyshape.dims = [{axis = 1 : i64, divisor = 1 : i64, expr = "s0", max = 512 : i64, min = 16 : i64}]}) -> !torch.vtensor<[2,?],f32> {
  %0 = torch.aten.tanh %arg0 : !torch.vtensor<[2,?],f32> -> !torch.vtensor<[2,?],f32>
  return %0 : !torch.vtensor<[2,?],f32>
}

/// Dims with the same expression share one assumed value, across arguments, so
/// IREE knows they are equal; `2*s0` after `s0` is computed from it (with its
/// divisor), so IREE knows that relation too. Other argument attributes stay.
// CHECK-LABEL: func.func @shared_symbol
// CHECK-SAME: %[[Z:[^:]*]]: !torch.vtensor<[?,2],f32> {test.kept = 1 : i64}) ->
// CHECK: %[[S:.+]] = util.assume.int %{{.+}}<umin = 16, umax = 512> : index
// CHECK: %[[C2:.+]] = arith.constant 2 : index
// CHECK: %[[TWICE:.+]] = arith.muli %[[S]], %[[C2]] : index
// CHECK: %[[S2:.+]] = util.assume.int %[[TWICE]]<umin = 32, umax = 1024, udiv = 2> : index
// CHECK: flow.tensor.tie_shape %{{.+}} : tensor<2x?xf32>{%[[S2]]}
// CHECK: %[[ZT:.+]] = torch_c.to_builtin_tensor %[[Z]]
// CHECK-NOT: tensor.dim
// CHECK: %[[ZTIED:.+]] = flow.tensor.tie_shape %[[ZT]] : tensor<?x2xf32>{%[[S]]}
// CHECK: %[[ZV:.+]] = torch_c.from_builtin_tensor %[[ZTIED]]
// CHECK: torch.aten.neg %[[ZV]]
func.func @shared_symbol(%arg0: !torch.vtensor<[2,?],f32> {anyshape.dims = [{axis = 1 : i64, divisor = 1 : i64, expr = "s0", max = 512 : i64, min = 16 : i64}]},
                         %arg1: !torch.vtensor<[2,?],f32> {anyshape.dims = [{axis = 1 : i64, divisor = 2 : i64, expr = "2*s0", max = 1024 : i64, min = 32 : i64}]},
                         %arg2: !torch.vtensor<[?,2],f32> {anyshape.dims = [{axis = 0 : i64, divisor = 1 : i64, expr = "s0", max = 512 : i64, min = 16 : i64}], test.kept = 1 : i64}) -> !torch.vtensor<[?,2],f32> {
  %0 = torch.aten.neg %arg2 : !torch.vtensor<[?,2],f32> -> !torch.vtensor<[?,2],f32>
  return %0 : !torch.vtensor<[?,2],f32>
}

/// A dim without an upper bound gets only its minimum; a dynamic dim without a
/// fact is tied as it is, with no assumption.
// CHECK-LABEL: func.func @unbounded_and_unstated
// CHECK: %[[T:.+]] = torch_c.to_builtin_tensor
// CHECK: %[[D0:.+]] = tensor.dim %[[T]], %{{.+}} : tensor<?x?x8xf32>
// CHECK: %[[D1:.+]] = tensor.dim %[[T]], %{{.+}} : tensor<?x?x8xf32>
// CHECK: %[[A1:.+]] = util.assume.int %[[D1]]<umin = 2> : index
// CHECK: flow.tensor.tie_shape %[[T]] : tensor<?x?x8xf32>{%[[D0]], %[[A1]]}
func.func @unbounded_and_unstated(%arg0: !torch.vtensor<[?,?,8],f32> {anyshape.dims = [{axis = 1 : i64, divisor = 1 : i64, expr = "s1", min = 2 : i64}]}) -> !torch.vtensor<[?,?,8],f32> {
  %0 = torch.aten.neg %arg0 : !torch.vtensor<[?,?,8],f32> -> !torch.vtensor<[?,?,8],f32>
  return %0 : !torch.vtensor<[?,?,8],f32>
}

/// A function without facts is left as it is.
// CHECK-LABEL: func.func @negative_no_facts
// CHECK-SAME: (%[[X:[^:]*]]: !torch.vtensor<[2,?],f32> {test.kept = 1 : i64})
// CHECK-NOT: util.assume.int
// CHECK-NOT: flow.tensor.tie_shape
// CHECK: torch.aten.tanh %[[X]]
func.func @negative_no_facts(%arg0: !torch.vtensor<[2,?],f32> {test.kept = 1 : i64}) -> !torch.vtensor<[2,?],f32> {
  %0 = torch.aten.tanh %arg0 : !torch.vtensor<[2,?],f32> -> !torch.vtensor<[2,?],f32>
  return %0 : !torch.vtensor<[2,?],f32>
}
