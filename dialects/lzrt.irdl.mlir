// lzrt: the lazymlir runtime dialect, the `plan` stage of the CUDA path.
//
// A host launch plan after GPU lowering: which device buffers exist, which kernels run
// on them with what grid, and the copies/memsets/frees between launches. Upstream MLIR
// has no dialect for such a host-side plan (gpu.launch_func still works on memrefs and
// implies a host program), so it is defined here with IRDL and loaded at run time
// (lowering/gpu/lzrt.py). Ops are written in generic form, e.g.
//   %0 = "lzrt.alloc"() {nbytes = 64 : i64} : () -> !lzrt.buffer
// See dialects/README.md for each op's meaning.
irdl.dialect @lzrt {
  // A device buffer (a slot of the runtime plan), or a byte-offset view of one.
  irdl.type @buffer {
    irdl.parameters()
  }

  // Buffer bound to the compiled function's memref argument `index` (inputs, then outs).
  irdl.operation @arg {
    %index = irdl.base "#builtin.integer"
    %nbytes = irdl.base "#builtin.integer"
    %buf = irdl.parametric @lzrt::@buffer<>
    irdl.attributes {"index" = %index, "nbytes" = %nbytes}
    irdl.results(result: %buf)
  }

  // Fresh device allocation of `nbytes` bytes (a temporary of the graph).
  irdl.operation @alloc {
    %int = irdl.base "#builtin.integer"
    %buf = irdl.parametric @lzrt::@buffer<>
    irdl.attributes {"nbytes" = %int}
    irdl.results(result: %buf)
  }

  // `offset` bytes into `source` (a static subview passed to a kernel).
  irdl.operation @view {
    %int = irdl.base "#builtin.integer"
    %buf = irdl.parametric @lzrt::@buffer<>
    irdl.attributes {"offset" = %int}
    %res = irdl.parametric @lzrt::@buffer<>
    irdl.operands(source: %buf)
    irdl.results(result: %res)
  }

  // Release an `lzrt.alloc` buffer.
  irdl.operation @free {
    %buf = irdl.parametric @lzrt::@buffer<>
    irdl.operands(buffer: %buf)
  }

  // Device-to-device copy of `nbytes` bytes from `source` to `target`.
  irdl.operation @copy {
    %int = irdl.base "#builtin.integer"
    %buf = irdl.parametric @lzrt::@buffer<>
    irdl.attributes {"nbytes" = %int}
    %src = irdl.parametric @lzrt::@buffer<>
    irdl.operands(target: %buf, source: %src)
  }

  // Set `nbytes` bytes of `buffer` to the byte `value` (0..255).
  irdl.operation @memset {
    %value = irdl.base "#builtin.integer"
    %nbytes = irdl.base "#builtin.integer"
    %buf = irdl.parametric @lzrt::@buffer<>
    irdl.attributes {"value" = %value, "nbytes" = %nbytes}
    irdl.operands(buffer: %buf)
  }

  // Launch kernel `kernel` of gpu.module number `module_index` (named `module`) with a
  // `grid` x `block` configuration and `shared_bytes` of dynamic shared memory.
  // `args` lists the kernel arguments in order: `unit` takes the next buffer operand
  // (passed as a device pointer), a typed i32/i64/f32/f64 attribute is a scalar. (IRDL
  // binds one type per variadic group, so scalars cannot be mixed in as operands.)
  // `arg_bytes` (array<i64>, one per argument): the bytes the kernel may access from each
  // pointer argument (0 for scalars, or unknown); the runtime checks caller buffers hold
  // them.
  irdl.operation @launch {
    %mod_index = irdl.base "#builtin.integer"
    %shared = irdl.base "#builtin.integer"
    %mod_name = irdl.base "#builtin.string"
    %kernel = irdl.base "#builtin.string"
    %grid = irdl.base "#builtin.dense_array"
    %block = irdl.base "#builtin.dense_array"
    %args = irdl.base "#builtin.array"
    %arg_bytes = irdl.base "#builtin.dense_array"
    %buf = irdl.parametric @lzrt::@buffer<>
    irdl.attributes {
      "module_index" = %mod_index, "module" = %mod_name, "kernel" = %kernel,
      "grid" = %grid, "block" = %block, "shared_bytes" = %shared, "args" = %args,
      "arg_bytes" = %arg_bytes
    }
    irdl.operands(buffers: variadic %buf)
  }
}
