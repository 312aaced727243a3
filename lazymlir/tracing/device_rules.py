"""PyTorch's device rules for lazy_mlir tensors.

- One op may not mix a lazy_mlir tensor with a CPU tensor of one or more
  dims: eager raises "Expected all tensors to be on the same device" for a
  CUDA and a CPU tensor, and so do we, rather than upload the CPU tensor
  silently on every call. 0-d CPU tensors mix as in eager (they are scalars), and the
  indexing ops that eager CUDA lets take CPU indices (`x[cpu_idx]`,
  `x[cpu_idx] = v`) still take them.
- Layouts other than strided (sparse, mkldnn...) and dtypes the compiler has no
  type for (float8, quantized, uint16/32/64, complex32, bits) are refused with
  a TypeError naming the layout or dtype and the op (as eager MPS does for
  dtypes it lacks), instead of failing later with an unrelated message.
"""

from __future__ import annotations

import torch

from ..lowering.front import fx_graph

# Ops eager CUDA runs with CPU index tensors (TensorIterator/indexing code
# moves them); `copy` is a device transfer.
HOST_TENSOR_OPS = frozenset({
    "aten::index", "aten::_unsafe_index", "aten::index_put", "aten::_index_put_impl_",
    "aten::_unsafe_index_put", "aten::copy",
})

SUPPORTED_DTYPES = frozenset(fx_graph.DTYPES.values())


def check_host_tensor(tensor: torch.Tensor, op_name: str | None) -> None:
    """Raise eager's same-device error for a CPU tensor argument that may not mix."""
    if tensor.dim() and op_name not in HOST_TENSOR_OPS:
        raise RuntimeError(
            f"Expected all tensors to be on the same device, but found at least two devices, "
            f"lazy_mlir:0 and {tensor.device}! (when checking arguments for {op_name})")


def check_supported(dtype: torch.dtype, layout: torch.layout, op_name: str) -> None:
    """Refuse tensors the lazy device cannot hold, naming what and where."""
    if layout != torch.strided:
        raise TypeError(
            f"lazy_mlir does not support {str(layout).removeprefix('torch.')} tensors "
            f"({op_name}); only dense (strided) tensors: convert with .to_dense() first")
    if dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            f"lazy_mlir does not support dtype {dtype} ({op_name}); supported: "
            f"{', '.join(sorted(str(d).removeprefix('torch.') for d in SUPPORTED_DTYPES))}")


def is_lazy_device(device) -> bool:
    """Whether `device` (a torch.device, a string, or None) names the lazy device."""
    return device is not None and torch.device(device).type == "lazy_mlir"
