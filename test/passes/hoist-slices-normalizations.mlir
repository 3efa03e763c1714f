// RUN: anyshape-opt %s --split-input-file --anyshape-hoist-slices | FileCheck %s

/// [Pattern: through_layer_norm]
/// layer_norm normalizes the last axis: a selection on the sequence axis
/// (before it) moves to its input; weight and bias stay whole.
// CHECK-LABEL: func.func @layer_norm_over_later_axis
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?,8],f32>, %[[W:.*]]: !torch.vtensor<[8],f32>, %[[B:.*]]: !torch.vtensor<[8],f32>)
// CHECK: %[[ROW:.*]] = torch.aten.slice.Tensor %[[X]]
// CHECK: %[[N:.*]] = torch.aten.layer_norm %[[ROW]], %{{.*}}, %[[W]], %[[B]]
// CHECK: torch.aten.squeeze.dim %[[N]]
func.func @layer_norm_over_later_axis(%arg0: !torch.vtensor<[?,?,8],f32>, %arg1: !torch.vtensor<[8],f32>, %arg2: !torch.vtensor<[8],f32>) -> !torch.vtensor<[?,8],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int8 = torch.constant.int 8
  %eps = torch.constant.float 1.000000e-05
  %false = torch.constant.bool false
  %shape = torch.prim.ListConstruct %int8 : (!torch.int) -> !torch.list<int>
  %0 = torch.aten.layer_norm %arg0, %shape, %arg1, %arg2, %eps, %false : !torch.vtensor<[?,?,8],f32>, !torch.list<int>, !torch.vtensor<[8],f32>, !torch.vtensor<[8],f32>, !torch.float, !torch.bool -> !torch.vtensor<[?,?,8],f32>
  %1 = torch.aten.select.int %0, %int1, %int0 : !torch.vtensor<[?,?,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,8],f32>
  return %1 : !torch.vtensor<[?,8],f32>
}

// -----

/// A selection on the normalized axis itself would change every mean: it stays.
// CHECK-LABEL: func.func @negative_layer_norm_over_sliced_axis
// CHECK: %[[N:.*]] = torch.aten.layer_norm
// CHECK: torch.aten.select.int %[[N]]
func.func @negative_layer_norm_over_sliced_axis(%arg0: !torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[?,?],f32> {
  %int0 = torch.constant.int 0
  %int2 = torch.constant.int 2
  %int8 = torch.constant.int 8
  %none = torch.constant.none
  %eps = torch.constant.float 1.000000e-05
  %false = torch.constant.bool false
  %shape = torch.prim.ListConstruct %int8 : (!torch.int) -> !torch.list<int>
  %0 = torch.aten.layer_norm %arg0, %shape, %none, %none, %eps, %false : !torch.vtensor<[?,?,8],f32>, !torch.list<int>, !torch.none, !torch.none, !torch.float, !torch.bool -> !torch.vtensor<[?,?,8],f32>
  %1 = torch.aten.select.int %0, %int2, %int0 : !torch.vtensor<[?,?,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,?],f32>
  return %1 : !torch.vtensor<[?,?],f32>
}

// -----

/// [Pattern: through_softmax]
/// Softmax over the last axis, selection on the batch axis (before it) or on
/// the rows (axis 1): moved. ONNX Runtime's table allows only "after the
/// sliced axis"; any axis other than the softmax's own is sound.
// CHECK-LABEL: func.func @softmax_over_other_axis
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?,?],f32>)
// CHECK: %[[ROWS:.*]] = torch.aten.slice.Tensor %[[X]], %{{.*}} -> !torch.vtensor<[?,1,?],f32>
// CHECK: %[[P:.*]] = torch.aten.softmax.int %[[ROWS]]
// CHECK: torch.aten.squeeze.dim %[[P]]
func.func @softmax_over_other_axis(%arg0: !torch.vtensor<[?,?,?],f32>) -> !torch.vtensor<[?,?],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int-1 = torch.constant.int -1
  %none = torch.constant.none
  %0 = torch.aten.softmax.int %arg0, %int-1, %none : !torch.vtensor<[?,?,?],f32>, !torch.int, !torch.none -> !torch.vtensor<[?,?,?],f32>
  %1 = torch.aten.select.int %0, %int1, %int0 : !torch.vtensor<[?,?,?],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,?],f32>
  return %1 : !torch.vtensor<[?,?],f32>
}

// -----

/// Softmax over the sliced axis: every kept value depends on every row.
// CHECK-LABEL: func.func @negative_softmax_over_sliced_axis
// CHECK: %[[P:.*]] = torch.aten._softmax
// CHECK: torch.aten.select.int %[[P]]
func.func @negative_softmax_over_sliced_axis(%arg0: !torch.vtensor<[?,?,?],f32>) -> !torch.vtensor<[?,?],f32> {
  %int1 = torch.constant.int 1
  %int0 = torch.constant.int 0
  %false = torch.constant.bool false
  %0 = torch.aten._softmax %arg0, %int1, %false : !torch.vtensor<[?,?,?],f32>, !torch.int, !torch.bool -> !torch.vtensor<[?,?,?],f32>
  %1 = torch.aten.select.int %0, %int1, %int0 : !torch.vtensor<[?,?,?],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,?],f32>
  return %1 : !torch.vtensor<[?,?],f32>
}

// -----

/// [Pattern: through_reduction]
/// mean over axis 2 without keepdim: result axis 1 is input axis 1 ([B, L, H, K]
/// -> [B, L, K]); a selection of result axis 2 is input axis 3 (renumbered).
// CHECK-LABEL: func.func @reduction_axes_renumbered
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?,4,6],f32>)
// CHECK: %[[THREE:.*]] = torch.constant.int 3
// CHECK: %[[COLS:.*]] = torch.aten.slice.Tensor %[[X]], %[[THREE]], %{{.*}} -> !torch.vtensor<[?,?,4,2],f32>
// CHECK: %[[M:.*]] = torch.aten.mean.dim %[[COLS]]
// CHECK: return %[[M]]
func.func @reduction_axes_renumbered(%arg0: !torch.vtensor<[?,?,4,6],f32>) -> !torch.vtensor<[?,?,2],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %false = torch.constant.bool false
  %none = torch.constant.none
  %dims = torch.prim.ListConstruct %int2 : (!torch.int) -> !torch.list<int>
  %0 = torch.aten.mean.dim %arg0, %dims, %false, %none : !torch.vtensor<[?,?,4,6],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[?,?,6],f32>
  %1 = torch.aten.slice.Tensor %0, %int2, %int0, %int2, %int1 : !torch.vtensor<[?,?,6],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[?,?,2],f32>
  return %1 : !torch.vtensor<[?,?,2],f32>
}

// -----

/// A sum over the sliced axis (kept as size 1): nothing to select before it.
// CHECK-LABEL: func.func @negative_reduction_over_sliced_axis
// CHECK: %[[S:.*]] = torch.aten.sum.dim_IntList
// CHECK: torch.aten.select.int %[[S]]
func.func @negative_reduction_over_sliced_axis(%arg0: !torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[?,8],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %true = torch.constant.bool true
  %none = torch.constant.none
  %dims = torch.prim.ListConstruct %int1 : (!torch.int) -> !torch.list<int>
  %0 = torch.aten.sum.dim_IntList %arg0, %dims, %true, %none : !torch.vtensor<[?,?,8],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[?,1,8],f32>
  %1 = torch.aten.select.int %0, %int1, %int0 : !torch.vtensor<[?,1,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,8],f32>
  return %1 : !torch.vtensor<[?,8],f32>
}

// -----

/// logsumexp over the feature axis, not the selected one: each row's result
/// reads that row only, so the row is selected from its input.
// CHECK-LABEL: func.func @logsumexp_over_other_axis
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?,8],f32>)
// CHECK: %[[ROW:.*]] = torch.aten.slice.Tensor %[[X]], {{.*}} -> !torch.vtensor<[?,1,8],f32>
// CHECK: %[[R:.*]] = torch.aten.logsumexp %[[ROW]]
// CHECK: torch.aten.squeeze.dim %[[R]]
func.func @logsumexp_over_other_axis(%arg0: !torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[?],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %false = torch.constant.bool false
  %dims = torch.prim.ListConstruct %int2 : (!torch.int) -> !torch.list<int>
  %0 = torch.aten.logsumexp %arg0, %dims, %false : !torch.vtensor<[?,?,8],f32>, !torch.list<int>, !torch.bool -> !torch.vtensor<[?,?],f32>
  %1 = torch.aten.select.int %0, %int1, %int0 : !torch.vtensor<[?,?],f32>, !torch.int, !torch.int -> !torch.vtensor<[?],f32>
  return %1 : !torch.vtensor<[?],f32>
}

// -----

/// argmax over the feature axis (its dim one int, not a list): it picks
/// within each row, so the row is selected from its input.
// CHECK-LABEL: func.func @argmax_over_other_axis
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?,8],f32>)
// CHECK: %[[ROW:.*]] = torch.aten.slice.Tensor %[[X]], {{.*}} -> !torch.vtensor<[?,1,8],f32>
// CHECK: %[[I:.*]] = torch.aten.argmax %[[ROW]], {{.*}} -> !torch.vtensor<[?,1],si64>
// CHECK: torch.aten.squeeze.dim %[[I]]
func.func @argmax_over_other_axis(%arg0: !torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[?],si64> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %false = torch.constant.bool false
  %0 = torch.aten.argmax %arg0, %int2, %false : !torch.vtensor<[?,?,8],f32>, !torch.int, !torch.bool -> !torch.vtensor<[?,?],si64>
  %1 = torch.aten.select.int %0, %int1, %int0 : !torch.vtensor<[?,?],si64>, !torch.int, !torch.int -> !torch.vtensor<[?],si64>
  return %1 : !torch.vtensor<[?],si64>
}

// -----

/// prod over the feature axis, kept as size 1: a slice of rows 2..4 is
/// taken from its input.
// CHECK-LABEL: func.func @prod_over_other_axis
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?,8],f32>)
// CHECK: %[[ROWS:.*]] = torch.aten.slice.Tensor %[[X]], {{.*}} -> !torch.vtensor<[?,2,8],f32>
// CHECK: %[[P:.*]] = torch.aten.prod.dim_int %[[ROWS]], {{.*}} -> !torch.vtensor<[?,2,1],f32>
// CHECK: return %[[P]]
func.func @prod_over_other_axis(%arg0: !torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[?,2,1],f32> {
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int4 = torch.constant.int 4
  %true = torch.constant.bool true
  %none = torch.constant.none
  %0 = torch.aten.prod.dim_int %arg0, %int2, %true, %none : !torch.vtensor<[?,?,8],f32>, !torch.int, !torch.bool, !torch.none -> !torch.vtensor<[?,?,1],f32>
  %1 = torch.aten.slice.Tensor %0, %int1, %int2, %int4, %int1 : !torch.vtensor<[?,?,1],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[?,2,1],f32>
  return %1 : !torch.vtensor<[?,2,1],f32>
}

// -----

/// [Pattern: move_every_result (a reduction with several results)]
/// var_mean has two results, each reaching the selection through its own
/// branch ((x - mean) / sqrt(var + eps)): once both branches carry the same
/// selection, var_mean runs on the selected row, once, for both.
// CHECK-LABEL: func.func @var_mean_both_results_selected
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?,16],f32>)
// CHECK: %[[ROW:.*]] = torch.aten.slice.Tensor %[[X]], %int1, %int0, %int1, %int1 {{.*}} -> !torch.vtensor<[?,1,16],f32>
// CHECK: %[[VAR:.*]], %[[MEAN:.*]] = torch.aten.var_mean.correction %[[ROW]], {{.*}} -> !torch.vtensor<[?,1,1],f32>, !torch.vtensor<[?,1,1],f32>
// CHECK: torch.aten.sub.Tensor %[[ROW]], %[[MEAN]]
// CHECK: torch.aten.add.Scalar %[[VAR]]
// CHECK-NOT: torch.aten.var_mean
func.func @var_mean_both_results_selected(%arg0: !torch.vtensor<[?,?,16],f32>) -> !torch.vtensor<[?,16],f32> {
  %0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %1 = torch.symbolic_int "s1" {min_val = 2, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0, %1], affine_map<()[s0, s1] -> (s0, s1, 16)> : !torch.vtensor<[?,?,16],f32>
  %int-1 = torch.constant.int -1
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %true = torch.constant.bool true
  %eps = torch.constant.float 1.000000e-05
  %dims = torch.prim.ListConstruct %int-1 : (!torch.int) -> !torch.list<int>
  %var, %mean = torch.aten.var_mean.correction %arg0, %dims, %int1, %true : !torch.vtensor<[?,?,16],f32>, !torch.list<int>, !torch.int, !torch.bool -> !torch.vtensor<[?,?,1],f32>, !torch.vtensor<[?,?,1],f32>
  torch.bind_symbolic_shape %var, [%0, %1], affine_map<()[s0, s1] -> (s0, s1, 1)> : !torch.vtensor<[?,?,1],f32>
  torch.bind_symbolic_shape %mean, [%0, %1], affine_map<()[s0, s1] -> (s0, s1, 1)> : !torch.vtensor<[?,?,1],f32>
  %2 = torch.aten.sub.Tensor %arg0, %mean, %int1 : !torch.vtensor<[?,?,16],f32>, !torch.vtensor<[?,?,1],f32>, !torch.int -> !torch.vtensor<[?,?,16],f32>
  torch.bind_symbolic_shape %2, [%0, %1], affine_map<()[s0, s1] -> (s0, s1, 16)> : !torch.vtensor<[?,?,16],f32>
  %3 = torch.aten.add.Scalar %var, %eps, %int1 : !torch.vtensor<[?,?,1],f32>, !torch.float, !torch.int -> !torch.vtensor<[?,?,1],f32>
  torch.bind_symbolic_shape %3, [%0, %1], affine_map<()[s0, s1] -> (s0, s1, 1)> : !torch.vtensor<[?,?,1],f32>
  %4 = torch.aten.sqrt %3 : !torch.vtensor<[?,?,1],f32> -> !torch.vtensor<[?,?,1],f32>
  torch.bind_symbolic_shape %4, [%0, %1], affine_map<()[s0, s1] -> (s0, s1, 1)> : !torch.vtensor<[?,?,1],f32>
  %5 = torch.aten.div.Tensor %2, %4 : !torch.vtensor<[?,?,16],f32>, !torch.vtensor<[?,?,1],f32> -> !torch.vtensor<[?,?,16],f32>
  torch.bind_symbolic_shape %5, [%0, %1], affine_map<()[s0, s1] -> (s0, s1, 16)> : !torch.vtensor<[?,?,16],f32>
  %6 = torch.aten.select.int %5, %int1, %int0 : !torch.vtensor<[?,?,16],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,16],f32>
  return %6 : !torch.vtensor<[?,16],f32>
}

// -----

/// The mean is also returned whole: var_mean must still produce every row, so
/// it stays (only the branches below it are selected).
// CHECK-LABEL: func.func @negative_var_mean_result_used_whole
// CHECK: %[[VAR:.*]], %[[MEAN:.*]] = torch.aten.var_mean.correction %arg0
// CHECK-SAME: -> !torch.vtensor<[?,?,1],f32>, !torch.vtensor<[?,?,1],f32>
// CHECK: return {{.*}}, %[[MEAN]]
func.func @negative_var_mean_result_used_whole(%arg0: !torch.vtensor<[?,?,16],f32>) -> (!torch.vtensor<[?,1],f32>, !torch.vtensor<[?,?,1],f32>) {
  %0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %1 = torch.symbolic_int "s1" {min_val = 2, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0, %1], affine_map<()[s0, s1] -> (s0, s1, 16)> : !torch.vtensor<[?,?,16],f32>
  %int-1 = torch.constant.int -1
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %true = torch.constant.bool true
  %dims = torch.prim.ListConstruct %int-1 : (!torch.int) -> !torch.list<int>
  %var, %mean = torch.aten.var_mean.correction %arg0, %dims, %int1, %true : !torch.vtensor<[?,?,16],f32>, !torch.list<int>, !torch.int, !torch.bool -> !torch.vtensor<[?,?,1],f32>, !torch.vtensor<[?,?,1],f32>
  torch.bind_symbolic_shape %var, [%0, %1], affine_map<()[s0, s1] -> (s0, s1, 1)> : !torch.vtensor<[?,?,1],f32>
  torch.bind_symbolic_shape %mean, [%0, %1], affine_map<()[s0, s1] -> (s0, s1, 1)> : !torch.vtensor<[?,?,1],f32>
  %2 = torch.aten.select.int %var, %int1, %int0 : !torch.vtensor<[?,?,1],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,1],f32>
  return %2, %mean : !torch.vtensor<[?,1],f32>, !torch.vtensor<[?,?,1],f32>
}

// -----

/// var_mean over the sliced axis: every row's statistics need all rows, so
/// the mean stays whole and broadcasts against the selected row.
// CHECK-LABEL: func.func @negative_var_mean_over_sliced_axis
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?,16],f32>)
// CHECK: %[[VAR:.*]], %[[MEAN:.*]] = torch.aten.var_mean.correction %[[X]]
// CHECK: %[[ROW:.*]] = torch.aten.slice.Tensor %[[X]]
// CHECK: torch.aten.sub.Tensor %[[ROW]], %[[MEAN]]
func.func @negative_var_mean_over_sliced_axis(%arg0: !torch.vtensor<[?,?,16],f32>) -> !torch.vtensor<[?,16],f32> {
  %0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %1 = torch.symbolic_int "s1" {min_val = 2, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0, %1], affine_map<()[s0, s1] -> (s0, s1, 16)> : !torch.vtensor<[?,?,16],f32>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %true = torch.constant.bool true
  %dims = torch.prim.ListConstruct %int1 : (!torch.int) -> !torch.list<int>
  %var, %mean = torch.aten.var_mean.correction %arg0, %dims, %int1, %true : !torch.vtensor<[?,?,16],f32>, !torch.list<int>, !torch.int, !torch.bool -> !torch.vtensor<[?,1,16],f32>, !torch.vtensor<[?,1,16],f32>
  torch.bind_symbolic_shape %var, [%0], affine_map<()[s0] -> (s0, 1, 16)> : !torch.vtensor<[?,1,16],f32>
  torch.bind_symbolic_shape %mean, [%0], affine_map<()[s0] -> (s0, 1, 16)> : !torch.vtensor<[?,1,16],f32>
  %2 = torch.aten.sub.Tensor %arg0, %mean, %int1 : !torch.vtensor<[?,?,16],f32>, !torch.vtensor<[?,1,16],f32>, !torch.int -> !torch.vtensor<[?,?,16],f32>
  torch.bind_symbolic_shape %2, [%0, %1], affine_map<()[s0, s1] -> (s0, s1, 16)> : !torch.vtensor<[?,?,16],f32>
  %3 = torch.aten.select.int %2, %int1, %int0 : !torch.vtensor<[?,?,16],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,16],f32>
  return %3 : !torch.vtensor<[?,16],f32>
}

// -----

/// max.dim has two results of different dtypes, values and indices, each
/// reaching the selection through its own branch: once both carry the same
/// selection, max.dim runs on the selected row, once, for both.
// CHECK-LABEL: func.func @max_dim_both_results_selected
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?,8],f32>)
// CHECK: %[[ROW:.*]] = torch.aten.slice.Tensor %[[X]], {{.*}} -> !torch.vtensor<[?,1,8],f32>
// CHECK: %[[V:.*]], %[[I:.*]] = torch.aten.max.dim %[[ROW]], {{.*}} -> !torch.vtensor<[?,1],f32>, !torch.vtensor<[?,1],si64>
// CHECK: %[[F:.*]] = torch.aten.to.dtype %[[I]]
// CHECK: torch.aten.add.Tensor %[[V]], %[[F]]
// CHECK-NOT: torch.aten.max.dim
func.func @max_dim_both_results_selected(%arg0: !torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[?],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int6 = torch.constant.int 6
  %false = torch.constant.bool false
  %none = torch.constant.none
  %values, %indices = torch.aten.max.dim %arg0, %int2, %false : !torch.vtensor<[?,?,8],f32>, !torch.int, !torch.bool -> !torch.vtensor<[?,?],f32>, !torch.vtensor<[?,?],si64>
  %0 = torch.aten.to.dtype %indices, %int6, %false, %false, %none : !torch.vtensor<[?,?],si64>, !torch.int, !torch.bool, !torch.bool, !torch.none -> !torch.vtensor<[?,?],f32>
  %1 = torch.aten.add.Tensor %values, %0, %int1 : !torch.vtensor<[?,?],f32>, !torch.vtensor<[?,?],f32>, !torch.int -> !torch.vtensor<[?,?],f32>
  %2 = torch.aten.select.int %1, %int1, %int0 : !torch.vtensor<[?,?],f32>, !torch.int, !torch.int -> !torch.vtensor<[?],f32>
  return %2 : !torch.vtensor<[?],f32>
}
