"""Bufferized-stage IR of a graph made of simple loop nests, for the tests of CPU code
generation (tests/python/lowering/cpu: outlining, units, the per-nest object cache)."""

from __future__ import annotations


def bufferized_nests(adds: list[float | None]) -> str:
    """`main(x, out)` with one nest per entry of `adds`, through a temporary: nest 0
    computes tmp = x + x, nest k tmp = tmp + x, each plus its add; then out = tmp. So out =
    x * (len(adds) + 1) + the sum of the adds. An add of None adds nothing (the nest
    computes maximumf(u, u) = u): such nests after the first are the same loop."""
    nests = []
    for k, add in enumerate(adds):
        source = "%arg0" if k == 0 else "%tmp"
        result = (f"%k{k} = arith.constant {float(add)} : f32\n"
                  f"      %w{k} = arith.addf %u{k}, %k{k} : f32" if add is not None
                  else f"%w{k} = arith.maximumf %u{k}, %u{k} : f32")
        nests.append(f"""    scf.for %i{k} = %c0 to %c256 step %c1 {{
      %v{k} = memref.load {source}[%i{k}] : memref<256xf32>
      %x{k} = memref.load %arg0[%i{k}] : memref<256xf32>
      %u{k} = arith.addf %v{k}, %x{k} : f32
      {result}
      memref.store %w{k}, %tmp[%i{k}] : memref<256xf32>
    }}""")
    return ("// lazymlir-stage: bufferized\nmodule {\n"
            "  func.func @main(%arg0: memref<256xf32>, %arg1: memref<256xf32>) {\n"
            "    %c0 = arith.constant 0 : index\n    %c1 = arith.constant 1 : index\n"
            "    %c256 = arith.constant 256 : index\n"
            "    %tmp = memref.alloc() {alignment = 64 : i64} : memref<256xf32>\n"
            + "\n".join(nests) + "\n"
            "    memref.copy %tmp, %arg1 : memref<256xf32> to memref<256xf32>\n"
            "    return\n  }\n}\n")
