// RUN: anyshape-opt %s --split-input-file --verify-diagnostics --anyshape-eliminate-padding='mask=1 dense=true' | FileCheck %s

/// dense=true keeps the function as it was beside the packed one, for the
/// runtime to call when the mask has no zeros (the gathers would buy nothing);
/// the packed function names it in its anyshape.padding attribute.
// CHECK-LABEL: func.func @projection_on_token_rows
// CHECK-SAME: (%{{.*}}: !torch.vtensor<[?,?,4],f32>, %{{.*}}: !torch.vtensor<[?,?],si64>, %{{.*}}: !torch.vtensor<[4,4],f32>, %[[TOKENS:.*]]: !torch.vtensor<[?],si64>, %{{.*}}: !torch.vtensor<[?],si64>)
// CHECK-SAME: anyshape.padding = {dense = @projection_on_token_rows$dense, mask = 1 : i64
// CHECK: torch.aten.index_select %{{.*}}, %{{.*}}, %[[TOKENS]]
// CHECK: torch.aten.linear %{{.*}} : !torch.vtensor<[1,?,4],f32>
// CHECK-LABEL: func.func @projection_on_token_rows$dense
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?,4],f32>, %{{.*}}: !torch.vtensor<[?,?],si64>, %[[W:.*]]: !torch.vtensor<[4,4],f32>) -> !torch.vtensor<[?,?,4],f32> {
// CHECK-NOT: index_select
// CHECK: %[[LIN:.*]] = torch.aten.linear %[[X]], %[[W]], %{{.*}} : !torch.vtensor<[?,?,4],f32>
// CHECK: %[[GELU:.*]] = torch.aten.gelu %[[LIN]]
// CHECK-NEXT: return %[[GELU]]
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

/// The twin's name is taken: the pass says so rather than shadow a function.
// expected-error@+1 {{option dense: the module already has a function @negative_twin_name_taken$dense}}
func.func @negative_twin_name_taken(%x: !torch.vtensor<[?,?,4],f32>, %mask: !torch.vtensor<[?,?],si64>, %w: !torch.vtensor<[4,4],f32>) -> !torch.vtensor<[?,?,4],f32> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %x, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1, 4)> : !torch.vtensor<[?,?,4],f32>
  torch.bind_symbolic_shape %mask, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],si64>
  %none = torch.constant.none
  %0 = torch.aten.linear %x, %w, %none : !torch.vtensor<[?,?,4],f32>, !torch.vtensor<[4,4],f32>, !torch.none -> !torch.vtensor<[?,?,4],f32>
  return %0 : !torch.vtensor<[?,?,4],f32>
}
func.func private @"negative_twin_name_taken$dense"()
