// RUN: anyshape-opt %s --split-input-file --verify-diagnostics --anyshape-lower

/// anyshape-lower refuses symbolic-shape bindings it cannot state as argument
/// facts, with an error at the binding, instead of dropping them silently.

func.func @negative_symbol_used_outside_a_binding(%arg0: !torch.vtensor<[?],f32>) -> !torch.int {
  // expected-error@+1 {{anyshape-lower: torch.symbolic_int 's0' is used by an op other than a shape binding; anyshape-lower cannot erase it}}
  %0 = torch.symbolic_int "s0" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0], affine_map<()[s0] -> (s0)> : !torch.vtensor<[?],f32>
  return %0 : !torch.int
}

// -----

func.func @negative_binding_rank_mismatch(%arg0: !torch.vtensor<[?,4],f32>) -> !torch.vtensor<[?,4],f32> {
  %0 = torch.symbolic_int "s0" {min_val = 1, max_val = 64} : !torch.int
  // expected-error@+1 {{anyshape-lower: torch.bind_symbolic_shape gives 1 sizes for a rank-2 tensor}}
  torch.bind_symbolic_shape %arg0, [%0], affine_map<()[s0] -> (s0)> : !torch.vtensor<[?,4],f32>
  return %arg0 : !torch.vtensor<[?,4],f32>
}

// -----

func.func @negative_bindings_disagree(%arg0: !torch.vtensor<[?],f32>) -> !torch.vtensor<[?],f32> {
  %0 = torch.symbolic_int "s0" {min_val = 1, max_val = 64} : !torch.int
  %1 = torch.symbolic_int "s1" {min_val = 1, max_val = 32} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0], affine_map<()[s0] -> (s0)> : !torch.vtensor<[?],f32>
  // expected-error@+1 {{anyshape-lower: two symbolic-shape bindings of argument 0 of @negative_bindings_disagree disagree on dim 0}}
  torch.bind_symbolic_shape %arg0, [%1], affine_map<()[s0] -> (s0)> : !torch.vtensor<[?],f32>
  return %arg0 : !torch.vtensor<[?],f32>
}

// -----

func.func @negative_unranked_binding(%arg0: !torch.vtensor<*,f32>) -> !torch.vtensor<*,f32> {
  %0 = torch.symbolic_int "s0" {min_val = 1, max_val = 64} : !torch.int
  // expected-error@+1 {{anyshape-lower: torch.bind_symbolic_shape on a value of type !torch.vtensor<*,f32>; expected a ranked !torch.vtensor}}
  torch.bind_symbolic_shape %arg0, [%0], affine_map<()[s0] -> (s0)> : !torch.vtensor<*,f32>
  return %arg0 : !torch.vtensor<*,f32>
}

// -----

func.func @negative_dimension_in_shape_expression(%arg0: !torch.vtensor<[?],f32>) -> !torch.vtensor<[?],f32> {
  %0 = torch.symbolic_int "s0" {min_val = 1, max_val = 64} : !torch.int
  // expected-error@+1 {{anyshape-lower: shape expression 'd0' uses a dimension; torch binds symbols only}}
  torch.bind_symbolic_shape %arg0, [%0], affine_map<(d0)[s0] -> (d0 + s0)> : !torch.vtensor<[?],f32>
  return %arg0 : !torch.vtensor<[?],f32>
}
