// RUN: anyshape-opt %s --anyshape-print-flops=at=s0=2,s1=3 -o /dev/null 2>&1 | FileCheck %s
// RUN: not anyshape-opt %s --anyshape-print-flops=at=s0=2 -o /dev/null 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not anyshape-opt %s --anyshape-print-flops=at=s0=2,s1=3,s9=4 -o /dev/null 2>&1 | FileCheck %s --check-prefix=NO-SYMBOL
// RUN: not anyshape-opt %s '--pass-pipeline=builtin.module(anyshape-print-flops{at=s0:2})' -o /dev/null 2>&1 | FileCheck %s --check-prefix=SYNTAX
// RUN: not anyshape-opt %s --anyshape-print-flops=at=s0=2,s0=3 -o /dev/null 2>&1 | FileCheck %s --check-prefix=TWICE

/// `at` evaluates every count at those sizes: linear 4128*s0*s1 at s0 = 2,
/// s1 = 3 is 24768 (24576 of it the matmul); gelu one per element, 32*6.
// CHECK-LABEL: flops @linear_gelu
// CHECK-NEXT:   at s0=2, s1=3
// CHECK-NEXT:   total: 4160*s0*s1 = 24960
// CHECK-NEXT:   matmul: 4096*s0*s1 = 24576
// CHECK-NEXT:   symbols: s0 = arg0 dim 0, s1 = arg0 dim 1
// CHECK-NEXT:   by op:
// CHECK-NEXT:     torch.aten.gelu x1: 32*s0*s1 = 192
// CHECK-NEXT:     torch.aten.linear x1: 4128*s0*s1 = 24768

/// A symbol the counts need and `at` leaves out fails the pass, as does a
/// name no function has, text that is not name=size pairs, or a name given twice.
// MISSING: error: anyshape-print-flops: option at: @linear_gelu: 4160*s0*s1 needs a value for s1
// NO-SYMBOL: error: anyshape-print-flops: option at: no function has a symbol s9 (symbols: s0, s1)
// SYNTAX: error: anyshape-print-flops: option at: expected name=size pairs separated by commas (at=s0=1,s1=128), got 's0:2' in 's0:2'
// TWICE: error: anyshape-print-flops: option at: s0 is given twice (2 and 3)
func.func @linear_gelu(%arg0: !torch.vtensor<[?,?,64],f32>) -> !torch.vtensor<[?,?,32],f32> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 512} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1, 64)> : !torch.vtensor<[?,?,64],f32>
  %w = torch.vtensor.literal(dense<1.0> : tensor<32x64xf32>) : !torch.vtensor<[32,64],f32>
  %b = torch.vtensor.literal(dense<0.5> : tensor<32xf32>) : !torch.vtensor<[32],f32>
  %0 = torch.aten.linear %arg0, %w, %b : !torch.vtensor<[?,?,64],f32>, !torch.vtensor<[32,64],f32>, !torch.vtensor<[32],f32> -> !torch.vtensor<[?,?,32],f32>
  %str = torch.constant.str "none"
  %1 = torch.aten.gelu %0, %str : !torch.vtensor<[?,?,32],f32>, !torch.str -> !torch.vtensor<[?,?,32],f32>
  return %1 : !torch.vtensor<[?,?,32],f32>
}
