// RUN: lazymlir-opt %s --verify-only -split-input-file | FileCheck %s

// Every lzrt op parses, verifies and prints back (generic form: IRDL ops have no
// custom syntax).
func.func @plan() {
  %0 = "lzrt.arg"() {index = 0 : i64, nbytes = 64 : i64} : () -> !lzrt.buffer
  %1 = "lzrt.alloc"() {nbytes = 64 : i64} : () -> !lzrt.buffer
  %2 = "lzrt.view"(%1) {offset = 16 : i64} : (!lzrt.buffer) -> !lzrt.buffer
  "lzrt.memset"(%1) {value = 0 : i64, nbytes = 64 : i64} : (!lzrt.buffer) -> ()
  "lzrt.launch"(%0, %2) {module_index = 0 : i64, module = "m", kernel = "k", grid = array<i64: 4, 1, 1>, block = array<i64: 256, 1, 1>, shared_bytes = 0 : i64, args = [unit, 3 : i32, unit, 1.500000e+00 : f32], arg_bytes = array<i64: 64, 0, 48, 0>} : (!lzrt.buffer, !lzrt.buffer) -> ()
  "lzrt.copy"(%0, %1) {nbytes = 64 : i64} : (!lzrt.buffer, !lzrt.buffer) -> ()
  "lzrt.free"(%1) : (!lzrt.buffer) -> ()
  return
}
// CHECK-LABEL: func.func @plan()
// CHECK: %[[A:.*]] = "lzrt.arg"() {index = 0 : i64, nbytes = 64 : i64} : () -> !lzrt.buffer
// CHECK: %[[T:.*]] = "lzrt.alloc"() {nbytes = 64 : i64} : () -> !lzrt.buffer
// CHECK: %[[V:.*]] = "lzrt.view"(%[[T]]) {offset = 16 : i64} : (!lzrt.buffer) -> !lzrt.buffer
// CHECK: "lzrt.memset"(%[[T]]) {nbytes = 64 : i64, value = 0 : i64}
// CHECK: "lzrt.launch"(%[[A]], %[[V]]) {arg_bytes = array<i64: 64, 0, 48, 0>, args = [unit, 3 : i32, unit, 1.500000e+00 : f32], block = array<i64: 256, 1, 1>, grid = array<i64: 4, 1, 1>, kernel = "k", module = "m", module_index = 0 : i64, shared_bytes = 0 : i64}
// CHECK: "lzrt.copy"(%[[A]], %[[T]]) {nbytes = 64 : i64}
// CHECK: "lzrt.free"(%[[T]])

// -----

// A launch with no buffer operands (only scalars) is valid; i64/f64 print untyped.
func.func @launch$scalars_only() {
  "lzrt.launch"() {module_index = 1 : i64, module = "m1", kernel = "k", grid = array<i64: 1, 1, 1>, block = array<i64: 1, 1, 1>, shared_bytes = 128 : i64, args = [7 : i64, 0x3FF0000000000000 : f64], arg_bytes = array<i64: 0, 0>} : () -> ()
  return
}
// CHECK-LABEL: func.func @launch$scalars_only
// CHECK: "lzrt.launch"() {arg_bytes = array<i64: 0, 0>, args = [7, 1.000000e+00], {{.*}}shared_bytes = 128 : i64}
