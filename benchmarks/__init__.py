"""Benchmarks of the lazy_mlir device against CPU eager (and optionally torch.compile)."""
