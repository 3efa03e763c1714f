// RUN: anyshape-opt %s --split-input-file --anyshape-hoist-slices | FileCheck %s

/// [Pattern: through_matmul, through_softmax, through_elementwise (decomposed attention)]
/// The last encoder layer of a classifier, decomposed attention with a
/// residual: out = (softmax(Q Kᵀ s + mask) V) Wo + h, then out[:, 0]. The row
/// moves into Q and the mask rows, never into K or V; h is needed whole by K,
/// V, so one row of it is selected on the branches that lead to the output
/// (the residual and Q read the same selection).
// CHECK-LABEL: func.func @encoder_layer_classifier_row
// CHECK-SAME: (%[[H:.*]]: !torch.vtensor<[?,?,8],f32>, %[[MASK:.*]]: !torch.vtensor<[?,?,?],f32>, %[[WQ:.*]]: !torch.vtensor<[8,8],f32>, %[[WK:.*]]: !torch.vtensor<[8,8],f32>, %[[WV:.*]]: !torch.vtensor<[8,8],f32>, %[[WO:.*]]: !torch.vtensor<[8,8],f32>)
// CHECK-DAG: %[[K:.*]] = torch.aten.linear %[[H]], %[[WK]], %{{.*}} -> !torch.vtensor<[?,?,8],f32>
// CHECK-DAG: %[[V:.*]] = torch.aten.linear %[[H]], %[[WV]], %{{.*}} -> !torch.vtensor<[?,?,8],f32>
// CHECK-DAG: %[[HROW:.*]] = torch.aten.slice.Tensor %[[H]], %{{.*}} -> !torch.vtensor<[?,1,8],f32>
// CHECK-DAG: %[[Q:.*]] = torch.aten.linear %[[HROW]], %[[WQ]], %{{.*}} -> !torch.vtensor<[?,1,8],f32>
// CHECK: %[[S:.*]] = torch.aten.matmul %[[Q]], %{{.*}} -> !torch.vtensor<[?,1,?],f32>
// CHECK: %[[MROW:.*]] = torch.aten.slice.Tensor %[[MASK]], %{{.*}} -> !torch.vtensor<[?,1,?],f32>
// CHECK: torch.aten.add.Tensor %{{.*}}, %[[MROW]]
// CHECK: %[[P:.*]] = torch.aten.softmax.int {{.*}} -> !torch.vtensor<[?,1,?],f32>
// CHECK: %[[O:.*]] = torch.aten.matmul %[[P]], %[[V]] {{.*}} -> !torch.vtensor<[?,1,8],f32>
// CHECK: %[[PROJ:.*]] = torch.aten.linear %[[O]], %[[WO]], %{{.*}} -> !torch.vtensor<[?,1,8],f32>
// CHECK: %[[RES:.*]] = torch.aten.add.Tensor %[[PROJ]], %[[HROW]]
// CHECK: %[[OUT:.*]] = torch.aten.squeeze.dim %[[RES]]
// CHECK: return %[[OUT]]
func.func @encoder_layer_classifier_row(%h: !torch.vtensor<[?,?,8],f32>, %mask: !torch.vtensor<[?,?,?],f32>, %wq: !torch.vtensor<[8,8],f32>, %wk: !torch.vtensor<[8,8],f32>, %wv: !torch.vtensor<[8,8],f32>, %wo: !torch.vtensor<[8,8],f32>) -> !torch.vtensor<[?,8],f32> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 4} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %h, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1, 8)> : !torch.vtensor<[?,?,8],f32>
  torch.bind_symbolic_shape %mask, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1, s1)> : !torch.vtensor<[?,?,?],f32>
  %none = torch.constant.none
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int-1 = torch.constant.int -1
  %scale = torch.constant.float 0.35355339059327373
  %q = torch.aten.linear %h, %wq, %none : !torch.vtensor<[?,?,8],f32>, !torch.vtensor<[8,8],f32>, !torch.none -> !torch.vtensor<[?,?,8],f32>
  %k = torch.aten.linear %h, %wk, %none : !torch.vtensor<[?,?,8],f32>, !torch.vtensor<[8,8],f32>, !torch.none -> !torch.vtensor<[?,?,8],f32>
  %v = torch.aten.linear %h, %wv, %none : !torch.vtensor<[?,?,8],f32>, !torch.vtensor<[8,8],f32>, !torch.none -> !torch.vtensor<[?,?,8],f32>
  %kt = torch.aten.transpose.int %k, %int1, %int2 : !torch.vtensor<[?,?,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,8,?],f32>
  %0 = torch.aten.matmul %q, %kt : !torch.vtensor<[?,?,8],f32>, !torch.vtensor<[?,8,?],f32> -> !torch.vtensor<[?,?,?],f32>
  %1 = torch.aten.mul.Scalar %0, %scale : !torch.vtensor<[?,?,?],f32>, !torch.float -> !torch.vtensor<[?,?,?],f32>
  %2 = torch.aten.add.Tensor %1, %mask, %int1 : !torch.vtensor<[?,?,?],f32>, !torch.vtensor<[?,?,?],f32>, !torch.int -> !torch.vtensor<[?,?,?],f32>
  %3 = torch.aten.softmax.int %2, %int-1, %none : !torch.vtensor<[?,?,?],f32>, !torch.int, !torch.none -> !torch.vtensor<[?,?,?],f32>
  %4 = torch.aten.matmul %3, %v : !torch.vtensor<[?,?,?],f32>, !torch.vtensor<[?,?,8],f32> -> !torch.vtensor<[?,?,8],f32>
  %5 = torch.aten.linear %4, %wo, %none : !torch.vtensor<[?,?,8],f32>, !torch.vtensor<[8,8],f32>, !torch.none -> !torch.vtensor<[?,?,8],f32>
  %6 = torch.aten.add.Tensor %5, %h, %int1 : !torch.vtensor<[?,?,8],f32>, !torch.vtensor<[?,?,8],f32>, !torch.int -> !torch.vtensor<[?,?,8],f32>
  %7 = torch.aten.select.int %6, %int1, %int0 : !torch.vtensor<[?,?,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,8],f32>
  return %7 : !torch.vtensor<[?,8],f32>
}

// -----

/// [Pattern: through_attention]
/// scaled_dot_product_attention (not decomposed): a row of the output is a row
/// of Q with its mask row; K and V whole.
// CHECK-LABEL: func.func @sdpa_query_rows
// CHECK-SAME: (%[[Q:.*]]: !torch.vtensor<[?,2,?,4],f32>, %[[K:.*]]: !torch.vtensor<[?,2,?,4],f32>, %[[V:.*]]: !torch.vtensor<[?,2,?,4],f32>, %[[M:.*]]: !torch.vtensor<[?,1,?,?],f32>)
// CHECK-DAG: %[[QS:.*]] = torch.aten.slice.Tensor %[[Q]], %{{.*}} -> !torch.vtensor<[?,2,1,4],f32>
// CHECK-DAG: %[[MS:.*]] = torch.aten.slice.Tensor %[[M]], %{{.*}} -> !torch.vtensor<[?,1,1,?],f32>
// CHECK: torch.aten.scaled_dot_product_attention %[[QS]], %[[K]], %[[V]], %[[MS]]
func.func @sdpa_query_rows(%q: !torch.vtensor<[?,2,?,4],f32>, %k: !torch.vtensor<[?,2,?,4],f32>, %v: !torch.vtensor<[?,2,?,4],f32>, %m: !torch.vtensor<[?,1,?,?],f32>) -> !torch.vtensor<[?,2,4],f32> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 4} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %q, [%s0, %s1], affine_map<()[s0, s1] -> (s0, 2, s1, 4)> : !torch.vtensor<[?,2,?,4],f32>
  torch.bind_symbolic_shape %k, [%s0, %s1], affine_map<()[s0, s1] -> (s0, 2, s1, 4)> : !torch.vtensor<[?,2,?,4],f32>
  torch.bind_symbolic_shape %v, [%s0, %s1], affine_map<()[s0, s1] -> (s0, 2, s1, 4)> : !torch.vtensor<[?,2,?,4],f32>
  torch.bind_symbolic_shape %m, [%s0, %s1], affine_map<()[s0, s1] -> (s0, 1, s1, s1)> : !torch.vtensor<[?,1,?,?],f32>
  %int0 = torch.constant.int 0
  %int2 = torch.constant.int 2
  %none = torch.constant.none
  %false = torch.constant.bool false
  %dropout = torch.constant.float 0.000000e+00
  %0 = torch.aten.scaled_dot_product_attention %q, %k, %v, %m, %dropout, %false, %none, %false : !torch.vtensor<[?,2,?,4],f32>, !torch.vtensor<[?,2,?,4],f32>, !torch.vtensor<[?,2,?,4],f32>, !torch.vtensor<[?,1,?,?],f32>, !torch.float, !torch.bool, !torch.none, !torch.bool -> !torch.vtensor<[?,2,?,4],f32>
  %1 = torch.aten.select.int %0, %int2, %int0 : !torch.vtensor<[?,2,?,4],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,2,4],f32>
  return %1 : !torch.vtensor<[?,2,4],f32>
}

// -----

/// Causal attention: row i's mask depends on i, which a sliced Q no longer knows.
// CHECK-LABEL: func.func @negative_sdpa_causal
// CHECK: %[[A:.*]] = torch.aten.scaled_dot_product_attention
// CHECK: torch.aten.select.int %[[A]]
func.func @negative_sdpa_causal(%q: !torch.vtensor<[1,2,8,4],f32>, %k: !torch.vtensor<[1,2,8,4],f32>, %v: !torch.vtensor<[1,2,8,4],f32>) -> !torch.vtensor<[1,2,4],f32> {
  %int2 = torch.constant.int 2
  %int-1 = torch.constant.int -1
  %none = torch.constant.none
  %true = torch.constant.bool true
  %false = torch.constant.bool false
  %dropout = torch.constant.float 0.000000e+00
  %0 = torch.aten.scaled_dot_product_attention %q, %k, %v, %none, %dropout, %true, %none, %false : !torch.vtensor<[1,2,8,4],f32>, !torch.vtensor<[1,2,8,4],f32>, !torch.vtensor<[1,2,8,4],f32>, !torch.none, !torch.float, !torch.bool, !torch.none, !torch.bool -> !torch.vtensor<[1,2,8,4],f32>
  %1 = torch.aten.select.int %0, %int2, %int-1 : !torch.vtensor<[1,2,8,4],f32>, !torch.int, !torch.int -> !torch.vtensor<[1,2,4],f32>
  return %1 : !torch.vtensor<[1,2,4],f32>
}

// -----

/// [Pattern: split_into_slices]
/// A fused QKV projection split into Q, K and V: the split becomes three
/// column slices, each takes its own copy of the projection (together the same
/// work), so the Q part alone can be row-sliced. K and V stay whole.
// CHECK-LABEL: func.func @fused_qkv_split
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?,8],f32>, %[[W:.*]]: !torch.vtensor<[24,8],f32>)
// CHECK-DAG: %[[XROW:.*]] = torch.aten.slice.Tensor %[[X]], %{{.*}} -> !torch.vtensor<[?,1,8],f32>
// CHECK-DAG: %[[WQ:.*]] = torch.aten.slice.Tensor %[[W]], %{{.*}} -> !torch.vtensor<[8,8],f32>
// CHECK-DAG: %[[Q:.*]] = torch.aten.linear %[[XROW]], %[[WQ]], %{{.*}} -> !torch.vtensor<[?,1,8],f32>
// CHECK-DAG: torch.aten.linear %[[X]], %{{.*}} -> !torch.vtensor<[?,?,8],f32>
// CHECK-DAG: torch.aten.linear %[[X]], %{{.*}} -> !torch.vtensor<[?,?,8],f32>
// CHECK-NOT: torch.aten.split_with_sizes
func.func @fused_qkv_split(%x: !torch.vtensor<[?,?,8],f32>, %w: !torch.vtensor<[24,8],f32>) -> (!torch.vtensor<[?,8],f32>, !torch.vtensor<[?,?,8],f32>, !torch.vtensor<[?,?,8],f32>) {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 4} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %x, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1, 8)> : !torch.vtensor<[?,?,8],f32>
  %none = torch.constant.none
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int8 = torch.constant.int 8
  %0 = torch.aten.linear %x, %w, %none : !torch.vtensor<[?,?,8],f32>, !torch.vtensor<[24,8],f32>, !torch.none -> !torch.vtensor<[?,?,24],f32>
  %sizes = torch.prim.ListConstruct %int8, %int8, %int8 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %1 = torch.aten.split_with_sizes %0, %sizes, %int2 : !torch.vtensor<[?,?,24],f32>, !torch.list<int>, !torch.int -> !torch.list<vtensor>
  %q, %k, %v = torch.prim.ListUnpack %1 : !torch.list<vtensor> -> !torch.vtensor<[?,?,8],f32>, !torch.vtensor<[?,?,8],f32>, !torch.vtensor<[?,?,8],f32>
  %2 = torch.aten.select.int %q, %int1, %int0 : !torch.vtensor<[?,?,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,8],f32>
  return %2, %k, %v : !torch.vtensor<[?,8],f32>, !torch.vtensor<[?,?,8],f32>, !torch.vtensor<[?,?,8],f32>
}

// -----

/// [Pattern: move_selection (a producer other users need whole)]
/// Two selections of one value along different axes: each needs rows the
/// other drops, so the value is computed whole once and neither moves.
// CHECK-LABEL: func.func @negative_two_different_selections
// CHECK: %[[T:.*]] = torch.aten.tanh
// CHECK-DAG: torch.aten.select.int %[[T]], %{{.*}}
// CHECK-DAG: torch.aten.select.int %[[T]], %{{.*}}
func.func @negative_two_different_selections(%x: !torch.vtensor<[?,?,8],f32>) -> (!torch.vtensor<[?,8],f32>, !torch.vtensor<[?,?],f32>) {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %0 = torch.aten.tanh %x : !torch.vtensor<[?,?,8],f32> -> !torch.vtensor<[?,?,8],f32>
  %1 = torch.aten.select.int %0, %int1, %int0 : !torch.vtensor<[?,?,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,8],f32>
  %2 = torch.aten.select.int %0, %int2, %int0 : !torch.vtensor<[?,?,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,?],f32>
  return %1, %2 : !torch.vtensor<[?,8],f32>, !torch.vtensor<[?,?],f32>
}
