// RUN: anyshape-opt %s --split-input-file --anyshape-defer-softmax-normalization | FileCheck %s

/// [Pattern: defer_normalization]
/// torch's scaled_dot_product_attention decomposition: the softmax over a
/// dynamic key axis, its rows of all -inf zeroed, the heads flattened into
/// bmm's batch. The product reads exp(S - max) and the division by the row
/// sums, and the guard (now max == -inf), come after it.
// CHECK-LABEL: func.func @attention_probabilities_times_values
// CHECK-SAME: (%[[S:.*]]: !torch.vtensor<[?,4,?,?],f32>, %[[V:.*]]: !torch.vtensor<[?,4,?,8],f32>)
// CHECK: %[[VFLAT:.*]] = torch.aten.flatten.using_ints %[[V]]
// CHECK: %[[MAX:.*]] = torch.aten.amax %[[S]], %{{.*}}, %true : {{.*}} -> !torch.vtensor<[?,4,?,1],f32>
// CHECK: %[[SHIFTED:.*]] = torch.aten.sub.Tensor %[[S]], %[[MAX]]
// CHECK: %[[E:.*]] = torch.aten.exp %[[SHIFTED]] : !torch.vtensor<[?,4,?,?],f32> -> !torch.vtensor<[?,4,?,?],f32>
// CHECK: %[[SUM:.*]] = torch.aten.sum.dim_IntList %[[E]], {{.*}} -> !torch.vtensor<[?,4,?,1],f32>
// CHECK: %[[EFLAT:.*]] = torch.aten.flatten.using_ints %[[E]], %int0, %int1 : {{.*}} -> !torch.vtensor<[?,?,?],f32>
// CHECK: %[[PRODUCT:.*]] = torch.aten.bmm %[[EFLAT]], %[[VFLAT]] : {{.*}} -> !torch.vtensor<[?,?,8],f32>
// CHECK: %[[SUMFLAT:.*]] = torch.aten.flatten.using_ints %[[SUM]], %int0, %int1 : {{.*}} -> !torch.vtensor<[?,?,1],f32>
// CHECK: %[[O:.*]] = torch.aten.div.Tensor %[[PRODUCT]], %[[SUMFLAT]] : {{.*}} -> !torch.vtensor<[?,?,8],f32>
// CHECK: %[[EMPTY:.*]] = torch.aten.eq.Scalar %[[MAX]], %float-Inf{{.*}} -> !torch.vtensor<[?,4,?,1],i1>
// CHECK: %[[ZEROS:.*]] = torch.aten.full_like %[[O]], %int0
// CHECK: %[[EMPTYFLAT:.*]] = torch.aten.flatten.using_ints %[[EMPTY]], %int0, %int1 : {{.*}} -> !torch.vtensor<[?,?,1],i1>
// CHECK: %[[GUARDED:.*]] = torch.aten.where.self %[[EMPTYFLAT]], %[[ZEROS]], %[[O]]
// CHECK-NOT: softmax
// CHECK-NOT: torch.aten.any.dim
// CHECK: return %[[GUARDED]]
func.func @attention_probabilities_times_values(%arg0: !torch.vtensor<[?,4,?,?],f32>, %arg1: !torch.vtensor<[?,4,?,8],f32>) -> !torch.vtensor<[?,?,8],f32> {
  %int-1 = torch.constant.int -1
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %none = torch.constant.none
  %true = torch.constant.bool true
  %false = torch.constant.bool false
  %float-Inf = torch.constant.float 0xFFF0000000000000
  %0 = torch.aten.softmax.int %arg0, %int-1, %none : !torch.vtensor<[?,4,?,?],f32>, !torch.int, !torch.none -> !torch.vtensor<[?,4,?,?],f32>
  %1 = torch.aten.eq.Scalar %arg0, %float-Inf : !torch.vtensor<[?,4,?,?],f32>, !torch.float -> !torch.vtensor<[?,4,?,?],i1>
  %2 = torch.aten.logical_not %1 : !torch.vtensor<[?,4,?,?],i1> -> !torch.vtensor<[?,4,?,?],i1>
  %3 = torch.aten.any.dim %2, %int-1, %true : !torch.vtensor<[?,4,?,?],i1>, !torch.int, !torch.bool -> !torch.vtensor<[?,4,?,1],i1>
  %4 = torch.aten.logical_not %3 : !torch.vtensor<[?,4,?,1],i1> -> !torch.vtensor<[?,4,?,1],i1>
  %5 = torch.aten.full_like %0, %int0, %none, %none, %none, %false, %int1 : !torch.vtensor<[?,4,?,?],f32>, !torch.int, !torch.none, !torch.none, !torch.none, !torch.bool, !torch.int -> !torch.vtensor<[?,4,?,?],f32>
  %6 = torch.aten.where.self %4, %5, %0 : !torch.vtensor<[?,4,?,1],i1>, !torch.vtensor<[?,4,?,?],f32>, !torch.vtensor<[?,4,?,?],f32> -> !torch.vtensor<[?,4,?,?],f32>
  %7 = torch.aten.flatten.using_ints %6, %int0, %int1 : !torch.vtensor<[?,4,?,?],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,?,?],f32>
  %8 = torch.aten.flatten.using_ints %arg1, %int0, %int1 : !torch.vtensor<[?,4,?,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,?,8],f32>
  %9 = torch.aten.bmm %7, %8 : !torch.vtensor<[?,?,?],f32>, !torch.vtensor<[?,?,8],f32> -> !torch.vtensor<[?,?,8],f32>
  return %9 : !torch.vtensor<[?,?,8],f32>
}

// -----

/// An unguarded softmax read by a 4-D matmul: the same deferral, with no
/// flatten and no guard (a row of all -inf stays NaN, as in eager).
// CHECK-LABEL: func.func @softmax_times_values
// CHECK-SAME: (%[[S:.*]]: !torch.vtensor<[2,?,?],f32>, %[[V:.*]]: !torch.vtensor<[2,?,16],f32>)
// CHECK: %[[MAX:.*]] = torch.aten.amax %[[S]]
// CHECK: %[[E:.*]] = torch.aten.exp
// CHECK: %[[SUM:.*]] = torch.aten.sum.dim_IntList %[[E]]
// CHECK: %[[PRODUCT:.*]] = torch.aten.matmul %[[E]], %[[V]] : {{.*}} -> !torch.vtensor<[2,?,16],f32>
// CHECK: %[[O:.*]] = torch.aten.div.Tensor %[[PRODUCT]], %[[SUM]]
// CHECK-NOT: torch.aten.where
// CHECK: return %[[O]]
func.func @softmax_times_values(%arg0: !torch.vtensor<[2,?,?],f32>, %arg1: !torch.vtensor<[2,?,16],f32>) -> !torch.vtensor<[2,?,16],f32> {
  %int2 = torch.constant.int 2
  %false = torch.constant.bool false
  %0 = torch.aten._softmax %arg0, %int2, %false : !torch.vtensor<[2,?,?],f32>, !torch.int, !torch.bool -> !torch.vtensor<[2,?,?],f32>
  %1 = torch.aten.matmul %0, %arg1 : !torch.vtensor<[2,?,?],f32>, !torch.vtensor<[2,?,16],f32> -> !torch.vtensor<[2,?,16],f32>
  return %1 : !torch.vtensor<[2,?,16],f32>
}

// -----

/// A static key axis: IREE compiles that softmax and its product well.
// CHECK-LABEL: func.func @negative_static_axis
// CHECK: torch.aten.softmax.int
// CHECK-NOT: torch.aten.amax
func.func @negative_static_axis(%arg0: !torch.vtensor<[?,?,16],f32>, %arg1: !torch.vtensor<[?,16,8],f32>) -> !torch.vtensor<[?,?,8],f32> {
  %int-1 = torch.constant.int -1
  %none = torch.constant.none
  %0 = torch.aten.softmax.int %arg0, %int-1, %none : !torch.vtensor<[?,?,16],f32>, !torch.int, !torch.none -> !torch.vtensor<[?,?,16],f32>
  %1 = torch.aten.bmm %0, %arg1 : !torch.vtensor<[?,?,16],f32>, !torch.vtensor<[?,16,8],f32> -> !torch.vtensor<[?,?,8],f32>
  return %1 : !torch.vtensor<[?,?,8],f32>
}

// -----

/// The probabilities are also returned: deferring would compute the softmax
/// twice, so nothing changes.
// CHECK-LABEL: func.func @negative_probabilities_read_elsewhere
// CHECK: torch.aten.softmax.int
// CHECK-NOT: torch.aten.div.Tensor
func.func @negative_probabilities_read_elsewhere(%arg0: !torch.vtensor<[?,?,?],f32>, %arg1: !torch.vtensor<[?,?,8],f32>) -> (!torch.vtensor<[?,?,8],f32>, !torch.vtensor<[?,?,?],f32>) {
  %int-1 = torch.constant.int -1
  %none = torch.constant.none
  %0 = torch.aten.softmax.int %arg0, %int-1, %none : !torch.vtensor<[?,?,?],f32>, !torch.int, !torch.none -> !torch.vtensor<[?,?,?],f32>
  %1 = torch.aten.bmm %0, %arg1 : !torch.vtensor<[?,?,?],f32>, !torch.vtensor<[?,?,8],f32> -> !torch.vtensor<[?,?,8],f32>
  return %1, %0 : !torch.vtensor<[?,?,8],f32>, !torch.vtensor<[?,?,?],f32>
}

// -----

/// A softmax over the query axis: the product contracts another axis than the
/// one normalized, so the division cannot move below it.
// CHECK-LABEL: func.func @negative_other_axis
// CHECK: torch.aten.softmax.int
// CHECK-NOT: torch.aten.amax
func.func @negative_other_axis(%arg0: !torch.vtensor<[?,?,?],f32>, %arg1: !torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[?,?,8],f32> {
  %int1 = torch.constant.int 1
  %none = torch.constant.none
  %0 = torch.aten.softmax.int %arg0, %int1, %none : !torch.vtensor<[?,?,?],f32>, !torch.int, !torch.none -> !torch.vtensor<[?,?,?],f32>
  %1 = torch.aten.bmm %0, %arg1 : !torch.vtensor<[?,?,?],f32>, !torch.vtensor<[?,?,8],f32> -> !torch.vtensor<[?,?,8],f32>
  return %1 : !torch.vtensor<[?,?,8],f32>
}

// -----

/// A where whose condition is not the all -inf row test of the scores: it
/// may zero single probabilities, which does not commute with the product.
// CHECK-LABEL: func.func @negative_other_condition
// CHECK: torch.aten.softmax.int
// CHECK: torch.aten.where.self
// CHECK-NOT: torch.aten.amax
func.func @negative_other_condition(%arg0: !torch.vtensor<[?,?,?],f32>, %arg1: !torch.vtensor<[?,?,8],f32>, %arg2: !torch.vtensor<[?,?,?],i1>) -> !torch.vtensor<[?,?,8],f32> {
  %int-1 = torch.constant.int -1
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %none = torch.constant.none
  %false = torch.constant.bool false
  %0 = torch.aten.softmax.int %arg0, %int-1, %none : !torch.vtensor<[?,?,?],f32>, !torch.int, !torch.none -> !torch.vtensor<[?,?,?],f32>
  %1 = torch.aten.full_like %0, %int0, %none, %none, %none, %false, %int1 : !torch.vtensor<[?,?,?],f32>, !torch.int, !torch.none, !torch.none, !torch.none, !torch.bool, !torch.int -> !torch.vtensor<[?,?,?],f32>
  %2 = torch.aten.where.self %arg2, %1, %0 : !torch.vtensor<[?,?,?],i1>, !torch.vtensor<[?,?,?],f32>, !torch.vtensor<[?,?,?],f32> -> !torch.vtensor<[?,?,?],f32>
  %3 = torch.aten.bmm %2, %arg1 : !torch.vtensor<[?,?,?],f32>, !torch.vtensor<[?,?,8],f32> -> !torch.vtensor<[?,?,8],f32>
  return %3 : !torch.vtensor<[?,?,8],f32>
}
