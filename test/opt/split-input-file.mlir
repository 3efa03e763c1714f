// RUN: anyshape-opt %s --split-input-file --canonicalize | FileCheck %s

/// Each chunk is parsed and run on its own; the separator is echoed between
/// the outputs so that FileCheck can match them chunk by chunk.

// CHECK-LABEL: func.func @first
// CHECK-NEXT: return %arg0 : i32
func.func @first(%arg0: i32) -> i32 {
  %c0 = arith.constant 0 : i32
  %0 = arith.addi %arg0, %c0 : i32
  return %0 : i32
}

// -----

// CHECK: // -----
// CHECK-LABEL: func.func @second
// CHECK-NEXT: %[[C:.*]] = arith.constant 3 : i32
// CHECK-NEXT: return %[[C]] : i32
func.func @second() -> i32 {
  %c1 = arith.constant 1 : i32
  %c2 = arith.constant 2 : i32
  %0 = arith.addi %c1, %c2 : i32
  return %0 : i32
}
