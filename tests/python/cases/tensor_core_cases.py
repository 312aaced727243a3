"""Graphs of the tensor-core matmul tests (tests/python/lowering/gpu/test_tensor_core_matmul.py).

Same protocol as emulator_cases.py: `trace_all(root, CASES)` traces each case on the
`lazy_mlir` device (cpu target, child process) and dumps its fx graphs. Each case:
(function, input factory, how graph inputs are drawn, dtype of the matmul operands).
Sizes: odd (every tile is an edge tile: M, N, K not multiples of 16 or 32), exact
multiples of the 128x128x32 block tile, and a batch.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

H, B = torch.float16, torch.bfloat16


def _r(*shape, dtype):
    return lambda: tuple(torch.randn(s, dtype=dtype) for s in shape)


CASES = {
    "mm_f16_odd": (lambda a, b: a @ b, _r((37, 53), (53, 29), dtype=H), "randn", H),
    "mm_bf16_odd": (lambda a, b: a @ b, _r((37, 53), (53, 29), dtype=B), "randn", B),
    "mm_f16_tiles": (lambda a, b: a @ b, _r((128, 64), (64, 256), dtype=H), "randn", H),
    "mm_bf16_tiles": (lambda a, b: a @ b, _r((256, 32), (32, 128), dtype=B), "randn", B),
    "bmm_f16": (torch.bmm, _r((3, 40, 24), (3, 24, 50), dtype=H), "randn", H),
    "bmm_bf16": (torch.bmm, _r((2, 20, 70), (2, 70, 33), dtype=B), "randn", B),
    "mm_t_f16": (lambda x, w: x @ w.t(), _r((33, 40), (48, 40), dtype=H), "randn", H),
    "linear_bias_bf16": (lambda x, w, b: F.linear(x, w, b), _r((40, 64), (48, 64), (48,),
                                                                dtype=B), "randn", B),
    "linear_bias_f16": (lambda x, w, b: F.linear(x, w, b), _r((19, 72), (36, 72), (36,),
                                                               dtype=H), "randn", H),
    "mm_f32": (lambda a, b: a @ b, _r((37, 53), (53, 40), dtype=torch.float32), "randn",
               torch.float32),
}


if __name__ == "__main__":
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    import emulator_cases

    emulator_cases.trace_all(sys.argv[1], {k: v[:3] for k, v in CASES.items()})
