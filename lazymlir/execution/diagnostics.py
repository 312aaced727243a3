"""Why did it compile? Recompile and fallback diagnostics.

With `LAZYMLIR_DEBUG=1` or `lazymlir.debug()`, every compile logs (logger
`lazymlir.debug`, to stderr) its cause, the graph hash, node/input/scalar/
output counts and the user's line that caused the sync:

    lazymlir: compile #2: graph 5d1c0b6e2f3a4b9c (cpu): 4 nodes, 1 inputs, 0 scalars,
      1 outputs; cause: input 0 shape [4, 3] -> [8, 3] (dim 0: 4 -> 8) (vs graph 0a1b...);
      sync at train.py:12 in step

The cause compares the new graph with the nearest graph compiled before: the
last one with the same op sequence (a changed input shape/dtype, a changed
constant argument such as an integer scalar), else "new graph". Every
fallback op is logged once with its reason. Independently of the debug
setting, a warning is logged when compiles keep happening across steps
("N compiles in the last M mark_steps"): a graph that should be steady is not.

Nothing here runs on a cache hit; with debug off a compile costs one counter
read.
"""

from __future__ import annotations

import logging
import sys
from collections import OrderedDict, deque

log = logging.getLogger("lazymlir.debug")

WINDOW = 10          # mark_steps looked back over
STEADY_AFTER = 5     # compiles in this many of the last WINDOW steps -> a warning
_HISTORY_LIMIT = 256  # op sequences remembered for the "nearest graph"


class Diagnostics:
    """Per session: the graphs compiled so far (one per op sequence) and when."""

    def __init__(self):
        self.compiles = 0
        self.by_ops: OrderedDict[tuple, tuple[str, dict]] = OrderedDict()
        self.steps_with_compiles: deque[int] = deque(maxlen=WINDOW)
        self.compiles_per_step: dict[int, int] = {}
        self.last_warning_step = -WINDOW
        self.fallbacks_logged: set[tuple[str, str]] = set()


def enable(on: bool = True) -> None:
    """Route `lazymlir.debug` messages to stderr (once) and set their level."""
    log.setLevel(logging.INFO if on else logging.WARNING)
    if on and not any(getattr(h, "_lazymlir", False) for h in log.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler._lazymlir = True
        log.addHandler(handler)
        log.propagate = False


def _state(current) -> Diagnostics:
    if current.diagnostics is None:
        current.diagnostics = Diagnostics()
    return current.diagnostics


def _ops(graph: dict) -> tuple:
    return (len(graph["inputs"]), len(graph.get("scalars", [])),
            tuple(node["op"] for node in graph["nodes"]))


def _without_refs(value):
    if isinstance(value, dict) and "ref" in value:
        return "<tensor>"
    if isinstance(value, list):
        return [_without_refs(v) for v in value]
    return value


def _changed_dims(old: list, new: list) -> str:
    """Which dimensions changed ("dim 0: 4 -> 8"), or the change of rank: a sequence
    length or batch size that keeps changing shows here as one dim."""
    if len(old) != len(new):
        return f"rank {len(old)} -> {len(new)}"
    return ", ".join(f"dim {d}: {a} -> {b}" for d, (a, b) in enumerate(zip(old, new))
                     if a != b)


def cause(previous: dict | None, previous_key: str | None, graph: dict) -> str:
    """What differs between `graph` and `previous` (same op sequence), briefly."""
    if previous is None:
        return "new graph (no graph with these ops was compiled before)"
    changes = []
    for i, (old, new) in enumerate(zip(previous["inputs"], graph["inputs"])):
        if old["shape"] != new["shape"]:
            changes.append(f"input {i} shape {old['shape']} -> {new['shape']} "
                           f"({_changed_dims(old['shape'], new['shape'])})")
        if old["dtype"] != new["dtype"]:
            changes.append(f"input {i} dtype {old['dtype']} -> {new['dtype']}")
    for i, (old, new) in enumerate(zip(previous["nodes"], graph["nodes"])):
        for position, (a, b) in enumerate(zip(old["args"], new["args"])):
            a, b = _without_refs(a), _without_refs(b)
            if a != b:
                changes.append(f"node {i} ({new['op']}) argument {position}: {a} -> {b}")
        for name in set(old["kwargs"]) | set(new["kwargs"]):
            a = _without_refs(old["kwargs"].get(name))
            b = _without_refs(new["kwargs"].get(name))
            if a != b:
                changes.append(f"node {i} ({new['op']}) {name}={a} -> {b}")
    if not changes:
        changes.append("same ops and inputs; output shapes or settings differ")
    shown = "; ".join(changes[:4]) + (f"; and {len(changes) - 4} more" if len(changes) > 4
                                     else "")
    return f"{shown} (vs graph {previous_key})"


def on_compile(current, graph: dict, key: str, target_name: str, sync_location,
               from_disk: bool = False, note: str | None = None) -> None:
    """Record a compile (a memory-cache miss; `from_disk`: served by the disk cache); log
    it in debug mode, warn when steady state keeps compiling. `sync_location()` names the
    user's line (walked only if logged)."""
    state = _state(current)
    state.compiles += 1
    step = current.metrics.counter("MarkStep")
    state.compiles_per_step[step] = state.compiles_per_step.get(step, 0) + 1
    if not state.steps_with_compiles or state.steps_with_compiles[-1] != step:
        state.steps_with_compiles.append(step)
    signature = _ops(graph)
    if current.settings.debug:
        previous_key, previous = state.by_ops.get(signature, (None, None))
        outputs = len(graph["outputs"])
        log.info("lazymlir: %s #%d: graph %s (%s): %d nodes, %d inputs, %d scalars, "
                 "%d outputs; cause: %s;%s sync at %s",
                 "disk cache load" if from_disk else "compile", state.compiles, key, target_name,
                 len(graph["nodes"]), len(graph["inputs"]), len(graph.get("scalars", [])),
                 outputs, cause(previous, previous_key, graph), f" {note};" if note else "",
                 sync_location())
    state.by_ops[signature] = (key, graph)
    state.by_ops.move_to_end(signature)
    while len(state.by_ops) > _HISTORY_LIMIT:
        state.by_ops.popitem(last=False)
    _warn_if_unsteady(state, step)


def _warn_if_unsteady(state: Diagnostics, step: int) -> None:
    recent = [s for s in state.steps_with_compiles if s > step - WINDOW]
    if len(recent) < STEADY_AFTER or step - state.last_warning_step < WINDOW:
        return
    state.last_warning_step = step
    count = sum(state.compiles_per_step.get(s, 0) for s in recent)
    for s in [s for s in state.compiles_per_step if s <= step - WINDOW]:
        del state.compiles_per_step[s]
    log.warning("lazymlir: %d compiles in the last %d mark_steps (in %d different steps): "
                "graphs keep changing. Set LAZYMLIR_DEBUG=1 (or call lazymlir.debug()) to "
                "see what changes in each", count, WINDOW, len(recent))


def _first_lines(reason: str | None) -> str:
    """A compile error's headline and its first MLIR `error:` line (the cause)."""
    if not reason:
        return "no reason given"
    lines = reason.splitlines()
    detail = next((line.strip() for line in lines[1:] if "error:" in line), None)
    text = lines[0] + (f" {detail}" if detail else "")
    return text if len(text) <= 300 else text[:297] + "..."


def on_fallback(current, name: str, reason: str | None) -> None:
    """Log an eager fallback with its reason, once per (op, reason), in debug mode."""
    if not current.settings.debug:
        return
    why = _first_lines(reason)
    state = _state(current)
    if (name, why) in state.fallbacks_logged:
        return
    state.fallbacks_logged.add((name, why))
    log.info("lazymlir: fallback: %s runs eagerly on CPU: %s", name, why)
