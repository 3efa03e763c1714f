// RUN: anyshape-opt %s --split-input-file --anyshape-logsumexp-softmax | FileCheck %s

/// [Pattern: softmax_as_logsumexp]
/// Attention scores over a dynamic key axis: IREE would raise the softmax into
/// a linalg.softmax whose CPU tiling recomputes the row max per 16 columns, so
/// it becomes exp((x - max) - log(sum(exp(x - max)))).
// CHECK-LABEL: func.func @dynamic_axis
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,4,?,?],f32>)
// CHECK: %[[AXES:.*]] = torch.prim.ListConstruct %[[AXIS:.*]] : (!torch.int) -> !torch.list<int>
// CHECK: %[[MAX:.*]] = torch.aten.amax %[[X]], %[[AXES]], %true : {{.*}} -> !torch.vtensor<[?,4,?,1],f32>
// CHECK: %[[SHIFTED:.*]] = torch.aten.sub.Tensor %[[X]], %[[MAX]], %{{.*}} -> !torch.vtensor<[?,4,?,?],f32>
// CHECK: %[[EXP:.*]] = torch.aten.exp %[[SHIFTED]]
// CHECK: %[[SUM:.*]] = torch.aten.sum.dim_IntList %[[EXP]], %[[AXES]], %true, %none {{.*}} -> !torch.vtensor<[?,4,?,1],f32>
// CHECK: %[[LOG:.*]] = torch.aten.log %[[SUM]] : !torch.vtensor<[?,4,?,1],f32> -> !torch.vtensor<[?,4,?,1],f32>
// CHECK: %[[CENTERED:.*]] = torch.aten.sub.Tensor %[[SHIFTED]], %[[LOG]], %{{.*}} -> !torch.vtensor<[?,4,?,?],f32>
// CHECK: %[[P:.*]] = torch.aten.exp %[[CENTERED]] : !torch.vtensor<[?,4,?,?],f32> -> !torch.vtensor<[?,4,?,?],f32>
// CHECK-NOT: softmax
// CHECK: return %[[P]]
func.func @dynamic_axis(%arg0: !torch.vtensor<[?,4,?,?],f32>) -> !torch.vtensor<[?,4,?,?],f32> {
  %int-1 = torch.constant.int -1
  %none = torch.constant.none
  %0 = torch.aten.softmax.int %arg0, %int-1, %none : !torch.vtensor<[?,4,?,?],f32>, !torch.int, !torch.none -> !torch.vtensor<[?,4,?,?],f32>
  return %0 : !torch.vtensor<[?,4,?,?],f32>
}

// -----

/// The core ATen spelling, _softmax without a half-to-float conversion, over
/// an axis given as a positive index.
// CHECK-LABEL: func.func @core_aten_softmax
// CHECK: %[[AXIS:.*]] = torch.constant.int 1
// CHECK: %[[AXES:.*]] = torch.prim.ListConstruct %[[AXIS]]
// CHECK: torch.aten.amax %arg0, %[[AXES]], %true : {{.*}} -> !torch.vtensor<[8,1],f32>
// CHECK-NOT: torch.aten._softmax
func.func @core_aten_softmax(%arg0: !torch.vtensor<[8,?],f32>) -> !torch.vtensor<[8,?],f32> {
  %int1 = torch.constant.int 1
  %false = torch.constant.bool false
  %0 = torch.aten._softmax %arg0, %int1, %false : !torch.vtensor<[8,?],f32>, !torch.int, !torch.bool -> !torch.vtensor<[8,?],f32>
  return %0 : !torch.vtensor<[8,?],f32>
}

// -----

/// A dtype argument that names the input's own dtype converts nothing (BLOOM's
/// softmax(scores, dim=-1, dtype=torch.float32) of float32 scores): rewritten.
// CHECK-LABEL: func.func @dtype_of_the_input
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[4,?],f32>)
// CHECK: %[[MAX:.*]] = torch.aten.amax %[[X]]
// CHECK: %[[SHIFTED:.*]] = torch.aten.sub.Tensor %[[X]], %[[MAX]]
// CHECK: %[[SUM:.*]] = torch.aten.sum.dim_IntList
// CHECK: %[[LOG:.*]] = torch.aten.log %[[SUM]]
// CHECK: %[[CENTERED:.*]] = torch.aten.sub.Tensor %[[SHIFTED]], %[[LOG]]
// CHECK: %[[P:.*]] = torch.aten.exp %[[CENTERED]] : !torch.vtensor<[4,?],f32> -> !torch.vtensor<[4,?],f32>
// CHECK-NOT: softmax
// CHECK: return %[[P]]
func.func @dtype_of_the_input(%arg0: !torch.vtensor<[4,?],f32>) -> !torch.vtensor<[4,?],f32> {
  %int-1 = torch.constant.int -1
  %int6 = torch.constant.int 6
  %0 = torch.aten.softmax.int %arg0, %int-1, %int6 : !torch.vtensor<[4,?],f32>, !torch.int, !torch.int -> !torch.vtensor<[4,?],f32>
  return %0 : !torch.vtensor<[4,?],f32>
}

// -----

/// A static axis, even in a tensor with dynamic dims: IREE tiles that softmax
/// well, so it is left as it is.
// CHECK-LABEL: func.func @negative_static_axis
// CHECK: torch.aten.softmax.int
// CHECK-NOT: torch.aten.amax
func.func @negative_static_axis(%arg0: !torch.vtensor<[?,?,16],f32>) -> !torch.vtensor<[?,?,16],f32> {
  %int-1 = torch.constant.int -1
  %none = torch.constant.none
  %0 = torch.aten.softmax.int %arg0, %int-1, %none : !torch.vtensor<[?,?,16],f32>, !torch.int, !torch.none -> !torch.vtensor<[?,?,16],f32>
  return %0 : !torch.vtensor<[?,?,16],f32>
}

// -----

/// A softmax that also converts its dtype (softmax(x, dtype=...) or
/// _softmax(half_to_float=True)) converts its input first, as torch does,
/// then is rewritten in the dtype it computes in. As a linalg.softmax over an
/// unbounded axis it failed in IREE's CPU codegen (BLOOM in float16).
// CHECK-LABEL: func.func @dtype_conversion
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?],f16>)
// CHECK: %[[CODE:.*]] = torch.constant.int 6
// CHECK: %[[X32:.*]] = torch.aten.to.dtype %[[X]], %[[CODE]], {{.*}} : !torch.vtensor<[?],f16>, {{.*}} -> !torch.vtensor<[?],f32>
// CHECK: torch.aten.amax %[[X32]], {{.*}} -> !torch.vtensor<[1],f32>
// CHECK: %[[P:.*]] = torch.aten.exp %{{.*}} : !torch.vtensor<[?],f32> -> !torch.vtensor<[?],f32>
// CHECK: %[[X32B:.*]] = torch.aten.to.dtype %[[X]], {{.*}} -> !torch.vtensor<[?],f32>
// CHECK: torch.aten.amax %[[X32B]]
// CHECK-NOT: softmax
func.func @dtype_conversion(%arg0: !torch.vtensor<[?],f16>) -> (!torch.vtensor<[?],f32>, !torch.vtensor<[?],f32>) {
  %int0 = torch.constant.int 0
  %int6 = torch.constant.int 6
  %true = torch.constant.bool true
  %0 = torch.aten.softmax.int %arg0, %int0, %int6 : !torch.vtensor<[?],f16>, !torch.int, !torch.int -> !torch.vtensor<[?],f32>
  %1 = torch.aten._softmax %arg0, %int0, %true : !torch.vtensor<[?],f16>, !torch.int, !torch.bool -> !torch.vtensor<[?],f32>
  return %0, %1 : !torch.vtensor<[?],f32>, !torch.vtensor<[?],f32>
}

// -----

/// A dtype given as a value, not a constant: what it converts to is unknown,
/// so the softmax is left alone.
// CHECK-LABEL: func.func @negative_dtype_not_constant
// CHECK: torch.aten.softmax.int
// CHECK-NOT: torch.aten.amax
func.func @negative_dtype_not_constant(%arg0: !torch.vtensor<[?],f32>, %arg1: !torch.int) -> !torch.vtensor<[?],f32> {
  %int0 = torch.constant.int 0
  %0 = torch.aten.softmax.int %arg0, %int0, %arg1 : !torch.vtensor<[?],f32>, !torch.int, !torch.int -> !torch.vtensor<[?],f32>
  return %0 : !torch.vtensor<[?],f32>
}
