// RUN: anyshape-opt %s --split-input-file --anyshape-canonicalize-shapes | FileCheck %s

/// [Pattern: rewrite_expand]
/// expand to the sizes the input already has (by the rooted dims) is the input.
// CHECK-LABEL: func.func @expand_to_own_sizes
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?],f32>, %[[Y:.*]]: !torch.vtensor<[?,?],f32>)
// CHECK-NOT: torch.aten.expand
// CHECK: return %[[X]]
func.func @expand_to_own_sizes(%arg0: !torch.vtensor<[?,?],f32>, %arg1: !torch.vtensor<[?,?],f32>) -> !torch.vtensor<[?,?],f32> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],f32>
  torch.bind_symbolic_shape %arg1, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],f32>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %false = torch.constant.bool false
  %0 = torch.aten.size.int %arg1, %int0 : !torch.vtensor<[?,?],f32>, !torch.int -> !torch.int
  %1 = torch.aten.size.int %arg1, %int1 : !torch.vtensor<[?,?],f32>, !torch.int -> !torch.int
  %2 = torch.prim.ListConstruct %0, %1 : (!torch.int, !torch.int) -> !torch.list<int>
  %3 = torch.aten.expand %arg0, %2, %false : !torch.vtensor<[?,?],f32>, !torch.list<int>, !torch.bool -> !torch.vtensor<[?,?],f32>
  return %3 : !torch.vtensor<[?,?],f32>
}

// -----

/// A real broadcast names only the dim that broadcasts (the rooted batch); the
/// length, equal to the input's own by construction, becomes -1 so torch-mlir
/// emits no run-time check comparing it with another tensor's dim.
// CHECK-LABEL: func.func @expand_names_only_broadcast_dims
// CHECK-SAME: (%[[POS:.*]]: !torch.vtensor<[1,?],f32>, %[[IDS:.*]]: !torch.vtensor<[?,?],f32>)
// CHECK-DAG: %[[ZERO:.*]] = torch.constant.int 0
// CHECK-DAG: %[[B:.*]] = torch.aten.size.int %[[IDS]], %[[ZERO]]
// CHECK-DAG: %[[KEEP:.*]] = torch.constant.int -1
// CHECK: %[[SIZES:.*]] = torch.prim.ListConstruct %[[B]], %[[KEEP]]
// CHECK: torch.aten.expand %[[POS]], %[[SIZES]]
func.func @expand_names_only_broadcast_dims(%arg0: !torch.vtensor<[1,?],f32>, %arg1: !torch.vtensor<[?,?],f32>) -> !torch.vtensor<[?,?],f32> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s1], affine_map<()[s0] -> (1, s0)> : !torch.vtensor<[1,?],f32>
  torch.bind_symbolic_shape %arg1, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],f32>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %false = torch.constant.bool false
  %0 = torch.aten.size.int %arg1, %int0 : !torch.vtensor<[?,?],f32>, !torch.int -> !torch.int
  %1 = torch.aten.size.int %arg1, %int1 : !torch.vtensor<[?,?],f32>, !torch.int -> !torch.int
  %2 = torch.prim.ListConstruct %0, %1 : (!torch.int, !torch.int) -> !torch.list<int>
  %3 = torch.aten.expand %arg0, %2, %false : !torch.vtensor<[1,?],f32>, !torch.list<int>, !torch.bool -> !torch.vtensor<[?,?],f32>
  return %3 : !torch.vtensor<[?,?],f32>
}

// -----

/// Without bindings the two arguments' lengths are unrelated: the size taken
/// from the other tensor's dim stays (torch-mlir checks it at run time).
// CHECK-LABEL: func.func @negative_broadcast_dims_really_differ
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[1,?],f32>, %[[Y:.*]]: !torch.vtensor<[?,?],f32>)
// CHECK-DAG: %[[ZERO:.*]] = torch.constant.int 0
// CHECK-DAG: %[[ONE:.*]] = torch.constant.int 1
// CHECK-DAG: %[[D0:.*]] = torch.aten.size.int %[[Y]], %[[ZERO]]
// CHECK-DAG: %[[D1:.*]] = torch.aten.size.int %[[Y]], %[[ONE]]
// CHECK: %[[SIZES:.*]] = torch.prim.ListConstruct %[[D0]], %[[D1]]
// CHECK: torch.aten.expand %[[X]], %[[SIZES]]
func.func @negative_broadcast_dims_really_differ(%arg0: !torch.vtensor<[1,?],f32>, %arg1: !torch.vtensor<[?,?],f32>) -> !torch.vtensor<[?,?],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %false = torch.constant.bool false
  %0 = torch.aten.size.int %arg1, %int0 : !torch.vtensor<[?,?],f32>, !torch.int -> !torch.int
  %1 = torch.aten.size.int %arg1, %int1 : !torch.vtensor<[?,?],f32>, !torch.int -> !torch.int
  %2 = torch.prim.ListConstruct %0, %1 : (!torch.int, !torch.int) -> !torch.list<int>
  %3 = torch.aten.expand %arg0, %2, %false : !torch.vtensor<[1,?],f32>, !torch.list<int>, !torch.bool -> !torch.vtensor<[?,?],f32>
  return %3 : !torch.vtensor<[?,?],f32>
}

// -----

/// [Pattern: sink_expand_below_embedding, drop_implied_expand]
/// BERT's token types: embedding(table, expand(ids[1, L], [B, L])) + words[B, L, H].
/// The rows are looked up once, for [1, L], and the add broadcasts them: no
/// expand and no size list remain.
// CHECK-LABEL: func.func @expanded_lookup_broadcast_by_add
// CHECK-SAME: (%[[WORDS:.*]]: !torch.vtensor<[?,?,8],f32>, %[[TYPES:.*]]: !torch.vtensor<[1,?],si64>, %[[TABLE:.*]]: !torch.vtensor<[2,8],f32>)
// CHECK: %[[ROWS:.*]] = torch.aten.embedding %[[TABLE]], %[[TYPES]]
// CHECK-SAME: -> !torch.vtensor<[1,?,8],f32>
// CHECK: %[[SUM:.*]] = torch.aten.add.Tensor %[[WORDS]], %[[ROWS]]
// CHECK-NOT: torch.aten.expand
// CHECK: return %[[SUM]]
func.func @expanded_lookup_broadcast_by_add(%arg0: !torch.vtensor<[?,?,8],f32>, %arg1: !torch.vtensor<[1,?],si64>, %arg2: !torch.vtensor<[2,8],f32>) -> !torch.vtensor<[?,?,8],f32> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1, 8)> : !torch.vtensor<[?,?,8],f32>
  torch.bind_symbolic_shape %arg1, [%s1], affine_map<()[s0] -> (1, s0)> : !torch.vtensor<[1,?],si64>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int-1 = torch.constant.int -1
  %false = torch.constant.bool false
  %0 = torch.aten.size.int %arg0, %int0 : !torch.vtensor<[?,?,8],f32>, !torch.int -> !torch.int
  %1 = torch.aten.size.int %arg0, %int1 : !torch.vtensor<[?,?,8],f32>, !torch.int -> !torch.int
  %2 = torch.prim.ListConstruct %0, %1 : (!torch.int, !torch.int) -> !torch.list<int>
  %3 = torch.aten.expand %arg1, %2, %false : !torch.vtensor<[1,?],si64>, !torch.list<int>, !torch.bool -> !torch.vtensor<[?,?],si64>
  %4 = torch.aten.embedding %arg2, %3, %int-1, %false, %false : !torch.vtensor<[2,8],f32>, !torch.vtensor<[?,?],si64>, !torch.int, !torch.bool, !torch.bool -> !torch.vtensor<[?,?,8],f32>
  %5 = torch.aten.add.Tensor %arg0, %4, %int1 : !torch.vtensor<[?,?,8],f32>, !torch.vtensor<[?,?,8],f32>, !torch.int -> !torch.vtensor<[?,?,8],f32>
  return %5 : !torch.vtensor<[?,?,8],f32>
}

// -----

/// [Pattern: drop_implied_expand]
/// The other operand has no batch dim: the add would not broadcast to [B, L],
/// so the expand is needed and stays.
// CHECK-LABEL: func.func @negative_expand_needed_by_elementwise
// CHECK: %[[WIDE:.*]] = torch.aten.expand
// CHECK: torch.aten.add.Tensor %[[WIDE]]
func.func @negative_expand_needed_by_elementwise(%arg0: !torch.vtensor<[1,?],f32>, %arg1: !torch.vtensor<[?,?],f32>) -> !torch.vtensor<[?,?],f32> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s1], affine_map<()[s0] -> (1, s0)> : !torch.vtensor<[1,?],f32>
  torch.bind_symbolic_shape %arg1, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],f32>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int-1 = torch.constant.int -1
  %false = torch.constant.bool false
  %0 = torch.aten.size.int %arg1, %int0 : !torch.vtensor<[?,?],f32>, !torch.int -> !torch.int
  %1 = torch.prim.ListConstruct %0, %int-1 : (!torch.int, !torch.int) -> !torch.list<int>
  %2 = torch.aten.expand %arg0, %1, %false : !torch.vtensor<[1,?],f32>, !torch.list<int>, !torch.bool -> !torch.vtensor<[?,?],f32>
  %3 = torch.aten.add.Tensor %2, %arg0, %int1 : !torch.vtensor<[?,?],f32>, !torch.vtensor<[1,?],f32>, !torch.int -> !torch.vtensor<[?,?],f32>
  return %3 : !torch.vtensor<[?,?],f32>
}

// -----

/// [Pattern: gather_from_expanded_table]
/// RoBERTa's buffered token types: gather(expand(t[1, 8], [B, -1]), 1, idx)
/// reads t's one row at idx, a lookup in t as a column; t is never broadcast.
// CHECK-LABEL: func.func @gather_from_expanded_table
// CHECK-SAME: (%[[IDX:.*]]: !torch.vtensor<[?,?],si64>, %[[T:.*]]: !torch.vtensor<[1,8],si64>)
// CHECK: %[[COLUMN:.*]] = torch.aten.unsqueeze %{{.*}} -> !torch.vtensor<[8,1],si64>
// CHECK: %[[ROWS:.*]] = torch.aten.embedding %[[COLUMN]], %[[IDX]]
// CHECK: %[[OUT:.*]] = torch.aten.squeeze.dim %[[ROWS]]
// CHECK-NOT: torch.aten.gather
// CHECK: return %[[OUT]]
func.func @gather_from_expanded_table(%arg0: !torch.vtensor<[?,?],si64>, %arg1: !torch.vtensor<[1,8],si64>) -> !torch.vtensor<[?,?],si64> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int-1 = torch.constant.int -1
  %false = torch.constant.bool false
  %0 = torch.aten.size.int %arg0, %int0 : !torch.vtensor<[?,?],si64>, !torch.int -> !torch.int
  %1 = torch.prim.ListConstruct %0, %int-1 : (!torch.int, !torch.int) -> !torch.list<int>
  %2 = torch.aten.expand %arg1, %1, %false : !torch.vtensor<[1,8],si64>, !torch.list<int>, !torch.bool -> !torch.vtensor<[?,8],si64>
  %3 = torch.aten.gather %2, %int1, %arg0, %false : !torch.vtensor<[?,8],si64>, !torch.int, !torch.vtensor<[?,?],si64>, !torch.bool -> !torch.vtensor<[?,?],si64>
  return %3 : !torch.vtensor<[?,?],si64>
}

// -----

/// Gathering along the broadcast axis reads different rows per position: it stays.
// CHECK-LABEL: func.func @negative_gather_along_broadcast_axis
// CHECK: torch.aten.gather
func.func @negative_gather_along_broadcast_axis(%arg0: !torch.vtensor<[?,8],si64>, %arg1: !torch.vtensor<[1,8],si64>) -> !torch.vtensor<[?,8],si64> {
  %int0 = torch.constant.int 0
  %int-1 = torch.constant.int -1
  %false = torch.constant.bool false
  %0 = torch.aten.size.int %arg0, %int0 : !torch.vtensor<[?,8],si64>, !torch.int -> !torch.int
  %1 = torch.prim.ListConstruct %0, %int-1 : (!torch.int, !torch.int) -> !torch.list<int>
  %2 = torch.aten.expand %arg1, %1, %false : !torch.vtensor<[1,8],si64>, !torch.list<int>, !torch.bool -> !torch.vtensor<[?,8],si64>
  %3 = torch.aten.gather %2, %int0, %arg0, %false : !torch.vtensor<[?,8],si64>, !torch.int, !torch.vtensor<[?,8],si64>, !torch.bool -> !torch.vtensor<[?,8],si64>
  return %3 : !torch.vtensor<[?,8],si64>
}

// -----

/// [Pattern: root_size_query]
/// ones() sized by an intermediate value's dims is sized by the argument dims
/// those are (through the matmul: rows of the left, columns of the right).
// CHECK-LABEL: func.func @ones_sized_by_rooted_dims
// CHECK-SAME: (%[[A:.*]]: !torch.vtensor<[?,?],f32>, %[[B:.*]]: !torch.vtensor<[?,?],f32>)
// CHECK-DAG: %[[ZERO:.*]] = torch.constant.int 0
// CHECK-DAG: %[[ONE:.*]] = torch.constant.int 1
// CHECK-DAG: %[[ROWS:.*]] = torch.aten.size.int %[[A]], %[[ZERO]]
// CHECK-DAG: %[[COLS:.*]] = torch.aten.size.int %[[B]], %[[ONE]]
// CHECK: %[[SIZES:.*]] = torch.prim.ListConstruct %[[ROWS]], %[[COLS]]
// CHECK: torch.aten.ones %[[SIZES]]
func.func @ones_sized_by_rooted_dims(%arg0: !torch.vtensor<[?,?],f32>, %arg1: !torch.vtensor<[?,?],f32>) -> !torch.vtensor<[?,?],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %none = torch.constant.none
  %0 = torch.aten.mm %arg0, %arg1 : !torch.vtensor<[?,?],f32>, !torch.vtensor<[?,?],f32> -> !torch.vtensor<[?,?],f32>
  %1 = torch.aten.size.int %0, %int0 : !torch.vtensor<[?,?],f32>, !torch.int -> !torch.int
  %2 = torch.aten.size.int %0, %int1 : !torch.vtensor<[?,?],f32>, !torch.int -> !torch.int
  %3 = torch.prim.ListConstruct %1, %2 : (!torch.int, !torch.int) -> !torch.list<int>
  %4 = torch.aten.ones %3, %none, %none, %none, %none : !torch.list<int>, !torch.none, !torch.none, !torch.none, !torch.none -> !torch.vtensor<[?,?],f32>
  return %4 : !torch.vtensor<[?,?],f32>
}

// -----

/// [Pattern: and_with_all_true, sink_expand_below_scalars, drop_implied_expand]
/// transformers' bidirectional mask: padding [B, 1, 1, L] and-ed with a query
/// term `arange(L)[None, None, :, None] >= 0` that is always true, which makes
/// it [B, 1, L, L]. The always-true term goes, and the broadcast it implied
/// moves below the where into the addition, which broadcasts anyway: the
/// scores get a [B, 1, 1, L] mask.
// CHECK-LABEL: func.func @padding_mask_with_always_true_query_term
// CHECK-SAME: (%[[IDS:.*]]: !torch.vtensor<[?,?],si64>, %[[KEEP:.*]]: !torch.vtensor<[?,1,1,?],i1>, %[[SCORES:.*]]: !torch.vtensor<[?,2,?,?],f32>)
// CHECK-NOT: torch.aten.ge.Scalar
// CHECK-NOT: torch.aten.bitwise_and.Tensor
// CHECK: %[[MASK:.*]] = torch.aten.where.self %[[KEEP]], %{{.*}}, %{{.*}} : !torch.vtensor<[?,1,1,?],i1>, !torch.vtensor<[],f32>, !torch.vtensor<[],f32> -> !torch.vtensor<[?,1,1,?],f32>
// CHECK: %[[SUM:.*]] = torch.aten.add.Tensor %[[SCORES]], %[[MASK]], %{{.*}} : !torch.vtensor<[?,2,?,?],f32>, !torch.vtensor<[?,1,1,?],f32>, !torch.int -> !torch.vtensor<[?,2,?,?],f32>
// CHECK: return %[[SUM]]
func.func @padding_mask_with_always_true_query_term(%arg0: !torch.vtensor<[?,?],si64>, %arg1: !torch.vtensor<[?,1,1,?],i1>, %arg2: !torch.vtensor<[?,2,?,?],f32>) -> !torch.vtensor<[?,2,?,?],f32> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],si64>
  torch.bind_symbolic_shape %arg1, [%s0, %s1], affine_map<()[s0, s1] -> (s0, 1, 1, s1)> : !torch.vtensor<[?,1,1,?],i1>
  torch.bind_symbolic_shape %arg2, [%s0, %s1], affine_map<()[s0, s1] -> (s0, 2, s1, s1)> : !torch.vtensor<[?,2,?,?],f32>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int3 = torch.constant.int 3
  %int6 = torch.constant.int 6
  %none = torch.constant.none
  %cpu = torch.constant.device "cpu"
  %false = torch.constant.bool false
  %float-Inf = torch.constant.float 0xFFF0000000000000
  %float0 = torch.constant.float 0.000000e+00
  %true = torch.vtensor.literal(dense<true> : tensor<i1>) : !torch.vtensor<[],i1>
  %0 = torch.aten.size.int %arg0, %int1 : !torch.vtensor<[?,?],si64>, !torch.int -> !torch.int
  %1 = torch.aten.arange.start_step %int0, %0, %int1, %none, %int0, %cpu, %false : !torch.int, !torch.int, !torch.int, !torch.none, !torch.int, !torch.Device, !torch.bool -> !torch.vtensor<[?],si64>
  %2 = torch.aten.add.Scalar %1, %int0, %int1 : !torch.vtensor<[?],si64>, !torch.int, !torch.int -> !torch.vtensor<[?],si64>
  %3 = torch.aten.unsqueeze %2, %int0 : !torch.vtensor<[?],si64>, !torch.int -> !torch.vtensor<[1,?],si64>
  %4 = torch.aten.unsqueeze %3, %int1 : !torch.vtensor<[1,?],si64>, !torch.int -> !torch.vtensor<[1,1,?],si64>
  %5 = torch.aten.unsqueeze %4, %int3 : !torch.vtensor<[1,1,?],si64>, !torch.int -> !torch.vtensor<[1,1,?,1],si64>
  %6 = torch.aten.ge.Scalar %5, %int0 : !torch.vtensor<[1,1,?,1],si64>, !torch.int -> !torch.vtensor<[1,1,?,1],i1>
  %7 = torch.aten.bitwise_and.Tensor %true, %6 : !torch.vtensor<[],i1>, !torch.vtensor<[1,1,?,1],i1> -> !torch.vtensor<[1,1,?,1],i1>
  %8 = torch.aten.bitwise_and.Tensor %7, %arg1 : !torch.vtensor<[1,1,?,1],i1>, !torch.vtensor<[?,1,1,?],i1> -> !torch.vtensor<[?,1,?,?],i1>
  %9 = torch.aten.scalar_tensor %float-Inf, %int6, %none, %cpu, %none : !torch.float, !torch.int, !torch.none, !torch.Device, !torch.none -> !torch.vtensor<[],f32>
  %10 = torch.aten.scalar_tensor %float0, %int6, %none, %cpu, %none : !torch.float, !torch.int, !torch.none, !torch.Device, !torch.none -> !torch.vtensor<[],f32>
  %11 = torch.aten.where.self %8, %10, %9 : !torch.vtensor<[?,1,?,?],i1>, !torch.vtensor<[],f32>, !torch.vtensor<[],f32> -> !torch.vtensor<[?,1,?,?],f32>
  %12 = torch.aten.add.Tensor %arg2, %11, %int1 : !torch.vtensor<[?,2,?,?],f32>, !torch.vtensor<[?,1,?,?],f32>, !torch.int -> !torch.vtensor<[?,2,?,?],f32>
  return %12 : !torch.vtensor<[?,2,?,?],f32>
}

// -----

/// [Pattern: and_with_all_true]
/// A position compared with 1 (`arange(L) >= 1`) is false at position 0: the
/// and keeps it, and so keeps its [B, 1, L, L] shape.
// CHECK-LABEL: func.func @negative_position_term_not_always_true
// CHECK: torch.aten.ge.Scalar
// CHECK: torch.aten.bitwise_and.Tensor {{.*}} -> !torch.vtensor<[?,1,?,?],i1>
func.func @negative_position_term_not_always_true(%arg0: !torch.vtensor<[?,?],si64>, %arg1: !torch.vtensor<[?,1,1,?],i1>) -> !torch.vtensor<[?,1,?,?],i1> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],si64>
  torch.bind_symbolic_shape %arg1, [%s0, %s1], affine_map<()[s0, s1] -> (s0, 1, 1, s1)> : !torch.vtensor<[?,1,1,?],i1>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int3 = torch.constant.int 3
  %none = torch.constant.none
  %cpu = torch.constant.device "cpu"
  %false = torch.constant.bool false
  %0 = torch.aten.size.int %arg0, %int1 : !torch.vtensor<[?,?],si64>, !torch.int -> !torch.int
  %1 = torch.aten.arange.start_step %int0, %0, %int1, %none, %int0, %cpu, %false : !torch.int, !torch.int, !torch.int, !torch.none, !torch.int, !torch.Device, !torch.bool -> !torch.vtensor<[?],si64>
  %3 = torch.aten.unsqueeze %1, %int0 : !torch.vtensor<[?],si64>, !torch.int -> !torch.vtensor<[1,?],si64>
  %4 = torch.aten.unsqueeze %3, %int1 : !torch.vtensor<[1,?],si64>, !torch.int -> !torch.vtensor<[1,1,?],si64>
  %5 = torch.aten.unsqueeze %4, %int3 : !torch.vtensor<[1,1,?],si64>, !torch.int -> !torch.vtensor<[1,1,?,1],si64>
  %6 = torch.aten.ge.Scalar %5, %int1 : !torch.vtensor<[1,1,?,1],si64>, !torch.int -> !torch.vtensor<[1,1,?,1],i1>
  %8 = torch.aten.bitwise_and.Tensor %6, %arg1 : !torch.vtensor<[1,1,?,1],i1>, !torch.vtensor<[?,1,1,?],i1> -> !torch.vtensor<[?,1,?,?],i1>
  return %8 : !torch.vtensor<[?,1,?,?],i1>
}
