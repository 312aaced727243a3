"""torch.compile graphs with symbolic sizes, compiled once for every size.

With `dynamic=True` or `torch._dynamo.mark_dynamic`, Dynamo hands over a graph whose
sizes are SymInts. lazymlir/dynamo.py writes such a graph in the fx-stage form with its
sizes as expressions over symbols (lowering/front/symbolic.py); the code compiled
from it reads the sizes from its arguments, and the cpu target computes the output
shapes per call. So one forward and one backward graph serve every batch size. (Dynamo's automatic
dynamic shapes, a size that changed between calls, also hands over SymInts; those graphs
are compiled per shape: `asked_for`.)

Where that cannot be done, the graph is compiled per concrete shape instead
(dynamo._specialize_per_shape), warned once and counted as `DynamicSpecialized`:
the cuda target (its kernels and launch plans are built for static shapes), a graph
with ops that bounds checks guard (lowering/front/checks.py: the check's clamps need
the indexed size), random ops, collectives, in-place updates of inputs, run-time
assertions on sizes (symbolic booleans and floats), a size no input carries, or a
compile error of the symbolic graph.
"""

from __future__ import annotations

import warnings

import sympy
import torch
from torch.utils._sympy.printers import PythonPrinter

from . import session, targets
from .execution import executor
from .lowering.front import checks
from .support.errors import CompileError


class NotSymbolic(NotImplementedError):
    """This graph cannot be compiled with symbolic sizes (the message says why)."""


class Symbols:
    """The size symbols of one graph: canonical names s0, s1... in the order the tensor
    inputs carry them, where each is read at run time, and its example value."""

    def __init__(self):
        self._names: dict[sympy.Symbol, sympy.Symbol] = {}
        self.sources: dict[str, list[int]] = {}
        self.hints: dict[str, int] = {}
        self._printer = PythonPrinter()

    def bind(self, inputs: list) -> None:
        """Name the symbols that are whole sizes of the tensor inputs, then those that
        only a size `a*s + b` carries (a backward's `2*s0` of a tensor made by
        stacking two): s = (size - b) // a."""
        linear = []
        for input_index, value in enumerate(inputs):
            if not isinstance(value, torch.Tensor):
                continue
            for dim, size in enumerate(value.shape):
                if not isinstance(size, torch.SymInt):
                    continue
                expr, hint = size.node.expr, int(size.node.hint)
                if isinstance(expr, sympy.Symbol):
                    self._name(expr, [input_index, dim], hint)
                elif len(expr.free_symbols) == 1:
                    (symbol,) = expr.free_symbols
                    a, b = sympy.Poly(expr, symbol).all_coeffs() if expr.is_polynomial(symbol) \
                        and sympy.degree(expr, symbol) == 1 else (sympy.S.Zero, sympy.S.Zero)
                    if a.is_Integer and b.is_Integer and a > 0:
                        linear.append((symbol, [input_index, dim, int(a), int(b)],
                                       (hint - int(b)) // int(a)))
        for symbol, source, hint in linear:
            self._name(symbol, source, hint)

    def _name(self, symbol: sympy.Symbol, source: list, hint: int) -> None:
        if symbol not in self._names:
            name = f"s{len(self._names)}"
            self._names[symbol] = sympy.Symbol(name, integer=True, positive=True)
            self.sources[name] = source
            self.hints[name] = hint

    def size(self, value) -> int | str:
        """A size as the document writes it: an int, or an expression over s0, s1..."""
        if isinstance(value, torch.SymBool | torch.SymFloat):
            # (int() of one would add a guard: Dynamo would recompile for every size)
            raise NotSymbolic(f"it computes a symbolic {type(value).__name__} ({value.node.expr}: "
                              f"a run-time assertion on sizes)")
        if not isinstance(value, torch.SymInt):
            return int(value)
        expr = value.node.expr
        if expr.is_number:
            return int(expr)
        unknown = expr.free_symbols - set(self._names)
        if unknown:
            raise NotSymbolic(f"size {expr} uses {sorted(map(str, unknown))}, which no "
                              f"tensor input has as a whole dimension")
        return self._printer.doprint(expr.xreplace(self._names))

    def shape(self, value: torch.Tensor) -> list:
        return [self.size(d) for d in value.shape]

    def document(self, graph: dict) -> dict:
        """`graph` with the symbols' sources and hints (lowering/front/symbolic.py)."""
        if not self.sources:
            return graph
        if graph.get("in_place"):
            # (its compile crashed in the llvm stage: graph_inputs.py's in-place writes
            # were made for static shapes)
            raise NotSymbolic("it updates its inputs in place")
        if session.current().settings.bounds_checks and checks.has_guarded_ops(graph):
            raise NotSymbolic("it indexes tensors (index and gather ops are bounds-checked "
                              "against static sizes)")
        return {**graph, "symbols": self.sources, "hints": self.hints}


def asked_for(gm: torch.fx.GraphModule) -> bool:
    """Whether the program asked for symbolic sizes: `torch.compile(dynamic=True)` (Dynamo
    then assumes no size static) or `mark_dynamic` on an input. Dynamo's automatic dynamic
    shapes (a size that changed between calls) is not asking: each size then gets its own
    static graph, whose code the cpu schedule tiles and vectorizes for its constant sizes
    (a symbolic graph's loops stay scalar: benchmarks/dynamic_shapes.py)."""
    if not torch._dynamo.config.assume_static_by_default:
        return True
    for node in gm.graph.find_nodes(op="placeholder"):
        example = getattr(node.meta.get("grapharg"), "example", None)
        if getattr(example, "_dynamo_dynamic_indices", None):
            return True
    return False


def is_size(value) -> bool:
    return isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool)


def compile_symbolic(aot_compile, specialize, gm, example_inputs):
    """`aot_compile(gm, example_inputs, prepared)` compiles with symbolic sizes, each
    graph handed to `prepared` (a list of (document, key)); compiled and loaded here,
    so that a failure falls back to `specialize()` before anything ran."""
    current = session.current()
    target = targets.active().name
    if target != "cpu":
        return _fallback(specialize, f"the {target} target compiles static shapes only")
    prepared: list = []
    try:
        compiled = aot_compile(gm, example_inputs, prepared)
        for graph, key in prepared:
            executor.prepare(graph, key)
    except NotSymbolic as why:
        return _fallback(specialize, str(why))
    except CompileError as error:
        return _fallback(specialize, f"compiling it failed: {str(error).splitlines()[0]}")
    current.metrics.inc("DynamicGraphs", len(prepared))
    return compiled


def _fallback(specialize, why: str):
    current = session.current()
    current.metrics.inc("DynamicSpecialized")
    if f"dynamic: {why}" not in current.warned:  # once per reason
        current.warned.add(f"dynamic: {why}")
        warnings.warn(f"lazymlir: a torch.compile graph with symbolic sizes is compiled "
                      f"once per shape instead: {why}", stacklevel=4)
    return specialize()
