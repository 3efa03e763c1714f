// RUN: %PYTHON -m anyshape.iree.in_place_writes %s --written step=1 --written two=0,2 | FileCheck %s
// RUN: not %PYTHON -m anyshape.iree.in_place_writes %s --written step=5 2>&1 | FileCheck %s --check-prefix=BAD

// The last rewrite of the iree-input stage with BackendOptions(in_place_writes=True)
// (iree/in_place_writes.py): a function's first results are the new values
// of inputs the model updates in place; those inputs become mutable and are
// overwritten with torch's own ops, and the results go.

/// One cache written in place: the argument becomes !torch.tensor, read once
/// at the top, and overwritten before the return, which keeps the logits.
// CHECK-LABEL: func.func @step
// CHECK-SAME: (%[[IDS:[^:]*]]: !torch.vtensor<[?,3],f32>, %[[CACHE:[^:]*]]: !torch.tensor<[?,?],f32>) -> !torch.vtensor<[?,3],f32>
// CHECK: %[[READ:.+]] = torch.copy.to_vtensor %[[CACHE]] : !torch.vtensor<[?,?],f32>
// CHECK: %[[NEW:.+]] = torch.aten.slice_scatter %[[READ]]
// CHECK: %[[LOGITS:.+]] = torch.aten.mul.Tensor %[[IDS]], %[[IDS]]
// CHECK: torch.overwrite.tensor.contents %[[NEW]] overwrites %[[CACHE]] : !torch.vtensor<[?,?],f32>, !torch.tensor<[?,?],f32>
// CHECK: return %[[LOGITS]] : !torch.vtensor<[?,3],f32>
func.func @step(%arg0: !torch.vtensor<[?,3],f32>, %arg1: !torch.vtensor<[?,?],f32>) -> (!torch.vtensor<[?,?],f32>, !torch.vtensor<[?,3],f32>) {
  %int1 = torch.constant.int 1
  %int0 = torch.constant.int 0
  %int3 = torch.constant.int 3
  %0 = torch.aten.slice_scatter %arg1, %arg0, %int1, %int0, %int3, %int1 : !torch.vtensor<[?,?],f32>, !torch.vtensor<[?,3],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[?,?],f32>
  %1 = torch.aten.mul.Tensor %arg0, %arg0 : !torch.vtensor<[?,3],f32>, !torch.vtensor<[?,3],f32> -> !torch.vtensor<[?,3],f32>
  return %0, %1 : !torch.vtensor<[?,?],f32>, !torch.vtensor<[?,3],f32>
}

/// Two inputs, in the order of the results; a new value whose type is more
/// precise than the input's is cast back to it before the overwrite.
// CHECK-LABEL: func.func @two
// CHECK-SAME: (%[[A:[^:]*]]: !torch.tensor<[?],f32>, %[[X:[^:]*]]: !torch.vtensor<[?],f32>, %[[B:[^:]*]]: !torch.tensor<[?],f32>) -> !torch.vtensor<[?],f32>
// CHECK-DAG: %[[RA:.+]] = torch.copy.to_vtensor %[[A]]
// CHECK-DAG: %[[RB:.+]] = torch.copy.to_vtensor %[[B]]
// CHECK: %[[NA:.+]] = torch.aten.add.Tensor %[[RA]], %[[X]]
// CHECK: %[[NB:.+]] = torch.aten.mul.Tensor %[[RB]], %[[X]]
// CHECK: torch.overwrite.tensor.contents %[[NA]] overwrites %[[A]]
// CHECK: %[[CAST:.+]] = torch.tensor_static_info_cast %[[NB]] : !torch.vtensor<[4],f32> to !torch.vtensor<[?],f32>
// CHECK: torch.overwrite.tensor.contents %[[CAST]] overwrites %[[B]]
// CHECK: return %[[X]]
func.func @two(%arg0: !torch.vtensor<[?],f32>, %arg1: !torch.vtensor<[?],f32>, %arg2: !torch.vtensor<[?],f32>) -> (!torch.vtensor<[?],f32>, !torch.vtensor<[4],f32>, !torch.vtensor<[?],f32>) {
  %int1 = torch.constant.int 1
  %0 = torch.aten.add.Tensor %arg0, %arg1, %int1 : !torch.vtensor<[?],f32>, !torch.vtensor<[?],f32>, !torch.int -> !torch.vtensor<[?],f32>
  %1 = torch.aten.mul.Tensor %arg2, %arg1 : !torch.vtensor<[?],f32>, !torch.vtensor<[?],f32> -> !torch.vtensor<[4],f32>
  return %0, %1, %arg1 : !torch.vtensor<[?],f32>, !torch.vtensor<[4],f32>, !torch.vtensor<[?],f32>
}

/// negative_: a position outside the function's arguments is refused, named.
// BAD: error: @step: input positions [5] do not fit its 2 arguments
