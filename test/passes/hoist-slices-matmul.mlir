// RUN: anyshape-opt %s --split-input-file --anyshape-hoist-slices | FileCheck %s

/// [Pattern: through_matmul]
/// bmm [b, m, k] x [b, k, n] sliced on the batch axis: both operands are.
// CHECK-LABEL: func.func @bmm_batch_axis
// CHECK-SAME: (%[[A:.*]]: !torch.vtensor<[4,?,8],f32>, %[[B:.*]]: !torch.vtensor<[4,8,?],f32>)
// CHECK-DAG: %[[AS:.*]] = torch.aten.slice.Tensor %[[A]], %{{.*}} -> !torch.vtensor<[2,?,8],f32>
// CHECK-DAG: %[[BS:.*]] = torch.aten.slice.Tensor %[[B]], %{{.*}} -> !torch.vtensor<[2,8,?],f32>
// CHECK: %[[P:.*]] = torch.aten.bmm %[[AS]], %[[BS]]
// CHECK: return %[[P]]
func.func @bmm_batch_axis(%arg0: !torch.vtensor<[4,?,8],f32>, %arg1: !torch.vtensor<[4,8,?],f32>) -> !torch.vtensor<[2,?,?],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %0 = torch.aten.bmm %arg0, %arg1 : !torch.vtensor<[4,?,8],f32>, !torch.vtensor<[4,8,?],f32> -> !torch.vtensor<[4,?,?],f32>
  %1 = torch.aten.slice.Tensor %0, %int0, %int0, %int2, %int1 : !torch.vtensor<[4,?,?],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[2,?,?],f32>
  return %1 : !torch.vtensor<[2,?,?],f32>
}

// -----

/// Sliced on the second-to-last (row) axis: only the left operand is.
// CHECK-LABEL: func.func @matmul_row_axis
// CHECK-SAME: (%[[A:.*]]: !torch.vtensor<[?,?,8],f32>, %[[B:.*]]: !torch.vtensor<[8,16],f32>)
// CHECK: %[[AS:.*]] = torch.aten.slice.Tensor %[[A]], %{{.*}} -> !torch.vtensor<[?,1,8],f32>
// CHECK: %[[P:.*]] = torch.aten.matmul %[[AS]], %[[B]]
// CHECK: torch.aten.squeeze.dim %[[P]]
func.func @matmul_row_axis(%arg0: !torch.vtensor<[?,?,8],f32>, %arg1: !torch.vtensor<[8,16],f32>) -> !torch.vtensor<[?,16],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %0 = torch.aten.matmul %arg0, %arg1 : !torch.vtensor<[?,?,8],f32>, !torch.vtensor<[8,16],f32> -> !torch.vtensor<[?,?,16],f32>
  %1 = torch.aten.select.int %0, %int1, %int0 : !torch.vtensor<[?,?,16],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,16],f32>
  return %1 : !torch.vtensor<[?,16],f32>
}

// -----

/// A batch axis where one operand broadcasts (size 1): only the other is sliced.
// CHECK-LABEL: func.func @matmul_batch_axis_broadcast_operand
// CHECK-SAME: (%[[A:.*]]: !torch.vtensor<[4,?,8],f32>, %[[B:.*]]: !torch.vtensor<[1,8,16],f32>)
// CHECK: %[[AS:.*]] = torch.aten.slice.Tensor %[[A]]
// CHECK: %[[P:.*]] = torch.aten.matmul %[[AS]], %[[B]]
// CHECK: torch.aten.squeeze.dim %[[P]]
func.func @matmul_batch_axis_broadcast_operand(%arg0: !torch.vtensor<[4,?,8],f32>, %arg1: !torch.vtensor<[1,8,16],f32>) -> !torch.vtensor<[?,16],f32> {
  %int0 = torch.constant.int 0
  %int2 = torch.constant.int 2
  %0 = torch.aten.matmul %arg0, %arg1 : !torch.vtensor<[4,?,8],f32>, !torch.vtensor<[1,8,16],f32> -> !torch.vtensor<[4,?,16],f32>
  %1 = torch.aten.select.int %0, %int0, %int2 : !torch.vtensor<[4,?,16],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,16],f32>
  return %1 : !torch.vtensor<[?,16],f32>
}

// -----

/// A matrix-vector product contracts the vector's only axis: the result's
/// axis is the matrix's rows, but matmul with a 1-D operand has no rule (its
/// axes do not line up with the result's), so the selection stays.
// CHECK-LABEL: func.func @negative_matmul_with_vector
// CHECK: %[[P:.*]] = torch.aten.matmul
// CHECK: torch.aten.select.int %[[P]]
func.func @negative_matmul_with_vector(%arg0: !torch.vtensor<[?,8],f32>, %arg1: !torch.vtensor<[8],f32>) -> !torch.vtensor<[],f32> {
  %int0 = torch.constant.int 0
  %0 = torch.aten.matmul %arg0, %arg1 : !torch.vtensor<[?,8],f32>, !torch.vtensor<[8],f32> -> !torch.vtensor<[?],f32>
  %1 = torch.aten.select.int %0, %int0, %int0 : !torch.vtensor<[?],f32>, !torch.int, !torch.int -> !torch.vtensor<[],f32>
  return %1 : !torch.vtensor<[],f32>
}

// -----

/// [Pattern: through_matmul_with_bias]
/// addmm(bias[N], a, b) sliced on rows: a's rows; the bias has no row axis.
// CHECK-LABEL: func.func @addmm_row_axis_bias_broadcast
// CHECK-SAME: (%[[BIAS:.*]]: !torch.vtensor<[16],f32>, %[[A:.*]]: !torch.vtensor<[?,8],f32>, %[[B:.*]]: !torch.vtensor<[8,16],f32>)
// CHECK: %[[AS:.*]] = torch.aten.slice.Tensor %[[A]]
// CHECK: %[[P:.*]] = torch.aten.addmm %[[BIAS]], %[[AS]], %[[B]]
// CHECK: return %[[P]]
func.func @addmm_row_axis_bias_broadcast(%arg0: !torch.vtensor<[16],f32>, %arg1: !torch.vtensor<[?,8],f32>, %arg2: !torch.vtensor<[8,16],f32>) -> !torch.vtensor<[2,16],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %0 = torch.aten.addmm %arg0, %arg1, %arg2, %int1, %int1 : !torch.vtensor<[16],f32>, !torch.vtensor<[?,8],f32>, !torch.vtensor<[8,16],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,16],f32>
  %1 = torch.aten.slice.Tensor %0, %int0, %int0, %int2, %int1 : !torch.vtensor<[?,16],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[2,16],f32>
  return %1 : !torch.vtensor<[2,16],f32>
}

// -----

/// [Pattern: through_linear]
/// Sliced on the last (column) axis: the right operand's columns; for linear
/// the weight's rows and the bias.
// CHECK-LABEL: func.func @linear_column_axis
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?,8],f32>, %[[W:.*]]: !torch.vtensor<[16,8],f32>, %[[BIAS:.*]]: !torch.vtensor<[16],f32>)
// CHECK-DAG: %[[WS:.*]] = torch.aten.slice.Tensor %[[W]], %{{.*}} -> !torch.vtensor<[4,8],f32>
// CHECK-DAG: %[[BS:.*]] = torch.aten.slice.Tensor %[[BIAS]], %{{.*}} -> !torch.vtensor<[4],f32>
// CHECK: %[[Y:.*]] = torch.aten.linear %[[X]], %[[WS]], %[[BS]]
// CHECK: return %[[Y]]
func.func @linear_column_axis(%arg0: !torch.vtensor<[?,?,8],f32>, %arg1: !torch.vtensor<[16,8],f32>, %arg2: !torch.vtensor<[16],f32>) -> !torch.vtensor<[?,?,4],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int4 = torch.constant.int 4
  %0 = torch.aten.linear %arg0, %arg1, %arg2 : !torch.vtensor<[?,?,8],f32>, !torch.vtensor<[16,8],f32>, !torch.vtensor<[16],f32> -> !torch.vtensor<[?,?,16],f32>
  %1 = torch.aten.slice.Tensor %0, %int2, %int0, %int4, %int1 : !torch.vtensor<[?,?,16],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[?,?,4],f32>
  return %1 : !torch.vtensor<[?,?,4],f32>
}
