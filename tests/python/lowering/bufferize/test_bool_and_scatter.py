"""Bool (i1) buffers and TMTensor ops compile and match eager, with no fallback.

Bool masks that survive fusion live in i1 buffers after bufferization, which LLVM 22
cannot lower: they are stored as i8 (lowering/bufferize/i1_storage.py). Scatter-like ops, sorts and
scans become torch-mlir TMTensor ops, lowered to loops in the `linalg` stage
(lowering/front/tmtensor.py). Each case here failed or fell back to eager before those two.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from conftest import assert_no_fallback, compare_with_eager

import lazymlir

from lazymlir.lowering import contracts, stages
from lazymlir.lowering.front import tmtensor


def r(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


def _grads(fn):
    """fn(*inputs) -> (fn's result, gradients of sum(result * weights) w.r.t. float inputs)."""
    def run(*inputs):
        leaves = [x.requires_grad_() if x.is_floating_point() else x for x in inputs]
        out = fn(*leaves)
        weights = torch.linspace(0.5, 1.5, out.numel()).reshape(out.shape).to(out.device)
        (out * weights).sum().backward()
        return (out.detach(), *[x.grad for x in leaves if x.is_floating_point()])
    return run


def _causal_softmax(scores):
    n = scores.shape[-1]
    mask = torch.triu(torch.ones(n, n, dtype=torch.bool, device=scores.device), 1)
    return scores.masked_fill(mask, float("-inf")).softmax(-1)


def _causal_sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _masked_std(x):
    return torch.where(x > 0, x, 0.0).std(dim=1)


def _setitem_mask(x):
    x = x.clone()
    x[x > 0] = 0.0
    return x


# Bool masks that stay in buffers (reductions over masks, masks reused by backward).
BOOL_CASES = [
    ("cross_entropy", _grads(F.cross_entropy), (r(3, 4), torch.tensor([0, 3, 1]))),
    ("cross_entropy_ignore_index",
     _grads(lambda x, t: F.cross_entropy(x, t, ignore_index=1)),
     (r(5, 4), torch.tensor([0, 1, 3, 1, 2]))),
    ("nll_loss", _grads(lambda x, t: F.nll_loss(x.log_softmax(-1), t, reduction="sum")),
     (r(4, 6), torch.tensor([5, 0, 2, 2]))),
    ("masked_fill_softmax", _grads(_causal_softmax), (r(2, 5, 5),)),
    ("sdpa_causal", _grads(_causal_sdpa), (r(1, 2, 4, 8), r(1, 2, 4, 8, seed=1),
                                          r(1, 2, 4, 8, seed=2))),
    # Forward only: torch-mlir has no lowering of _adaptive_avg_pool2d_backward.
    ("adaptive_avg_pool2d", lambda x: F.adaptive_avg_pool2d(x, (3, 3)), (r(1, 2, 7, 7),)),
    ("diag_embed", torch.diag_embed, (r(2, 3),)),
    ("masked_std", _masked_std, (r(3, 5),)),
    ("any", lambda x: (x > 0).any(), (r(3, 4),)),
    ("all_dim", lambda x: (x > -1).all(dim=1), (r(3, 4),)),
    ("setitem_bool_mask", _setitem_mask, (r(3, 4),)),
    ("where_bool_result", lambda x: torch.where(x > 0, x > 1, x < -1), (r(3, 4),)),
    ("bool_cumsum", lambda x: (x > 0).cumsum(1), (r(3, 4),)),
    ("argmax", lambda x: x.argmax(1), (r(4, 5),)),
    ("nll_loss_weight", lambda x, t, w: F.nll_loss(x.log_softmax(-1), t, weight=w),
     (r(4, 5), torch.tensor([0, 4, 1, 2]), torch.arange(1.0, 6.0))),
    ("cross_entropy_label_smoothing",
     lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1),
     (r(4, 5), torch.tensor([0, 4, 1, 2]))),
]

# Ops torch-mlir lowers to TMTensor (scatter, scan, sort).
SCATTER_CASES = [
    ("scatter", lambda x, i: torch.zeros(4, 5, device=x.device).scatter(0, i, x),
     (r(2, 5), torch.tensor([[0, 1, 2, 3, 0], [1, 2, 3, 0, 1]]))),
    ("scatter_add_repeated", lambda x, i: torch.zeros(4, 5, device=x.device).scatter_add(1, i, x),
     (r(4, 5), torch.tensor([[0, 1, 1, 3, 0]] * 4))),
    ("scatter_reduce_amax",
     lambda x, i: torch.zeros(4, 5, device=x.device).scatter_reduce(1, i, x, "amax"),
     (r(4, 5), torch.tensor([[0, 1, 1, 3, 0]] * 4))),
    ("index_put_accumulate",
     lambda x, i, v: x.index_put((i,), v, accumulate=True),
     (r(4, 5), torch.tensor([0, 2, 0]), r(3, 5, seed=1))),
    ("embedding_backward", _grads(lambda w, i: F.embedding(i, w)),
     (r(6, 3), torch.tensor([[0, 2, 2], [5, 0, 2]]))),
    ("max_pool2d_backward", _grads(lambda x: F.max_pool2d(x, 2)), (r(1, 2, 4, 6),)),
    ("cumsum", lambda x: torch.cumsum(x, 1), (r(4, 5),)),
    ("cumprod", lambda x: torch.cumprod(x, 0), (r(4, 5),)),
    ("sort", lambda x: torch.sort(x, 1, descending=True), (r(4, 5),)),
    ("argsort", lambda x: torch.argsort(x, 0), (r(4, 5),)),
    ("topk", lambda x: torch.topk(x, 2, 1), (r(4, 5),)),
    ("kthvalue", lambda x: torch.kthvalue(x, 2, 1), (r(4, 5),)),
    ("logcumsumexp", lambda x: torch.logcumsumexp(x, 1), (r(4, 5),)),
    ("index_add", lambda x, i, v: x.index_add(0, i, v),
     (r(4, 5), torch.tensor([0, 2, 0]), r(3, 5, seed=1))),
    ("index_copy", lambda x, i, v: x.index_copy(0, i, v),
     (r(4, 5), torch.tensor([0, 2, 3]), r(3, 5, seed=1))),
    ("gather_backward", _grads(lambda x, i: torch.gather(x, 1, i)),
     (r(4, 5), torch.tensor([[0, 1, 1]] * 4))),
    ("masked_scatter", lambda x, s: x.masked_scatter(x > 0, s), (r(4, 5), r(4, 5, seed=1))),
    # Both masks are computed into one tensor.empty: the scatter must read the first
    # before the second reuses its buffer (tmtensor._sink_to_buffers).
    ("scatter_bool_masks", lambda x, i: (x > 0).scatter(1, i, (x < 0)[:, :2]),
     (r(4, 5), torch.tensor([[0, 1], [2, 3], [4, 0], [1, 2]]))),
    ("index_put_bool", lambda x, i: (x > 0).index_put((i,), torch.tensor(True, device=x.device)),
     (r(4, 5), torch.tensor([0, 2]))),
]


@pytest.mark.parametrize("fn,inputs", [pytest.param(f, i, id=n) for n, f, i in BOOL_CASES])
def test_bool_buffers_match_eager(fn, inputs):
    compare_with_eager(fn, *inputs)
    assert_no_fallback()


@pytest.mark.parametrize("fn,inputs", [pytest.param(f, i, id=n) for n, f, i in SCATTER_CASES])
def test_tmtensor_ops_match_eager(fn, inputs):
    compare_with_eager(fn, *inputs)
    assert_no_fallback()


def test_scatters_along_negative_dims_and_one_hot():
    """A negative dim crashed torch-mlir's scatter lowering (SIGSEGV in `linalg`), so every
    F.one_hot ran with eager fallback (lowering/front/negative_dims.py); `reduce=` is
    decomposed (lowering/front/decompositions.py)."""
    i = torch.tensor([[0], [3], [1], [4]])

    def fn(x, i, s):
        return (x.scatter(-1, i, 1.0), x.scatter(-2, i % 4, s), x.scatter_add(-1, i, s),
                x.scatter_reduce(-1, i, s, "amax"), F.one_hot(i[:, 0], 5),
                # the deprecated reduce= forms (their torch-mlir lowering fails)
                x.scatter(-1, i, s, reduce="add"), x.scatter(0, i % 4, 2.5, reduce="multiply"))
    compare_with_eager(fn, r(4, 5), i, r(4, 1, seed=1))
    assert_no_fallback()
    assert lazymlir.metrics.counter("CompilerCrash") == 0


def test_transformer_encoder_layer_fwd_bwd():
    """Self-attention with a causal mask: i1 masks in forward and backward."""
    def run(x, device):
        torch.manual_seed(0)
        layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True).to(device)
        mask = nn.Transformer.generate_square_subsequent_mask(4, device=device)
        x = x.to(device).requires_grad_()
        y = layer(x, src_mask=mask, is_causal=True)
        y.square().mean().backward()
        return [y.detach().cpu(), x.grad.cpu(), layer.linear1.weight.grad.cpu(),
                layer.self_attn.in_proj_weight.grad.cpu()]

    x = r(2, 4, 8)
    for got, want in zip(run(x, "lazy_mlir"), run(x, "cpu")):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert_no_fallback()


def test_long_sort_falls_back():
    """The loop lowering of a sort is O(n^2): past tmtensor.MAX_SORT_LENGTH it runs eagerly."""
    x = r(2, tmtensor.MAX_SORT_LENGTH + 1)
    compare_with_eager(lambda t: torch.sort(t, 1), x)
    assert set(lazymlir.metrics.fallback_ops()) == {"aten::sort"}


class _TinyGPT(nn.Module):
    """Tied embeddings, causal attention through masked_fill and through sdpa."""

    def __init__(self, vocab=11, dim=8, ctx=6):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(ctx, dim) * 0.1)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln = nn.LayerNorm(dim)

    def forward(self, idx):
        x = self.emb(idx) + self.pos[: idx.shape[1]]
        q, k, v = self.qkv(self.ln(x)).chunk(3, -1)
        x = x + self.proj(_causal_softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5) @ v)
        x = x + _causal_sdpa(q, k, v)
        return x @ self.emb.weight.t()


def _train_gpt(device, steps=3):
    torch.manual_seed(0)
    model = _TinyGPT().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    idx, tgt = torch.randint(0, 11, (2, 6), generator=g), torch.randint(0, 11, (2, 6), generator=g)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        logits = model(idx.to(device))
        loss = F.cross_entropy(logits.reshape(-1, 11), tgt.to(device).reshape(-1))
        loss.backward()
        opt.step()
        if device != "cpu":
            lazymlir.mark_step()
        losses.append(loss.item())
    return losses, {k: v.detach().cpu() for k, v in model.state_dict().items()}


def test_tiny_gpt_training_steps():
    """Embedding backward (index_put), causal masks and cross_entropy in one training step."""
    want_losses, want = _train_gpt("cpu")
    lazymlir.metrics.reset()
    got_losses, got = _train_gpt("lazy_mlir")
    torch.testing.assert_close(got_losses, want_losses, rtol=1e-5, atol=1e-5)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-4, atol=1e-5, msg=name)
    assert_no_fallback()
    # No recompile after warm-up: the last step is a cache hit. Alone, step 1's graph is
    # step 2's too (1 compile); after the rest of the suite in one process, step 1's graph
    # differs from the later ones (2 compiles, steps 2-3 equal): a known issue
    # (docs/known-issues.md), not yet explained. The counters say why if this fails.
    counters = lazymlir.metrics.counters()
    assert counters.get("UncachedCompile", 0) <= 2 and counters.get("CachedCompile", 0) >= 1, \
        counters


# linalg-stage text with an i1 temporary that fusion keeps (diag_embed's mask).
_DIAG_MASK = """
#map = affine_map<(d0, d1) -> (d1)>
#map1 = affine_map<(d0, d1) -> (d0, 0)>
#map2 = affine_map<(d0, d1) -> (d0, d1)>
#map3 = affine_map<(d0, d1) -> (d1, d0)>
module {
  func.func @main(%arg0: tensor<3x3xf32>, %arg1: tensor<3xi64>)
      -> (tensor<3x3xf32>, tensor<3x3xi1>) {
    %cst = arith.constant 0.000000e+00 : f32
    %expanded = tensor.expand_shape %arg1 [[0, 1]] output_shape [3, 1]
        : tensor<3xi64> into tensor<3x1xi64>
    %0 = tensor.empty() : tensor<3x3xi1>
    %1 = linalg.generic {indexing_maps = [#map, #map1, #map2],
        iterator_types = ["parallel", "parallel"]}
        ins(%arg1, %expanded : tensor<3xi64>, tensor<3x1xi64>) outs(%0 : tensor<3x3xi1>) {
    ^bb0(%in: i64, %in_0: i64, %out: i1):
      %5 = arith.cmpi eq, %in, %in_0 : i64
      linalg.yield %5 : i1
    } -> tensor<3x3xi1>
    %2 = tensor.empty() : tensor<3x3xi1>
    %t = linalg.transpose ins(%1 : tensor<3x3xi1>) outs(%2 : tensor<3x3xi1>) permutation = [1, 0]
    %3 = tensor.empty() : tensor<3x3xf32>
    %4 = linalg.generic {indexing_maps = [#map2, #map2, #map2],
        iterator_types = ["parallel", "parallel"]}
        ins(%t, %arg0 : tensor<3x3xi1>, tensor<3x3xf32>) outs(%3 : tensor<3x3xf32>) {
    ^bb0(%in: i1, %in_0: f32, %out: f32):
      %5 = arith.select %in, %in_0, %cst : f32
      linalg.yield %5 : f32
    } -> tensor<3x3xf32>
    // The mask is an output too: the cuda target folds the transpose into its
    // consumer, and the mask would otherwise never be stored.
    return %4, %t : tensor<3x3xf32>, tensor<3x3xi1>
  }
}
"""


@pytest.mark.parametrize("target,last", [("cpu", "llvm"), ("cuda", "ptx")])
def test_i1_buffers_lower_for_each_target(target, last):
    """The `bufferized` stage (shared by both targets) leaves i8 buffers; both lower them."""
    seen = {}
    stages.run_stages(stages.marked("linalg", _DIAG_MASK), stages.Options(target=target),
                      on_stage=lambda rec: seen.setdefault(rec.name, rec.text))
    assert "xi1>" not in seen["bufferized"] and "memref<3x3xi8>" in seen["bufferized"]
    assert last in seen


def _contract(stage: str, body: str):
    from mlir import ir

    ctx = ir.Context()
    ctx.allow_unregistered_dialects = True
    with ctx:
        module = ir.Module.parse(body)
        return contracts.check_contract(stage, module.operation)


def test_linalg_contract_allows_only_tmtensor_loops():
    loops = """
    func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
      %c0 = arith.constant 0 : index
      %0 = bufferization.to_buffer %arg0 : tensor<4xf32> to memref<4xf32>
      %alloc = memref.alloc() : memref<4xf32>
      %1 = bufferization.to_tensor %alloc restrict : memref<4xf32> to tensor<4xf32>
      memref.copy %0, %alloc : memref<4xf32> to memref<4xf32>
      %2 = memref.load %alloc[%c0] : memref<4xf32>
      memref.store %2, %alloc[%c0] : memref<4xf32>
      return %1 : tensor<4xf32>
    }"""
    assert _contract("linalg", loops) is None
    scan = """
    func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
      %0 = "tm_tensor.scan"(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
      return %0 : tensor<4xf32>
    }"""
    assert "op 'tm_tensor.scan' is not allowed after stage 'linalg'" in _contract("linalg", scan)
    other_memref = """
    func.func @main(%arg0: memref<4xf32>) {
      memref.dealloc %arg0 : memref<4xf32>
      return
    }"""
    assert "op 'memref.dealloc' is not allowed" in _contract("linalg", other_memref)


def test_bufferized_contract_rejects_i1_buffers():
    i1 = """
    func.func @main(%arg0: memref<4xf32>) {
      %alloc = memref.alloc() : memref<4xi1>
      return
    }"""
    problem = _contract("bufferized", i1)
    assert "a bool (i1) buffer (memref<4xi1>) remains after stage 'bufferized'" in problem
    assert _contract("bufferized", i1.replace("xi1", "xi8")) is None
