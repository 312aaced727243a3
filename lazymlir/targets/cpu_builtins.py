"""Compiler runtime functions the compiled CPU graphs call that the system may lack.

LLVM lowers a float -> bfloat16 conversion to a call of `__truncsfbf2` on x86-64
CPUs without AVX512-BF16 (and bfloat16 arithmetic too: it is computed in float
and converted back). compiler-rt has the function, and libgcc only from GCC 13:
on a Debian 12 machine (GCC 12) with an AVX2-only AMD EPYC every graph that
produces a bfloat16 failed to load ("undefined symbol: __truncsfbf2"). This
library defines it, and is loaded with RTLD_GLOBAL before any graph, as
targets/cpu_alloc.py's allocator is; a system libgcc that has the function is
not interposed on (the graphs bind to whichever definition comes first, and
both round the same way).

Rounding is to nearest, ties to even, as compiler-rt's (and eager PyTorch's
`c10::BFloat16`): add 0x7fff plus the lowest kept bit, keep the high 16 bits;
a NaN stays a NaN (quiet, sign kept), infinities and overflow to infinity as
IEEE rounding says. The x86-64 psABI returns a `__bf16` in the low 16 bits of
xmm0; GCC 12 has no `__bf16` type without AVX512-BF16, so the function returns
a float whose bit pattern carries the 16 bits in its low half: the same
register, the same bits.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..support import toolchain

SOURCE = r"""
#include <stdint.h>
#include <string.h>

float __truncsfbf2(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  uint32_t half;
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    half = (bits >> 16) | 0x0040u;  /* NaN: quiet, sign and payload's top kept */
  } else {
    half = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  }
  uint32_t out_bits = half & 0xffffu;
  float out;
  memcpy(&out, &out_bits, sizeof out);
  return out;
}
"""

LIBRARY_STEM = "liblazymlir_cpu_builtins"


def library_name() -> str:
    """The library's file name: a hash of its source, so an edited one is rebuilt."""
    return toolchain.library_name(LIBRARY_STEM, SOURCE)


def build(directory: str | os.PathLike) -> Path:
    """directory/<library_name()>, compiled if it is not there yet."""
    return toolchain.build_c_library(SOURCE, LIBRARY_STEM, directory, ())
