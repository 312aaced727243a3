"""Buffer donation: the graph inputs whose buffers a lazy-device graph may write its
outputs into (fx_graph "in_place"), as eager updates parameters and optimizer state in
place.

Without it an optimizer step on the lazy device reads every parameter's and state's old
value as an input and writes the new value to a fresh buffer, and the old buffer is
freed after the run: the step touches twice the memory eager does (a small MLP's step
no longer fits the L2 cache next to eager work: benchmarks/results/2026-11-28/
alternation-working-sets.md) and allocates every output anew. A donated input's buffer
takes its output instead: the compiler's in-place updates (lowering/bufferize/
graph_inputs.py; one-shot bufferization copies where the graph still reads the input
after writing it), which torch.compile's graphs use too (lazymlir/dynamo.py).

Which pairs (`candidates`, once per graph key: a function of the graph's structure):
outputs and inputs of the same shape and dtype upstream of them, nearest first (an
updated parameter with its old value), at most one pair per input and per output.
The key of the graph compiled with pairs is another key (`keyed`).

Which of them at a mark_step() (`safe_pairs`; a read computes part of the trace, whose
other values may need its graph's nodes again: materialize.py donates nothing there): an
input is donated only if nothing but this graph can read its old value after the run:
- its LazyValue is referenced by this graph's nodes and the sync's list of inputs and
  by nothing else (exact Python refcount): no live tensor holds it (a user's alias,
  `p.detach()` or `p.clone()` made before the update, a view functionalization has not
  regenerated yet, a second parameter on the same storage), no pending node outside
  this graph reads it, no run binds it (an input a graph launched earlier computes is
  waited for first: that run's binding lets go of it, materialize.py);
- its buffer is a dense CPU tensor nothing else holds: no other Python reference, no
  other C++ one (TensorImpl use count: a DLPack export), no other tensor on its storage
  (a view, a base: storage use count), and memory its allocator owns (resizable: not
  a DLPack import's or numpy's memory, which is the user's). A copy-on-write buffer (an
  upload, a `.cpu()` copy shares it) is fine: the code writes through `data_ptr()`,
  which gives it memory of its own first (targets/cpu.py);
- the cpu target runs it, no run observer is registered (they may read a run's input
  buffers after it), and LAZYMLIR_DYNAMIC_AFTER is off (graphs with in-place updates
  get no symbolic-size plan).
Anything else keeps its buffer: the output gets a fresh one. Plans that do not write
inputs (a graph split around ops that fall back, a big graph's segments, a graph with
check flags: lowering/front/checks.py drops the pairs) simply return new buffers.

After its graph has run, a donated value is marked failed (`retire`): if a reader these
rules missed ever reached it, it would raise instead of reading the new value.
LAZYMLIR_DONATE=0 turns donation off.
"""

from __future__ import annotations

import hashlib
import sys

import torch

from ..execution import run_observers
from .values import LazyValue

# Candidate pairs per graph key, and the key of a graph with pairs: what a training
# loop's every step asks again.
_CANDIDATES: dict = {}
_KEYS: dict = {}
_CACHE_LIMIT = 1 << 12
# Upstream nodes looked at per output when pairing (an optimizer's update of one
# parameter is a few elementwise ops deep).
_SEARCH_LIMIT = 256


class DonatedError(RuntimeError):
    """Raised by a read of a value whose buffer a graph took for an output."""


def enabled(current, target) -> bool:
    """Whether this sync may donate: LAZYMLIR_DONATE, the cpu target (plain CPU tensors
    whose compiled code writes inputs in place), no run observer, and no
    LAZYMLIR_DYNAMIC_AFTER (execution/dynamic_policy.py serves no graph with in-place
    updates from a graph with symbolic sizes)."""
    settings = current.settings
    return settings.donate and not settings.dynamic_after and target.plain_cpu_tensors \
        and not run_observers.active


def candidates(key: str, targets: list[LazyValue], inputs: list[LazyValue]
               ) -> tuple[tuple[int, int], ...]:
    """The (input, output) pairs the graph of `key` may update in place, if safe (`_pair`)."""
    pairs = _CANDIDATES.get(key)
    if pairs is None:
        pairs = _pair(targets, inputs)
        if len(_CANDIDATES) >= _CACHE_LIMIT:
            _CANDIDATES.clear()
        _CANDIDATES[key] = pairs
    return pairs


def _pair(targets: list[LazyValue], inputs: list[LazyValue]) -> tuple:
    """Nearest first: every (distance, output, input) of an output and an input of its
    shape and dtype upstream of it, taken in that order while both are unclaimed (an
    updated parameter is one op from its old value; the parameter's gradient, computed
    earlier in the trace, reads it many ops up)."""
    at = {id(v): i for i, v in enumerate(inputs)}
    found = []
    for k, value in enumerate(targets):
        for i, distance in _upstream_inputs(value, at).items():
            found.append((distance, k, i))
    found.sort()
    inputs_taken: set[int] = set()
    outputs_taken: set[int] = set()
    pairs = []
    for _, k, i in found:
        if i not in inputs_taken and k not in outputs_taken:
            inputs_taken.add(i)
            outputs_taken.add(k)
            pairs.append((i, k))
    return tuple(sorted(pairs))


def _upstream_inputs(value: LazyValue, at: dict) -> dict:
    """{input index: how many ops up} of the inputs of `value`'s shape and dtype upstream
    of it (breadth first, at most _SEARCH_LIMIT nodes; a tensor-list argument as long as
    its node's outputs is followed at the output's own position: a foreach op's
    parameter)."""
    sig = value.sig
    frontier = [(value.node, value.index)]
    seen = {value.node.seq}
    found: dict = {}
    distance = 0
    while frontier and len(seen) < _SEARCH_LIMIT:
        distance += 1
        following = []
        for node, index in frontier:
            for arg in _tensor_args(node, index):
                if arg.node is None:
                    i = at.get(id(arg))
                    if i is not None and arg.sig == sig and i not in found:
                        found[i] = distance
                elif arg.node.seq not in seen:
                    seen.add(arg.node.seq)
                    following.append((arg.node, arg.index))
        frontier = following
    return found


def _tensor_args(node, index: int):
    outputs = len(node.out_metas)
    for arg in (*node.args, *node.kwargs.values()):
        if type(arg) is LazyValue:
            yield arg
        elif type(arg) in (list, tuple):
            if outputs > 1 and len(arg) == outputs and type(arg[index]) is LazyValue:
                yield arg[index]
                continue
            for v in arg:
                if type(v) is LazyValue:
                    yield v


def keyed(key: str, pairs: tuple) -> str:
    """The key of the graph of `key` updating `pairs` in place (the document differs:
    its "in_place" entry)."""
    if not pairs:
        return key
    found = _KEYS.get((key, pairs))
    if found is None:
        if len(_KEYS) >= _CACHE_LIMIT:
            _KEYS.clear()
        digest = hashlib.sha256(repr(pairs).encode()).hexdigest()[:12]
        found = _KEYS[(key, pairs)] = f"{key}-d{digest}"
    return found


def safe_pairs(pairs: tuple, inputs: list[LazyValue], nodes: list, runner) -> tuple:
    """Those of `pairs` whose input nothing but this graph can read (the module's rules).
    `inputs`: the sync's list of the graph's inputs (the caller holds no other reference
    to them); `nodes`: the graph's nodes; `runner`: the session's runs (an input still
    being computed is waited for)."""
    if not pairs:
        return ()
    for i, _ in pairs:
        run = inputs[i].run
        if run is not None:
            runner.wait_for(run)  # its binding then holds the value no more
    references = _node_references(nodes, {id(inputs[i]): i for i, _ in pairs})
    safe = []
    for i, k in pairs:
        value = inputs[i]
        # Held by: getrefcount's argument, `value`, `inputs`, this graph's nodes.
        if value.error is None and value.data is not None and \
                sys.getrefcount(value) == 3 + references.get(i, 0) and _own_buffer(value):
            safe.append((i, k))
    return tuple(safe)


def _own_buffer(value: LazyValue) -> bool:
    """Whether `value.data` is a dense CPU tensor on memory of its own that only `value`
    holds."""
    data = value.data
    if type(data) is not torch.Tensor or data.device.type != "cpu" or data._is_view() \
            or not data.is_contiguous() or data.requires_grad:
        return False
    # Held by: getrefcount's argument, `data`, the value's slot; one TensorImpl reference.
    if sys.getrefcount(data) != 3 or data._use_count() != 1:
        return False
    storage = data.untyped_storage()
    # (the storage's references: `data`'s and this Python storage object's)
    return storage.resizable() and torch._C._storage_Use_Count(storage._cdata) == 2


def _node_references(nodes: list, wanted: dict) -> dict:
    """How many references the containers of `nodes` (argument tuples and lists, kwargs
    dicts; each counted once, however many nodes share it) hold to the values whose ids
    `wanted` maps to input indices, by input index."""
    counts: dict = {}
    seen: set = set()

    def count(container) -> None:
        if id(container) in seen:
            return
        seen.add(id(container))
        items = container.values() if type(container) is dict else container
        for x in items:
            t = type(x)
            if t is LazyValue:
                i = wanted.get(id(x))
                if i is not None:
                    counts[i] = counts.get(i, 0) + 1
            elif t is list or t is tuple or t is dict:
                count(x)

    for node in nodes:
        count(node.args)
        if node.kwargs:
            count(node.kwargs)
    return counts


def retire(values: list[LazyValue]) -> None:
    """Mark donated inputs of a graph that ran (or failed) as gone: their buffers hold
    outputs now (or a failed run's partial writes)."""
    for value in values:
        value.failed(DonatedError(
            "lazymlir: this value's buffer was reused for a graph output (buffer donation, "
            "LAZYMLIR_DONATE=0 turns it off); nothing should have been able to read it"))
        value.data = None
