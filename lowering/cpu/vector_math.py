"""Vector variants for the libm calls LLVM's LIBMVEC table does not know.

`opt -vector-library=LIBMVEC` vectorizes loops that call expf, logf, sinf,
cosf and powf (and their f64 forms) by calling glibc's libmvec. Other math
functions the graphs call by name (`erff` for GELU, `erfcf`, `tanhf`,
`log1pf`, `expm1f`, ...; convert-math-to-libm) are not in LLVM 22's table, and
one such call leaves its whole loop scalar: in the GPT training step, GELU's
loops ran one `erff` call per element and did not vectorize the rest of the
loop either ("call instruction cannot be vectorized").

glibc 2.35+ exports vector forms of these (`_ZGVdN8v_erff`: AVX2, 8 lanes;
`_ZGVeN16v_erff`: AVX-512, 16 lanes). This pass on the LLVM IR text tells the
loop vectorizer about the ones this host's libmvec has, with the
`vector-function-abi-variant` attribute on the scalar declaration, declares the
vector functions, and keeps them alive in `llvm.compiler.used` until the
vectorizer has run (otherwise -O3 drops the unused declarations first). The
scalar declarations are marked `memory(none)`: the graphs' math does not read
errno.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import re
from functools import cache

from ...support import host_isa

# (scalar type, vector ISA letter, lanes) per glibc's x86_64 vector ABI: AVX2 ('d')
# and AVX-512 ('e').
_VARIANTS = {"float": (("d", 8), ("e", 16)), "double": (("d", 4), ("e", 8))}
# Already mapped by -vector-library=LIBMVEC: leave them to LLVM's own table.
_LLVM_KNOWS = {"expf", "exp", "logf", "log", "sinf", "sin", "cosf", "cos", "powf", "pow"}
_DECLARE = re.compile(r"^declare (?P<attrs>[^@]*?)(?P<type>float|double) @(?P<name>\w+)"
                      r"\((?P<params>float|double|float, float|double, double)\)(?P<tail>.*)$",
                      re.MULTILINE)


@cache
def _libmvec() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("mvec")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


def _host_has_avx512() -> bool:
    """glibc exports the AVX-512 variants on every x86-64 host, but they execute AVX-512
    instructions: offered to the vectorizer on an AVX2-only CPU, the 16-lane `erff` of
    a float16 erf graph was chosen and the graph died with SIGILL (an AMD EPYC, Zen 3).
    The detected unit, not LAZYMLIR_CPU_VECTOR_ISA (which only sizes tiles)."""
    return host_isa.detected() == "avx512"


def _exported(symbol: str) -> bool:
    lib = _libmvec()
    return lib is not None and hasattr(lib, symbol)


def annotate(ll_text: str) -> str:
    """The module with vector variants attached to its scalar libm declarations."""
    if "llvm.compiler.used" in ll_text or _libmvec() is None:
        return ll_text  # nothing to add to, or no library to call
    groups, vector_decls, used = [], [], []

    def rewrite(match: re.Match) -> str:
        name, scalar, params = match["name"], match["type"], match["params"]
        if name in _LLVM_KNOWS or params.split(", ")[0] != scalar:
            return match[0]
        arity = params.count(",") + 1
        mappings = []
        for isa, lanes in _VARIANTS[scalar]:
            vector_name = f"_ZGV{isa}N{lanes}{'v' * arity}_{name}"
            if not _exported(vector_name) or (isa == "e" and not _host_has_avx512()):
                continue
            vector = f"<{lanes} x {scalar}>"
            mappings.append(f"_ZGV_LLVM_N{lanes}{'v' * arity}_{name}({vector_name})")
            vector_decls.append(f"declare {vector} @{vector_name}"
                                f"({', '.join([vector] * arity)})")
            used.append(f"ptr @{vector_name}")
        if not mappings:
            return match[0]
        group = 90000 + len(groups)
        groups.append(f'attributes #{group} = {{ nounwind willreturn memory(none) '
                      f'"vector-function-abi-variant"="{",".join(mappings)}" }}')
        return f"declare {match['attrs']}{scalar} @{name}({params}) #{group}"

    text = _DECLARE.sub(rewrite, ll_text)
    if not groups:
        return ll_text
    return "\n".join([text, *vector_decls, *groups,
                      f"@llvm.compiler.used = appending global [{len(used)} x ptr] "
                      f"[{', '.join(used)}], section \"llvm.metadata\"", ""])
