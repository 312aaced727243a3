"""Sample graphs for the CUDA lowering tests.

Each sample is a small torch module plus example inputs. Helpers turn a sample into
linalg-on-tensors text (through torch-mlir's FX importer) and into the `bufferized`
stage (upstream MLIR: linalg on memrefs, outputs as out-params), which is the input of
`lowering.gpu.pipeline.to_gpu`. Kept free of `lazymlir` imports so any test can reuse it.
"""

from __future__ import annotations

import functools

import torch

# Same pipeline the stage registry uses for `linalg` -> `bufferized`; the optional
# elementwise-fusion prefix is `lowering.gpu.pipeline.LINALG_FUSION_PIPELINE`.
BUFFERIZE_PIPELINE = (
    "builtin.module("
    "one-shot-bufferize{bufferize-function-boundaries "
    "function-boundary-type-conversion=identity-layout-map}, "
    "buffer-results-to-out-params{modify-public-functions hoist-static-allocs}, "
    "canonicalize, cse)"
)


class Elementwise(torch.nn.Module):
    """Chain of elementwise ops with a broadcast (row vector over a matrix)."""

    def forward(self, x, y):
        return torch.relu(x * 2.0 + y) - torch.exp(y) / 3.0


class SumDim(torch.nn.Module):
    """Reduction over one dim: parallel over the kept dim."""

    def forward(self, x):
        return x.sum(dim=1)


class SumAll(torch.nn.Module):
    """Full reduction to a scalar: needs the split/atomic scheme."""

    def forward(self, x):
        return x.sum()


class Softmax(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


class Matmul(torch.nn.Module):
    def forward(self, a, b):
        return a @ b


class LinearRelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(64, 32)

    def forward(self, x):
        return torch.relu(self.lin(x))


class MlpStep(torch.nn.Module):
    """Forward + hand-written backward of a 2-layer MLP (matmul, transpose, relu mask, sums)."""

    def forward(self, x, w1, w2, gout):
        h = x @ w1
        a = torch.relu(h)
        out = a @ w2
        grad_a = gout @ w2.t()
        grad_h = grad_a * (h > 0).to(grad_a.dtype)
        grad_w1 = x.t() @ grad_h
        grad_w2 = a.t() @ gout
        loss = (out * out).sum()
        return loss, grad_w1, grad_w2, grad_h.sum(dim=0)


def _r(*shape):
    return torch.randn(*shape)


# name -> (module factory, example-input factory)
SAMPLES = {
    "elementwise": (Elementwise, lambda: (_r(64, 100), _r(100))),
    "sum_dim": (SumDim, lambda: (_r(32, 1000),)),
    "sum_all": (SumAll, lambda: (_r(64, 300),)),
    "softmax": (Softmax, lambda: (_r(16, 128),)),
    "matmul": (Matmul, lambda: (_r(64, 48), _r(48, 80))),
    "linear_relu": (LinearRelu, lambda: (_r(16, 64),)),
    "mlp_step": (MlpStep, lambda: (_r(32, 64), _r(64, 48), _r(48, 10), _r(32, 10))),
}


@functools.cache
def linalg_text(name: str) -> str:
    """linalg-on-tensors text of sample `name` (torch-mlir's own context, printed)."""
    from torch_mlir import fx

    factory, args = SAMPLES[name]
    module = fx.export_and_import(factory(), *args(), output_type="linalg-on-tensors")
    return str(module.operation)


def bufferized_text(name: str, fuse: bool = True) -> str:
    """`bufferized`-stage text of sample `name`, using the upstream bindings."""
    from mlir import ir, passmanager

    with ir.Context():
        module = ir.Module.parse(linalg_text(name))
        if fuse:
            from lazymlir.lowering.gpu.pipeline import LINALG_FUSION_PIPELINE

            passmanager.PassManager.parse(LINALG_FUSION_PIPELINE).run(module.operation)
        passmanager.PassManager.parse(BUFFERIZE_PIPELINE).run(module.operation)
        return str(module)


def bufferized_module(name: str, context, fuse: bool = True):
    """Parse the bufferized sample into `context` (an upstream `mlir.ir.Context`)."""
    from mlir import ir

    return ir.Module.parse(bufferized_text(name, fuse), context)
