"""Kernel generators of the gpu stage: each rewrites one family of linalg ops into a
`gpu.launch` (tiled matmuls, tensor-core matmuls, reductions, row reductions and
fused row runs, warp shuffles, vectorized accesses, host loops run as kernels).
"""
