// RUN: anyshape-opt %s --split-input-file --anyshape-print-flops -o /dev/null 2>&1 | FileCheck %s
// RUN: anyshape-opt %s --split-input-file --anyshape-print-flops | FileCheck %s --check-prefix=IR

/// The report goes to stderr; the IR on stdout is unchanged.
// IR-LABEL: func.func @static_mm
// IR: torch.aten.mm
// IR-LABEL: func.func @negative_unknown_op
// IR: torch.aten.nonzero

/// A static mm [4, 8] x [8, 16]: 2*M*N*K = 2*4*16*8.
// CHECK-LABEL: flops @static_mm
// CHECK-NEXT:   total: 1024
// CHECK-NEXT:   matmul: 1024
// CHECK-NEXT:   symbols: none
// CHECK-NEXT:   by op:
// CHECK-NEXT:     torch.aten.mm x1: 1024
// CHECK-NEXT:   free: none
// CHECK-NEXT:   unknown: none
func.func @static_mm(%arg0: !torch.vtensor<[4,8],f32>, %arg1: !torch.vtensor<[8,16],f32>) -> !torch.vtensor<[4,16],f32> {
  %0 = torch.aten.mm %arg0, %arg1 : !torch.vtensor<[4,8],f32>, !torch.vtensor<[8,16],f32> -> !torch.vtensor<[4,16],f32>
  return %0 : !torch.vtensor<[4,16],f32>
}

// -----

/// linear [s0, s1, 64] x [32, 64]^T + bias: 2*s0*s1*32*64 = 4096*s0*s1 for the
/// matmul, plus one add per output element (32*s0*s1). The view is free.
// CHECK-LABEL: flops @dynamic_linear_with_bias
// CHECK-NEXT:   total: 4128*s0*s1
// CHECK-NEXT:   matmul: 4096*s0*s1
// CHECK-NEXT:   symbols: s0 = arg0 dim 0, s1 = arg0 dim 1
// CHECK-NEXT:   by op:
// CHECK-NEXT:     torch.aten.linear x1: 4128*s0*s1
// CHECK-NEXT:   free: torch.aten.view x1, torch.vtensor.literal x2
// CHECK-NEXT:   unknown: none
func.func @dynamic_linear_with_bias(%arg0: !torch.vtensor<[?,?,64],f32>) -> !torch.vtensor<[?,32],f32> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 512} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1, 64)> : !torch.vtensor<[?,?,64],f32>
  %w = torch.vtensor.literal(dense<1.0> : tensor<32x64xf32>) : !torch.vtensor<[32,64],f32>
  %b = torch.vtensor.literal(dense<0.5> : tensor<32xf32>) : !torch.vtensor<[32],f32>
  %0 = torch.aten.linear %arg0, %w, %b : !torch.vtensor<[?,?,64],f32>, !torch.vtensor<[32,64],f32>, !torch.vtensor<[32],f32> -> !torch.vtensor<[?,?,32],f32>
  torch.bind_symbolic_shape %0, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1, 32)> : !torch.vtensor<[?,?,32],f32>
  %int-1 = torch.constant.int -1
  %int32 = torch.constant.int 32
  %1 = torch.prim.ListConstruct %int-1, %int32 : (!torch.int, !torch.int) -> !torch.list<int>
  %2 = torch.aten.view %0, %1 : !torch.vtensor<[?,?,32],f32>, !torch.list<int> -> !torch.vtensor<[?,32],f32>
  return %2 : !torch.vtensor<[?,32],f32>
}

// -----

/// bmm [s0, 8, 16] x [s0, 16, 4] after a free permute: 2*s0*8*4*16.
// CHECK-LABEL: flops @bmm
// CHECK-NEXT:   total: 1024*s0
// CHECK-NEXT:   matmul: 1024*s0
// CHECK-NEXT:   symbols: s0 = arg0 dim 0
// CHECK-NEXT:   by op:
// CHECK-NEXT:     torch.aten.bmm x1: 1024*s0
// CHECK-NEXT:   free: torch.aten.permute x1
// CHECK-NEXT:   unknown: none
func.func @bmm(%arg0: !torch.vtensor<[?,8,16],f32>, %arg1: !torch.vtensor<[?,4,16],f32>) -> !torch.vtensor<[?,8,4],f32> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0], affine_map<()[s0] -> (s0, 8, 16)> : !torch.vtensor<[?,8,16],f32>
  torch.bind_symbolic_shape %arg1, [%s0], affine_map<()[s0] -> (s0, 4, 16)> : !torch.vtensor<[?,4,16],f32>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %perm = torch.prim.ListConstruct %int0, %int2, %int1 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %0 = torch.aten.permute %arg1, %perm : !torch.vtensor<[?,4,16],f32>, !torch.list<int> -> !torch.vtensor<[?,16,4],f32>
  %1 = torch.aten.bmm %arg0, %0 : !torch.vtensor<[?,8,16],f32>, !torch.vtensor<[?,16,4],f32> -> !torch.vtensor<[?,8,4],f32>
  return %1 : !torch.vtensor<[?,8,4],f32>
}

// -----

/// Elementwise ops count one per element of the broadcast output:
/// [s0, 1, 16] + [8, 1] is [s0, 8, 16]; an alpha other than 1 is one more.
// CHECK-LABEL: flops @broadcasting_add
// CHECK-NEXT:   total: 384*s0
// CHECK-NEXT:   matmul: 0
// CHECK-NEXT:   symbols: s0 = arg0 dim 0
// CHECK-NEXT:   by op:
// CHECK-NEXT:     torch.aten.add.Tensor x2: 384*s0
func.func @broadcasting_add(%arg0: !torch.vtensor<[?,1,16],f32>, %arg1: !torch.vtensor<[8,1],f32>) -> (!torch.vtensor<[?,8,16],f32>, !torch.vtensor<[?,8,16],f32>) {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0], affine_map<()[s0] -> (s0, 1, 16)> : !torch.vtensor<[?,1,16],f32>
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %0 = torch.aten.add.Tensor %arg0, %arg1, %int1 : !torch.vtensor<[?,1,16],f32>, !torch.vtensor<[8,1],f32>, !torch.int -> !torch.vtensor<[?,8,16],f32>
  %1 = torch.aten.add.Tensor %arg0, %arg1, %int2 : !torch.vtensor<[?,1,16],f32>, !torch.vtensor<[8,1],f32>, !torch.int -> !torch.vtensor<[?,8,16],f32>
  return %0, %1 : !torch.vtensor<[?,8,16],f32>, !torch.vtensor<[?,8,16],f32>
}

// -----

/// layer_norm: 5 per element, + 1 each for weight and bias: 7*320*s0 for the
/// affine one over [s0, 10, 32], 5*4*32 for the plain one over [4, 32].
// CHECK-LABEL: flops @layer_norms
// CHECK-NEXT:   total: 2240*s0 + 640
// CHECK-NEXT:   matmul: 0
// CHECK:          torch.aten.layer_norm x2: 2240*s0 + 640
func.func @layer_norms(%arg0: !torch.vtensor<[?,10,32],f32>, %arg1: !torch.vtensor<[4,32],f32>) -> (!torch.vtensor<[?,10,32],f32>, !torch.vtensor<[4,32],f32>) {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0], affine_map<()[s0] -> (s0, 10, 32)> : !torch.vtensor<[?,10,32],f32>
  %w = torch.vtensor.literal(dense<1.0> : tensor<32xf32>) : !torch.vtensor<[32],f32>
  %b = torch.vtensor.literal(dense<0.0> : tensor<32xf32>) : !torch.vtensor<[32],f32>
  %none = torch.constant.none
  %eps = torch.constant.float 1.000000e-05
  %false = torch.constant.bool false
  %int32 = torch.constant.int 32
  %shape = torch.prim.ListConstruct %int32 : (!torch.int) -> !torch.list<int>
  %0 = torch.aten.layer_norm %arg0, %shape, %w, %b, %eps, %false : !torch.vtensor<[?,10,32],f32>, !torch.list<int>, !torch.vtensor<[32],f32>, !torch.vtensor<[32],f32>, !torch.float, !torch.bool -> !torch.vtensor<[?,10,32],f32>
  %1 = torch.aten.layer_norm %arg1, %shape, %none, %none, %eps, %false : !torch.vtensor<[4,32],f32>, !torch.list<int>, !torch.none, !torch.none, !torch.float, !torch.bool -> !torch.vtensor<[4,32],f32>
  return %0, %1 : !torch.vtensor<[?,10,32],f32>, !torch.vtensor<[4,32],f32>
}

// -----

/// addmm (GPT-2's Conv1D) [s0, 64] x [64, 32] + bias with alpha = 2:
/// 2*s0*32*64, + 32*s0 for the add, + 32*s0 for the alpha scaling.
/// softmax over [s0, 16]: 5 per element; a sum over dim 1: 1 per input element.
// CHECK-LABEL: flops @addmm_softmax_sum
// CHECK-NEXT:   total: 4256*s0
// CHECK-NEXT:   matmul: 4096*s0
// CHECK-NEXT:   symbols: s0 = arg0 dim 0
// CHECK-NEXT:   by op:
// CHECK-NEXT:     torch.aten.addmm x1: 4160*s0
// CHECK-NEXT:     torch.aten.softmax.int x1: 80*s0
// CHECK-NEXT:     torch.aten.sum.dim_IntList x1: 16*s0
func.func @addmm_softmax_sum(%arg0: !torch.vtensor<[?,64],f32>, %arg1: !torch.vtensor<[?,16],f32>) -> (!torch.vtensor<[?,32],f32>, !torch.vtensor<[?,16],f32>, !torch.vtensor<[?],f32>) {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0], affine_map<()[s0] -> (s0, 64)> : !torch.vtensor<[?,64],f32>
  torch.bind_symbolic_shape %arg1, [%s0], affine_map<()[s0] -> (s0, 16)> : !torch.vtensor<[?,16],f32>
  %w = torch.vtensor.literal(dense<1.0> : tensor<64x32xf32>) : !torch.vtensor<[64,32],f32>
  %b = torch.vtensor.literal(dense<0.0> : tensor<32xf32>) : !torch.vtensor<[32],f32>
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %none = torch.constant.none
  %false = torch.constant.bool false
  %0 = torch.aten.addmm %b, %arg0, %w, %int1, %int2 : !torch.vtensor<[32],f32>, !torch.vtensor<[?,64],f32>, !torch.vtensor<[64,32],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,32],f32>
  %1 = torch.aten.softmax.int %arg1, %int1, %none : !torch.vtensor<[?,16],f32>, !torch.int, !torch.none -> !torch.vtensor<[?,16],f32>
  %dims = torch.prim.ListConstruct %int1 : (!torch.int) -> !torch.list<int>
  %2 = torch.aten.sum.dim_IntList %arg1, %dims, %false, %none : !torch.vtensor<[?,16],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[?],f32>
  return %0, %1, %2 : !torch.vtensor<[?,32],f32>, !torch.vtensor<[?,16],f32>, !torch.vtensor<[?],f32>
}

// -----

/// An op without a FLOP rule is listed with its location and not counted;
/// the rest still is (tanh: one per element of an unbound dynamic dim).
// CHECK-LABEL: flops @negative_unknown_op
// CHECK-NEXT:   total: arg0_dim0
// CHECK-NEXT:   matmul: 0
// CHECK-NEXT:   symbols: arg0_dim0 = arg0 dim 0
// CHECK-NEXT:   by op:
// CHECK-NEXT:     torch.aten.tanh x1: arg0_dim0
// CHECK-NEXT:   free: none
// CHECK-NEXT:   unknown: 1
// CHECK-NEXT:     torch.aten.nonzero at {{.*}}print-flops.mlir:[[# @LINE + 3]]:8: no FLOP rule for this op
func.func @negative_unknown_op(%arg0: !torch.vtensor<[?],f32>) -> (!torch.vtensor<[?],f32>, !torch.vtensor<[?,1],si64>) {
  %0 = torch.aten.tanh %arg0 : !torch.vtensor<[?],f32> -> !torch.vtensor<[?],f32>
  %1 = torch.aten.nonzero %arg0 : !torch.vtensor<[?],f32> -> !torch.vtensor<[?,1],si64>
  return %0, %1 : !torch.vtensor<[?],f32>, !torch.vtensor<[?,1],si64>
}

// -----

/// A bmm whose batch dims are two unrelated dynamic dims (either may be 1 and
/// broadcast): its output size is unknown, so it is listed, never counted as 0.
// CHECK-LABEL: flops @negative_unknown_dims
// CHECK-NEXT:   total: 0
// CHECK-NEXT:   matmul: 0
// CHECK-NEXT:   symbols: arg0_dim0 = arg0 dim 0, arg1_dim0 = arg1 dim 0
// CHECK-NEXT:   by op:
// CHECK-NEXT:   free: none
// CHECK-NEXT:   unknown: 1
// CHECK-NEXT:     torch.aten.matmul at {{.*}}print-flops.mlir:[[# @LINE + 2]]:8: dims of the result unknown: [?, 8, 4]
func.func @negative_unknown_dims(%arg0: !torch.vtensor<[?,8,16],f32>, %arg1: !torch.vtensor<[?,16,4],f32>) -> !torch.vtensor<[?,8,4],f32> {
  %0 = torch.aten.matmul %arg0, %arg1 : !torch.vtensor<[?,8,16],f32>, !torch.vtensor<[?,16,4],f32> -> !torch.vtensor<[?,8,4],f32>
  return %0 : !torch.vtensor<[?,8,4],f32>
}
