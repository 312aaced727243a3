"""Serial loop nests left on the host (TMTensor scans and scatters) -> parallel loops.

torch-mlir's `tm-tensor-to-loops` (lowering/front/tmtensor.py) lowers `cumsum`/`cumprod`
(scans) and `scatter`/`index_put` to nests of `scf.for` over buffers: serial where
the op needs it (a scan carries its running value along one dim; a scatter with
repeated indices accumulates in order), but every other dim is independent. The gpu
stage maps only `scf.parallel` loops to kernels, so these nests stayed on the host and
the op fell back to eager CPU. Here one independent loop of such a nest becomes an
`scf.parallel` around the rest of the nest (moved outermost when it is not): one
thread per row of a scan along its last dim, per column of a scan along dim 0, per
element of a scattered row's slice. The serial loops run inside each thread, in their
order, so the result is the serial one.

A loop is independent when every buffer the nest writes is indexed by that loop's
induction variable, in one and the same position, by every access to it in the nest:
two iterations then touch disjoint slices of it. Only nests of plain loads/stores,
arithmetic and structured control flow on buffers that are allocations or function
arguments (not views, which could alias) are considered. A written argument is an
output (graphs never write their inputs: functionalized), and outputs are fresh
buffers (targets/cuda.py allocates them per run), so it aliases nothing the nest
reads. Loops carrying values (`iter_args`) are not moved; anything else is left as
it was (and still falls back).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import scf

# Ops a nest may contain to be analysed (anything else: left alone).
_ALLOWED_PREFIXES = ("arith.", "math.")
_ALLOWED = {"memref.load", "memref.store", "scf.for", "scf.if", "scf.yield"}


def _ops(op):
    found = []

    def visit(o):
        for region in o.regions:
            for block in region.blocks:
                for inner in block.operations:
                    found.append(inner.operation)
                    visit(inner.operation)

    visit(op)
    return found


def _root_ok(value) -> bool:
    """A buffer the analysis can tell apart from the others: an allocation or an argument."""
    owner = value.owner
    if isinstance(owner, ir.Block):
        return True
    return getattr(owner, "name", None) == "memref.alloc"


def _accesses(nest):
    """{buffer: [(index values, is_store)]} of the nest, or None if it has other ops."""
    accesses: dict = {}
    for op in _ops(nest):
        name = op.name
        if name not in _ALLOWED and not name.startswith(_ALLOWED_PREFIXES):
            return None
        if name == "memref.load":
            buffer, indices, store = op.operands[0], list(op.operands[1:]), False
        elif name == "memref.store":
            buffer, indices, store = op.operands[1], list(op.operands[2:]), True
        else:
            continue
        if not _root_ok(buffer):
            return None
        accesses.setdefault(buffer, []).append((indices, store))
    return accesses


def _independent(iv, accesses) -> bool:
    for uses in accesses.values():
        if not any(store for _, store in uses):
            continue  # only read: no constraint
        positions = None
        for indices, _ in uses:
            here = {p for p, v in enumerate(indices) if v == iv}
            positions = here if positions is None else positions & here
            if not positions:
                return False
    return any(any(store for _, store in uses) for uses in accesses.values())


def _chain(nest) -> list:
    """The perfectly nested scf.for loops from `nest` down (each body: one loop + yield)."""
    chain = [nest]
    while True:
        body = list(chain[-1].regions[0].blocks[0].operations)
        if len(body) == 2 and body[0].operation.name == "scf.for" and \
                body[1].operation.name == "scf.yield":
            chain.append(body[0].operation)
        else:
            return chain


def _defined_outside(value, nest) -> bool:
    owner = value.owner
    op = owner.owner if isinstance(owner, ir.Block) else owner
    while op is not None:
        if op == nest:
            return False
        op = op.parent
    return True


def _parallel_around(nest, loop) -> None:
    """Replace `loop` (a loop of `nest`'s chain) by an scf.parallel around `nest`."""
    with ir.InsertionPoint(nest), nest.location:
        parallel = scf.ParallelOp([], [loop.operands[0]], [loop.operands[1]],
                                  [loop.operands[2]], [])
        body = parallel.regions[0].blocks.append(ir.IndexType.get())
        with ir.InsertionPoint(body):
            scf.ReduceOp([], 0)
    iv = loop.regions[0].blocks[0].arguments[0]
    iv.replace_all_uses_with(body.arguments[0])
    terminator = body.operations[0]
    if loop == nest:
        for op in list(loop.regions[0].blocks[0].operations)[:-1]:  # all but scf.yield
            op.move_before(terminator)
    else:
        nest.move_before(terminator)
        for op in list(loop.regions[0].blocks[0].operations)[:-1]:
            op.move_before(loop)
    loop.erase()


def parallelize_host_loops(host) -> int:
    """Each top-level scf.for nest of `host` with an independent loop becomes an
    scf.parallel over it (in place); returns how many."""
    changed = 0
    for op in list(host.regions[0].blocks[0].operations):
        nest = op.operation
        if nest.name != "scf.for" or len(nest.results):
            continue
        accesses = _accesses(nest)
        if accesses is None:
            continue
        for loop in _chain(nest):
            if len(loop.results):
                break  # a loop carrying values: the ones inside it cannot move out
            bounds_outside = all(_defined_outside(v, nest) for v in loop.operands[:3])
            iv = loop.regions[0].blocks[0].arguments[0]
            if bounds_outside and _independent(iv, accesses):
                _parallel_around(nest, loop)
                changed += 1
                break
    return changed
