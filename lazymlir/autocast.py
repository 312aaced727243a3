"""Autocast for lazy_mlir: the policy of the target's eager backend, for the device's key.

`torch.autocast("lazy_mlir", dtype=torch.bfloat16 | torch.float16)` enables PyTorch's
AutocastPrivateUse1 dispatch key. PyTorch registers a fallthrough there and leaves the
policy to the backend (its CUDA and CPU policies are C++ kernels of their own keys), so
this module registers Python kernels for the ops those policies name
(aten/src/ATen/autocast_mode.cpp), and each kernel applies the policy of the active
target: CUDA's on the cuda target, CPU's on the cpu target, whose reference is eager
CPU (CPU autocast keeps softmax, exp, sum and layer_norm of a half input in half, where
CUDA's runs them in float32). The policies:

- lower precision: matmuls and convolutions run in the autocast dtype;
- float32: ops that lose too much in half precision (CUDA: exp, log, pow, norms,
  losses...; CPU: losses, linalg, FFTs, some pools and pads...) run in float32;
- float32 unless a dtype is given (CUDA: softmax, log_softmax, sum, cumsum, prod...);
- promote: ops with several floating inputs (CUDA: cat, stack, addcmul, index_put...;
  CPU: cat, stack, index_copy) run in the widest of their types.

A kernel casts the eligible arguments (floating tensors on the device, not float64,
as PyTorch's `is_autocast_eligible`) and calls the op again with the autocast key
excluded; an op the target's policy does not name runs as it is. Autograd records the
casts. Composite ops (linear, conv2d) reach the kernels of the ops they decompose
into. No cast cache: lazy casts are recorded nodes, and the compiler merges repeats.
"""

from __future__ import annotations

import torch

from . import targets

aten = torch.ops.aten
_KEY = "AutocastPrivateUse1"
_EXCLUDE = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)

# CUDA's policy
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


# CPU's policy
CPU_LOWER_PRECISION = (
    "conv1d", "conv2d", "conv3d", "bmm", "mm", "linalg_vecdot", "baddbmm", "addmm",
    "_addmm_activation", "addbmm", "linear", "_convolution", "matmul", "conv_tbc",
    "mkldnn_rnn_layer", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "prelu",
    "scaled_dot_product_attention", "_native_multi_head_attention",
)
CPU_FLOAT32 = (
    "avg_pool3d", "binary_cross_entropy", "grid_sampler", "polar", "prod", "quantile",
    "nanquantile", "stft", "cdist", "grid_sampler_2d", "_grid_sampler_2d_cpu_fallback",
    "grid_sampler_3d", "trace", "view_as_complex", "cholesky", "cholesky_inverse",
    "cholesky_solve", "inverse", "lu_solve", "orgqr", "ormqr", "pinverse", "max_pool3d",
    "max_unpool2d", "max_unpool3d", "adaptive_avg_pool3d", "reflection_pad1d",
    "reflection_pad2d", "replication_pad1d", "replication_pad2d", "replication_pad3d",
    "mse_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d", "hinge_embedding_loss",
    "poisson_nll_loss", "smooth_l1_loss", "cross_entropy_loss", "l1_loss", "huber_loss",
    "margin_ranking_loss", "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
    "ctc_loss", "kl_div", "multilabel_margin_loss", "binary_cross_entropy_with_logits",
    "fft_fft", "fft_ifft", "fft_fft2", "fft_ifft2", "fft_fftn", "fft_ifftn", "fft_rfft",
    "fft_irfft", "fft_rfft2", "fft_irfft2", "fft_rfftn", "fft_irfftn", "fft_hfft",
    "fft_ihfft", "linalg_cond", "linalg_matrix_rank", "linalg_solve", "linalg_cholesky",
    "linalg_svdvals", "linalg_eigvals", "linalg_eigvalsh", "linalg_inv",
    "linalg_householder_product", "linalg_tensorinv", "linalg_tensorsolve",
    "fake_quantize_per_tensor_affine", "geqrf", "_lu_with_info", "qr", "svd",
    "triangular_solve", "fractional_max_pool2d", "fractional_max_pool3d",
    "adaptive_max_pool3d", "multilabel_margin_loss_forward", "linalg_qr",
    "linalg_cholesky_ex", "linalg_svd", "linalg_eig", "linalg_eigh", "linalg_lstsq",
    "linalg_inv_ex",
)
CPU_PROMOTE = ("stack", "cat", "index_copy")

# target name -> {op name: policy}
POLICIES = {
    "cuda": {**dict.fromkeys(LOWER_PRECISION, "lower"), **dict.fromkeys(FLOAT32, "float32"),
             **dict.fromkeys(FLOAT32_UNLESS_DTYPE, "float32_unless_dtype"),
             **dict.fromkeys(PROMOTE, "promote")},
    "cpu": {**dict.fromkeys(CPU_LOWER_PRECISION, "lower"),
            **dict.fromkeys(CPU_FLOAT32, "float32"), **dict.fromkeys(CPU_PROMOTE, "promote")},
}

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


def _kernel(op, name: str):
    dtype_index = next((i for i, a in enumerate(op._schema.arguments) if a.name == "dtype"),
                       None)

    def kernel(*args, **kwargs):
        policy = POLICIES[targets.active().name].get(name)
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            if policy is None:   # not in this target's policy: the op as it is
                return op(*args, **kwargs)
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
        if name in FLOAT32_UNLESS_DTYPE and not any(a.name == "dtype"
                                                     for a in op._schema.arguments):
            continue
        yield op


def install() -> None:
    """Idempotent: register the policy's kernels for AutocastPrivateUse1."""
    if _libraries:
        return
    # Every other op passes through the key, as PyTorch registers for its own autocast
    # keys (but not for AutocastPrivateUse1).
    fallthrough = torch.library.Library("_", "IMPL")
    fallthrough.fallback(torch.library.fallthrough_kernel, _KEY)
    library = torch.library.Library("aten", "IMPL")
    for name in sorted(set().union(*POLICIES.values())):
        for op in _overloads(name):
            library.impl(op, _kernel(op, name), _KEY)
    _libraries.extend((fallthrough, library))
