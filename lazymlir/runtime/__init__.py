"""Runtimes that execute compiled graphs: CPU (MLIR ExecutionEngine) and CUDA (C++)."""
