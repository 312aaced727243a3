"""Graphs for tests/python/lowering/gpu/test_gpu_kernels.py: the shapes each redesigned
kernel takes.

Same protocol as emulator_cases.py: `trace_all(root)` runs every case on the
`lazy_mlir` device (cpu target) inside `lazymlir.dump_to(root/name)` in a child
process, and the test compiles the dumped fx graphs for the cuda target.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

import emulator_cases

# name -> (function, input factory, how graph inputs are drawn)
CASES = {
    # 6 rows of 3000: each row split over 2 blocks, combined by one atomic per block.
    "row_sum_split": (lambda x: x.sum(-1), lambda: (torch.randn(6, 3000),), "randn"),
    # 300 rows of 1024: one block per row, 4 elements per thread, no atomic.
    "row_amax": (lambda x: x.amax(-1), lambda: (torch.randn(300, 1024),), "randn"),
    # Odd row length (77: 64 threads, 13 of them take a second element).
    "row_mean_odd": (lambda x: x.mean(-1), lambda: (torch.randn(40, 77),), "randn"),
    # Full reduction of an odd-sized matrix: one "row" over several blocks.
    "full_sum": (lambda x: x.sum(), lambda: (torch.randn(100, 517),), "randn"),
    # No atomic for a product: one block per row, never split.
    "row_prod": (lambda x: x.prod(-1), lambda: (1 + 0.01 * torch.randn(4, 300),), "near_one"),
    "row_sum_int": (lambda x: x.sum(-1), lambda: (torch.randint(0, 4, (9, 200)),), "randn"),
    "row_min_2d": (lambda x: x.amin(dim=(1, 2)), lambda: (torch.randn(5, 12, 40),), "randn"),
    "softmax_rows": (lambda x: torch.softmax(x, dim=-1), lambda: (torch.randn(64, 1000),),
                     "randn"),
    "layer_norm_rows": (lambda x, w, b: F.layer_norm(x, (300,), w, b),
                        lambda: (torch.randn(33, 300), torch.randn(300), torch.randn(300)),
                        "randn"),
    "log_softmax_rows": (lambda x: torch.log_softmax(x, dim=-1), lambda: (torch.randn(48, 512),),
                         "randn"),
    # The row max is a graph output too: the fused kernel stores it as well.
    "softmax_and_amax": (lambda x: (torch.softmax(x, dim=-1), x.amax(-1)),
                         lambda: (torch.randn(20, 96),), "randn"),
    "rms_norm": (lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w,
                 lambda: (torch.randn(24, 256), torch.randn(256)), "randn"),
    # Warp shuffles (gpu_warp_reduce.py). Rows of 40: one warp per row, no barrier.
    "row_sum_warp": (lambda x: x.sum(-1), lambda: (torch.randn(50, 40),), "randn"),
    "softmax_warp": (lambda x: torch.softmax(x, dim=-1), lambda: (torch.randn(30, 45),),
                     "randn"),
    # Rows shorter than a warp: one thread per row (no shuffle).
    "row_sum_short": (lambda x: x.sum(-1), lambda: (torch.randn(70, 9),), "randn"),
    # NaN in every third row, at a different lane each: max and min propagate it
    # through the butterfly, other rows are unaffected.
    "row_max_min_nan": (lambda x: (x.amax(-1), x.amin(-1)), lambda: (torch.randn(40, 300),),
                        "with_nan"),
    # 64-bit values move as two 32-bit shuffles; split rows (4 blocks per row) combine
    # with an f64 atomic.
    "row_sum_f64_split": (lambda x: x.sum(-1),
                          lambda: (torch.randn(4, 5000, dtype=torch.float64),), "randn"),
    # 16-bit values move as the low half of a 32-bit shuffle.
    "row_max_min_f16": (lambda x: (x.amax(-1), x.amin(-1)),
                        lambda: (torch.randn(20, 300, dtype=torch.float16),), "with_nan"),
    "row_sum_i32": (lambda x: x.sum(-1, dtype=torch.int32),
                    lambda: (torch.randint(0, 4, (9, 200), dtype=torch.int32),), "randn"),
    "log_softmax_f64": (lambda x: torch.log_softmax(x, dim=-1),
                        lambda: (torch.randn(24, 100, dtype=torch.float64),), "randn"),
    # Tiled matmuls (M, N >= 32): edge tiles, a K tail (45 = 5 x 8 + 5), batch, and
    # transposed operands (x @ w.t(), x.t() @ y) read through their indexing maps.
    "matmul_tiled": (lambda a, b: a @ b, lambda: (torch.randn(70, 45), torch.randn(45, 150)),
                     "randn"),
    "bmm_tiled": (lambda a, b: torch.bmm(a, b),
                  lambda: (torch.randn(2, 40, 20), torch.randn(2, 20, 33)), "randn"),
    "linear_wt": (lambda x, w: x @ w.t(), lambda: (torch.randn(64, 24), torch.randn(40, 24)),
                  "randn"),
    "matmul_tn": (lambda x, y: x.t() @ y, lambda: (torch.randn(30, 50), torch.randn(30, 64)),
                  "randn"),
    # Attention scores (q k^T): a batched transposed operand (the permute folds into the bmm).
    "bmm_kt": (lambda q, k: torch.bmm(q, k.transpose(1, 2)),
               lambda: (torch.randn(2, 40, 24), torch.randn(2, 36, 24)), "randn"),
    # Column reductions (split over row chunks, atomics per chunk; a product: partials).
    "col_sum": (lambda x: x.sum(0), lambda: (torch.randn(300, 70),), "randn"),
    "col_prod": (lambda x: x.prod(0), lambda: (1 + 0.01 * torch.randn(200, 33),), "near_one"),
}

MATMULS = ("matmul_tiled", "bmm_tiled", "linear_wt", "matmul_tn", "bmm_kt")

# Matmuls of a transposed operand: the transpose is read in place (one launch, no copy).
TRANSPOSED = ("linear_wt", "matmul_tn", "bmm_kt")

# Cases fused into one kernel per graph (no other launch, copy or memset).
FUSED = ("softmax_rows", "layer_norm_rows", "log_softmax_rows", "rms_norm")


def trace_all(root: str) -> None:
    emulator_cases.trace_all(root, CASES)


if __name__ == "__main__":
    trace_all(sys.argv[1])
