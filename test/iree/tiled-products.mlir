// RUN: %PYTHON -m anyshape.iree.tiled_products %s | FileCheck %s

// target="cuda": products whose rows are dynamic, padded to whole tiles so
// that IREE tiles them (the stage 'iree-input'; python/anyshape/iree/tiled_products.py).
// Each product becomes a call of a helper function; the helpers follow the
// functions, in the order of their first call, and are checked there.

/// A linear whose rows are dynamic calls its helper (below) and is gone.
// CHECK-LABEL: func.func @linear_dynamic_rows
// CHECK: %[[CALL:.+]] = call @anyshape_tiled_linear_0({{.*}}) : (tensor<?x?x64xf16>, tensor<96x64xf16>, tensor<96xf16>) -> tensor<?x?x96xf16>
// CHECK: torch_c.from_builtin_tensor %[[CALL]]
// CHECK-NOT: torch.aten.linear
func.func @linear_dynamic_rows(%x: !torch.vtensor<[?,?,64],f16>, %w: !torch.vtensor<[96,64],f16>, %b: !torch.vtensor<[96],f16>) -> !torch.vtensor<[?,?,96],f16> {
  %0 = torch.aten.linear %x, %w, %b : !torch.vtensor<[?,?,64],f16>, !torch.vtensor<[96,64],f16>, !torch.vtensor<[96],f16> -> !torch.vtensor<[?,?,96],f16>
  return %0 : !torch.vtensor<[?,?,96],f16>
}

// CHECK-LABEL: func.func @scores_of_half_data
// CHECK: call @anyshape_tiled_bmm_1
func.func @scores_of_half_data(%q: !torch.vtensor<[?,?,64],f16>, %k: !torch.vtensor<[?,64,?],f16>) -> !torch.vtensor<[?,?,?],f32> {
  %int6 = torch.constant.int 6
  %none = torch.constant.none
  %false = torch.constant.bool false
  %scale = torch.constant.float 0.35355339059327379
  %q32 = torch.aten._to_copy %q, %int6, %none, %none, %none, %false, %none : !torch.vtensor<[?,?,64],f16>, !torch.int, !torch.none, !torch.none, !torch.none, !torch.bool, !torch.none -> !torch.vtensor<[?,?,64],f32>
  %k32 = torch.aten._to_copy %k, %int6, %none, %none, %none, %false, %none : !torch.vtensor<[?,64,?],f16>, !torch.int, !torch.none, !torch.none, !torch.none, !torch.bool, !torch.none -> !torch.vtensor<[?,64,?],f32>
  %qs = torch.aten.mul.Scalar %q32, %scale : !torch.vtensor<[?,?,64],f32>, !torch.float -> !torch.vtensor<[?,?,64],f32>
  %0 = torch.aten.bmm %qs, %k32 : !torch.vtensor<[?,?,64],f32>, !torch.vtensor<[?,64,?],f32> -> !torch.vtensor<[?,?,?],f32>
  return %0 : !torch.vtensor<[?,?,?],f32>
}

// CHECK-LABEL: func.func @probabilities_times_values
// CHECK: call @anyshape_tiled_bmm_2
func.func @probabilities_times_values(%s: !torch.vtensor<[?,?,?],f32>, %v: !torch.vtensor<[?,?,64],f16>) -> !torch.vtensor<[?,?,64],f32> {
  %int6 = torch.constant.int 6
  %int1 = torch.constant.int 1
  %none = torch.constant.none
  %false = torch.constant.bool false
  %true = torch.constant.bool true
  %int-1 = torch.constant.int -1
  %dims = torch.prim.ListConstruct %int-1 : (!torch.int) -> !torch.list<int>
  %max = torch.aten.amax %s, %dims, %true : !torch.vtensor<[?,?,?],f32>, !torch.list<int>, !torch.bool -> !torch.vtensor<[?,?,1],f32>
  %shifted = torch.aten.sub.Tensor %s, %max, %int1 : !torch.vtensor<[?,?,?],f32>, !torch.vtensor<[?,?,1],f32>, !torch.int -> !torch.vtensor<[?,?,?],f32>
  %p = torch.aten.exp %shifted : !torch.vtensor<[?,?,?],f32> -> !torch.vtensor<[?,?,?],f32>
  %v32 = torch.aten._to_copy %v, %int6, %none, %none, %none, %false, %none : !torch.vtensor<[?,?,64],f16>, !torch.int, !torch.none, !torch.none, !torch.none, !torch.bool, !torch.none -> !torch.vtensor<[?,?,64],f32>
  %0 = torch.aten.bmm %p, %v32 : !torch.vtensor<[?,?,?],f32>, !torch.vtensor<[?,?,64],f32> -> !torch.vtensor<[?,?,64],f32>
  return %0 : !torch.vtensor<[?,?,64],f32>
}

// CHECK-LABEL: func.func @three_static_rows
// CHECK: call @anyshape_tiled_mm_3
func.func @three_static_rows(%x: !torch.vtensor<[3,64],f16>, %w: !torch.vtensor<[64,96],f16>) -> !torch.vtensor<[3,96],f16> {
  %0 = torch.aten.mm %x, %w : !torch.vtensor<[3,64],f16>, !torch.vtensor<[64,96],f16> -> !torch.vtensor<[3,96],f16>
  return %0 : !torch.vtensor<[3,96],f16>
}

// CHECK-LABEL: func.func @float32_data
// CHECK: call @anyshape_tiled_bmm_4
func.func @float32_data(%a: !torch.vtensor<[?,?,16],f32>, %b: !torch.vtensor<[?,16,?],f32>) -> !torch.vtensor<[?,?,?],f32> {
  %0 = torch.aten.bmm %a, %b : !torch.vtensor<[?,?,16],f32>, !torch.vtensor<[?,16,?],f32> -> !torch.vtensor<[?,?,?],f32>
  return %0 : !torch.vtensor<[?,?,?],f32>
}

/// One row is a matrix-vector product (a decode step's): IREE's own
/// configuration stands, in float16 as in float32; so do static float32 rows.
// CHECK-LABEL: func.func @negative_one_row_and_static_float32_rows
// CHECK: torch.aten.linear
// CHECK: torch.aten.mm
// CHECK-NOT: call
// CHECK: return
func.func @negative_one_row_and_static_float32_rows(%x: !torch.vtensor<[1,64],f16>, %w: !torch.vtensor<[96,64],f16>, %y: !torch.vtensor<[3,64],f32>, %v: !torch.vtensor<[64,96],f32>) -> (!torch.vtensor<[1,96],f16>, !torch.vtensor<[3,96],f32>) {
  %none = torch.constant.none
  %0 = torch.aten.linear %x, %w, %none : !torch.vtensor<[1,64],f16>, !torch.vtensor<[96,64],f16>, !torch.none -> !torch.vtensor<[1,96],f16>
  %1 = torch.aten.mm %y, %v : !torch.vtensor<[3,64],f32>, !torch.vtensor<[64,96],f32> -> !torch.vtensor<[3,96],f32>
  return %0, %1 : !torch.vtensor<[1,96],f16>, !torch.vtensor<[3,96],f32>
}

/// A dim that one operand knows and the other does not (a batch static in
/// one, dynamic in the other) is left to IREE, as written.
// CHECK-LABEL: func.func @negative_batch_known_to_one_operand
// CHECK: torch.aten.bmm
// CHECK-NOT: call
// CHECK: return
func.func @negative_batch_known_to_one_operand(%a: !torch.vtensor<[2,?,16],f16>, %b: !torch.vtensor<[?,16,32],f16>) -> !torch.vtensor<[2,?,32],f16> {
  %0 = torch.aten.bmm %a, %b : !torch.vtensor<[2,?,16],f16>, !torch.vtensor<[?,16,32],f16> -> !torch.vtensor<[2,?,32],f16>
  return %0 : !torch.vtensor<[2,?,32],f16>
}

/// The linear's rows (every dim of x but the last) are collapsed, padded
/// with zeros to a multiple of 128 and split [rows / 128, 128]: IREE then
/// tiles the product instead of giving it one workgroup per output. The bias
/// is added in float32 before the one rounding to float16; the padded rows
/// are sliced off.
// CHECK-LABEL: func.func private @anyshape_tiled_linear_0
// CHECK: %[[ROWS:.+]] = tensor.collapse_shape %{{.+}} {{\[}}[0, 1], [2]] : tensor<?x?x64xf16> into tensor<?x64xf16>
// CHECK: %[[PADDED:.+]] = tensor.pad %[[ROWS]] low[0, 0] high[%{{.+}}, 0]
// CHECK: %[[SPLIT:.+]] = tensor.expand_shape %[[PADDED]] {{\[}}[0, 1], [2]] output_shape [%{{.+}}, 128, 64] : tensor<?x64xf16> into tensor<?x128x64xf16>
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%[[SPLIT]], %{{.+}} : tensor<?x128x64xf16>, tensor<96x64xf16>) outs(%{{.+}} : tensor<?x128x96xf32>)
// CHECK: linalg.generic {{.*}} ins(%{{.+}}, %{{.+}} : tensor<?x128x96xf32>, tensor<96xf16>) outs(%{{.+}} : tensor<?x128x96xf16>)
// CHECK-NEXT: ^bb0
// CHECK-NEXT: arith.extf %{{.+}} : f16 to f32
// CHECK-NEXT: arith.addf %{{.+}} : f32
// CHECK-NEXT: arith.truncf %{{.+}} : f32 to f16
// CHECK: %[[FLAT:.+]] = tensor.collapse_shape %{{.+}} {{\[}}[0, 1], [2]] : tensor<?x128x96xf16> into tensor<?x96xf16>
// CHECK: %[[KEPT:.+]] = tensor.extract_slice %[[FLAT]][0, 0] [%{{.+}}, 96] [1, 1]
// CHECK: tensor.expand_shape %[[KEPT]]

/// Attention scores in float32 from float16 queries and keys (torch's SDPA
/// decomposition casts them up, and scales each by at most 1) are computed
/// from float16 operands with float32 sums, as eager CUDA attention does; the
/// keys (N) are padded to a multiple of 64 and split too.
// CHECK-LABEL: func.func private @anyshape_tiled_bmm_1
// CHECK-SAME: tensor<?x?x64xf32>, %{{.+}}: tensor<?x64x?xf32>) -> tensor<?x?x?xf32>
// CHECK: arith.truncf %{{.+}} : f32 to f16
// CHECK: arith.truncf %{{.+}} : f32 to f16
// CHECK: tensor.expand_shape %{{.+}} {{\[}}[0], [1, 2], [3]] output_shape [%{{.+}}, %{{.+}}, 128, 64] : tensor<?x?x64xf16> into tensor<?x?x128x64xf16>
// CHECK: tensor.expand_shape %{{.+}} {{\[}}[0], [1], [2, 3]] output_shape [%{{.+}}, 64, %{{.+}}, 64] : tensor<?x64x?xf16> into tensor<?x64x?x64xf16>
// CHECK: linalg.generic {{.*}} outs(%{{.+}} : tensor<?x?x128x?x64xf32>)

/// Probabilities (exp(S - amax(S))) times float16 values: the keys are the
/// reduced dim, dynamic, and IREE gives no MMA to a dynamic reduced dim, so
/// they are padded to a multiple of 256 and cut into chunks of 256, each
/// chunk's product a parallel dim, summed by an outer reduction after.
// CHECK-LABEL: func.func private @anyshape_tiled_bmm_2
// CHECK: tensor.expand_shape %{{.+}} {{\[}}[0], [1, 2], [3, 4]] output_shape [%{{.+}}, %{{.+}}, 128, %{{.+}}, 256] : tensor<?x?x?xf16> into tensor<?x?x128x?x256xf16>
// CHECK: tensor.expand_shape %{{.+}} {{\[}}[0], [1, 2], [3]] output_shape [%{{.+}}, %{{.+}}, 256, 64] : tensor<?x?x64xf16> into tensor<?x?x256x64xf16>
// CHECK: %[[PARTS:.+]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "reduction"]} {{.*}} outs(%{{.+}} : tensor<?x?x?x128x64xf32>)
// CHECK: linalg.generic {indexing_maps = [#{{.+}}, #{{.+}}], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%[[PARTS]] : tensor<?x?x?x128x64xf32>)

/// 3 static rows in float16 (a hoisted first token at batch 3): IREE 3.13
/// gives 2 to 7 static rows its reduction strategy, so they are padded to 16;
/// a compute barrier keeps IREE from folding the slice back into the product.
// CHECK-LABEL: func.func private @anyshape_tiled_mm_3
// CHECK: tensor.pad %{{.+}} low[0, 0] high[13, 0]
// CHECK: linalg.generic {{.*}} outs(%{{.+}} : tensor<16x96xf32>)
// CHECK: %[[WHOLE:.+]] = iree_tensor_ext.compute_barrier.start %{{.+}} : tensor<16x96xf16> -> tensor<16x96xf16>
// CHECK: tensor.extract_slice %[[WHOLE]][0, 0] [3, 96] [1, 1]

/// A float32 product of float32 data (RoPE's inv_freq @ positions, in
/// float32 on purpose) is tiled but stays float32.
// CHECK-LABEL: func.func private @anyshape_tiled_bmm_4
// CHECK-NOT: arith.truncf
// CHECK: linalg.generic {{.*}} ins(%{{.+}}, %{{.+}} : tensor<?x?x128x16xf32>, tensor<?x16x?x64xf32>)
// CHECK-NOT: arith.truncf
// CHECK: return
