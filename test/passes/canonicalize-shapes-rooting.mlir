// RUN: anyshape-opt %s --split-input-file --anyshape-canonicalize-shapes | FileCheck %s

/// [Pattern: root_size_query]
/// Shape queries of intermediate values become facts over argument dims, and
/// dims that share a symbol read one SSA value.

// CHECK-LABEL: func.func @rooted_through_elementwise
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?,8],f32>, %[[M:.*]]: !torch.vtensor<[?,?],si64>)
// CHECK-DAG: %[[ONE:.*]] = torch.constant.int 1
// CHECK-DAG: %[[EIGHT:.*]] = torch.constant.int 8
/// The root query follows the argument bindings: IREE's torch input replaces
/// uses of a bound argument with a value defined at its binding.
// CHECK: torch.bind_symbolic_shape %[[M]]
// CHECK: %[[L:.*]] = torch.aten.size.int %[[X]], %[[ONE]]
// CHECK-NOT: torch.aten.size.int
// CHECK: %[[SUM:.*]] = torch.aten.add.int %[[L]], %[[L]]
// CHECK: %[[ALL:.*]] = torch.aten.add.int %[[SUM]], %[[EIGHT]]
// CHECK: return %[[ALL]]
func.func @rooted_through_elementwise(%arg0: !torch.vtensor<[?,?,8],f32>, %arg1: !torch.vtensor<[?,?],si64>) -> !torch.int {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 512} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1, 8)> : !torch.vtensor<[?,?,8],f32>
  torch.bind_symbolic_shape %arg1, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],si64>
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %0 = torch.aten.tanh %arg0 : !torch.vtensor<[?,?,8],f32> -> !torch.vtensor<[?,?,8],f32>
  %1 = torch.aten.size.int %0, %int1 : !torch.vtensor<[?,?,8],f32>, !torch.int -> !torch.int
  %2 = torch.aten.size.int %arg1, %int1 : !torch.vtensor<[?,?],si64>, !torch.int -> !torch.int
  %3 = torch.aten.size.int %0, %int2 : !torch.vtensor<[?,?,8],f32>, !torch.int -> !torch.int
  %4 = torch.aten.add.int %1, %2 : !torch.int, !torch.int -> !torch.int
  %5 = torch.aten.add.int %4, %3 : !torch.int, !torch.int -> !torch.int
  return %5 : !torch.int
}

// -----

/// [Pattern: root_size_query, root_numel]
/// A binding with a derived dim (2 * s0) becomes scalar arithmetic on the root;
/// numel is the product of the rooted dims.
// CHECK-LABEL: func.func @derived_dims_and_numel
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,4],f32>)
// CHECK-DAG: %[[EIGHT:.*]] = torch.constant.int 8
// CHECK-DAG: %[[TWO:.*]] = torch.constant.int 2
// CHECK-DAG: %[[ZERO:.*]] = torch.constant.int 0
// CHECK: %[[S0:.*]] = torch.aten.size.int %[[X]], %[[ZERO]]
// CHECK-NOT: torch.aten.numel
// CHECK: %[[D:.*]] = torch.aten.mul.int %[[TWO]], %[[S0]]
// CHECK: %[[N:.*]] = torch.aten.mul.int %[[EIGHT]], %[[S0]]
// CHECK: return %[[D]], %[[N]]
func.func @derived_dims_and_numel(%arg0: !torch.vtensor<[?,4],f32>) -> (!torch.int, !torch.int) {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0], affine_map<()[s0] -> (s0, 4)> : !torch.vtensor<[?,4],f32>
  %int0 = torch.constant.int 0
  %1 = torch.prim.ListConstruct %arg0, %arg0 : (!torch.vtensor<[?,4],f32>, !torch.vtensor<[?,4],f32>) -> !torch.list<vtensor>
  %2 = torch.aten.cat %1, %int0 : !torch.list<vtensor>, !torch.int -> !torch.vtensor<[?,4],f32>
  torch.bind_symbolic_shape %2, [%s0], affine_map<()[s0] -> (s0 * 2, 4)> : !torch.vtensor<[?,4],f32>
  %3 = torch.aten.size.int %2, %int0 : !torch.vtensor<[?,4],f32>, !torch.int -> !torch.int
  %4 = torch.aten.numel %2 : !torch.vtensor<[?,4],f32> -> !torch.int
  return %3, %4 : !torch.int, !torch.int
}

// -----

/// [Pattern: root_size_query]
/// Without a binding, dims propagate through the producer: a transpose swaps
/// them, a matmul takes rows from the left and columns from the right.
// CHECK-LABEL: func.func @propagated_through_producers
// CHECK-SAME: (%[[A:.*]]: !torch.vtensor<[?,?],f32>, %[[B:.*]]: !torch.vtensor<[?,?],f32>)
// CHECK-DAG: %[[ZERO:.*]] = torch.constant.int 0
// CHECK-DAG: %[[ONE:.*]] = torch.constant.int 1
// CHECK-DAG: %[[ROWS:.*]] = torch.aten.size.int %[[A]], %[[ONE]]
// CHECK-DAG: %[[COLS:.*]] = torch.aten.size.int %[[B]], %[[ZERO]]
// CHECK: return %[[ROWS]], %[[COLS]]
func.func @propagated_through_producers(%arg0: !torch.vtensor<[?,?],f32>, %arg1: !torch.vtensor<[?,?],f32>) -> (!torch.int, !torch.int) {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %0 = torch.aten.transpose.int %arg0, %int0, %int1 : !torch.vtensor<[?,?],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,?],f32>
  %1 = torch.aten.transpose.int %arg1, %int0, %int1 : !torch.vtensor<[?,?],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,?],f32>
  %2 = torch.aten.mm %0, %1 : !torch.vtensor<[?,?],f32>, !torch.vtensor<[?,?],f32> -> !torch.vtensor<[?,?],f32>
  %3 = torch.aten.size.int %2, %int0 : !torch.vtensor<[?,?],f32>, !torch.int -> !torch.int
  %4 = torch.aten.size.int %2, %int1 : !torch.vtensor<[?,?],f32>, !torch.int -> !torch.int
  return %3, %4 : !torch.int, !torch.int
}

// -----

/// Broadcasting two unrelated dynamic dims: either may be 1 at run time, so
/// the result's size is unknown and its query must stay.
// CHECK-LABEL: func.func @negative_broadcast_of_unrelated_dims
// CHECK: %[[SUM:.*]] = torch.aten.add.Tensor
// CHECK: %[[Q:.*]] = torch.aten.size.int %[[SUM]]
// CHECK: return %[[Q]]
func.func @negative_broadcast_of_unrelated_dims(%arg0: !torch.vtensor<[?],f32>, %arg1: !torch.vtensor<[?],f32>) -> !torch.int {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %0 = torch.aten.add.Tensor %arg0, %arg1, %int1 : !torch.vtensor<[?],f32>, !torch.vtensor<[?],f32>, !torch.int -> !torch.vtensor<[?],f32>
  %1 = torch.aten.size.int %0, %int0 : !torch.vtensor<[?],f32>, !torch.int -> !torch.int
  return %1 : !torch.int
}

// -----

/// An op the analysis does not know (data-dependent nonzero) keeps its query.
// CHECK-LABEL: func.func @negative_unknown_producer
// CHECK: %[[NZ:.*]] = torch.aten.nonzero
// CHECK: torch.aten.size.int %[[NZ]]
func.func @negative_unknown_producer(%arg0: !torch.vtensor<[?],f32>) -> !torch.int {
  %int0 = torch.constant.int 0
  %0 = torch.aten.nonzero %arg0 : !torch.vtensor<[?],f32> -> !torch.vtensor<[?,1],si64>
  %1 = torch.aten.size.int %0, %int0 : !torch.vtensor<[?,1],si64>, !torch.int -> !torch.int
  return %1 : !torch.int
}

// -----

/// Without bindings, dims propagate through slices to the end, selects,
/// reductions (keepdim or not), views and concatenation (sum of the parts).
// CHECK-LABEL: func.func @propagated_through_slicing_reductions_and_cat
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?,8],f32>)
// CHECK-DAG: %[[ZERO:.*]] = torch.constant.int 0
// CHECK-DAG: %[[ONE:.*]] = torch.constant.int 1
// CHECK-DAG: %[[B:.*]] = torch.aten.size.int %[[X]], %[[ZERO]]
// CHECK-DAG: %[[L:.*]] = torch.aten.size.int %[[X]], %[[ONE]]
// CHECK-DAG: %[[TWICE:.*]] = torch.aten.mul.int %{{.*}}, %[[L]]
// CHECK-DAG: %[[EIGHT:.*]] = torch.constant.int 8
// CHECK: return %[[L]], %[[B]], %[[B]], %[[EIGHT]], %[[TWICE]]
func.func @propagated_through_slicing_reductions_and_cat(%arg0: !torch.vtensor<[?,?,8],f32>) -> (!torch.int, !torch.int, !torch.int, !torch.int, !torch.int) {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %end = torch.constant.int 9223372036854775807
  %false = torch.constant.bool false
  %true = torch.constant.bool true
  %none = torch.constant.none
  %0 = torch.aten.slice.Tensor %arg0, %int1, %int0, %end, %int1 : !torch.vtensor<[?,?,8],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[?,?,8],f32>
  %1 = torch.aten.size.int %0, %int1 : !torch.vtensor<[?,?,8],f32>, !torch.int -> !torch.int
  %2 = torch.aten.select.int %arg0, %int1, %int0 : !torch.vtensor<[?,?,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,8],f32>
  %3 = torch.aten.size.int %2, %int0 : !torch.vtensor<[?,8],f32>, !torch.int -> !torch.int
  %dims = torch.prim.ListConstruct %int1 : (!torch.int) -> !torch.list<int>
  %4 = torch.aten.sum.dim_IntList %arg0, %dims, %false, %none : !torch.vtensor<[?,?,8],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[?,8],f32>
  %5 = torch.aten.size.int %4, %int0 : !torch.vtensor<[?,8],f32>, !torch.int -> !torch.int
  %6 = torch.aten.mean.dim %arg0, %dims, %true, %none : !torch.vtensor<[?,?,8],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[?,1,8],f32>
  %7 = torch.aten.flatten.using_ints %6, %int1, %int2 : !torch.vtensor<[?,1,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,?],f32>
  %8 = torch.aten.size.int %7, %int1 : !torch.vtensor<[?,?],f32>, !torch.int -> !torch.int
  %parts = torch.prim.ListConstruct %arg0, %0 : (!torch.vtensor<[?,?,8],f32>, !torch.vtensor<[?,?,8],f32>) -> !torch.list<vtensor>
  %9 = torch.aten.cat %parts, %int1 : !torch.list<vtensor>, !torch.int -> !torch.vtensor<[?,?,8],f32>
  %10 = torch.aten.size.int %9, %int1 : !torch.vtensor<[?,?,8],f32>, !torch.int -> !torch.int
  return %1, %3, %5, %8, %10 : !torch.int, !torch.int, !torch.int, !torch.int, !torch.int
}

// -----

/// x[:, :4] on a dynamic length: the result has min(L, 4) elements, which the
/// symbols cannot express, so the query stays.
// CHECK-LABEL: func.func @negative_slice_may_clamp
// CHECK: %[[S:.*]] = torch.aten.slice.Tensor
// CHECK: %[[Q:.*]] = torch.aten.size.int %[[S]]
// CHECK: return %[[Q]]
func.func @negative_slice_may_clamp(%arg0: !torch.vtensor<[?,?],f32>) -> !torch.int {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int4 = torch.constant.int 4
  %0 = torch.aten.slice.Tensor %arg0, %int1, %int0, %int4, %int1 : !torch.vtensor<[?,?],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[?,?],f32>
  %1 = torch.aten.size.int %0, %int1 : !torch.vtensor<[?,?],f32>, !torch.int -> !torch.int
  return %1 : !torch.int
}

// -----

/// [Pattern: rewrite_expand, root_size_query]
/// The identity expand of %arg1 folds away first and leaves its binding on
/// %arg1 at the bottom of the block; the root query of s0 made afterwards must
/// still go to the entry, above the mul.int that uses it.
// CHECK-LABEL: func.func @root_above_identity_expand_binding
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?],f32>, %[[Y:.*]]: !torch.vtensor<[?,?],f32>)
// CHECK: %[[B:.*]] = torch.aten.size.int %[[X]], %int0
// CHECK: %[[L:.*]] = torch.aten.size.int %[[X]], %int1
// CHECK: %[[N:.*]] = torch.aten.mul.int %[[B]], %[[L]]
// CHECK: return %[[N]], %[[Y]]
func.func @root_above_identity_expand_binding(%arg0: !torch.vtensor<[?,?],f32>, %arg1: !torch.vtensor<[?,?],f32>) -> (!torch.int, !torch.vtensor<[?,?],f32>) {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],f32>
  torch.bind_symbolic_shape %arg1, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],f32>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %false = torch.constant.bool false
  %0 = torch.aten.size.int %arg1, %int0 : !torch.vtensor<[?,?],f32>, !torch.int -> !torch.int
  %1 = torch.aten.size.int %arg0, %int1 : !torch.vtensor<[?,?],f32>, !torch.int -> !torch.int
  %2 = torch.aten.mul.int %0, %1 : !torch.int, !torch.int -> !torch.int
  %5 = torch.prim.ListConstruct %0, %1 : (!torch.int, !torch.int) -> !torch.list<int>
  %6 = torch.aten.expand %arg1, %5, %false : !torch.vtensor<[?,?],f32>, !torch.list<int>, !torch.bool -> !torch.vtensor<[?,?],f32>
  torch.bind_symbolic_shape %6, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],f32>
  return %2, %6 : !torch.int, !torch.vtensor<[?,?],f32>
}

// -----

/// [Pattern: root_size_query]
/// torch reads dim 0 (or -1) of a 0-d tensor as the tensor itself: a reduction
/// over it has a 0-d result, which the shape analysis derives (it once took
/// the axis modulo the rank, 0, and crashed the pass).

// CHECK-LABEL: func.func @reduction_of_a_0d_tensor
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?],f32>, %[[S:.*]]: !torch.vtensor<[],f32>)
// CHECK: %[[R:.*]] = torch.aten.logsumexp %[[S]], %{{.*}}, %{{.*}} : !torch.vtensor<[],f32>, !torch.list<int>, !torch.bool -> !torch.vtensor<[],f32>
// CHECK: torch.aten.add.Tensor %[[X]], %[[R]]
func.func @reduction_of_a_0d_tensor(%arg0: !torch.vtensor<[?],f32>, %arg1: !torch.vtensor<[],f32>) -> !torch.vtensor<[?],f32> {
  %s0 = torch.symbolic_int "s0" {min_val = 2, max_val = 512} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0], affine_map<()[s0] -> (s0)> : !torch.vtensor<[?],f32>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %true = torch.constant.bool true
  %dims = torch.prim.ListConstruct %int0 : (!torch.int) -> !torch.list<int>
  %0 = torch.aten.logsumexp %arg1, %dims, %true : !torch.vtensor<[],f32>, !torch.list<int>, !torch.bool -> !torch.vtensor<[],f32>
  %1 = torch.aten.add.Tensor %arg0, %0, %int1 : !torch.vtensor<[?],f32>, !torch.vtensor<[],f32>, !torch.int -> !torch.vtensor<[?],f32>
  return %1 : !torch.vtensor<[?],f32>
}

// -----

/// var.dim, std.dim and var_mean.dim take their dims at operand 1 and keepdim
/// at operand 3 (unbiased in between), as the .correction forms do: a size of
/// their results is rooted like any other.
// CHECK-LABEL: func.func @rooted_through_var_dim_forms
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?,8],f32>)
// CHECK: %[[L:.*]] = torch.aten.size.int %[[X]], %{{.*}}
// CHECK-NOT: torch.aten.size.int
// CHECK: return %[[L]], %[[L]], %[[L]]
func.func @rooted_through_var_dim_forms(%arg0: !torch.vtensor<[?,?,8],f32>) -> (!torch.int, !torch.int, !torch.int) {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 2, max_val = 512} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1, 8)> : !torch.vtensor<[?,?,8],f32>
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %true = torch.constant.bool true
  %false = torch.constant.bool false
  %dims = torch.prim.ListConstruct %int2 : (!torch.int) -> !torch.list<int>
  %0 = torch.aten.var.dim %arg0, %dims, %true, %false : !torch.vtensor<[?,?,8],f32>, !torch.list<int>, !torch.bool, !torch.bool -> !torch.vtensor<[?,?],f32>
  %1 = torch.aten.std.dim %arg0, %dims, %true, %true : !torch.vtensor<[?,?,8],f32>, !torch.list<int>, !torch.bool, !torch.bool -> !torch.vtensor<[?,?,1],f32>
  %var, %mean = torch.aten.var_mean.dim %arg0, %dims, %true, %false : !torch.vtensor<[?,?,8],f32>, !torch.list<int>, !torch.bool, !torch.bool -> !torch.vtensor<[?,?],f32>, !torch.vtensor<[?,?],f32>
  %2 = torch.aten.size.int %0, %int1 : !torch.vtensor<[?,?],f32>, !torch.int -> !torch.int
  %3 = torch.aten.size.int %1, %int1 : !torch.vtensor<[?,?,1],f32>, !torch.int -> !torch.int
  %4 = torch.aten.size.int %mean, %int1 : !torch.vtensor<[?,?],f32>, !torch.int -> !torch.int
  return %2, %3, %4 : !torch.int, !torch.int, !torch.int
}

// -----

/// [Pattern: root_size_list_item, fold_rank]
/// An item of a size list (`x.size()[i]`, negative i too) is that dim, rooted
/// like a size query; the rank of a ranked tensor is a constant.
// CHECK-LABEL: func.func @size_list_item_and_rank
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?,8],f32>)
// CHECK-DAG: %[[THREE:.*]] = torch.constant.int 3
// CHECK-DAG: %[[EIGHT:.*]] = torch.constant.int 8
// CHECK-DAG: %[[ONE:.*]] = torch.constant.int 1
// CHECK-NOT: torch.aten.__getitem__.t
// CHECK-NOT: torch.aten.dim
// CHECK: %[[L:.*]] = torch.aten.size.int %[[X]], %[[ONE]]
// CHECK: return %[[L]], %[[EIGHT]], %[[THREE]]
func.func @size_list_item_and_rank(%arg0: !torch.vtensor<[?,?,8],f32>) -> (!torch.int, !torch.int, !torch.int) {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 512} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1, 8)> : !torch.vtensor<[?,?,8],f32>
  %int1 = torch.constant.int 1
  %int-1 = torch.constant.int -1
  %0 = torch.aten.tanh %arg0 : !torch.vtensor<[?,?,8],f32> -> !torch.vtensor<[?,?,8],f32>
  %1 = torch.aten.size %0 : !torch.vtensor<[?,?,8],f32> -> !torch.list<int>
  %2 = torch.aten.__getitem__.t %1, %int1 : !torch.list<int>, !torch.int -> !torch.int
  %3 = torch.aten.__getitem__.t %1, %int-1 : !torch.list<int>, !torch.int -> !torch.int
  %4 = torch.aten.dim %0 : !torch.vtensor<[?,?,8],f32> -> !torch.int
  return %2, %3, %4 : !torch.int, !torch.int, !torch.int
}

// -----

/// [Pattern: root_size_list_item]
/// An item of a list that is not a size list is data: it stays.
// CHECK-LABEL: func.func @negative_item_of_a_list_not_sizes
// CHECK: %[[ITEM:.*]] = torch.aten.__getitem__.t
// CHECK: return %[[ITEM]]
func.func @negative_item_of_a_list_not_sizes(%arg0: !torch.int, %arg1: !torch.int) -> !torch.int {
  %int1 = torch.constant.int 1
  %0 = torch.prim.ListConstruct %arg0, %arg1 : (!torch.int, !torch.int) -> !torch.list<int>
  %1 = torch.aten.__getitem__.t %0, %int1 : !torch.list<int>, !torch.int -> !torch.int
  return %1 : !torch.int
}
