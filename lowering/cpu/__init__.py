"""The cpu backend: `bufferized` -> `loops` -> `llvm` -> a shared object.

Row fusion, the tiling/vectorizing schedule sized for the host's ISA, parallel loops
as OpenMP regions, outlining of loop nests, vector math and the llc/cc code generation.
"""
