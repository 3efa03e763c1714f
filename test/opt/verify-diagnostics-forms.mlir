// RUN: anyshape-opt %s -split-input-file -verify-diagnostics -allow-unregistered-dialect
// RUN: sed -e 's/{{0 operands, but}}/{{1 operand}}/' -e 's/expected-error {{(@severity)}}/expected-remark {{(@severity)}}/' %s \
// RUN:   | not anyshape-opt - -split-input-file -verify-diagnostics=all 2>&1 | FileCheck %s

/// --verify-diagnostics reads every form of upstream's expectations: the
/// first RUN line meets each; the second breaks some and checks each report
/// is the one torch-mlir-opt's verifier gives, at its place (unexpected ones
/// as they come, unmet ones after the last chunk: CHECK-DAG here, while
/// test_opt_compat.py compares the two drivers' output byte for byte).

func.func @space_before_at() -> i32 {
  // expected-error @+1 {{'func.return' op has 0 operands, but}}
  return
}

// -----

// CHECK-DAG: <stdin>:[[# @LINE + 3]]:6: error: expected error "1 operand" was not produced
// CHECK-DAG: <stdin>:[[# @LINE + 3]]:3: error: unexpected error: 'func.return' op has 0 operands, but enclosing function (@below) returns 1
func.func @below() -> i32 {
  // expected-error @below {{0 operands, but}}
  return
}

// -----

func.func @regex_and_above() -> i32 {
  return
  // expected-error-re@above {{enclosing function (@{{[[:alpha:]_]+}}) returns {{[[:digit:]]+}}}}
}

// -----

func.func @at_an_unknown_location() -> i32 {
  // expected-error @unknown {{has 0 operands}}
  return loc(unknown)
}

// -----

// CHECK-DAG: <stdin>:[[# @LINE + 2]]:13: error: 'error' diagnostic emitted when expecting a 'remark'
func.func @severity() -> i32 {
  return // expected-error {{(@severity)}}
}

// -----

// CHECK-DAG: <stdin>:[[# @LINE + 1]]:13: error: unexpected error: operation being parsed with an unregistered dialect
"mystery.op"() : () -> ()
