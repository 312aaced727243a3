"""Transposed contraction operands without the big copies (CPU, linalg on tensors).

torch-mlir lowers `x @ w.t()` (every `Linear`) to a `linalg.transpose` of the weight
and a `linalg.matmul` of the copy, and autograd's `h.t() @ grad` (a weight's
gradient) to another. On buffers each transpose is a pass of its own that writes a
permuted copy (512 KB for an MLP's 512 x 256 weight, memory-bound) which the matmul
then reads back. Two rewrites, for the contractions the CPU schedule tiles (f32,
static shapes, whole register tiles; schedule_contraction.py):

- A transposed A operand (`X.t() @ B`, matmul or batch_matmul): the contraction
  reads X through the transposed indexing map (`fold_transposed_a`; the named ops
  take `indexing_maps`). The schedule's kernel broadcasts A's elements from a K x M
  slab anyway, so the A^T tile is read as is: no copy, no shuffles.
- A transposed B operand (`A @ W.t()`, 2-D matmul): B^T is the layout the schedule's
  broadcast kernel cannot read (its vectors run along N; measured: reading B^T
  tiles and transposing them in registers made an MLP step's code 1.35x slower than
  the copy). Where A and the result are the smaller matrices (M*K + M*N < N*K: an
  MLP's batch of 64 rows against a 512 x 256 weight), it computes
  `C = (W @ A^T)^T` instead (`swap_transposed_b`): W is read in place as the plain
  A operand, and only A (64 x 256) and the result (64 x 512) are transposed,
  48K elements moved instead of the weight's 128K. Larger batches keep the copy of
  W, then the smaller operand.

Runs at the start of the `bufferized` stage, after elementwise fusion
(contractions.py), on linalg-on-tensors: there a transpose's result is a value
with its uses, where on buffers the copy's target may be an output buffer that
other ops write later. A transpose left without users goes.
"""

from __future__ import annotations

from . import schedule_contraction
from ..mlir_runner import walk
from .schedule_plan import is_f32, static_shape

# The transposes of the two innermost dims torch-mlir writes for `.t()` / `.mT`.
_SWAPS = {2: [1, 0], 3: [0, 2, 1]}


def _swapped_source(value):
    """The input of the `linalg.transpose` of the two innermost dims that produced
    `value`, else None."""
    from mlir import ir

    owner = value.owner
    if isinstance(owner, ir.Block) or owner.name != "linalg.transpose":
        return None
    permutation = list(ir.DenseI64ArrayAttr(owner.attributes["permutation"]))
    return owner.operands[0] if _SWAPS.get(len(permutation)) == permutation else None


def _maps(op) -> list[str]:
    if "indexing_maps" in op.attributes:
        return [str(m) for m in op.attributes["indexing_maps"]]
    return list(schedule_contraction.DEFAULT_MAPS[op.name])


def _static_f32(values) -> list[list[int]] | None:
    if not all(is_f32(v.type) for v in values):
        return None
    shapes = [static_shape(v.type) for v in values]
    return None if any(s is None for s in shapes) else shapes


def fold_transposed_a(op) -> bool:
    """`op` (a matmul / batch_matmul on tensors) reads a transposed A operand through
    its indexing map where the schedule then tiles it; whether it changed."""
    from mlir import ir

    operands = list(op.operands)
    if len(operands) != 3 or schedule_contraction.a_transposed(op.name, _maps(op)) is not False:
        return False
    source = _swapped_source(operands[0])
    shapes = _static_f32([source, operands[1], operands[2]]) if source is not None else None
    if shapes is None or schedule_contraction.register_tiles(
            *schedule_contraction.problem(shapes[0], shapes[1], True)) is None:
        return False
    maps = _maps(op)
    maps[0] = schedule_contraction.TRANSPOSED_A[op.name]
    op.attributes["indexing_maps"] = ir.ArrayAttr.get([ir.Attribute.parse(m) for m in maps])
    op.operands[0] = source
    return True


def _zero_of_fill(value):
    """The +0.0 constant that `value` is a `linalg.fill` of, else None."""
    from mlir import ir

    fill = value.owner
    if isinstance(fill, ir.Block) or fill.name != "linalg.fill":
        return None
    constant = fill.operands[0]
    if isinstance(constant.owner, ir.Block) or constant.owner.name != "arith.constant" or \
            str(constant.owner.attributes["value"]) != "0.000000e+00 : f32":
        return None
    return constant


def _one(built):
    """The result of what a dialect builder returned: a value, a one-result list, or
    the op (linalg.transpose's builder returns its op)."""
    from mlir import ir

    if isinstance(built, ir.Value):
        return built
    if isinstance(built, ir.OpView):
        return built.results[0]
    return built[0]


def swap_transposed_b(op) -> bool:
    """`A @ W.t()` (a 2-D matmul on tensors, zero-initialized) as `(W @ A.t()).t()` where
    A and the result are smaller than W and the schedule tiles the swapped matmul;
    whether it changed (`op` is then replaced and erased)."""
    from mlir import ir
    from mlir.dialects import linalg, tensor

    operands = list(op.operands)
    if op.name != "linalg.matmul" or len(operands) != 3 or \
            schedule_contraction.a_transposed(op.name, _maps(op)) is not False:
        return False
    weight = _swapped_source(operands[1])
    zero = _zero_of_fill(operands[2])
    if weight is None or zero is None:
        return False
    shapes = _static_f32([operands[0], weight, operands[2]])
    if shapes is None:
        return False
    (m, k), (n, _) = shapes[0], shapes[1]
    if m * k + m * n >= n * k or schedule_contraction.register_tiles(n, m, k) is None:
        return False
    f32 = ir.F32Type.get()
    with ir.InsertionPoint(op), op.location:
        # A transposed A is read as its source: (X.t()).t() is X.
        a_t = _swapped_source(operands[0])
        if a_t is None:
            a_t = _one(linalg.transpose(operands[0], permutation=[1, 0],
                                        outs=[tensor.EmptyOp([k, m], f32).result]))
        c_t = _one(linalg.fill(zero, outs=[tensor.EmptyOp([n, m], f32).result]))
        c_t = _one(linalg.matmul(weight, a_t, outs=[c_t]))
        c = _one(linalg.transpose(c_t, permutation=[1, 0],
                                  outs=[tensor.EmptyOp([m, n], f32).result]))
    op.results[0].replace_all_uses_with(c)
    fill = operands[2].owner
    op.erase()
    if not list(fill.results[0].uses):
        fill.erase()
    return True


def fold_transposes(module) -> int:
    """Both rewrites over `module` (in place, inside its context); returns how many
    contractions changed."""
    ops = walk(module.operation)
    transposes = [op for op in ops if op.name == "linalg.transpose"]
    contractions = [op for op in ops if op.name in schedule_contraction.CONTRACTIONS]
    # A^T first: a weight gradient's `x.t() @ grad` no longer uses its transpose of x,
    # and the forward's swapped matmul makes the one transpose of x it needs.
    changed = sum(fold_transposed_a(op) for op in contractions)
    changed += sum(swap_transposed_b(op) for op in contractions)
    if changed:
        for op in reversed(transposes):  # consumers first: a chain goes whole
            if not list(op.results[0].uses):
                op.erase()
    return changed
