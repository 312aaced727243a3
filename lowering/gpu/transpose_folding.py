"""Transposes folded into their consumers' indexing maps (CUDA, linalg on tensors).

torch-mlir lowers `w.t()` / `permute` to a `linalg.transpose` of its own, and `x @ w.t()`
to a `linalg.matmul` of the transposed tensor. Bufferized as is, the transpose is a
kernel of its own that writes a permuted copy (L2-bound: one side of it is strided) which
the matmul then reads back. The matmul kernels read their operands through the indexing
map anyway (`gpu.kernels.matmul.contraction_maps`, `stage_tile`), so the copy buys nothing:
here the consumer reads the transpose's input through the composed map instead.

`fold_transposes` runs before the `bufferized` stage's pipeline (cuda target only; the
CPU schedule tiles named matmuls with identity maps). A producer is a `linalg.transpose`
or a `linalg.generic` that only copies its one input through permutation maps. It is
folded when every use of its result is an input of a `linalg.matmul` /
`linalg.batch_matmul` (their `indexing_maps` attribute takes the composed map; the op's
verifier decides which maps it accepts) or a `linalg.generic`; it is then erased.
Anything else (the transpose returned, or read by another op kind) keeps the copy.
Upstream's `linalg-fuse-elementwise-ops` would fold such a generic into a generic
matmul too, but it would also fuse every elementwise producer (GELU, bias add) into
the contraction, recomputed per multiply-add; no pass offers only the permutation part.
"""

from __future__ import annotations

from mlir import ir

from ..mlir_runner import walk

_MATMULS = ("linalg.matmul", "linalg.batch_matmul")


def _maps(op) -> list[ir.AffineMap]:
    return [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]


def _permutation(amap: ir.AffineMap) -> list[int] | None:
    if amap.n_symbols or len(amap.results) != amap.n_dims:
        return None
    dims = []
    for e in amap.results:
        if not isinstance(e, ir.AffineDimExpr):
            return None
        dims.append(ir.AffineDimExpr(e).position)
    return dims if sorted(dims) == list(range(amap.n_dims)) else None


def _producer_maps(op) -> tuple[ir.Value, ir.AffineMap, ir.AffineMap] | None:
    """(input, input map, output map) over the producer's loops if `op` is a pure
    permutation copy with tensor semantics, else None."""
    if len(op.results) != 1 or not isinstance(op.results[0].type, ir.RankedTensorType):
        return None
    if op.name == "linalg.transpose":
        perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
        n = len(perm)
        # out[j] = in[k] with k[perm[i]] = j[i]: loops over the output's indices.
        inv = [0] * n
        for i, p in enumerate(perm):
            inv[p] = i
        in_map = ir.AffineMap.get(n, 0, [ir.AffineDimExpr.get(inv[d]) for d in range(n)])
        return op.operands[0], in_map, ir.AffineMap.get_identity(n)
    if op.name != "linalg.generic" or len(op.operands) != 2:
        return None
    iters = [str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
    if any("parallel" not in t for t in iters):
        return None
    body = op.regions[0].blocks[0]
    ops = list(body.operations)
    if len(ops) != 1 or ops[0].operation.name != "linalg.yield" or \
            ops[0].operands[0] != body.arguments[0]:
        return None
    in_map, out_map = _maps(op)
    if _permutation(in_map) is None or _permutation(out_map) is None:
        return None
    return op.operands[0], in_map, out_map


def _composed(consumer_map: ir.AffineMap, in_map: ir.AffineMap,
              out_map: ir.AffineMap) -> ir.AffineMap:
    """The consumer's map for the producer's input: consumer loops -> producer loops
    (through the inverse of the producer's output permutation) -> input indices."""
    out_dims = _permutation(out_map)
    to_producer = ir.AffineMap.get(
        consumer_map.n_dims, 0,
        [consumer_map.results[out_dims.index(loop)] for loop in range(len(out_dims))])
    return ir.AffineMap.get(consumer_map.n_dims, 0,
                            [e.compose(to_producer) for e in in_map.results])


def _fold(producer) -> bool:
    found = _producer_maps(producer)
    if found is None:
        return False
    source, in_map, out_map = found
    uses = [(use.owner, use.operand_number) for use in producer.results[0].uses]
    if not uses:
        return False
    for owner, number in uses:
        if isinstance(owner, ir.Block) or owner.name not in ("linalg.generic", *_MATMULS):
            return False
        if "indexing_maps" not in owner.attributes or \
                number >= len(owner.opview.inputs) or len(_maps(owner)) != len(owner.operands):
            return False  # an init operand (the consumer would write into the source)
    changed = []
    for owner, number in uses:
        maps = _maps(owner)
        maps[number] = _composed(maps[number], in_map, out_map)
        old = owner.attributes["indexing_maps"]
        owner.attributes["indexing_maps"] = ir.ArrayAttr.get(
            [ir.AffineMapAttr.get(m) for m in maps])
        owner.operands[number] = source
        changed.append((owner, number, old))
        try:
            owner.verify()
        except ir.MLIRError:
            break
    else:
        producer.erase()
        return True
    # The named op's verifier rejected the map: restore every consumer.
    for owner, number, old in changed:
        owner.attributes["indexing_maps"] = old
        owner.operands[number] = producer.results[0]
    return False


def fold_transposes(module: ir.Module) -> int:
    """Fold permutation copies into their consumers (in place); returns how many."""
    producers: list[ir.Operation] = []

    def collect(op: ir.Operation) -> None:
        if op.name in ("linalg.transpose", "linalg.generic"):
            producers.append(op)

    for op in walk(module.operation):
        collect(op)
    with module.context, ir.Location.unknown(module.context):
        return sum(_fold(op) for op in producers)
