"""Which vector instruction set the host has, as the CPU code generator sizes tiles for it.

`LAZYMLIR_CPU_VECTOR_ISA` (`avx512`, `avx2`) overrides the detection (the lit
tests pin `avx512`). The answer is part of the cpu target's fingerprint, so the
disk cache never hands code tiled for one choice to the other; lowering/cpu/isa.py
has what each choice means for the schedule.
"""

from __future__ import annotations

import functools

from .settings import cpu_vector_isa_from_env


@functools.cache
def detected() -> str:
    """The host's own vector ISA (no override): what code may execute."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("flags"):
                    return "avx512" if " avx512f" in line else "avx2"
    except OSError:
        pass
    return "avx2"  # not Linux/x86: the 256-bit tiles are the safer guess


def vector_isa() -> str:
    """The override (LAZYMLIR_CPU_VECTOR_ISA) or the detected instruction set."""
    return cpu_vector_isa_from_env() or detected()
