"""Graphs the CUDA emulator tests run (tests/python/lowering/gpu/test_cuda_emulator.py).

Each case is a function of CPU tensors plus an input factory. `trace_all(root)` runs
every case on the `lazy_mlir` device (cpu target) inside `lazymlir.dump_to(root/name)`,
so the tracer's own fx graphs (views as *_copy ops, functionalized) land in
`root/<name>/<graph-hash>/00-fx.fx.json`; it is run in a child process so the dumps
come from a fresh graph cache. Shapes differ between cases, so no two cases share a
graph. `inputs` lists how each graph input of a case is drawn ("randn", "near_one").
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from lazymlir.gpu_kit.cases import mlp_step


# name -> (function, input factory, how graph inputs are drawn)
CASES = {
    "elementwise": (lambda x, y: torch.relu(x * 2.0 + y) - torch.exp(y) / 3.0,
                    lambda: (torch.randn(37, 100), torch.randn(100)), "randn"),
    "gelu_pow": (lambda x: 0.5 * x * (1 + torch.tanh(0.79788456 * (x + 0.044715 * x ** 3))),
                 lambda: (torch.randn(8, 70),), "randn"),
    "slice_cols": (lambda x: x[:, 1:] * 2, lambda: (torch.randn(4, 31),), "randn"),
    "slice_rows": (lambda x: x[2:5] + 1, lambda: (torch.randn(9, 13),), "randn"),
    # 16-byte accesses (lowering/gpu/kernels/vectorize.py): a view 4 bytes in keeps one element
    # per thread; one 16 bytes in (rows of 68 floats) takes 4 per thread, as does a chain
    # with a broadcast row; one reading a transpose in place (y.t()) keeps one.
    "slice_cols_64": (lambda x: x[:, 1:] * 2, lambda: (torch.randn(8, 65),), "randn"),
    "slice_cols_aligned": (lambda x: x[:, 4:] * 2, lambda: (torch.randn(8, 68),), "randn"),
    "vec4_chain": (lambda x, y, b: torch.tanh(x * 2.0 + b) - y,
                   lambda: (torch.randn(48, 128), torch.randn(48, 128), torch.randn(128)),
                   "randn"),
    "transposed_chain": (lambda x, y, b: torch.tanh(x * y.t() + b) - x,
                         lambda: (torch.randn(48, 128), torch.randn(128, 48),
                                  torch.randn(128)), "randn"),
    "chunk_middle": (lambda x: x.chunk(3, 1)[1] * 1.5, lambda: (torch.randn(6, 24),), "randn"),
    "qkv_split": (lambda x: (lambda q, k, v: q * k + v)(*x.chunk(3, -1)),
                  lambda: (torch.randn(5, 3 * 20),), "randn"),
    # A strided read as_strided cannot take as a view gathers with constant indices
    # (dense_resource constants in the module, which the merged CPU build must carry).
    "as_strided_gather": (lambda x: (x * 2).as_strided((4, 4), (1, 8), 2) + 1,
                          lambda: (torch.randn(4, 8),), "randn"),
    "transpose_add": (lambda x, y: x.t() + y, lambda: (torch.randn(11, 7), torch.randn(7, 11)),
                      "randn"),
    "sum_dim": (lambda x: x.sum(dim=1), lambda: (torch.randn(30, 1000),), "randn"),
    "sum_all": (lambda x: x.sum(), lambda: (torch.randn(64, 301),), "randn"),
    "mean_dim0": (lambda x: x.mean(0), lambda: (torch.randn(257, 19),), "randn"),
    "prod_all": (lambda x: x.prod(), lambda: (1 + 0.01 * torch.randn(16, 40),), "near_one"),
    "prod_dim": (lambda x: x.prod(1), lambda: (1 + 0.01 * torch.randn(3, 500),), "near_one"),
    "max_min": (lambda x: (x.amax(1), x.amin(), x.max()), lambda: (torch.randn(21, 333),),
                "randn"),
    "argmax": (lambda x: x.argmax(1), lambda: (torch.randn(12, 77),), "randn"),
    "softmax": (lambda x: torch.softmax(x, dim=-1), lambda: (torch.randn(16, 130),), "randn"),
    "log_softmax": (lambda x: torch.log_softmax(x, dim=0), lambda: (torch.randn(40, 9),),
                    "randn"),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (64,), w, b),
                   lambda: (torch.randn(12, 64), torch.randn(64), torch.randn(64)), "randn"),
    "matmul": (lambda a, b: a @ b, lambda: (torch.randn(33, 17), torch.randn(17, 29)), "randn"),
    "bmm": (lambda a, b: torch.bmm(a, b), lambda: (torch.randn(3, 9, 14), torch.randn(3, 14, 6)),
            "randn"),
    # TMTensor scans: serial along the scanned dim, one thread per row/column
    # (lowering/gpu/kernels/host_loops.py).
    "cumsum_rows": (lambda x: torch.cumsum(x, 1), lambda: (torch.randn(37, 45),), "randn"),
    "cumsum_cols": (lambda x: torch.cumsum(x, 0), lambda: (torch.randn(23, 19),), "randn"),
    "cumprod": (lambda x: torch.cumprod(x, -1), lambda: (1 + 0.01 * torch.randn(6, 40),),
                "near_one"),
    # TMTensor scatters: index_put overwrites rows in order (one thread per column);
    # accumulating scatters update by atomic adds (one thread per update). Integer
    # inputs are drawn in [0, 4), so indices repeat.
    "index_put": (lambda x, r, v: x.index_put((r,), v),
                  lambda: (torch.randn(8, 20), torch.randint(0, 8, (6,)), torch.randn(6, 20)),
                  "randn"),
    "index_put_accumulate": (lambda x, r, v: x.index_put((r,), v, accumulate=True),
                             lambda: (torch.randn(8, 20), torch.randint(0, 8, (6,)),
                                      torch.randn(6, 20)), "randn"),
    "scatter_add": (lambda x, i, s: x.scatter_add(1, i, s),
                    lambda: (torch.randn(8, 21), torch.randint(0, 21, (8, 5)),
                             torch.randn(8, 5)), "randn"),
    # An overwriting scatter with repeated indices (400 updates into 20 elements): two
    # passes, the last update in order wins (lowering/gpu/kernels/host_loops.py).
    "scatter_overwrite": (lambda x, i, s: x.scatter(0, i, s),
                          lambda: (torch.randn(4, 5), torch.randint(0, 4, (80, 5)),
                                   torch.randn(80, 5)), "randn"),
    # Cross-entropy's gradient in one graph: the log_softmax backward's row sum is one
    # fused row kernel whose output was filled far before it (read by every thread,
    # then stored by thread 0: a barrier between, lowering/gpu/kernels/row_fusion.py).
    "cross_entropy_grad": (lambda x, t: torch.autograd.grad(
                               F.cross_entropy(x.requires_grad_(), t), x)[0],
                           lambda: (torch.randn(2, 64), torch.randint(0, 64, (2,))), "randn"),
    # scatter_reduce: amax by atomic max (any order, exact), prod by one thread in order.
    "scatter_reduce": (lambda x, i, s: (x.scatter_reduce(1, i, s, "amax"),
                                        x.scatter_reduce(1, i, s, "prod")),
                       lambda: (torch.randn(6, 5), torch.randint(0, 5, (6, 9)),
                                torch.randn(6, 9)), "randn"),
    # Complex arithmetic in kernels (parts through the complex dialect; a complex fill
    # value made on the host and sunk into the kernel for the matmul).
    "complex_ops": (lambda a, b: (a * b + a, (a.exp() * 2).abs(), a @ b),
                    lambda: (torch.randn(3, 3, dtype=torch.complex64),
                             torch.randn(3, 3, dtype=torch.complex64)), "randn"),
    # FFTs as DFT matmuls on (real, imaginary) parts (lowering/front/fft.py).
    "fft": (lambda x: (torch.fft.rfft(x), torch.fft.ifft(x)), lambda: (torch.randn(4, 6),),
            "randn"),
    # Half types round as eager's CPU kernels (lowering/cpu/bf16_rounding.py in the CPU
    # build): bfloat16 products of tiny values stay subnormal, a number multiplies at
    # full precision, float16 rsqrt and expm1 are float32 math rounded once.
    "bf16_rounding": (lambda a, b: (a * b + a * 1e-3, a.expm1()),
                      lambda: (torch.randn(8, 64, dtype=torch.bfloat16),
                               torch.randn(8, 64, dtype=torch.bfloat16)), "half_edges"),
    "f16_math": (lambda a, b: ((a * 1e-3 + b).abs().rsqrt(), a.expm1()),
                 lambda: (torch.randn(8, 64, dtype=torch.float16),
                          torch.randn(8, 64, dtype=torch.float16)), "half_edges"),
    "mlp_step": (mlp_step, lambda: (torch.randn(8, 16), torch.randn(8, 4), torch.randn(32, 16),
                                     torch.randn(32), torch.randn(4, 32), torch.randn(4)),
                 "randn"),
}


def _flat(out):
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for o in out for t in _flat(o)]


def trace_all(root: str, cases: dict | None = None) -> None:
    """Trace each case (default: CASES) on lazy_mlir, dumping its stages to root/<name>."""
    import lazymlir

    torch.manual_seed(0)
    for name, (fn, make, _) in (CASES if cases is None else cases).items():
        with lazymlir.dump_to(f"{root}/{name}"):
            inputs = [t.to("lazy_mlir") for t in make()]
            outs = _flat(fn(*inputs))
            lazymlir.mark_step()
            for o in outs:
                o.cpu()


if __name__ == "__main__":
    trace_all(sys.argv[1])
