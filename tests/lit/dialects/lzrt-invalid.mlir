// RUN: lazymlir-opt %s --verify-only -verify-diagnostics -split-input-file

func.func @alloc$missing_nbytes() {
  // expected-error @+1 {{attribute "nbytes" is expected but not provided}}
  %0 = "lzrt.alloc"() : () -> !lzrt.buffer
  return
}

// -----

func.func @alloc$string_nbytes() {
  // expected-error @+1 {{expected base attribute 'builtin.integer' but got 'builtin.string'}}
  %0 = "lzrt.alloc"() {nbytes = "64"} : () -> !lzrt.buffer
  return
}

// -----

func.func @alloc$wrong_result() {
  // expected-error @+1 {{expected base type 'lzrt.buffer' but got 'i32'}}
  %0 = "lzrt.alloc"() {nbytes = 4 : i64} : () -> i32
  return
}

// -----

func.func @copy$one_operand() {
  %0 = "lzrt.alloc"() {nbytes = 4 : i64} : () -> !lzrt.buffer
  // expected-error @+1 {{expects exactly 2 operands, but got 1}}
  "lzrt.copy"(%0) {nbytes = 4 : i64} : (!lzrt.buffer) -> ()
  return
}

// -----

func.func @free$scalar() {
  %c = arith.constant 1 : i32
  // expected-error @+1 {{expected base type 'lzrt.buffer' but got 'i32'}}
  "lzrt.free"(%c) : (i32) -> ()
  return
}

// -----

func.func @launch$scalar_operand(%b: !lzrt.buffer) {
  %c = arith.constant 1 : i32
  // expected-error @+1 {{expected '!lzrt.buffer' but got 'i32'}}
  "lzrt.launch"(%b, %c) {module_index = 0 : i64, module = "m", kernel = "k", grid = array<i64: 1, 1, 1>, block = array<i64: 32, 1, 1>, shared_bytes = 0 : i64, args = [unit, unit], arg_bytes = array<i64: 0, 0>} : (!lzrt.buffer, i32) -> ()
  return
}

// -----

func.func @launch$grid_not_array(%b: !lzrt.buffer) {
  // expected-error @+1 {{expected base attribute 'builtin.dense_array' but got 'builtin.array'}}
  "lzrt.launch"(%b) {module_index = 0 : i64, module = "m", kernel = "k", grid = [1, 1, 1], block = array<i64: 32, 1, 1>, shared_bytes = 0 : i64, args = [unit], arg_bytes = array<i64: 0>} : (!lzrt.buffer) -> ()
  return
}

// -----

// `arg_bytes` (bytes each argument may touch) is part of every launch: the runtime
// checks caller buffers against it.
func.func @launch$no_arg_bytes(%b: !lzrt.buffer) {
  // expected-error @+1 {{arg_bytes}}
  "lzrt.launch"(%b) {module_index = 0 : i64, module = "m", kernel = "k", grid = array<i64: 1, 1, 1>, block = array<i64: 32, 1, 1>, shared_bytes = 0 : i64, args = [unit]} : (!lzrt.buffer) -> ()
  return
}
