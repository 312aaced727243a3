"""The cuda target: lazy values in device memory, graphs run by the C++ runtime.

Binds the compiler's CUDA output (kernels as PTX/cubin + an lzrt launch plan)
to the thin C++ runtime (cuda_runtime/, bound in runtime/cuda.py).
"""

from __future__ import annotations

from functools import cache


@cache
def _runtime_or_error():
    try:
        from .cuda import CudaRuntime

        runtime = CudaRuntime.create()
        if runtime.device_count() < 1:
            return None, "the CUDA driver reports no devices"
        return runtime, None
    except (ImportError, OSError, RuntimeError) as error:
        return None, str(error)


def unavailable_reason() -> str | None:
    """None when a CUDA device is usable, else why not."""
    return _runtime_or_error()[1]
