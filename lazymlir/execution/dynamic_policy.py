"""Symbolic sizes for graphs that keep changing size (the `dynamic_after` setting).

The lazy device records graphs with concrete sizes, so a loop whose sequence grows
by one each step (a decoding loop) records a new graph per step, each compiled once.
With `LAZYMLIR_DYNAMIC_AFTER=K` (K >= 1; 0, the default, turns this off), graphs that
are equal except for their integers (sizes in shapes and arguments) are grouped:
once K of a group have compiled, the next new one is compared with the ones seen.
Each input size that changed becomes a symbol (sizes always equal share one), and
every other integer that changed must be `a*s + b` of one symbol across all of them
(integer a != 0 and b); then one graph with symbolic sizes is compiled
(lowering/front/symbolic.py) and used for every later graph of the group whose
integers are exactly what those expressions give for its sizes (checked on each new
graph: any other graph compiles as before). So a growing loop compiles at most K + 1
graphs per graph of its step, and counts `DynamicGraphs` (compiled) and
`DynamicMatches` (new sizes served by one).

A group is left to per-size compiles (counted as `DynamicSpecialized`) where an integer
fits no such expression (e.g. `s*s`), where bounds checks guard its ops (index ops:
lowering/front/checks.py needs static sizes; LAZYMLIR_BOUNDS_CHECKS=0 lifts this),
where it updates inputs in place, on the cuda target (static shapes only), or where
the symbolic graph fails to compile.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging

from ..lowering.front import checks

log = logging.getLogger("lazymlir.dynamic")


class Policy:
    """One session's groups: skeleton hash -> _Group."""

    def __init__(self):
        self.groups: dict[str, _Group] = {}

    def plan(self, current, target_name: str, graph: dict, compile_symbolic):
        """A plan for `graph` from its group's symbolic graph (compiling that when the
        group is due), or None: compile `graph` as it is.
        `compile_symbolic(document)` compiles a symbolic document into a plan (raises
        CompileError)."""
        after = current.settings.dynamic_after
        if not after or target_name != "cpu" or graph.get("symbols") or graph.get("in_place"):
            return None
        ints = _ints(graph)
        skeleton = _skeleton_hash(graph)
        group = self.groups.setdefault(skeleton, _Group())
        if group.template is not None:
            if group.template.matches(ints):
                current.metrics.inc("DynamicMatches")
                return group.plan
            return None
        if group.given_up:
            return None
        group.seen.setdefault(tuple(ints), graph)
        if len(group.seen) <= after:
            return None
        why = _refusal(current, graph)
        template = None if why else _Template.fit(list(group.seen.items()), graph)
        if template is None:
            return self._give_up(current, group, why or "its sizes fit no a*s + b")
        try:
            plan = compile_symbolic(template.document)
        except Exception as error:  # noqa: BLE001 - CompileError and the importer's
            return self._give_up(current, group, f"compiling it failed: {error}")
        current.metrics.inc("DynamicGraphs")
        current.metrics.inc("DynamicMatches")
        group.template, group.plan = template, plan
        group.seen.clear()
        return plan

    @staticmethod
    def _give_up(current, group, why: str):
        group.given_up = True
        group.seen.clear()
        current.metrics.inc("DynamicSpecialized")
        log.warning("lazymlir: a graph that changes size is compiled once per size: %s",
                    why.splitlines()[0])
        return None


class _Group:
    def __init__(self):
        self.seen: dict[tuple, dict] = {}  # integers -> a graph with them
        self.template: _Template | None = None
        self.plan = None
        self.given_up = False


def _refusal(current, graph: dict) -> str | None:
    if current.settings.bounds_checks and checks.has_guarded_ops(graph):
        return "it indexes tensors (bounds checks need static sizes)"
    return None


class _Template:
    """A symbolic document and the function giving a group member's integers from its
    symbols' values."""

    def __init__(self, document: dict, sources: list, expressions: list):
        self.document = document
        self._sources = sources  # integer position of each symbol (an input size)
        names = ", ".join(f"s{j}" for j in range(len(sources)))
        body = ", ".join(str(e) for e in expressions)
        self._integers = eval(f"lambda {names}: ({body},)",  # noqa: S307 - built here
                              {"__builtins__": {}})

    def matches(self, ints: list) -> bool:
        values = [ints[k] for k in self._sources]
        return min(values) >= 1 and self._integers(*values) == tuple(ints)

    @classmethod
    def fit(cls, seen: list, latest: dict) -> _Template | None:
        vectors = [v for v, _ in seen]
        positions = _input_positions(latest)
        columns = list(zip(*vectors))
        sources: list[int] = []
        symbol_of: dict[int, int] = {}
        for k in positions:
            if len(set(columns[k])) > 1:
                same = next((j for j, s in enumerate(sources) if columns[s] == columns[k]), None)
                if same is None:
                    same = len(sources)
                    sources.append(k)
                symbol_of[k] = same
        if not sources:
            return None
        expressions: list = []
        for k, column in enumerate(columns):
            if len(set(column)) == 1:
                expressions.append(column[0])
            elif k in symbol_of:
                expressions.append(f"s{symbol_of[k]}")
            else:
                fitted = _fit(column, [columns[s] for s in sources])
                if fitted is None:
                    return None
                expressions.append(fitted)
        # The hints (lowering/front/symbolic.py) of a member whose sizes are all >= 2:
        # a ShapeEnv specializes sizes 0 and 1.
        basis = next((g for v, g in seen if all(v[s] >= 2 for s in sources)), None)
        if basis is None:
            return None
        values = [basis_ints for basis_ints, g in seen if g is basis][0]
        counter = itertools.count()

        def replace(value, kind):
            expression = expressions[next(counter)]
            if isinstance(expression, int):
                return value
            return expression if kind == "shape" else {"sym": expression}

        document = _map_ints(basis, replace)
        document["symbols"] = {f"s{j}": list(_input_dim(basis, k))
                               for j, k in enumerate(sources)}
        document["hints"] = {f"s{j}": values[k] for j, k in enumerate(sources)}
        return cls(document, sources, expressions)


def _fit(column, symbol_columns) -> str | None:
    """`a*s + b` (integers, a != 0) giving `column` from one symbol's column."""
    for j, xs in enumerate(symbol_columns):
        x0, y0 = xs[0], column[0]
        other = next((i for i, x in enumerate(xs) if x != x0), None)
        if other is None or (column[other] - y0) % (xs[other] - x0):
            continue
        a = (column[other] - y0) // (xs[other] - x0)
        b = y0 - a * x0
        if a and all(a * x + b == y for x, y in zip(xs, column)):
            term = f"s{j}" if a == 1 else f"{a}*s{j}"
            return term if b == 0 else f"{term} + {b}" if b > 0 else f"{term} - {-b}"
    return None


def _map_ints(graph: dict, function) -> dict:
    """A copy of `graph` with each integer of its shapes and of its nodes' arguments
    replaced by `function(value, "shape" | "arg")`, visited in one fixed order."""

    def shape(values):
        return [function(d, "shape") if type(d) is int else d for d in values]

    def arg(value):
        if type(value) is int:
            return function(value, "arg")
        if isinstance(value, list):
            return [arg(v) for v in value]
        return value  # refs, floats, dtypes... and bools, None, strings

    result = dict(graph)
    result["inputs"] = [{**m, "shape": shape(m["shape"])} for m in graph["inputs"]]
    result["nodes"] = [{
        **node,
        "args": arg(node["args"]),
        "kwargs": {k: arg(node["kwargs"][k]) for k in sorted(node["kwargs"])},
        "outputs": [None if o is None else {**o, "shape": shape(o["shape"])}
                    for o in node["outputs"]],
    } for node in graph["nodes"]]
    return result


def _ints(graph: dict) -> list[int]:
    found: list[int] = []
    _map_ints(graph, lambda value, kind: found.append(value) or value)
    return found


def _skeleton_hash(graph: dict) -> str:
    skeleton = _map_ints(graph, lambda value, kind: None)
    text = json.dumps(skeleton, sort_keys=True, separators=(",", ":"), check_circular=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _input_positions(graph: dict) -> list[int]:
    """The integer positions of the input sizes (they come first)."""
    return list(range(sum(len(m["shape"]) for m in graph["inputs"])))


def _input_dim(graph: dict, position: int) -> tuple[int, int]:
    for index, meta in enumerate(graph["inputs"]):
        if position < len(meta["shape"]):
            return index, position
        position -= len(meta["shape"])
    raise IndexError(position)

