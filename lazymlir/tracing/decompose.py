"""The decomposition route: ops torch-mlir wants decomposed, with replayed templates.

An op in torch-mlir's decomposition table (what its FX path applies before
import, plus lowering.front.decompositions) is decomposed here; the pieces re-enter
dispatch. A decomposition runs Python reference code and re-enters dispatch for
every piece (t_copy -> t -> transpose -> permute -> clone), 20-50 us a call. Its
result depends only on its arguments' shapes, dtypes and static values, so it
runs once per signature while a template of the nodes it recorded is captured;
later calls replay the template (a Node and a LazyValue per piece). A call that
syncs, runs an op eagerly, uploads a constant or rebinds a tensor from outside
is not captured: it runs every time.

A decomposition marked shape-generic (batch norm's: DenseNet calls it with a
different channel count at every layer) also replays a template captured at other
sizes: when two captures differ only by sizes substituted for sizes (every 24 in
the first is 32 in the second, nothing else differs), the first is replayed for
later calls with the sizes substituted, instead of running the decomposition
(~25 ms of Python reference code and meta kernels) once per size.
"""

from __future__ import annotations

import torch

from ..lowering.front import late_decompositions
from .recording import KWARGS_SEPARATOR, record
from .trace_state import state
from .values import (LazyTensor, LazyValue, Node, is_lazy, meta_like, node_seq_mark, signature,
                     static_token, value_of)

aten = torch.ops.aten

def table():
    """The decompositions the tracer applies as it records: torch-mlir's table and
    lazymlir's, except the ops the `torch` stage decomposes whole
    (lowering.front.late_decompositions: the optimizers' element ops, a transformer's
    backward ops and loss, recorded by the C++ entry)."""
    return late_decompositions.tracer_table()


_TEMPLATE_LIMIT = 256   # templates kept per op (a changing float in the key misses)


class _NoTemplate(Exception):
    pass


class _Ref:
    """In a template: the value at position `i` (inputs first, then node outputs)."""

    __slots__ = ("i",)

    def __init__(self, i: int):
        self.i = i


# Decompositions whose templates replay at other sizes (`_SizeFamilies`): ones whose
# recorded ops depend on sizes only through their shapes, called at many sizes.
SHAPE_GENERIC = {
    aten._native_batch_norm_legit_functional.default,
    aten.native_batch_norm_backward.default,
}


def decomposer(func, decomposition):
    """The route of `func`, an op that `decomposition` decomposes."""
    templates: dict = {}
    families = _SizeFamilies() if func in SHAPE_GENERIC else None

    def run(f, args, kwargs):
        out = decomposition(*args, **kwargs)
        return record(f, args, kwargs) if out is NotImplemented else out

    def decompose(f, args, kwargs):
        if state.capture_start >= 0:  # inside another capture: that one templates us
            return run(f, args, kwargs)
        # The default dtype: a decomposition may read it (factories without a dtype).
        key, inputs = [torch.get_default_dtype()], []
        try:
            _arguments_key(args, kwargs, key, inputs)
            if len({id(v) for v in inputs}) != len(inputs):
                # One value in two argument places (mse_loss(x, x)): the template ties
                # them together, so it serves only calls that repeat values in the
                # same places; the key says which.
                first: dict = {}
                key.append(tuple(first.setdefault(id(v), n) for n, v in enumerate(inputs)))
            key = tuple(key)
            template = templates.get(key)
        except (TypeError, _NoTemplate):  # unhashable or host-tensor arguments
            return run(f, args, kwargs)
        if template is not None:
            return _replay(template, inputs)
        if families is not None:
            template = families.substitute(args, kwargs, inputs)
            if template is not None:
                if len(templates) >= _TEMPLATE_LIMIT:
                    templates.clear()
                templates[key] = template
                return _replay(template, inputs)
        start = node_seq_mark()
        impure = state.impure
        state.capture_start = start
        try:
            out = run(f, args, kwargs)
        finally:
            state.capture_start = -1
        if state.impure == impure:
            template = _capture(start, inputs, out)
            if template is not None:
                if len(templates) >= _TEMPLATE_LIMIT:
                    templates.clear()
                templates[key] = template
                if families is not None:
                    families.add(args, kwargs, inputs, template)
        return out

    return decompose


def _arguments_key(args, kwargs, key: list, inputs: list, sizes: bool = True) -> None:
    """`_template_key` of a call's positional and keyword arguments."""
    for a in args:
        _template_key(a, key, inputs, sizes)
    if kwargs:
        key.append(KWARGS_SEPARATOR)
        for k, v in kwargs.items():
            key.append(k)
            _template_key(v, key, inputs, sizes)


def _template_key(x, key: list, inputs: list, sizes: bool = True) -> None:
    """Like the shape-cache key, but every scalar by value (floats by their exact bits:
    -0.0 == 0.0 in Python); collects the LazyValues in order. Without `sizes`, a
    tensor's sizes are left out (its rank and dtype kept): `_SizeFamilies`' key."""
    t = type(x)
    if t is LazyTensor or is_lazy(x):
        value = value_of(x)
        key.append(value.sig if sizes else (value.meta.dim(), value.meta.dtype))
        inputs.append(value)
    elif t is float:
        key.append(float)
        key.append(x.hex())
    elif t is list or t is tuple:
        key.append(t)
        key.append(len(x))
        for v in x:
            _template_key(v, key, inputs, sizes)
    elif isinstance(x, torch.Tensor):
        raise _NoTemplate  # a host tensor: its values would be baked in
    else:
        key.append(t)
        key.append(x)


class _SizeFamilies:
    """The templates of one shape-generic decomposition, grouped by everything in their
    key but the sizes of their tensor arguments (the ranks and dtypes stay).

    A template replays at other sizes when its family has shown it to: a later capture
    equal to it with some sizes substituted (every occurrence of size a, in the
    arguments' shapes, the recorded nodes' shapes and their integer arguments, becomes
    b) marks those positions of the arguments' shapes as free. Sizes 0 and 1 are never
    substituted (broadcasting and empty tensors take other paths), nor a size that also
    appears at an unchanged position (it could not be told apart)."""

    _LIMIT = 8  # templates kept per family (a decomposition whose sizes show in floats)

    def __init__(self):
        self.families: dict = {}

    @staticmethod
    def _family(args, kwargs, inputs) -> tuple:
        key: list = []
        _arguments_key(args, kwargs, key, [], sizes=False)
        first: dict = {}
        key.append(tuple(first.setdefault(id(v), n) for n, v in enumerate(inputs)))
        return tuple(key)

    def substitute(self, args, kwargs, inputs):
        """A template for these sizes from one captured at others, or None."""
        shapes = [tuple(v.meta.shape) for v in inputs]
        for entry in self.families.get(self._family(args, kwargs, inputs), ()):
            old_shapes, template, free = entry
            found = _size_map(old_shapes, shapes)
            if found is not None and found[1] in free:
                return _substituted(template, found[0])
        return None

    def add(self, args, kwargs, inputs, template) -> None:
        entries = self.families.setdefault(self._family(args, kwargs, inputs), [])
        shapes = [tuple(v.meta.shape) for v in inputs]
        canonical = _canonical(template)
        for old_shapes, old, free in entries:
            found = _size_map(old_shapes, shapes)
            if found is not None and _canonical(_substituted(old, found[0])) == canonical:
                free.add(found[1])
        if len(entries) >= self._LIMIT:
            entries.pop(0)
        entries.append((shapes, template, set()))


def _size_map(old_shapes: list, new_shapes: list):
    """({old size: new size}, the changed positions) if `new_shapes` is `old_shapes` with
    sizes substituted as `_SizeFamilies` allows, else None."""
    mapping: dict = {}
    kept: set = set()
    changed = []
    for i, (old, new) in enumerate(zip(old_shapes, new_shapes)):
        for d, (a, b) in enumerate(zip(old, new)):
            if a == b:
                kept.add(a)
                continue
            if a <= 1 or b <= 1 or mapping.setdefault(a, b) != b:
                return None
            changed.append((i, d))
    if not mapping or kept & mapping.keys():
        return None
    return mapping, tuple(changed)


def _substituted(template, mapping: dict):
    """`template` with every size and integer argument `a` in `mapping` replaced by
    mapping[a] (the output metas made again at the new shapes)."""
    def ints(x):
        t = type(x)
        if t is int:
            return mapping.get(x, x)
        if t is list or t is tuple:
            return t(ints(v) for v in x)
        return x  # a _Ref, float, bool, dtype...

    steps, out = template
    new_steps = []
    for op, args, kwargs, metas, _sigs, _token in steps:
        metas = [None if m is None else meta_like(ints(tuple(m.shape)), m.dtype)
                 for m in metas]
        # A new static token: the node's text (graph.py's graph_key) has the new sizes.
        new_steps.append((op, ints(args), {k: ints(v) for k, v in kwargs.items()}, metas,
                          [None if m is None else signature(m.shape, m.dtype)
                           for m in metas], static_token()))
    return new_steps, ints(out)


def _canonical(template) -> tuple:
    """A template as comparable values (references by position, metas by shape/dtype)."""
    def plain(x):
        t = type(x)
        if t is _Ref:
            return (_Ref, x.i)
        if t is list or t is tuple:
            return (t, tuple(plain(v) for v in x))
        if t is float:
            return (float, x.hex())
        return (t, x)

    steps, out = template
    return (tuple((op, plain(args), tuple((k, plain(v)) for k, v in kwargs.items()),
                   tuple(None if m is None else (tuple(m.shape), m.dtype) for m in metas))
                  for op, args, kwargs, metas, _sigs, _token in steps), plain(out))


def _capture(start: int, inputs: list, out):
    """The template of what a decomposition recorded after node `start`, or None."""
    position = {}  # id(value) or (seq, output) -> position in the replay's values
    for i, value in enumerate(inputs):
        position.setdefault(id(value), i)
    nodes = {}
    stack = []

    def visit(value) -> bool:
        if id(value) in position:
            return True
        node = value.node
        if node is None or node.seq <= start:
            return False  # made outside and not an input (a constant, a closure...)
        if node.seq not in nodes:
            nodes[node.seq] = node
            stack.append(node)
        return True

    def visit_out(o) -> bool:
        if is_lazy(o):
            return visit(value_of(o))
        # (a tuple subclass too: the named tuples of PyTorch's references, nll_loss's;
        # the dispatcher hands the caller a plain tuple either way)
        if isinstance(o, (list, tuple)):
            return all(visit_out(v) for v in o)
        return o is None or type(o) in (int, float, bool)

    if not visit_out(out):
        return None
    while stack:
        node = stack.pop()
        for arg in (*node.args, *node.kwargs.values()):
            for value in (arg if type(arg) is list or type(arg) is tuple else (arg,)):
                if type(value) is LazyValue and not visit(value):
                    return None
    count = len(inputs)
    for seq in sorted(nodes):
        for k in range(len(nodes[seq].out_metas)):
            position[(seq, k)] = count
            count += 1

    def spec(x):
        if type(x) is LazyValue:
            i = position.get(id(x))
            return _Ref(i if i is not None else position[(x.node.seq, x.index)])
        if type(x) is list or type(x) is tuple:
            return type(x)(spec(v) for v in x)
        return x

    steps = []
    for seq in sorted(nodes):
        node = nodes[seq]
        steps.append((node.op, tuple(spec(a) for a in node.args),
                      {k: spec(v) for k, v in node.kwargs.items()}, node.out_metas,
                      [None if m is None else signature(m.shape, m.dtype)
                       for m in node.out_metas], static_token()))

    def out_spec(o):
        if is_lazy(o):
            return spec(value_of(o))
        if type(o) is list:
            return [out_spec(v) for v in o]
        if isinstance(o, tuple):
            return tuple(out_spec(v) for v in o)
        return o

    return steps, out_spec(out)


def _resolve(x, values: list):
    t = type(x)
    if t is _Ref:
        return values[x.i]
    if t is list or t is tuple:
        return t(_resolve(v, values) for v in x)
    return x


def _rebuild(x, values: list):
    t = type(x)
    if t is _Ref:
        return LazyTensor(values[x.i])
    if t is list or t is tuple:
        return t(_rebuild(v, values) for v in x)
    return x


def _replay(template, values: list):
    steps, out = template
    for op, args, kwargs, metas, sigs, token in steps:
        node = Node(op, tuple(_resolve(a, values) for a in args),
                    {k: _resolve(v, values) for k, v in kwargs.items()} if kwargs else {},
                    metas, token)
        for k, meta in enumerate(metas):
            values.append(None if meta is None else LazyValue(meta, node, k, None, sigs[k]))
    return _rebuild(out, values)
