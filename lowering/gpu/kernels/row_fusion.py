"""Row-wise fusion for CUDA: softmax, layer_norm & co. as one kernel, one block per row.

Softmax, log_softmax and layer_norm bufferize to a run of `linalg.generic`s over the same
rows, each either a row reduction (`out[p] = comb(out[p], f(..))` over the last dim) or
a row map (`out[p, r] = f(..)`), with the reduction outputs filled with a constant just
before (maybe through a copy of a filled buffer). Lowered one generic at a time they are
4-5 kernels that each read the whole input again and materialize the intermediates.

Here such a run becomes one `gpu.launch`: block p owns row p, thread t the elements
r = t + j*T (j < n, n <= MAX_PER_THREAD), so every row value lives in n registers per
thread. The ops run in program order inside the kernel:

* a row map computes its n values from registers (an earlier op's output), a row
  scalar (an earlier reduction's result, in a register of every thread), a per-column
  vector (weights: loaded) or a first load of a global row, and stores them to global
  memory only if the buffer is used after the run (a graph output, say);
* a row reduction folds its n values in a register, combines the block's partials
  with warp shuffles (warp_reduce.block_allreduce: a xor butterfly per warp, one
  top-level `gpu.barrier` and one shared word per warp in its own buffer, the warp
  partials combined by shuffles in every warp), so every thread holds the total; it
  combines the initial value (the constant fill, or the output's value read by every
  thread before a barrier), and thread 0 stores it if the buffer is used after the run.

Each input row is read from global memory once and each output written once.
Intermediate buffers used only inside the run are never written, and their
allocations, views and deallocations are erased.

A run is fused only when every operand is contiguous row-major and reached through
shape views only (so the same (row, column) is the same element for every op), every
generic has the same row count and row length (32 <= length <= MAX_PER_THREAD * 1024),
every reduction's value can be shuffled (int/float of at most 64 bits), and the run has
at least one reduction and two generics. Anything else ends the run.
"""

from __future__ import annotations

import functools
import math

from mlir import ir
from mlir.dialects import affine, arith, gpu, memref, scf

from ..ir import cidx, launch_before, loop_extents
from .reductions import clone_body, match_reduction
from .warp_reduce import block_allreduce, partials_needed, shuffleable

MAX_PER_THREAD = 8
MAX_THREADS = 1024
MIN_ROW = 32
_VIEWS = ("memref.expand_shape", "memref.collapse_shape")


def _root(v: ir.Value) -> ir.Value:
    """The buffer behind shape views (an alloc result or a function argument)."""
    while True:
        owner = v.owner
        owner = getattr(owner, "operation", owner)
        if isinstance(owner, ir.Operation) and owner.name in _VIEWS:
            v = owner.operands[0]
            continue
        return v


def _dense(t: ir.Type) -> bool:
    mt = ir.MemRefType(t)
    strides, offset = mt.get_strides_and_offset()
    return offset == 0 and strides == [math.prod(mt.shape[i + 1:]) for i in range(mt.rank)]


def _root_ok(v: ir.Value) -> bool:
    r = _root(v)
    owner = r.owner
    owner = getattr(owner, "operation", owner)
    return isinstance(owner, ir.Block) or owner.name == "memref.alloc"


class _Op:
    """A generic of the run: kind ('map' | 'reduce'), extents, operand roles."""

    def __init__(self, op, kind, extents, roles, matched=None):
        self.op, self.kind, self.extents, self.roles, self.matched = (
            op, kind, extents, roles, matched)


def _roles(op, extents) -> list[str] | None:
    """'full' | 'row' | 'col' | 'scalar' per operand (inputs, then the output)."""
    n = len(extents)
    maps = _maps(op)
    nonunit = [d for d in range(n) if extents[d] != 1]
    roles = []
    for v, m in zip(list(op.inputs) + list(op.outputs), maps):
        if not isinstance(v.type, ir.MemRefType):
            roles.append("scalar")
            continue
        if not _dense(v.type) or not _root_ok(v):
            return None
        dims = []
        for expr in m.results:
            if isinstance(expr, ir.AffineDimExpr):
                d = ir.AffineDimExpr(expr).position
                if extents[d] != 1:
                    dims.append(d)
            elif not (isinstance(expr, ir.AffineConstantExpr)
                      and ir.AffineConstantExpr(expr).value == 0):
                return None
        if dims == nonunit:
            roles.append("full")
        elif dims == [d for d in nonunit if d != n - 1]:
            roles.append("row")
        elif dims == [n - 1]:
            roles.append("col")
        else:
            return None
    return roles


def _classify(op) -> _Op | None:
    if op.name != "linalg.generic":
        return None
    op = op.opview
    if len(op.outputs) != 1:
        return None
    if any(not isinstance(v.type, ir.MemRefType) for v in op.outputs):
        return None
    extents = loop_extents(op)
    if extents is None or not extents:
        return None
    iters = [str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
    red = [i for i, t in enumerate(iters) if "parallel" not in t]
    roles = _roles(op, extents)
    if roles is None:
        return None
    if not red:
        if roles[-1] != "full":
            return None
        return _Op(op, "map", extents, roles)
    if red != [len(iters) - 1] or roles[-1] != "row":
        return None
    matched = match_reduction(op)
    if matched is None or not shuffleable(matched[1].type):
        return None  # the block reduction moves values between lanes by warp shuffles
    return _Op(op, "reduce", extents, roles, matched)


def _shape(g: _Op) -> tuple[int, int]:
    return math.prod(g.extents[:-1]), g.extents[-1]


def _const_of(op) -> ir.Value | None:
    """The constant a `linalg.fill` writes, or None."""
    if op.name != "linalg.fill":
        return None
    value = op.operands[0]
    owner = value.owner
    owner = getattr(owner, "operation", owner)
    if isinstance(owner, ir.Operation) and owner.name == "arith.constant":
        return value
    return None


def _collect(ops, start):
    """The longest fusable run starting at ops[start]: (items, end index) or None.
    items: ('generic', _Op) | ('fill', op, root, const) | ('copy', op, root, const)
    | ('view', op)."""
    shape = None
    items, filled = [], {}
    roles = {}  # root -> its one role in the run
    i = start
    while i < len(ops):
        op = ops[i]
        if op.name in _VIEWS or op.name == "memref.alloc":
            items.append(("view", op))
        elif _const_of(op) is not None and _root_ok(op.operands[1]):
            root = _root(op.operands[1])
            filled[root] = _const_of(op)
            items.append(("fill", op, root, filled[root]))
        elif (op.name == "memref.copy" and _root(op.operands[0]) in filled
              and _root_ok(op.operands[1])):
            root = _root(op.operands[1])
            filled[root] = filled[_root(op.operands[0])]
            items.append(("copy", op, root, filled[root]))
        elif op.name == "memref.copy" and _copy_out(op, items):
            # The run's result copied out (layer_norm's output): the kernel stores
            # straight into the destination; the run ends here.
            items.append(("copyout", op, _root(op.operands[0]), op.operands[1]))
            i += 1
            break
        else:
            g = _classify(op)
            if g is None:
                break
            if shape is None:
                shape = _shape(g)
                if not (MIN_ROW <= shape[1] <= MAX_PER_THREAD * MAX_THREADS) or shape[0] < 1:
                    return None
            elif _shape(g) != shape:
                break
            if not _roles_agree(g, roles):
                break
            items.append(("generic", g))
        i += 1
    if not items or items[0][0] not in ("generic", "fill"):
        return None  # a run starts at its first fill or generic
    return _trim(items)


def _roles_agree(g, roles) -> bool:
    """Every buffer is used in one role ('full' row data, 'row' scalars, 'col' vectors)
    throughout the run, and 'col' vectors are never written by it: the kernel forwards
    run-written values through registers, so a second kind of access to the same buffer
    would read global memory the run has not written. Records g's uses if they agree."""
    new = {}
    operands = list(g.op.inputs) + list(g.op.outputs)
    for v, role in zip(operands, g.roles):
        if role == "scalar":
            continue
        root = _root(v)
        if roles.get(root, role) != role or new.get(root, role) != role:
            return False
        new[root] = role
    out_root = _root(g.op.outputs[0])
    if new[out_root] == "col":
        return False
    roles.update(new)
    return True


def _copy_out(op, items) -> bool:
    """`memref.copy` of a full row buffer the run writes into a dense buffer the run does
    not touch otherwise."""
    src, dst = op.operands[0], op.operands[1]
    if not (_dense(src.type) and _dense(dst.type) and _root_ok(dst)):
        return False
    if ir.MemRefType(src.type).element_type != ir.MemRefType(dst.type).element_type:
        return False
    written = {_root(it[1].op.outputs[0]): it[1] for it in items if it[0] == "generic"}
    g = written.get(_root(src))
    if g is None or g.kind != "map":
        return False
    if math.prod(ir.MemRefType(dst.type).shape) != math.prod(g.extents):
        return False
    dst_root = _root(dst)
    return all(_root(v) != dst_root for it in items if it[0] == "generic"
               for v in list(it[1].op.inputs) + list(it[1].op.outputs)
               if isinstance(v.type, ir.MemRefType))


def _trim(items):
    """Cut the run so that every absorbed fill/copy initialises a reduction of the run
    that comes after it, nothing else touches a filled buffer before that reduction, and
    it ends with a generic; None if fewer than two generics or no reduction remain."""
    while items:
        while items and items[-1][0] not in ("generic", "copyout"):
            items.pop()
        bad = None
        for q, item in enumerate(items):
            if item[0] not in ("fill", "copy"):
                continue
            root, ok = item[2], False
            for later in items[q + 1:]:
                if later[0] == "generic":
                    g = later[1]
                    uses = [v for v in list(g.op.inputs) + list(g.op.outputs)
                            if isinstance(v.type, ir.MemRefType) and _root(v) == root]
                    if g.kind == "reduce" and _root(g.op.outputs[0]) == root and \
                            all(_root(v) != root for v in g.op.inputs):
                        ok = True
                        break
                    if uses:
                        break
                elif later[0] == "copy" and _root(later[1].operands[0]) == root:
                    continue
                elif later[0] in ("fill", "copy") and later[2] == root:
                    break
            if not ok:
                bad = q
                break
        if bad is None:
            break
        items = items[:bad]
    generics = [it[1] for it in items if it[0] == "generic"]
    if len(generics) < 2 or all(g.kind != "reduce" for g in generics):
        return None
    return items


def _external(root, absorbed) -> bool:
    """Whether `root`'s contents are observable after the run."""
    if isinstance(getattr(root.owner, "operation", root.owner), ir.Block):
        return True
    pending = [root]
    while pending:
        v = pending.pop()
        for use in v.uses:
            owner = use.owner
            owner = getattr(owner, "operation", owner)
            if owner.name in _VIEWS:
                pending.append(owner.results[0])
                continue
            if owner.name == "memref.dealloc" or owner in absorbed:
                continue
            return True
    return False


def _delinearize(lin, extents):
    ivs, rest = [], lin
    for i, ext in reversed(list(enumerate(extents))):
        if ext == 1:
            ivs.append(cidx(0))
        elif i == 0 or all(e == 1 for e in extents[:i]):
            ivs.append(rest)
        else:
            ivs.append(arith.RemUIOp(rest, cidx(ext)).result)
            rest = arith.DivUIOp(rest, cidx(ext)).result
    return ivs[::-1]


def _indices(m, ivs):
    n = len(ivs)
    return [affine.AffineApplyOp(ir.AffineMap.get(n, 0, [e]), ivs).result for e in m.results]


def _maps(op) -> list:
    """The indexing maps of a generic."""
    return [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]


class _Emitter:
    """Emits the body of a fused run's kernel (one block per row): each generic of the
    run in order, row data in registers, row scalars reduced across the block."""

    def __init__(self, items, threads, per_thread, rows, row_len, smems, absorbed):
        self.items, self.T, self.n = items, threads, per_thread
        self.rows, self.R = rows, row_len
        self.smems = smems
        self.absorbed = absorbed
        self.regs = {}  # root -> [value per j] (full rows)
        self.scal = {}  # root -> value (row scalars)
        self.init = {}  # root -> constant (fills not yet overwritten)
        # Only the last write of a buffer in the run can be observed after it.
        self.last_writer = {}
        for item in items:
            if item[0] == "generic":
                self.last_writer[_root(item[1].op.outputs[0])] = item[1]
        self.copy_to = {it[2]: it[3] for it in items if it[0] == "copyout"}

    def run(self, row, tid):
        self.row, self.tid = row, tid
        self.r = [arith.AddIOp(tid, cidx(j * self.T)).result if j else tid
                  for j in range(self.n)]
        reductions = 0
        for item in self.items:
            if item[0] in ("fill", "copy"):
                self.init[item[2]] = item[3]
            elif item[0] == "generic":
                g = item[1]
                if g.kind == "map":
                    self._map(g)
                else:
                    self._reduce(g, self.smems[reductions])
                    reductions += 1

    def _tail(self, j) -> bool:
        return (j + 1) * self.T > self.R

    def _guarded(self, j, compute, result_type):
        """Run compute() for element j; in the tail under `r < R` (else a zero)."""
        if not self._tail(j):
            return compute()
        inb = arith.CmpIOp(arith.CmpIPredicate.ult, self.r[j], cidx(self.R)).result
        branch = scf.IfOp(inb, [result_type], has_else=True)
        with ir.InsertionPoint(branch.then_block):
            scf.YieldOp([compute()])
        with ir.InsertionPoint(branch.else_block):
            zero = (arith.ConstantOp(result_type, 0.0) if isinstance(result_type, ir.FloatType)
                    else arith.ConstantOp(result_type, 0))
            scf.YieldOp([zero.result])
        return branch.results[0]

    def _value(self, g, j, skip=None):
        """The body's yielded value (or the reduction's element value) at element j."""
        op = g.op
        maps = _maps(op)
        block = op.regions[0].blocks[0]
        pivs = _delinearize(self.row, g.extents[:-1])
        ivs = pivs + [self.r[j]]
        mapping = {}
        for arg, v, m, role in zip(block.arguments, op.inputs, maps, g.roles):
            if role == "scalar":
                mapping[arg] = v
                continue
            root = _root(v)
            if role == "full":
                if root not in self.regs:
                    self.regs[root] = [None] * self.n
                if self.regs[root][j] is None:
                    self.regs[root][j] = memref.LoadOp(v, _indices(m, ivs)).result
                mapping[arg] = self.regs[root][j]
            elif role == "row":
                if root in self.scal:
                    mapping[arg] = self.scal[root]
                elif root in self.init:
                    mapping[arg] = self.init[root]
                else:
                    mapping[arg] = memref.LoadOp(v, _indices(m, ivs)).result
            else:  # col: weights, read-only in the run
                mapping[arg] = memref.LoadOp(v, _indices(m, ivs)).result
        return clone_body(block, ivs, skip, mapping)

    def _map(self, g):
        """A map of the run: each thread computes its elements of the row (in registers),
        stored only where the buffer is seen after the run."""
        root = _root(g.op.outputs[0])
        yielded = list(g.op.regions[0].blocks[0].operations)[-1].operands[0]
        last = self.last_writer[root] is g
        external = last and _external(root, self.absorbed)
        copy_to = self.copy_to.get(root) if last else None
        values = []
        for j in range(self.n):
            # Loads of registers not yet filled happen inside the guard: fill them first
            # for the tail so the guarded region only computes.
            compute = functools.partial(self._map_element, g, j, yielded, external, copy_to)
            if self._tail(j):
                self._preload(g, j)
            values.append(self._guarded(j, compute, yielded.type))
        self.regs[root] = values
        self.init.pop(root, None)

    def _map_element(self, g, j, yielded, external: bool, copy_to):
        """Element j of a map: its value, stored to the output (external) and the copy."""
        mapping = self._value(g, j)
        value = mapping.get(yielded, yielded)
        if external:
            pivs = _delinearize(self.row, g.extents[:-1])
            memref.StoreOp(value, g.op.outputs[0], _indices(_maps(g.op)[-1], pivs + [self.r[j]]))
        if copy_to is not None:
            self._store_copy(value, copy_to, j)
        return value

    def _store_copy(self, value, copy_to, j) -> None:
        """Element j of the row into the buffer the run's output is copied to."""
        shape = list(ir.MemRefType(copy_to.type).shape)
        if shape and shape[-1] == self.R:  # same rows: no div/rem per element
            idx = _delinearize(self.row, shape[:-1]) + [self.r[j]]
        else:
            lin = arith.AddIOp(arith.MulIOp(self.row, cidx(self.R)).result,
                               self.r[j]).result
            idx = _delinearize(lin, shape)
        memref.StoreOp(value, copy_to, idx)

    def _preload(self, g, j):
        """Tail element j: global row loads go under their own guard (a load past the
        row would read out of bounds), yielding zero outside."""
        maps = _maps(g.op)
        pivs = _delinearize(self.row, g.extents[:-1])
        for v, m, role in zip(g.op.inputs, maps, g.roles):
            if role != "full":
                continue
            root = _root(v)
            regs = self.regs.setdefault(root, [None] * self.n)
            if regs[j] is None:
                elem = ir.MemRefType(v.type).element_type
                regs[j] = self._guarded(
                    j, lambda v=v, m=m: memref.LoadOp(v, _indices(m, pivs + [self.r[j]])).result,
                    elem)

    def _reduce(self, g, smem):
        """A reduction of the run: per-thread partials, combined across the block, then
        with the output's initial value; the row scalar stays in a register."""
        comb = g.matched[0]
        root = _root(g.op.outputs[0])

        def combine(a, b):
            new = comb.clone()
            new.operands[0], new.operands[1] = a, b
            return new.results[0]

        total = block_allreduce(self._thread_partial(g, combine), combine, self.tid, self.T,
                                smem)
        final = combine(self._initial_scalar(g, root), total)
        self.scal[root] = final
        if self.last_writer[root] is g and _external(root, self.absorbed):
            self._store_scalar(g, final)

    def _thread_partial(self, g, combine):
        """This thread's elements of the row combined (tail elements under a guard)."""
        comb, e, _ = g.matched
        acc = None
        for j in range(self.n):
            if self._tail(j):
                self._preload(g, j)
                inb = arith.CmpIOp(arith.CmpIPredicate.ult, self.r[j], cidx(self.R)).result
                branch = scf.IfOp(inb, [e.type], has_else=True)
                with ir.InsertionPoint(branch.then_block):
                    scf.YieldOp([combine(acc, self._value(g, j, skip=comb)[e])])
                with ir.InsertionPoint(branch.else_block):
                    scf.YieldOp([acc])
                acc = branch.results[0]
            else:
                value = self._value(g, j, skip=comb)[e]
                acc = value if acc is None else combine(acc, value)
        return acc

    def _initial_scalar(self, g, root):
        """The reduction's initial value: a fill's constant, an earlier reduction of the
        run, or the output's current value."""
        if root in self.init:
            return self.init.pop(root)
        if root in self.scal:  # an earlier reduction of the run wrote it
            return self.scal[root]
        pivs = _delinearize(self.row, g.extents[:-1])
        value = memref.LoadOp(g.op.outputs[0],
                              _indices(_maps(g.op)[-1], pivs + [cidx(0)])).result
        # Every thread reads the initial value before thread 0 may store the total over
        # it (_store_scalar): without the barrier a thread of a later warp (or of the
        # emulator, which runs a block's threads one after another) read the total and
        # counted it twice (a log_softmax backward's row sum, its fill far before).
        gpu.BarrierOp()
        return value

    def _store_scalar(self, g, final) -> None:
        """Thread 0 writes the row's scalar to the output, seen after the run."""
        leader = arith.CmpIOp(arith.CmpIPredicate.eq, self.tid, cidx(0)).result
        branch = scf.IfOp(leader)
        with ir.InsertionPoint(branch.then_block):
            pivs = _delinearize(self.row, g.extents[:-1])
            memref.StoreOp(final, g.op.outputs[0], _indices(_maps(g.op)[-1], pivs + [cidx(0)]))
            scf.YieldOp([])

def _threads(row_len: int) -> int:
    t = 32
    while t * MAX_PER_THREAD < row_len and t < MAX_THREADS:
        t *= 2
    t = max(t, 256) if row_len >= 256 * 2 else t
    # Every thread owns at least one element (the reduction needs no identity value).
    while t > row_len:
        t //= 2
    return t


def _fuse(items) -> None:
    generics = [it[1] for it in items if it[0] == "generic"]
    rows, row_len = _shape(generics[0])
    threads = _threads(row_len)
    per_thread = -(-row_len // threads)
    absorbed = {it[1].op.operation if it[0] == "generic" else it[1].operation for it in items
                if it[0] != "view"}
    last = generics[-1].op
    workgroup = ir.Attribute.parse("#gpu.address_space<workgroup>")
    # Per reduction: one partial per warp (none for a single warp).
    partials = partials_needed(threads)
    smem_types = [ir.MemRefType.get([partials], g.matched[1].type, memory_space=workgroup)
                  for g in generics if g.kind == "reduce"] if partials else []
    body = launch_before(last, rows, threads, smem_types)
    with ir.InsertionPoint(body), last.location:
        smems = list(body.arguments)[12:] or [None] * len(generics)
        emitter = _Emitter(items, threads, per_thread, rows, row_len, smems, absorbed)
        emitter.run(body.arguments[0], body.arguments[3])
        gpu.TerminatorOp()
    roots = {_root(it[1].op.outputs[0]) for it in items if it[0] == "generic"}
    roots |= {it[2] for it in items if it[0] in ("fill", "copy")}
    internal = [r for r in roots if not _external(r, absorbed)]
    for it in reversed(items):
        if it[0] == "generic":
            it[1].op.operation.erase()
        elif it[0] in ("fill", "copy", "copyout"):
            it[1].operation.erase()
    for root in internal:
        _erase_buffer(root)


def _erase_buffer(root) -> None:
    """Erase an internal buffer: its views and deallocs (no other use is left)."""
    def erase_users(v):
        for use in list(v.uses):
            owner = use.owner
            owner = getattr(owner, "operation", owner)
            if owner.name in _VIEWS:
                erase_users(owner.results[0])
            owner.erase()

    erase_users(root)
    owner = getattr(root.owner, "operation", root.owner)
    owner.erase()


def fuse_row_runs(module) -> int:
    """Fuse every run of row ops in the public function; return how many kernels."""
    count = 0
    for func in module.body.operations:
        if func.operation.name != "func.func" or not len(func.regions[0].blocks):
            continue
        start = 0
        while True:
            ops = [o.operation for o in func.regions[0].blocks[0].operations]
            if start >= len(ops):
                break
            items = _collect(ops, start)
            if items is None:
                start += 1
                continue
            _fuse(items)
            count += 1
            # The launch sits where the run's last generic was; rescan after it.
            ops_after = [o.operation for o in func.regions[0].blocks[0].operations]
            start = next((k for k, o in enumerate(ops_after) if o.name == "gpu.launch"
                          and k >= start), start) + 1
    return count
