// RUN: anyshape-opt %s --split-input-file --verify-diagnostics --anyshape-eliminate-padding='mask=1' | FileCheck %s

/// A projection of the padded batch runs on the real tokens: gathered by the
/// token positions, scattered back by the slots, 0 at padding in the result.
// CHECK-LABEL: func.func @projection_on_token_rows
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?,4],f32>, %[[MASK:.*]]: !torch.vtensor<[?,?],si64>, %[[W:.*]]: !torch.vtensor<[4,4],f32>, %[[TOKENS:.*]]: !torch.vtensor<[?],si64>, %[[SLOTS:.*]]: !torch.vtensor<[?],si64>)
// CHECK-SAME: anyshape.padding = {mask = 1 : i64, per_row = [], per_token = [0]}
// CHECK: torch.symbolic_int "anyshape_tokens" {min_val = 1, max_val = 512}
// CHECK: torch.bind_symbolic_shape %[[TOKENS]], [%{{.*}}], affine_map<()[s0] -> (s0)>
// CHECK: torch.bind_symbolic_shape %[[SLOTS]], [%{{.*}}, %{{.*}}], affine_map<()[s0, s1] -> (s0 * s1)>
// CHECK: %[[FLAT:.*]] = torch.aten.flatten.using_ints %[[X]]
// CHECK: %[[ROWS:.*]] = torch.aten.index_select %[[FLAT]], %{{.*}}, %[[TOKENS]] : {{.*}} -> !torch.vtensor<[?,4],f32>
// CHECK: %[[PACKED:.*]] = torch.aten.unsqueeze %[[ROWS]]
// CHECK: %[[LIN:.*]] = torch.aten.linear %[[PACKED]], %[[W]], %{{.*}} : !torch.vtensor<[1,?,4],f32>
// CHECK: %[[GELU:.*]] = torch.aten.gelu %[[LIN]], %{{.*}} : !torch.vtensor<[1,?,4],f32>
// CHECK: %[[SQ:.*]] = torch.aten.flatten.using_ints %[[GELU]]
// CHECK: %[[GRID:.*]] = torch.aten.index_select %[[SQ]], %{{.*}}, %[[SLOTS]]
// CHECK: %[[BACK:.*]] = torch.aten.unflatten.int %[[GRID]]
// CHECK: %[[KEEP:.*]] = torch.aten.ne.Scalar %[[MASK]]
// CHECK: %[[KEEP3:.*]] = torch.aten.unsqueeze %[[KEEP]]
// CHECK: %[[ZEROED:.*]] = torch.aten.where.ScalarOther %[[KEEP3]], %[[BACK]]
// CHECK: return %[[ZEROED]]
func.func @projection_on_token_rows(%x: !torch.vtensor<[?,?,4],f32>, %mask: !torch.vtensor<[?,?],si64>, %w: !torch.vtensor<[4,4],f32>) -> !torch.vtensor<[?,?,4],f32> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %x, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1, 4)> : !torch.vtensor<[?,?,4],f32>
  torch.bind_symbolic_shape %mask, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],si64>
  %none = torch.constant.none
  %str = torch.constant.str "none"
  %0 = torch.aten.linear %x, %w, %none : !torch.vtensor<[?,?,4],f32>, !torch.vtensor<[4,4],f32>, !torch.none -> !torch.vtensor<[?,?,4],f32>
  %1 = torch.aten.gelu %0, %str : !torch.vtensor<[?,?,4],f32>, !torch.str -> !torch.vtensor<[?,?,4],f32>
  return %1 : !torch.vtensor<[?,?,4],f32>
}

// -----

/// Attention between projections reads the padded layout; its additive mask
/// (1 - mask) * min and the softmax make the padded keys' weights exactly 0,
/// so the next projection gathers rows that never read padding.
// CHECK-LABEL: func.func @attention_with_additive_mask
// CHECK: %[[Q:.*]] = torch.aten.linear %{{.*}} : !torch.vtensor<[1,?,4],f32>
// CHECK: %[[H:.*]] = torch.aten.unflatten.int
// CHECK: torch.aten.matmul %[[H]]
// CHECK: torch.aten.softmax.int
// CHECK: %[[CTX:.*]] = torch.aten.matmul
// CHECK: %[[CTX_FLAT:.*]] = torch.aten.flatten.using_ints %[[CTX]]
// CHECK: torch.aten.index_select %[[CTX_FLAT]]
// CHECK: torch.aten.linear %{{.*}} : !torch.vtensor<[1,?,4],f32>
func.func @attention_with_additive_mask(%x: !torch.vtensor<[?,?,4],f32>, %mask: !torch.vtensor<[?,?],si64>, %w: !torch.vtensor<[4,4],f32>) -> !torch.vtensor<[?,?,4],f32> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %x, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1, 4)> : !torch.vtensor<[?,?,4],f32>
  torch.bind_symbolic_shape %mask, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],si64>
  %none = torch.constant.none
  %false = torch.constant.bool false
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int6 = torch.constant.int 6
  %int-1 = torch.constant.int -1
  %float1 = torch.constant.float 1.000000e+00
  %min = torch.constant.float -3.4028234663852886E+38
  %0 = torch.aten.linear %x, %w, %none : !torch.vtensor<[?,?,4],f32>, !torch.vtensor<[4,4],f32>, !torch.none -> !torch.vtensor<[?,?,4],f32>
  %1 = torch.aten.transpose.int %0, %int1, %int2 : !torch.vtensor<[?,?,4],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,4,?],f32>
  %2 = torch.aten.matmul %0, %1 : !torch.vtensor<[?,?,4],f32>, !torch.vtensor<[?,4,?],f32> -> !torch.vtensor<[?,?,?],f32>
  %3 = torch.aten.unsqueeze %mask, %int1 : !torch.vtensor<[?,?],si64>, !torch.int -> !torch.vtensor<[?,1,?],si64>
  %4 = torch.aten.to.dtype %3, %int6, %false, %false, %none : !torch.vtensor<[?,1,?],si64>, !torch.int, !torch.bool, !torch.bool, !torch.none -> !torch.vtensor<[?,1,?],f32>
  %5 = torch.aten.rsub.Scalar %4, %float1, %int1 : !torch.vtensor<[?,1,?],f32>, !torch.float, !torch.int -> !torch.vtensor<[?,1,?],f32>
  %6 = torch.aten.mul.Scalar %5, %min : !torch.vtensor<[?,1,?],f32>, !torch.float -> !torch.vtensor<[?,1,?],f32>
  %7 = torch.aten.add.Tensor %2, %6, %int1 : !torch.vtensor<[?,?,?],f32>, !torch.vtensor<[?,1,?],f32>, !torch.int -> !torch.vtensor<[?,?,?],f32>
  %8 = torch.aten.softmax.int %7, %int-1, %none : !torch.vtensor<[?,?,?],f32>, !torch.int, !torch.none -> !torch.vtensor<[?,?,?],f32>
  %9 = torch.aten.matmul %8, %0 : !torch.vtensor<[?,?,?],f32>, !torch.vtensor<[?,?,4],f32> -> !torch.vtensor<[?,?,4],f32>
  %10 = torch.aten.linear %9, %w, %none : !torch.vtensor<[?,?,4],f32>, !torch.vtensor<[4,4],f32>, !torch.none -> !torch.vtensor<[?,?,4],f32>
  return %10 : !torch.vtensor<[?,?,4],f32>
}

// -----

/// Attention without a mask averages over padded keys: the projection after
/// it would read what a padded position holds, which is not eager's value.
func.func @negative_attention_without_mask(%x: !torch.vtensor<[?,?,4],f32>, %mask: !torch.vtensor<[?,?],si64>, %w: !torch.vtensor<[4,4],f32>) -> !torch.vtensor<[?,?,4],f32> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %x, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1, 4)> : !torch.vtensor<[?,?,4],f32>
  torch.bind_symbolic_shape %mask, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],si64>
  %none = torch.constant.none
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int-1 = torch.constant.int -1
  %0 = torch.aten.linear %x, %w, %none : !torch.vtensor<[?,?,4],f32>, !torch.vtensor<[4,4],f32>, !torch.none -> !torch.vtensor<[?,?,4],f32>
  %1 = torch.aten.transpose.int %0, %int1, %int2 : !torch.vtensor<[?,?,4],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,4,?],f32>
  %2 = torch.aten.matmul %0, %1 : !torch.vtensor<[?,?,4],f32>, !torch.vtensor<[?,4,?],f32> -> !torch.vtensor<[?,?,?],f32>
  // expected-error@+1 {{'torch.aten.softmax.int' reads across positions (a softmax normalizes over padded positions no mask removes)}}
  %3 = torch.aten.softmax.int %2, %int-1, %none : !torch.vtensor<[?,?,?],f32>, !torch.int, !torch.none -> !torch.vtensor<[?,?,?],f32>
  %4 = torch.aten.matmul %3, %0 : !torch.vtensor<[?,?,?],f32>, !torch.vtensor<[?,?,4],f32> -> !torch.vtensor<[?,?,4],f32>
  %5 = torch.aten.linear %4, %w, %none : !torch.vtensor<[?,?,4],f32>, !torch.vtensor<[4,4],f32>, !torch.none -> !torch.vtensor<[?,?,4],f32>
  return %5 : !torch.vtensor<[?,?,4],f32>
}

// -----

/// A cumulative sum over positions reads every earlier position, padding
/// included: refused, naming it.
func.func @negative_cumsum_over_positions(%x: !torch.vtensor<[?,?,4],f32>, %mask: !torch.vtensor<[?,?],si64>, %w: !torch.vtensor<[4,4],f32>) -> !torch.vtensor<[?,?,4],f32> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %x, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1, 4)> : !torch.vtensor<[?,?,4],f32>
  torch.bind_symbolic_shape %mask, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],si64>
  %none = torch.constant.none
  %int1 = torch.constant.int 1
  %0 = torch.aten.linear %x, %w, %none : !torch.vtensor<[?,?,4],f32>, !torch.vtensor<[4,4],f32>, !torch.none -> !torch.vtensor<[?,?,4],f32>
  // expected-error@+1 {{'torch.aten.cumsum' reads across positions (no rule says which positions it reads)}}
  %1 = torch.aten.cumsum %0, %int1, %none : !torch.vtensor<[?,?,4],f32>, !torch.int, !torch.none -> !torch.vtensor<[?,?,4],f32>
  %2 = torch.aten.linear %1, %w, %none : !torch.vtensor<[?,?,4],f32>, !torch.vtensor<[4,4],f32>, !torch.none -> !torch.vtensor<[?,?,4],f32>
  return %2 : !torch.vtensor<[?,?,4],f32>
}

// -----

/// Without a projection there is nothing to gather for.
// expected-error@+1 {{no projection runs on the token rows}}
func.func @negative_no_projection(%x: !torch.vtensor<[?,?,4],f32>, %mask: !torch.vtensor<[?,?],si64>) -> !torch.vtensor<[?,?,4],f32> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %x, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1, 4)> : !torch.vtensor<[?,?,4],f32>
  torch.bind_symbolic_shape %mask, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],si64>
  %str = torch.constant.str "none"
  %0 = torch.aten.gelu %x, %str : !torch.vtensor<[?,?,4],f32>, !torch.str -> !torch.vtensor<[?,?,4],f32>
  return %0 : !torch.vtensor<[?,?,4],f32>
}

// -----

/// A head split of a projection goes back to the padded layout by gathering
/// the projection's unsplit rows, split after: a gather from the split value
/// IREE compiles as an element-by-element read (an index divided and
/// remaindered per element), not a vector copy of rows.
// CHECK-LABEL: func.func @head_split_gathered_unsplit
// CHECK: %[[LIN:.*]] = torch.aten.linear %{{.*}} : !torch.vtensor<[1,?,4],f32>
// CHECK-NOT: torch.aten.unflatten.int %[[LIN]]
// CHECK: %[[ROWS:.*]] = torch.aten.flatten.using_ints %[[LIN]], %{{.*}}, %{{.*}} : {{.*}} -> !torch.vtensor<[?,4],f32>
// CHECK: %[[GRID:.*]] = torch.aten.index_select %[[ROWS]], {{.*}} -> !torch.vtensor<[?,4],f32>
// CHECK: %[[HEADS:.*]] = torch.aten.unflatten.int %[[GRID]], %int1{{.*}} -> !torch.vtensor<[?,2,2],f32>
// CHECK: torch.aten.unflatten.int %[[HEADS]], %int0{{.*}} -> !torch.vtensor<[?,?,2,2],f32>
func.func @head_split_gathered_unsplit(%x: !torch.vtensor<[?,?,4],f32>, %mask: !torch.vtensor<[?,?],si64>, %w: !torch.vtensor<[4,4],f32>) -> !torch.vtensor<[?,?,2,2],f32> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %x, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1, 4)> : !torch.vtensor<[?,?,4],f32>
  torch.bind_symbolic_shape %mask, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],si64>
  %none = torch.constant.none
  %int2 = torch.constant.int 2
  %heads = torch.prim.ListConstruct %int2, %int2 : (!torch.int, !torch.int) -> !torch.list<int>
  %0 = torch.aten.linear %x, %w, %none : !torch.vtensor<[?,?,4],f32>, !torch.vtensor<[4,4],f32>, !torch.none -> !torch.vtensor<[?,?,4],f32>
  %1 = torch.aten.unflatten.int %0, %int2, %heads : !torch.vtensor<[?,?,4],f32>, !torch.int, !torch.list<int> -> !torch.vtensor<[?,?,2,2],f32>
  return %1 : !torch.vtensor<[?,?,2,2],f32>
}

// -----

/// An empty dims list reduces every dim (as torch reads it), the padded
/// positions too: refused, naming the reduction.
func.func @negative_sum_over_every_dim(%x: !torch.vtensor<[?,?,4],f32>, %mask: !torch.vtensor<[?,?],si64>, %w: !torch.vtensor<[4,4],f32>) -> !torch.vtensor<[],f32> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %x, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1, 4)> : !torch.vtensor<[?,?,4],f32>
  torch.bind_symbolic_shape %mask, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],si64>
  %none = torch.constant.none
  %false = torch.constant.bool false
  %0 = torch.aten.linear %x, %w, %none : !torch.vtensor<[?,?,4],f32>, !torch.vtensor<[4,4],f32>, !torch.none -> !torch.vtensor<[?,?,4],f32>
  %dims = torch.prim.ListConstruct  : () -> !torch.list<int>
  // expected-error@+1 {{'torch.aten.sum.dim_IntList' reads across positions (a reduction sums over padded positions)}}
  %1 = torch.aten.sum.dim_IntList %0, %dims, %false, %none : !torch.vtensor<[?,?,4],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[],f32>
  return %1 : !torch.vtensor<[],f32>
}

// -----

/// Mean pooling's masked sum reads every position, but eager's product there
/// is 0 (a finite row times the mask's 0): the product is scattered back with
/// 0 at padding, not copies of real rows, and the sum over positions is exact.
// CHECK-LABEL: func.func @masked_sum_over_positions
// CHECK-SAME: (%{{.*}}: !torch.vtensor<[?,?,4],f32>, %[[MASK:[^:]*]]: !torch.vtensor<[?,?],si64>
// CHECK: %[[PRODUCT:.*]] = torch.aten.mul.Tensor %{{.*}} : !torch.vtensor<[1,?,4],f32>
// CHECK: %[[FLAT:.*]] = torch.aten.flatten.using_ints %[[PRODUCT]]
// CHECK: %[[GRID:.*]] = torch.aten.index_select %[[FLAT]]
// CHECK: %[[BACK:.*]] = torch.aten.unflatten.int %[[GRID]]
// CHECK: %[[REAL:.*]] = torch.aten.ne.Scalar %[[MASK]]
// CHECK: %[[REAL3:.*]] = torch.aten.unsqueeze %[[REAL]]
// CHECK: %[[ZEROED:.*]] = torch.aten.where.ScalarOther %[[REAL3]], %[[BACK]]
// CHECK: %[[SUM:.*]] = torch.aten.sum.dim_IntList %[[ZEROED]]
// CHECK: return %[[SUM]]
func.func @masked_sum_over_positions(%x: !torch.vtensor<[?,?,4],f32>, %mask: !torch.vtensor<[?,?],si64>, %w: !torch.vtensor<[4,4],f32>) -> !torch.vtensor<[?,4],f32> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %x, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1, 4)> : !torch.vtensor<[?,?,4],f32>
  torch.bind_symbolic_shape %mask, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],si64>
  %none = torch.constant.none
  %false = torch.constant.bool false
  %int1 = torch.constant.int 1
  %int6 = torch.constant.int 6
  %int-1 = torch.constant.int -1
  %0 = torch.aten.linear %x, %w, %none : !torch.vtensor<[?,?,4],f32>, !torch.vtensor<[4,4],f32>, !torch.none -> !torch.vtensor<[?,?,4],f32>
  %1 = torch.aten.unsqueeze %mask, %int-1 : !torch.vtensor<[?,?],si64>, !torch.int -> !torch.vtensor<[?,?,1],si64>
  torch.bind_symbolic_shape %1, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1, 1)> : !torch.vtensor<[?,?,1],si64>
  %2 = torch.prims.convert_element_type %1, %int6 : !torch.vtensor<[?,?,1],si64>, !torch.int -> !torch.vtensor<[?,?,1],f32>
  torch.bind_symbolic_shape %2, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1, 1)> : !torch.vtensor<[?,?,1],f32>
  %3 = torch.aten.mul.Tensor %0, %2 : !torch.vtensor<[?,?,4],f32>, !torch.vtensor<[?,?,1],f32> -> !torch.vtensor<[?,?,4],f32>
  %dims = torch.prim.ListConstruct %int1 : (!torch.int) -> !torch.list<int>
  %4 = torch.aten.sum.dim_IntList %3, %dims, %false, %none : !torch.vtensor<[?,?,4],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[?,4],f32>
  return %4 : !torch.vtensor<[?,4],f32>
}

// -----

/// Weights of 1 at padding (mask + 1) leave the padded rows in the sum: eager's
/// product there is a row of the padded input, which no token computes.
func.func @negative_sum_weighted_by_more_than_the_mask(%x: !torch.vtensor<[?,?,4],f32>, %mask: !torch.vtensor<[?,?],si64>, %w: !torch.vtensor<[4,4],f32>) -> !torch.vtensor<[?,4],f32> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %x, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1, 4)> : !torch.vtensor<[?,?,4],f32>
  torch.bind_symbolic_shape %mask, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],si64>
  %none = torch.constant.none
  %false = torch.constant.bool false
  %int1 = torch.constant.int 1
  %int-1 = torch.constant.int -1
  %0 = torch.aten.linear %x, %w, %none : !torch.vtensor<[?,?,4],f32>, !torch.vtensor<[4,4],f32>, !torch.none -> !torch.vtensor<[?,?,4],f32>
  %1 = torch.aten.add.Scalar %mask, %int1, %int1 : !torch.vtensor<[?,?],si64>, !torch.int, !torch.int -> !torch.vtensor<[?,?],si64>
  torch.bind_symbolic_shape %1, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],si64>
  %2 = torch.aten.unsqueeze %1, %int-1 : !torch.vtensor<[?,?],si64>, !torch.int -> !torch.vtensor<[?,?,1],si64>
  torch.bind_symbolic_shape %2, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1, 1)> : !torch.vtensor<[?,?,1],si64>
  %3 = torch.aten.mul.Tensor %0, %2 : !torch.vtensor<[?,?,4],f32>, !torch.vtensor<[?,?,1],si64> -> !torch.vtensor<[?,?,4],f32>
  %dims = torch.prim.ListConstruct %int1 : (!torch.int) -> !torch.list<int>
  // expected-error@+1 {{'torch.aten.sum.dim_IntList' reads across positions (a reduction sums over padded positions)}}
  %4 = torch.aten.sum.dim_IntList %3, %dims, %false, %none : !torch.vtensor<[?,?,4],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[?,4],f32>
  return %4 : !torch.vtensor<[?,4],f32>
}
