// RUN: anyshape-opt %s --split-input-file --verify-diagnostics

/// Each malformed anyshape.iota_like gets a diagnostic at its location, not a crash.

func.func @invalid_dim(%arg0: !torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[?],si64> {
  // expected-error@+1 {{'anyshape.iota_like' op dim 3 is out of range for a rank-3 'ref' (expected 0..2)}}
  %0 = "anyshape.iota_like"(%arg0) {dim = 3 : i64} : (!torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[?],si64>
  return %0 : !torch.vtensor<[?],si64>
}

// -----

func.func @invalid_result_dtype(%arg0: !torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[?],f32> {
  // expected-error@+1 {{'anyshape.iota_like' op expects a 1-D si64 or si32 !torch.vtensor result, got !torch.vtensor<[?],f32>}}
  %0 = "anyshape.iota_like"(%arg0) {dim = 0 : i64} : (!torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[?],f32>
  return %0 : !torch.vtensor<[?],f32>
}

// -----

func.func @invalid_result_size(%arg0: !torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[4],si64> {
  // expected-error@+1 {{'anyshape.iota_like' op result size 4 does not match size 8 of 'ref' along dim 2}}
  %0 = "anyshape.iota_like"(%arg0) {dim = 2 : i64} : (!torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[4],si64>
  return %0 : !torch.vtensor<[4],si64>
}

// -----

func.func @invalid_missing_dim(%arg0: !torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[?],si64> {
  // expected-error@+1 {{'anyshape.iota_like' op requires an integer attribute 'dim'}}
  %0 = "anyshape.iota_like"(%arg0) : (!torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[?],si64>
  return %0 : !torch.vtensor<[?],si64>
}

// -----

func.func @invalid_unranked(%arg0: !torch.vtensor) -> !torch.vtensor<[?],si64> {
  // expected-error@+1 {{'anyshape.iota_like' op expects 'ref' to be a ranked !torch.vtensor, got !torch.vtensor}}
  %0 = "anyshape.iota_like"(%arg0) {dim = 0 : i64} : (!torch.vtensor) -> !torch.vtensor<[?],si64>
  return %0 : !torch.vtensor<[?],si64>
}
