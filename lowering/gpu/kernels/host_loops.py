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
reads. Buffers the nest only reads may also be views (expand_shape, subview, ...) of an
allocation or argument the nest does not write. Loops carrying values (`iter_args`) are
not moved; anything else is left as it was (and still falls back).

A scatter that accumulates (`scatter_add`, `index_put(accumulate=True)`, `index_add`,
embedding's backward, `scatter_reduce` with amax/amin) reads, combines and writes back
the element its index names: `B[idx] = B[idx] + u`. Its loop over updates is not
independent (two updates may name one element), but the updates commute, so when that
read-combine-write is a buffer's only access in the nest it becomes one
`memref.atomic_rmw` (f32/f64/i32/i64 add, max, min: adds native on every sm_70+ GPU,
float max/min CAS loops in the NVPTX backend) and the loop runs in parallel. Float sums then
depend on the order the updates land in, as with CUDA eager's atomics.

A scatter that overwrites with one update per loop iteration and no other loop
(`scatter(dim, index, src)` as tm-tensor-to-loops writes it) has no independent loop:
two updates may name one element, and the serial loop (eager's CPU scatter) leaves the
later one there. Run unordered, either could land. Such a nest (a perfect chain of
loops whose body stores once, into a buffer the nest does not read) becomes two
parallel passes over the iterations, in one thread each, with a scratch buffer of the
output's shape holding, per element, the number of the last iteration that writes it:
the first pass computes each iteration's target and takes `atomic max` of its iteration
number there (the scratch starts at -1, a memset); the second stores the update of the
iteration that won, alone. The result is the serial one, duplicates included, and does
not depend on the order threads run in.

What is still serial after that (a scatter that multiplies, which has no atomic) runs
as one thread, in order, if it is small (MAX_SERIAL_ITERATIONS); larger ones stay on
the host and fall back.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, gpu, memref, scf

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


# View ops a read-only buffer may come through (they alias their source).
_VIEWS = {"memref.expand_shape", "memref.collapse_shape", "memref.subview", "memref.cast",
          "memref.reinterpret_cast"}
# Accumulations that become atomics: the combining op -> the atomic kind (adds, and the
# max/min of scatter_reduce's amax/amin, exact in any order; products have no atomic).
_ATOMIC_COMBINES = {
    "arith.addf": arith.AtomicRMWKind.addf, "arith.addi": arith.AtomicRMWKind.addi,
    "arith.maximumf": arith.AtomicRMWKind.maximumf,
    "arith.minimumf": arith.AtomicRMWKind.minimumf,
    "arith.maxsi": arith.AtomicRMWKind.maxs, "arith.minsi": arith.AtomicRMWKind.mins,
}
_ATOMIC_TYPES = {"f32", "f64", "i32", "i64"}


def _name(owner) -> str | None:
    return None if isinstance(owner, ir.Block) else owner.operation.name


def _root_ok(value) -> bool:
    """A buffer the analysis can tell apart from the others: an allocation or an argument."""
    return isinstance(value.owner, ir.Block) or _name(value.owner) == "memref.alloc"


def _root(value):
    """The allocation or argument `value` is a view of, or None (anything else)."""
    while not _root_ok(value):
        if _name(value.owner) not in _VIEWS:
            return None
        value = value.owner.operands[0]
    return value


def _accesses(nest):
    """{buffer: [(index values, is_store, op)]} of the nest, or None if it has other ops
    or a buffer it cannot tell apart from the others."""
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
        accesses.setdefault(buffer, []).append((indices, store, op))
    written = {b for b, uses in accesses.items() if any(store for _, store, _ in uses)}
    if not all(_root_ok(b) for b in written):
        return None
    for buffer in accesses.keys() - written:
        root = _root(buffer)
        if root is None or root in written:
            return None
    return accesses


def _accumulation(uses):
    """(store op, add op, addend, kind) if `uses` are one load and one store of
    `load + addend` at the same indices, the load used by the add alone; else None."""
    if len(uses) != 2 or {store for _, store, _ in uses} != {False, True}:
        return None
    (load_idx, _, load), (store_idx, _, store) = sorted(uses, key=lambda use: use[1])
    if str(load.results[0].type) not in _ATOMIC_TYPES or \
            len(load_idx) != len(store_idx) or \
            any(a != b for a, b in zip(load_idx, store_idx)):
        return None
    add = store.operands[0].owner
    if isinstance(add, ir.Block) or add.operation.name not in _ATOMIC_COMBINES:
        return None
    loaded = load.results[0]
    operands = list(add.operation.operands)
    if loaded not in operands or len(list(loaded.uses)) != 1 or \
            len(list(add.operation.results[0].uses)) != 1:
        return None
    addend = operands[1] if operands[0] == loaded else operands[0]
    return store, add.operation, addend, _ATOMIC_COMBINES[add.operation.name]


def _to_atomic(buffer, uses, accumulation) -> None:
    """Replace a buffer's read-add-write by one memref.atomic_rmw."""
    store, add, addend, kind = accumulation
    load = next(op for _, is_store, op in uses if not is_store)
    indices = list(store.operands[2:])
    with ir.InsertionPoint(store), store.location:
        memref.AtomicRMWOp(kind, addend, buffer, indices)
    store.erase()
    add.erase()
    load.erase()


def _independent(iv, accesses, commutative=frozenset()) -> bool:
    """Iterations of `iv` touch disjoint slices of every buffer the nest writes, apart
    from the `commutative` ones (updated by atomics), and the nest writes something."""
    for buffer, uses in accesses.items():
        if buffer in commutative or not any(store for _, store, _ in uses):
            continue  # atomics, or only read: no constraint
        positions = None
        for indices, _, _ in uses:
            here = {p for p, v in enumerate(indices) if v == iv}
            positions = here if positions is None else positions & here
            if not positions:
                return False
    return any(any(store for _, store, _ in uses) for uses in accesses.values())


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


def _movable_loops(nest):
    """(loop, induction variable) of the nest's chain that can become the parallel loop:
    bounds defined outside the nest, no loop carrying values around it."""
    for loop in _chain(nest):
        if len(loop.results):
            return  # a loop carrying values: the ones inside it cannot move out
        if all(_defined_outside(v, nest) for v in loop.operands[:3]):
            yield loop, loop.regions[0].blocks[0].arguments[0]


def _plan(nest, accesses, accumulations):
    """(loop to run in parallel, buffers to update by atomics), or None: the first
    movable loop independent as it is, else with the accumulations made atomic."""
    loops = list(_movable_loops(nest))
    for loop, iv in loops:
        if _independent(iv, accesses):
            return loop, frozenset()
    atomics = frozenset(accumulations)
    for loop, iv in loops if atomics else ():
        if _independent(iv, accesses, atomics):
            return loop, atomics
    return None


def _top_level_nests(host):
    """(nest, its buffer accesses) for each top-level scf.for nest of `host` that yields
    nothing and whose accesses are known; taken from a snapshot of the block, so a nest
    may be replaced while the caller iterates."""
    for op in list(host.regions[0].blocks[0].operations):
        nest = op.operation
        if nest.name != "scf.for" or len(nest.results):
            continue
        accesses = _accesses(nest)
        if accesses is not None:
            yield nest, accesses


def parallelize_host_loops(host) -> int:
    """Each top-level scf.for nest of `host` with an independent loop becomes an
    scf.parallel over it (in place), its accumulations atomics where that is what makes
    a loop independent; returns how many."""
    changed = 0
    for nest, accesses in _top_level_nests(host):
        accumulations = {b: acc for b, uses in accesses.items()
                         if (acc := _accumulation(uses)) is not None}
        plan = _plan(nest, accesses, accumulations)
        if plan is None:
            continue
        loop, atomics = plan
        for buffer in atomics:
            _to_atomic(buffer, accesses[buffer], accumulations[buffer])
        _parallel_around(nest, loop)
        changed += 1
    return changed


# --------------------------------------------------------------------------------------
# Overwriting scatters: last write wins, in two parallel passes.


def _const(value) -> int | None:
    owner = value.owner
    if isinstance(owner, ir.Block) or owner.operation.name != "arith.constant":
        return None
    return ir.IntegerAttr(owner.operation.attributes["value"]).value


def _overwrite(nest, accesses):
    """(chain, [(lb, step, trips)], store op) when `nest` is a perfect chain of loops with
    constant bounds whose innermost body stores once, into a buffer the nest does not
    read (nothing else is written), else None."""
    chain = _chain(nest)
    bounds = []
    for loop in chain:
        if len(loop.results):
            return None
        lb, ub, step = (_const(v) for v in loop.operands[:3])
        if None in (lb, ub, step) or step <= 0:
            return None
        bounds.append((lb, step, max(0, -(-(ub - lb) // step))))
    stores = [(b, op) for b, uses in accesses.items() for _, is_store, op in uses if is_store]
    if len(stores) != 1:
        return None
    buffer, store = stores[0]
    if len(accesses[buffer]) != 1 or store.parent != chain[-1] or \
            not ir.MemRefType(buffer.type).has_static_shape:
        return None
    return chain, bounds, store


def _parallel_copy(nest, chain, bounds):
    """A copy of `nest` as one scf.parallel over all its loops, right before it: returns
    (the copy's store op, its iteration number as an `index` value)."""
    index = ir.IndexType.get()
    copy = nest.clone(ip=ir.InsertionPoint(nest))
    loops = _chain(copy)
    with ir.InsertionPoint(copy), copy.location:
        parallel = scf.ParallelOp([], [loop.operands[0] for loop in loops],
                                  [loop.operands[1] for loop in loops],
                                  [loop.operands[2] for loop in loops], [])
        body = parallel.regions[0].blocks.append(*([index] * len(loops)))
        with ir.InsertionPoint(body):
            scf.ReduceOp([], 0)
    terminator = body.operations[0]
    with ir.InsertionPoint(terminator), copy.location:
        number = None
        for iv, (lb, step, trips) in zip(body.arguments, bounds):
            k = arith.SubIOp(iv, _index(lb)).result if lb else iv
            k = arith.DivUIOp(k, _index(step)).result if step != 1 else k
            number = k if number is None else \
                arith.AddIOp(arith.MulIOp(number, _index(trips)).result, k).result
    for loop, iv in zip(loops, body.arguments):
        loop.regions[0].blocks[0].arguments[0].replace_all_uses_with(iv)
    for op in list(loops[-1].regions[0].blocks[0].operations)[:-1]:  # all but scf.yield
        op.move_before(terminator)
    store = next(op for op in _ops(parallel.operation) if op.name == "memref.store")
    copy.erase()
    return store, number


def _index(n: int):
    return arith.ConstantOp(ir.IndexType.get(), n).result


def _last_write_wins(nest, chain, bounds, store) -> None:
    """Replace the overwriting nest by its two parallel passes (module docstring)."""
    total = 1
    for _, _, trips in bounds:
        total *= trips
    key = ir.IntegerType.get_signless(32 if total < 2**31 else 64)
    shape = ir.MemRefType(store.operands[1].type).shape
    with ir.InsertionPoint(nest), nest.location:
        winners = memref.AllocOp(ir.MemRefType.get(shape, key), [], []).result
        gpu.MemsetOp(None, [], winners, arith.ConstantOp(key, -1).result)
    claim, number = _parallel_copy(nest, chain, bounds)
    with ir.InsertionPoint(claim), claim.location:
        mine = arith.IndexCastOp(key, number).result
        memref.AtomicRMWOp(arith.AtomicRMWKind.maxs, mine, winners, list(claim.operands[2:]))
    claim.erase()
    write, number = _parallel_copy(nest, chain, bounds)
    with ir.InsertionPoint(write), write.location:
        mine = arith.IndexCastOp(key, number).result
        won = memref.LoadOp(winners, list(write.operands[2:])).result
        guard = scf.IfOp(arith.CmpIOp(arith.CmpIPredicate.eq, won, mine).result)
        with ir.InsertionPoint(guard.then_block):
            scf.YieldOp([])
    write.move_before(guard.then_block.operations[0])
    nest.erase()


def parallelize_overwrites(host) -> int:
    """Each top-level scf.for nest of `host` that overwrites one buffer at computed
    indices (an overwriting scatter) becomes the two passes that keep the last write
    (module docstring); returns how many. Run after parallelize_host_loops, which takes
    the nests that have an independent loop."""
    changed = 0
    for nest, accesses in _top_level_nests(host):
        found = _overwrite(nest, accesses)
        if found is None:
            continue
        _last_write_wins(nest, *found)
        changed += 1
    return changed


# --------------------------------------------------------------------------------------
# Whatever stays serial: one thread.

# Iterations above which a serial nest is left on the host (it then falls back): one GPU
# thread runs ~1e8 simple iterations a second at best, eager's CPU loop far more.
MAX_SERIAL_ITERATIONS = 1 << 16


def serial_kernels(host) -> int:
    """Each top-level scf.for nest of `host` still serial after the rewrites above (a
    scatter that multiplies: `scatter_reduce(reduce="prod")`) becomes a kernel of one
    thread that runs it in order, when it is a perfect chain of constant-bound loops of
    at most MAX_SERIAL_ITERATIONS iterations over plain loads, stores and arithmetic;
    returns how many."""
    changed = 0
    for nest, _ in _top_level_nests(host):
        chain = _chain(nest)
        if any(o.name == "scf.for" for o in _ops(chain[-1])):
            continue
        iterations = 1
        for loop in chain:
            lb, ub, step = (_const(v) for v in loop.operands[:3])
            if None in (lb, ub, step) or step <= 0 or len(loop.results):
                iterations = None
                break
            iterations *= max(0, -(-(ub - lb) // step))
        if iterations is None or iterations > MAX_SERIAL_ITERATIONS:
            continue
        with ir.InsertionPoint(nest), nest.location:
            parallel = scf.ParallelOp([], [_index(0)], [_index(1)], [_index(1)], [])
            body = parallel.regions[0].blocks.append(ir.IndexType.get())
            with ir.InsertionPoint(body):
                scf.ReduceOp([], 0)
        nest.move_before(body.operations[0])
        changed += 1
    return changed
