// RUN: anyshape-opt %s --split-input-file --anyshape-hoist-slices | FileCheck %s

/// [Pattern: through_elementwise]
/// features[:, 0] of gelu(x + bias): the row is selected from x, the bias
/// ([H], no sequence axis) broadcasts as before, and gelu runs on one row.
// CHECK-LABEL: func.func @select_moves_through_elementwise
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?,8],f32>, %[[BIAS:.*]]: !torch.vtensor<[8],f32>)
// CHECK: %[[ROW:.*]] = torch.aten.slice.Tensor %[[X]], %{{.*}} -> !torch.vtensor<[?,1,8],f32>
// CHECK: %[[SUM:.*]] = torch.aten.add.Tensor %[[ROW]], %[[BIAS]]
// CHECK: %[[ACT:.*]] = torch.aten.gelu %[[SUM]]
// CHECK: %[[OUT:.*]] = torch.aten.squeeze.dim %[[ACT]]
// CHECK: return %[[OUT]]
func.func @select_moves_through_elementwise(%arg0: !torch.vtensor<[?,?,8],f32>, %arg1: !torch.vtensor<[8],f32>) -> !torch.vtensor<[?,8],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %str = torch.constant.str "none"
  %0 = torch.aten.add.Tensor %arg0, %arg1, %int1 : !torch.vtensor<[?,?,8],f32>, !torch.vtensor<[8],f32>, !torch.int -> !torch.vtensor<[?,?,8],f32>
  %1 = torch.aten.gelu %0, %str : !torch.vtensor<[?,?,8],f32>, !torch.str -> !torch.vtensor<[?,?,8],f32>
  %2 = torch.aten.select.int %1, %int1, %int0 : !torch.vtensor<[?,?,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,8],f32>
  return %2 : !torch.vtensor<[?,8],f32>
}

// -----

/// Both operands have the full sequence (same symbol): both are sliced.
// CHECK-LABEL: func.func @slice_moves_into_both_full_operands
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?,8],f32>, %[[Y:.*]]: !torch.vtensor<[?,?,8],f32>)
// CHECK-DAG: %[[XS:.*]] = torch.aten.slice.Tensor %[[X]], %{{.*}} -> !torch.vtensor<[?,?,8],f32>
// CHECK-DAG: %[[YS:.*]] = torch.aten.slice.Tensor %[[Y]], %{{.*}} -> !torch.vtensor<[?,?,8],f32>
// CHECK: %[[P:.*]] = torch.aten.mul.Tensor %[[XS]], %[[YS]]
// CHECK: return %[[P]]
func.func @slice_moves_into_both_full_operands(%arg0: !torch.vtensor<[?,?,8],f32>, %arg1: !torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[?,?,8],f32> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 4} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 4, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1, 8)> : !torch.vtensor<[?,?,8],f32>
  torch.bind_symbolic_shape %arg1, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1, 8)> : !torch.vtensor<[?,?,8],f32>
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int3 = torch.constant.int 3
  %0 = torch.aten.mul.Tensor %arg0, %arg1 : !torch.vtensor<[?,?,8],f32>, !torch.vtensor<[?,?,8],f32> -> !torch.vtensor<[?,?,8],f32>
  %1 = torch.aten.slice.Tensor %0, %int1, %int1, %int3, %int2 : !torch.vtensor<[?,?,8],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[?,?,8],f32>
  return %1 : !torch.vtensor<[?,?,8],f32>
}

// -----

/// The other operand's length is its own unbound dim: it may be 1 at run time
/// (then it broadcasts) or equal: which rows to take cannot be told, so the
/// selection stays.
// CHECK-LABEL: func.func @negative_operand_may_broadcast
// CHECK: %[[P:.*]] = torch.aten.mul.Tensor
// CHECK: torch.aten.select.int %[[P]]
func.func @negative_operand_may_broadcast(%arg0: !torch.vtensor<[?,?,8],f32>, %arg1: !torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[?,8],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %0 = torch.aten.mul.Tensor %arg0, %arg1 : !torch.vtensor<[?,?,8],f32>, !torch.vtensor<[?,?,8],f32> -> !torch.vtensor<[?,?,8],f32>
  %1 = torch.aten.select.int %0, %int1, %int0 : !torch.vtensor<[?,?,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,8],f32>
  return %1 : !torch.vtensor<[?,8],f32>
}

// -----

/// index_select of rows [L] -> [n] moves like a slice: each operand with the
/// full axis gets the same index_select.
// CHECK-LABEL: func.func @index_select_moves_through_where
// CHECK-SAME: (%[[C:.*]]: !torch.vtensor<[?,?],i1>, %[[X:.*]]: !torch.vtensor<[?,?],f32>, %[[IDX:.*]]: !torch.vtensor<[3],si64>)
// CHECK-DAG: %[[CS:.*]] = torch.aten.index_select %[[C]], %{{.*}}, %[[IDX]]
// CHECK-DAG: %[[XS:.*]] = torch.aten.index_select %[[X]], %{{.*}}, %[[IDX]]
// CHECK: %[[W:.*]] = torch.aten.where.ScalarOther %[[CS]], %[[XS]]
// CHECK: return %[[W]]
func.func @index_select_moves_through_where(%arg0: !torch.vtensor<[?,?],i1>, %arg1: !torch.vtensor<[?,?],f32>, %arg2: !torch.vtensor<[3],si64>) -> !torch.vtensor<[?,3],f32> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 4} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],i1>
  torch.bind_symbolic_shape %arg1, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],f32>
  %int1 = torch.constant.int 1
  %float = torch.constant.float 0.000000e+00
  %0 = torch.aten.where.ScalarOther %arg0, %arg1, %float : !torch.vtensor<[?,?],i1>, !torch.vtensor<[?,?],f32>, !torch.float -> !torch.vtensor<[?,?],f32>
  %1 = torch.aten.index_select %0, %int1, %arg2 : !torch.vtensor<[?,?],f32>, !torch.int, !torch.vtensor<[3],si64> -> !torch.vtensor<[?,3],f32>
  return %1 : !torch.vtensor<[?,3],f32>
}

// -----

/// [Pattern: select_as_row_slice]
/// x[:, -1] with a rooted length L: the row is L - 1, computed from the
/// argument's dim; a cast and dropout in eval are moved through.
// CHECK-LABEL: func.func @negative_index_normalized_with_rooted_dim
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?,8],f32>)
// CHECK-DAG: %[[ONE:.*]] = torch.constant.int 1
// CHECK-DAG: %[[MINUS1:.*]] = torch.constant.int -1
// CHECK: %[[L:.*]] = torch.aten.size.int %[[X]], %[[ONE]]
// CHECK: %[[LAST:.*]] = torch.aten.add.int %[[MINUS1]], %[[L]]
// CHECK: %[[ROW:.*]] = torch.aten.slice.Tensor %[[X]], %[[ONE]], %[[LAST]], %[[L]], %[[ONE]]
// CHECK: torch.aten._to_copy %[[ROW]]

// CHECK: torch.aten.dropout
// CHECK: torch.aten.squeeze.dim
func.func @negative_index_normalized_with_rooted_dim(%arg0: !torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[?,8],f64> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 4} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1, 8)> : !torch.vtensor<[?,?,8],f32>
  %int1 = torch.constant.int 1
  %int-1 = torch.constant.int -1
  %int7 = torch.constant.int 7
  %none = torch.constant.none
  %false = torch.constant.bool false
  %float = torch.constant.float 1.000000e-01
  %0 = torch.aten._to_copy %arg0, %int7, %none, %none, %none, %false, %none : !torch.vtensor<[?,?,8],f32>, !torch.int, !torch.none, !torch.none, !torch.none, !torch.bool, !torch.none -> !torch.vtensor<[?,?,8],f64>
  %1 = torch.aten.clone %0, %none : !torch.vtensor<[?,?,8],f64>, !torch.none -> !torch.vtensor<[?,?,8],f64>
  %2 = torch.aten.dropout %1, %float, %false : !torch.vtensor<[?,?,8],f64>, !torch.float, !torch.bool -> !torch.vtensor<[?,?,8],f64>
  %3 = torch.aten.select.int %2, %int1, %int-1 : !torch.vtensor<[?,?,8],f64>, !torch.int, !torch.int -> !torch.vtensor<[?,8],f64>
  return %3 : !torch.vtensor<[?,8],f64>
}

// -----

/// x[:, 3] with a length that may be 3 or less: eager raises an index error,
/// a one-row slice would silently be empty. The select stays.
// CHECK-LABEL: func.func @negative_select_may_be_out_of_range
// CHECK: %[[T:.*]] = torch.aten.tanh
// CHECK: torch.aten.select.int %[[T]]
func.func @negative_select_may_be_out_of_range(%arg0: !torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[?,8],f32> {
  %int1 = torch.constant.int 1
  %int3 = torch.constant.int 3
  %0 = torch.aten.tanh %arg0 : !torch.vtensor<[?,?,8],f32> -> !torch.vtensor<[?,?,8],f32>
  %1 = torch.aten.select.int %0, %int1, %int3 : !torch.vtensor<[?,?,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,8],f32>
  return %1 : !torch.vtensor<[?,8],f32>
}

// -----

/// [Pattern: through_dropout]
/// Dropout in training mode draws a fresh mask per element: not moved.
// CHECK-LABEL: func.func @negative_dropout_in_training
// CHECK: %[[D:.*]] = torch.aten.dropout
// CHECK: torch.aten.select.int %[[D]]
func.func @negative_dropout_in_training(%arg0: !torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[?,8],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %true = torch.constant.bool true
  %float = torch.constant.float 1.000000e-01
  %0 = torch.aten.dropout %arg0, %float, %true : !torch.vtensor<[?,?,8],f32>, !torch.float, !torch.bool -> !torch.vtensor<[?,?,8],f32>
  %1 = torch.aten.select.int %0, %int1, %int0 : !torch.vtensor<[?,?,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,8],f32>
  return %1 : !torch.vtensor<[?,8],f32>
}

// -----

/// [Pattern: through_elementwise]
/// GPT-2's split c_attn weight kept in bfloat16 and read through its cast
/// (frontend/checkpoint.py): the column slice stays below the cast, which
/// runs once, so the weight each part reads is the cast of the stored blob
/// (what the compile quantizes and what data-tiling-forms reads whole).
// CHECK-LABEL: func.func @negative_cast_of_stored_weight
// CHECK: %[[W:.*]] = torch.aten._to_copy %{{.*}} -> !torch.vtensor<[4,6],f32>
// CHECK: %[[COLUMNS:.*]] = torch.aten.slice.Tensor %[[W]], %int1, %int0, %int2, %int1
// CHECK: torch.aten.mm %arg0, %[[COLUMNS]]
func.func @negative_cast_of_stored_weight(%arg0: !torch.vtensor<[?,4],f32>) -> !torch.vtensor<[?,2],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int6 = torch.constant.int 6
  %none = torch.constant.none
  %false = torch.constant.bool false
  %stored = torch.vtensor.literal(dense_resource<w> : tensor<4x6xbf16>) : !torch.vtensor<[4,6],bf16>
  %w = torch.aten._to_copy %stored, %int6, %none, %none, %none, %false, %none : !torch.vtensor<[4,6],bf16>, !torch.int, !torch.none, !torch.none, !torch.none, !torch.bool, !torch.none -> !torch.vtensor<[4,6],f32>
  %columns = torch.aten.slice.Tensor %w, %int1, %int0, %int2, %int1 : !torch.vtensor<[4,6],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[4,2],f32>
  %q = torch.aten.mm %arg0, %columns : !torch.vtensor<[?,4],f32>, !torch.vtensor<[4,2],f32> -> !torch.vtensor<[?,2],f32>
  return %q : !torch.vtensor<[?,2],f32>
}
{-#
  dialect_resources: {
    builtin: {
      w: "0x02000000803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f"
    }
  }
#-}

// -----

/// [Pattern: gather_as_index_select]
/// gather(x, 1, expand(idx[1, 2, 1], [B, 2, 8])): the same two rows for every
/// batch and column, an index_select of idx as 1-D, which then moves.
// CHECK-LABEL: func.func @gather_of_expanded_index
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?,8],f32>, %[[IDX:.*]]: !torch.vtensor<[1,2,1],si64>)
// CHECK: %[[FLAT:.*]] = torch.aten.flatten.using_ints %[[IDX]]
// CHECK: %[[ROWS:.*]] = torch.aten.index_select %[[X]], %{{.*}}, %[[FLAT]]
// CHECK: %[[T:.*]] = torch.aten.tanh %[[ROWS]]
// CHECK-NOT: torch.aten.gather
// CHECK: return %[[T]]
func.func @gather_of_expanded_index(%arg0: !torch.vtensor<[?,?,8],f32>, %arg1: !torch.vtensor<[1,2,1],si64>) -> !torch.vtensor<[?,2,8],f32> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 4} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 2, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1, 8)> : !torch.vtensor<[?,?,8],f32>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int8 = torch.constant.int 8
  %false = torch.constant.bool false
  %0 = torch.aten.tanh %arg0 : !torch.vtensor<[?,?,8],f32> -> !torch.vtensor<[?,?,8],f32>
  %b = torch.aten.size.int %arg0, %int0 : !torch.vtensor<[?,?,8],f32>, !torch.int -> !torch.int
  %sizes = torch.prim.ListConstruct %b, %int2, %int8 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %1 = torch.aten.expand %arg1, %sizes, %false : !torch.vtensor<[1,2,1],si64>, !torch.list<int>, !torch.bool -> !torch.vtensor<[?,2,8],si64>
  %2 = torch.aten.gather %0, %int1, %1, %false : !torch.vtensor<[?,?,8],f32>, !torch.int, !torch.vtensor<[?,2,8],si64>, !torch.bool -> !torch.vtensor<[?,2,8],f32>
  return %2 : !torch.vtensor<[?,2,8],f32>
}

// -----

/// Each batch row gathers its own position (the index varies along the batch
/// axis): not one selection of rows, so it stays.
// CHECK-LABEL: func.func @negative_gather_per_batch_row
// CHECK: %[[T:.*]] = torch.aten.tanh
// CHECK: torch.aten.gather %[[T]]
func.func @negative_gather_per_batch_row(%arg0: !torch.vtensor<[?,?,8],f32>, %arg1: !torch.vtensor<[?,1,1],si64>) -> !torch.vtensor<[?,1,8],f32> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 4} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 2, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1, 8)> : !torch.vtensor<[?,?,8],f32>
  torch.bind_symbolic_shape %arg1, [%s0], affine_map<()[s0] -> (s0, 1, 1)> : !torch.vtensor<[?,1,1],si64>
  %int1 = torch.constant.int 1
  %int8 = torch.constant.int 8
  %int-1 = torch.constant.int -1
  %false = torch.constant.bool false
  %0 = torch.aten.tanh %arg0 : !torch.vtensor<[?,?,8],f32> -> !torch.vtensor<[?,?,8],f32>
  %sizes = torch.prim.ListConstruct %int-1, %int1, %int8 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %1 = torch.aten.expand %arg1, %sizes, %false : !torch.vtensor<[?,1,1],si64>, !torch.list<int>, !torch.bool -> !torch.vtensor<[?,1,8],si64>
  %2 = torch.aten.gather %0, %int1, %1, %false : !torch.vtensor<[?,?,8],f32>, !torch.int, !torch.vtensor<[?,1,8],si64>, !torch.bool -> !torch.vtensor<[?,1,8],f32>
  return %2 : !torch.vtensor<[?,1,8],f32>
}
