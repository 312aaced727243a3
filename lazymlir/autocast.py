"""Autocast for lazy_mlir: CUDA's policy, registered for the device's autocast key.

`torch.autocast("lazy_mlir", dtype=torch.bfloat16 | torch.float16)` enables PyTorch's
AutocastPrivateUse1 dispatch key. PyTorch registers a fallthrough there and leaves the
policy to the backend (its CUDA and CPU policies are C++ kernels of their own keys), so
this module registers Python kernels for the ops CUDA's policy names
(aten/src/ATen/autocast_mode.cpp):

- lower precision: matmuls and convolutions run in the autocast dtype;
- float32: ops that lose too much in half precision (exp, log, pow, norms, losses,
  softmax...) run in float32;
- float32 unless a dtype is given (softmax, log_softmax, sum, cumsum, prod...);
- promote: ops with several floating inputs (cat, stack, addcmul, index_put...) run in
  the widest of their types.

A kernel casts the eligible arguments (floating tensors on the device, not float64,
as CUDA's `is_autocast_eligible`) and calls the op again with the autocast key
excluded; autograd records the casts, as on CUDA. Composite ops (linear, conv2d)
reach the kernels of the ops they decompose into. No cast cache: lazy casts are
recorded nodes, and the compiler merges repeated ones.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten
_KEY = "AutocastPrivateUse1"
_EXCLUDE = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)

LOWER_PRECISION = (
    "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d",
    "conv_transpose2d", "conv_transpose3d", "convolution", "prelu", "addmm", "addmv",
    "addr", "matmul", "einsum", "mm", "mv", "linalg_vecdot", "linear", "addbmm",
    "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot", "lstm_cell", "gru_cell",
    "rnn_tanh_cell", "rnn_relu_cell", "scaled_dot_product_attention",
)
FLOAT32 = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
    "reciprocal", "rsqrt", "sinh", "tan", "pow", "softplus", "layer_norm",
    "native_layer_norm", "group_norm", "frobenius_norm", "nuclear_norm",
    "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss",
    "nll_loss2d", "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss",
    "huber_loss", "mse_loss", "margin_ranking_loss", "multilabel_margin_loss",
    "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
    "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
    "upsample_nearest1d", "_upsample_nearest_exact1d", "upsample_nearest2d",
    "_upsample_nearest_exact2d", "upsample_nearest3d", "_upsample_nearest_exact3d",
    "upsample_linear1d", "upsample_bilinear2d", "_upsample_bilinear2d_aa",
    "upsample_trilinear3d", "upsample_bicubic2d", "_upsample_bicubic2d_aa",
)
FLOAT32_UNLESS_DTYPE = (
    "prod", "softmax", "log_softmax", "cumprod", "cumsum", "linalg_vector_norm",
    "linalg_matrix_norm", "sum",
)
PROMOTE = (
    "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler",
    "index_put", "tensordot", "scatter_add", "cat", "stack",
)

_libraries: list = []  # the torch.library.Library objects holding the kernels: kept alive


def supported_dtypes() -> list[torch.dtype]:
    return [torch.float16, torch.bfloat16]


def _eligible(x) -> bool:
    return (isinstance(x, torch.Tensor) and x.is_floating_point()
            and x.dtype != torch.float64 and x.device.type == "lazy_mlir")


def _cast(value, dtype):
    if _eligible(value):
        return value if value.dtype == dtype else value.to(dtype)
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, dtype) for v in value)
    return value


def _widest(args, kwargs):
    widest = None
    for value in (*args, *kwargs.values()):
        for v in value if isinstance(value, (list, tuple)) else (value,):
            if _eligible(v):
                widest = v.dtype if widest is None else torch.promote_types(widest, v.dtype)
    return widest


def _kernel(op, policy: str):
    dtype_index = next((i for i, a in enumerate(op._schema.arguments) if a.name == "dtype"),
                       None)

    def kernel(*args, **kwargs):
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            if policy == "lower":
                target = torch.get_autocast_dtype("lazy_mlir")
            elif policy == "float32":
                target = torch.float32
            elif policy == "promote":
                target = _widest(args, kwargs)
            else:  # float32 unless the call names a dtype
                given = kwargs.get("dtype") if dtype_index is None or \
                    len(args) <= dtype_index else args[dtype_index]
                if given is None and _eligible(args[0]):
                    if dtype_index is not None and len(args) > dtype_index:
                        args = (*args[:dtype_index], torch.float32, *args[dtype_index + 1:])
                    else:
                        kwargs = {**kwargs, "dtype": torch.float32}
                return op(*args, **kwargs)
            if target is not None:
                args = _cast(args, target)
                kwargs = {k: _cast(v, target) for k, v in kwargs.items()}
            return op(*args, **kwargs)

    return kernel


def _overloads(name: str):
    packet = getattr(aten, name, None)
    if packet is None:
        return
    for overload in packet.overloads():
        op = getattr(packet, overload)
        if "out" in overload or op._schema.is_mutable:
            continue
        if policy_needs_dtype_arg(name) and not any(a.name == "dtype"
                                                     for a in op._schema.arguments):
            continue
        yield op


def policy_needs_dtype_arg(name: str) -> bool:
    return name in FLOAT32_UNLESS_DTYPE


def install() -> None:
    """Idempotent: register the policy's kernels for AutocastPrivateUse1."""
    if _libraries:
        return
    # Every other op passes through the key, as PyTorch registers for its own autocast
    # keys (but not for AutocastPrivateUse1).
    fallthrough = torch.library.Library("_", "IMPL")
    fallthrough.fallback(torch.library.fallthrough_kernel, _KEY)
    library = torch.library.Library("aten", "IMPL")
    for policy, names in (("lower", LOWER_PRECISION), ("float32", FLOAT32),
                          ("float32_unless_dtype", FLOAT32_UNLESS_DTYPE),
                          ("promote", PROMOTE)):
        for name in names:
            for op in _overloads(name):
                library.impl(op, _kernel(op, policy), _KEY)
    _libraries.extend((fallthrough, library))
