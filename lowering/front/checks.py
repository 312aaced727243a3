"""Run-time checks for what eager PyTorch rejects and compiled code would not.

An out-of-range index (`x[idx]`, gather, scatter, index_select, embedding,
index_put, index_add...) or an integer division/remainder by zero is an error
in eager PyTorch, but undefined behaviour in the compiled code: it read
garbage, aborted in a torch-mlir `cf.assert`, or killed the process with
SIGFPE. `instrument(graph)` rewrites an fx-stage document (lowering/front/fx_graph.py)
so that such an op can do no harm and the graph reports it:

- each index tensor `i` of a dim of size `n` is replaced by
  `clamp(i, lo, n - 1)` (lo = -n where eager accepts negative indices, else 0),
  and `any(i != clamped)` becomes a check flag;
- each integer divisor `d` is replaced by `d + (d == 0)` (a 1 where it was 0),
  and `any(d == 0)` becomes a check flag.

The flags are or-ed into one extra graph output (a 0-d bool). The executor
reads it after the run; if any is set it runs the graph eagerly on
the CPU, which raises eager's own error (class and message) at the sync point.
A static zero divisor (`int_tensor % 0`) needs no flag: `instrument` reports
it and the executor goes straight to the eager run.

Cost: per index tensor three elementwise/reduction ops over the indices (not
over the indexed tensor), per integer divisor three over the divisor, and one
one-byte device-to-host copy of the flag per run. On CUDA the `any`
reductions are serial kernels (i1 reductions are not split into atomics,
docs/known-issues.md) and the flag's copy waits for the graph. Measured by
benchmarks/bounds_checks.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import fx_graph

# op -> (position of the dim argument or None for dim 0, position of the index,
#        whether negative indices are valid, position of the indexed tensor)
_INDEX_OPS = {
    "aten.gather.default": (1, 2, False, 0),
    "aten.scatter.src": (1, 2, False, 0),
    "aten.scatter.value": (1, 2, False, 0),
    "aten.scatter.reduce": (1, 2, False, 0),
    "aten.scatter.value_reduce": (1, 2, False, 0),
    "aten.scatter_add.default": (1, 2, False, 0),
    "aten.scatter_reduce.two": (1, 2, False, 0),
    "aten.index_select.default": (1, 2, False, 0),
    "aten.index_add.default": (1, 2, False, 0),
    "aten.index_copy.default": (1, 2, False, 0),
    "aten.index_fill.int_Scalar": (1, 2, False, 0),
    "aten.index_fill.int_Tensor": (1, 2, False, 0),
    "aten.embedding.default": (None, 1, False, 0),
}
# Ops the lazy device records whole and the `torch` stage decomposes into index ops
# (late_decompositions.py), after these checks ran: guarded here as such.
# embedding_dense_backward: (index position, position of the int number of rows)
_ROWS_INDEX_OPS = {"aten.embedding_dense_backward.default": (1, 2)}
# nll_loss: (target position, position of the input whose last dim is the classes,
#            ignore_index position); a target equal to ignore_index is valid whatever it is
_TARGET_OPS = {"aten.nll_loss_forward.default": (1, 0, 4),
               "aten.nll_loss_backward.default": (2, 1, 5)}
# ops taking a list of optional index tensors, one per leading dim
_LIST_INDEX_OPS = {"aten.index.Tensor": 1, "aten.index_put.default": 1,
                   "aten._unsafe_index_put.default": 1, "aten._unsafe_index.Tensor": 1}
# integer division ops: position of the divisor
_DIVISION_OPS = {
    "aten.remainder.Tensor": 1, "aten.remainder.Scalar": 1,
    "aten.fmod.Tensor": 1, "aten.fmod.Scalar": 1,
    "aten.div.Tensor_mode": 1, "aten.div.Scalar_mode": 1,
    "aten.floor_divide.default": 1, "aten.floor_divide.Scalar": 1,
}

_INTEGER = {"int8", "int16", "int32", "int64", "uint8"}


@dataclass
class Instrumented:
    graph: dict        # the rewritten graph; its last output is the flag (if `checks`)
    checks: int        # number of checks (0: the graph is unchanged)
    static_error: bool  # an op always fails (a constant zero divisor): run eagerly


def has_guarded_ops(graph: dict) -> bool:
    """Whether `graph` has an op `instrument` guards (an index or an integer divisor)."""
    return any(n["op"] in _INDEX_OPS or n["op"] in _LIST_INDEX_OPS or n["op"] in _DIVISION_OPS
               or n["op"] in _ROWS_INDEX_OPS or n["op"] in _TARGET_OPS for n in graph["nodes"])


def instrument(graph: dict) -> Instrumented:
    """`graph` with index clamping, divisor guards and a flags output (see module doc)."""
    if not has_guarded_ops(graph):
        return Instrumented(graph, 0, False)
    return _Rewriter(graph).run()


class _Rewriter:
    def __init__(self, graph: dict):
        self.graph = graph
        self.nodes: list[dict] = []
        self.mapping: dict[tuple, tuple] = {}  # old node ref -> new node ref
        self.flags: list[dict] = []
        self.flag: dict | None = None  # the checks so far, or-ed
        self.static_error = False

    def add_flag(self, check: dict) -> None:
        """Or `check` into the flag right where it is computed, not at the graph's end:
        the flag holds every earlier check's verdict wherever the code is, and its last
        write follows the last check, where its out-parameter is signaled final (a read
        of a running graph's value needs the checks before it passed:
        lowering/cpu/output_signals.py, execution/compiled_plan.py)."""
        self.flags.append(check)
        self.flag = check if self.flag is None else \
            self.emit("aten.logical_or.default", self.flag, check)

    # ----------------------------------------------------------------- refs
    def remap(self, value):
        if isinstance(value, dict) and "ref" in value:
            ref = tuple(value["ref"])
            return {"ref": list(self.mapping.get(ref, ref))}
        if isinstance(value, list):
            return [self.remap(v) for v in value]
        return value

    def desc(self, ref: dict) -> dict:
        kind, index, out = ref["ref"]
        if kind == "input":
            return self.graph["inputs"][index]
        if kind == "scalar":
            return {"shape": [], "dtype": fx_graph.dtype_name(fx_graph.SCALAR_DTYPE)}
        return self.nodes[index]["outputs"][out]

    def meta(self, value):
        if isinstance(value, dict) and "ref" in value:
            d = self.desc(value)
            return torch.empty(d["shape"], dtype=fx_graph.dtype_from_name(d["dtype"]),
                               device="meta")
        if isinstance(value, list):
            return [self.meta(v) for v in value]
        return fx_graph.decode_scalar(value)

    def emit(self, op_name: str, *args) -> dict:
        """Append node `op(*args)` (args already in new refs) and return a ref to it."""
        op = fx_graph.resolve_op(op_name)
        out = op(*[self.meta(a) for a in args])
        self.nodes.append({
            "op": op_name, "args": list(args), "kwargs": {},
            "outputs": [{"shape": list(out.shape), "dtype": fx_graph.dtype_name(out.dtype)}]})
        return {"ref": ["node", len(self.nodes) - 1, 0]}

    # ----------------------------------------------------------------- checks
    def guard_index(self, index: dict, size: int, negative_ok: bool) -> dict:
        """clamp(index) in range, and a flag set where it was not."""
        if self.desc(index)["dtype"] not in ("int64", "int32"):  # masks cannot be out of range
            return index
        low = -size if negative_ok else 0
        clamped = self.emit("aten.clamp.default", index, low, max(size - 1, low))
        wrong = self.emit("aten.ne.Tensor", index, clamped)
        self.add_flag(self.emit("aten.any.default", wrong))
        return clamped

    def guard_target(self, target: dict, classes: int, ignore_index: int) -> dict:
        """A class target clamped into range except where it is `ignore_index` (which the
        loss masks out), and a flag set where it was out of range."""
        if self.desc(target)["dtype"] not in ("int64", "int32"):
            return target
        clamped = self.emit("aten.clamp.default", target, 0, max(classes - 1, 0))
        ignored = self.emit("aten.eq.Scalar", target, ignore_index)
        kept = self.emit("aten.where.self", ignored, target, clamped)
        wrong = self.emit("aten.ne.Tensor", target, kept)
        self.add_flag(self.emit("aten.any.default", wrong))
        return kept

    def guard_divisor(self, divisor):
        if not (isinstance(divisor, dict) and "ref" in divisor):
            if type(divisor) is int and divisor == 0:
                self.static_error = True
                return 1
            return divisor
        if self.desc(divisor)["dtype"] not in _INTEGER:
            return divisor
        zero = self.emit("aten.eq.Scalar", divisor, 0)
        self.add_flag(self.emit("aten.any.default", zero))
        return self.emit("aten.add.Tensor", divisor, zero)

    def rewrite(self, node: dict) -> dict:
        name = node["op"]
        args = list(node["args"])
        shape = lambda ref: self.desc(ref)["shape"]  # noqa: E731
        if name in _INDEX_OPS:
            dim_at, index_at, negative_ok, self_at = _INDEX_OPS[name]
            if index_at < len(args) and self_at < len(args):
                sizes = shape(args[self_at]) or [1]
                dim = args[dim_at] if dim_at is not None else 0
                if isinstance(dim, int):
                    args[index_at] = self.guard_index(args[index_at], sizes[dim % len(sizes)],
                                                      negative_ok)
        elif name in _LIST_INDEX_OPS:
            at = _LIST_INDEX_OPS[name]
            sizes = shape(args[0])
            indices = list(args[at])
            for dim, index in enumerate(indices):
                if index is not None and dim < len(sizes):
                    indices[dim] = self.guard_index(index, sizes[dim], True)
            args[at] = indices
        elif name in _ROWS_INDEX_OPS:
            index_at, rows_at = _ROWS_INDEX_OPS[name]
            if rows_at < len(args) and isinstance(args[rows_at], int):
                args[index_at] = self.guard_index(args[index_at], args[rows_at], False)
        elif name in _TARGET_OPS:
            target_at, input_at, ignore_at = _TARGET_OPS[name]
            if ignore_at < len(args) and isinstance(args[ignore_at], int):
                classes = (shape(args[input_at]) or [1])[-1]
                args[target_at] = self.guard_target(args[target_at], classes, args[ignore_at])
        elif name in _DIVISION_OPS and node["outputs"][0]["dtype"] in _INTEGER:
            at = _DIVISION_OPS[name]
            if at < len(args):
                args[at] = self.guard_divisor(args[at])
        return {**node, "args": args}

    # ----------------------------------------------------------------- driver
    def run(self) -> Instrumented:
        for i, node in enumerate(self.graph["nodes"]):
            node = {**node, "args": self.remap(node["args"]),
                    "kwargs": self.remap(node["kwargs"])}
            self.nodes.append(self.rewrite(node))
            for out in range(len(node["outputs"])):
                self.mapping[("node", i, out)] = ("node", len(self.nodes) - 1, out)
        outputs = [self.remap(o) for o in self.graph["outputs"]]
        if self.flags:
            # One 0-d flag: or-ed, not stacked (a stack writes strided subviews, which
            # the cuda plan stage rejects); which check failed, eager's rerun tells.
            outputs.append(self.flag)
        graph = {**self.graph, "nodes": self.nodes, "outputs": outputs}
        if self.flags:
            # A set flag reruns the graph eagerly (to raise eager's error) on the same
            # inputs: the compiled graph must not have updated them in place first.
            graph.pop("in_place", None)
        return Instrumented(graph, len(self.flags), self.static_error)
