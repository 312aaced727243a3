"""The CPU schedule's plans and what its strategies share.

A strategy (schedule_contraction.py, schedule_vector.py) looks at one linalg op on
buffers and returns a `Plan`: the transform ops that tile and vectorize it, on the
handle `%op<index>` the driver (schedule.py) gives it, and what the driver must do
around it (isolate a contraction's accumulator, read an elementwise op's 0-d inputs
once, put the op under a run-time test of its sizes). Also here: the shape queries
and tile arithmetic every strategy uses, and the buffer a view is of.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Plan:
    index: int
    script: str  # transform ops on the handle %op<index>
    # A contraction, whose accumulator must stay in registers across its K loop.
    contraction: bool = False
    # An elementwise op whose 0-d inputs are read once, before its loops.
    elementwise: bool = False
    # A contraction whose K loop is not split into cache tiles: each accumulator
    # register tile is read from the output once, before the K loop
    # (schedule_accumulator.zero_inits).
    reads_output_once: bool = False
    # Symbolic sizes, where whether the op runs on all cores depends on them: (its
    # loops' extents, the product of the static ones, the work threshold); the op is
    # put under a run-time test and each copy is planned again (dynamic.guard).
    guard: tuple | None = None


def largest_divisor(dim: int, candidates: tuple[int, ...]) -> int:
    for c in candidates:
        if dim % c == 0:
            return c
    return 1


def cache_tile(dim: int, inner: int, cap: int) -> int:
    """The largest multiple of `inner` that divides `dim` and is at most `cap` (at least inner)."""
    best = inner
    for t in range(inner, min(dim, cap) + 1, inner):
        if dim % t == 0:
            best = t
    return best


def static_shape(value_type) -> list[int] | None:
    from mlir import ir

    shaped = ir.ShapedType(value_type)
    if not shaped.has_static_shape:
        return None
    return list(shaped.shape)


def is_f32(value_type) -> bool:
    from mlir import ir

    return str(ir.ShapedType(value_type).element_type) == "f32"


# memref ops whose result is a view of their first operand.
VIEW_OPS = frozenset(f"memref.{name}" for name in (
    "subview", "collapse_shape", "expand_shape", "cast", "reinterpret_cast", "view",
    "transpose", "assume_alignment"))


def buffer_root(value):
    """The buffer `value` is a view of (itself if it is not a view)."""
    from mlir import ir

    while not isinstance(value.owner, ir.Block) and value.owner.operation.name in VIEW_OPS:
        value = value.owner.operation.operands[0]
    return value
