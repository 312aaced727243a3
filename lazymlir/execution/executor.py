"""The graph executor: one owner for what happens to a graph at a sync point.

    execute(graph, inputs, scalars) -> outputs

hashes the graph, finds its plan in the graph cache (memory, then disk), or
makes one: compile the whole graph in the compile worker; if that fails and
eager fallback is allowed, probe the graph's ops one by one (verdicts are
cached per op signature, in memory and next to the disk cache) and split the
graph around the ops that do not lower (partition.py): compiled segments run
as their own (cached) graphs, the others run eagerly with PyTorch on CPU,
counted. A plan is cached under the graph's hash either way, so a training
step that needs a fallback is probed once, not every step.

A graph of more than LAZYMLIR_SEGMENT_NODES nodes is not compiled whole: it is cut
into contiguous segments (partition.cut_points), which compile at once in the
compile workers (one core each) and run in order as one plan; each segment is a
graph of its own for the caches, so a changed graph compiles only the segments
that changed, and one that does not lower is split around its ops as above.

Errors that reach the caller are lazymlir errors (CompileError,
CompilerCrashError) or the eager op's own error; the tracing layer marks the
graph's values failed with it.
"""

from __future__ import annotations

import logging
import os
import time
import traceback
import warnings
from pathlib import Path

import torch

from .. import lowering, session, targets
from ..lowering.front import checks, fx_graph
from ..support.errors import CompileError, CompilerCrashError
from . import (diagnostics, disk_cache, dynamic_policy, fallback, graph_cache, partition, runs,
               segment_chain)
from .compiled_plan import Compiled, EagerReference
from .compiler import CompileOptions, compile_graph, probe
from .worker_pool import WorkerPool

log = logging.getLogger("lazymlir.executor")


def execute(graph: dict, inputs: list, scalars: list[float], key: str | None = None) -> list:
    """Run `graph` on target buffers `inputs` and scalar values; returns output buffers.

    A graph's in-place update (fx_graph "in_place": input i gets output k) that the
    compiled code wrote into input i returns input i itself as output k; any other
    plan (a split graph, an instrumented one, the cuda target) returns a new buffer,
    which the caller copies into its input (lazymlir/dynamo.py).

    `key`: the graph's structural hash for the active target, if the caller
    keeps it (torch.compile graphs run many times unchanged).
    """
    return run(prepare(graph, key)[0], inputs, scalars)


def prepare(graph: dict, key: str | None = None) -> tuple:
    """(the plan that runs `graph`, its structural hash): from the graph cache, or
    made now (a compile, or the compile started ahead, loaded; its errors are raised
    here, on the caller's thread; a graph with symbolic sizes raises instead of
    being split)."""
    current = session.current()
    target = targets.active()
    key = key or fx_graph.structural_hash(graph, target.name)
    with current.lock:
        return _plan(current, target, graph, key), key


def prepare_keyed(key: str, build) -> object:
    """The plan of the graph `build()` returns, whose key (for the active target) the
    caller computed without building it (tracing/graph.py's graph_key): a cached plan
    is returned without calling `build`."""
    current = session.current()
    with current.lock:
        return _plan(current, targets.active(), build, key)


def run(plan, inputs: list, scalars: list[float]) -> list:
    """Run a plan of `prepare` on this thread."""
    current = session.current()
    # Not metrics.timed: the context manager cost 3.6 us of a torch.compile graph's
    # ~40 us of Python per call.
    began = time.perf_counter()
    try:
        return plan.run(targets.active(), inputs, scalars)
    finally:
        current.metrics.add_time("ExecuteTime", time.perf_counter() - began)


def in_background(plan) -> bool:
    """Whether `launch` may run this plan in the background: LAZYMLIR_ASYNC is on, the
    target's code runs on any thread, and the plan is compiled code only: one compiled
    graph, or a big graph's segments, each one compiled graph (a graph split around ops
    that do not lower runs eager ops and compiles segments: it runs on the caller's
    thread)."""
    return session.current().settings.async_execution and _compiled_only(plan) and \
        targets.active().runs_in_background


def _compiled_only(plan) -> bool:
    if type(plan) is Compiled:
        return True
    return type(plan) is partition.Partitioned and not plan.eager and \
        plan.plans is not None and all(type(p) is Compiled for p in plan.plans)


def launch(plan, run: runs.Run, inputs, scalars: list[float], done) -> None:
    """Run `plan` as `run` after every earlier launch (runs.py): on the target's native
    thread where it starts one (a compiled graph, or a big graph's segments as one chain:
    segment_chain.py), else on the session's execution thread; `inputs()` gives its
    input buffers, `done(outputs, error)` binds."""
    target = targets.active()
    metrics = session.current().metrics
    if type(plan) is Compiled and plan.starts_natively():
        starter = plan.start
    elif segment_chain.starts_natively(plan):  # a big graph's segments, as one chain
        def starter(target, buffers, scalars):
            return segment_chain.start(plan, target, buffers, scalars)
    else:
        starter = None
    if starter is not None:
        # The compiled calls run on the target's native thread, which never takes the
        # GIL: everything in Python around them happens on the user's thread (runs.py).
        def start():
            started = starter(target, inputs(), scalars)
            # A read of one output need not wait for the whole graph (a step's loss
            # for its backward and optimizer update): materialize.py asks this first.
            run.early_output = getattr(started, "early_output", None)

            def finish() -> list:
                outputs = started.result()
                metrics.add_time("ExecuteTime", started.seconds())
                return outputs
            return finish
        runs.runner(session.current()).launch_started(run, start, done)
        return

    def job() -> list:
        buffers = inputs()
        began = time.perf_counter()
        try:
            return plan.run(target, buffers, scalars)
        finally:
            metrics.add_time("ExecuteTime", time.perf_counter() - began)
    runs.runner(session.current()).launch(run, job, done)


def drain() -> None:
    """Wait until every launched graph has run (their errors are not raised here)."""
    runner = session.current().runs
    if runner is not None:
        runner.drain()


def _cache(current) -> graph_cache.GraphCache:
    if current.graph_cache is None:
        current.graph_cache = graph_cache.GraphCache(current.settings.graph_cache_size)
    return current.graph_cache


def _disk(current) -> disk_cache.DiskCache | None:
    """The session's disk cache (None: off, or its folder cannot be written: warned once);
    reopened when `settings().cache_dir` changes."""
    base = current.settings.cache_dir
    if current.disk_cache is None or current.disk_cache[0] != base:
        cache = disk_cache.DiskCache.open(base, current.settings.cache_max_mb << 20) \
            if base else None
        current.disk_cache = (base, cache)
    return current.disk_cache[1]


def _dumping(current) -> bool:
    return bool(current.dump_dirs or current.settings.dump_dir)


def _plan_key(current, key: str) -> str:
    if not current.settings.bounds_checks:
        key += "-unchecked"  # another plan: the graph compiled without checks.py
    return key


# Where the graph cache keeps plans (a plan's shape follows LAZYMLIR_SEGMENT_NODES, which
# may change at run time: `lazymlir.config.settings().segment_nodes`):
# - a plan of the graph whole (compiled, split around ops that do not lower, a symbolic
#   graph's) under the graph's key: it is the plan for every limit that does not cut the
#   graph, so a change of limit compiles no graph it does not concern again;
# - a big graph's segments under the key and the limit that cut them (`_segments_key`):
#   each limit has its own cuts, and a segment (cached under its own key, whole) never
#   finds a graph's split plan there.
# A plan found under the graph's key whose graph the limit now cuts is not used.

def _segments_key(key: str, limit: int) -> str:
    return f"{key}-segments{limit}"


def _whole(current, graph: dict) -> bool:
    """Whether `graph` is compiled whole under the current LAZYMLIR_SEGMENT_NODES (the
    rule `_split` applies; a graph with symbolic sizes is never cut)."""
    limit = current.settings.segment_nodes
    return not limit or len(graph["nodes"]) <= limit or bool(graph.get("symbols"))


def _memory_key(current, key: str, graph: dict) -> str:
    """The graph cache's key of `graph`'s plan (see above)."""
    return key if _whole(current, graph) else \
        _segments_key(key, current.settings.segment_nodes)


def _cached_plan(current, key: str) -> tuple:
    """(the session's graph cache, the plan it holds for the graph of `key` under the
    current LAZYMLIR_SEGMENT_NODES, or None); a hit counts as a CachedCompile."""
    cache = _cache(current)
    plan = _lookup(current, cache, key)
    if plan is not None:
        current.metrics.inc("CachedCompile")
    return cache, plan


def _lookup(current, cache, key: str):
    plan = cache.get(key)
    limit = current.settings.segment_nodes
    # (`_whole` inlined: this is every sync point's and torch.compile call's lookup)
    if limit and (plan is None or len(plan.graph["nodes"]) > limit
                  and not plan.graph.get("symbols")):
        plan = cache.get(_segments_key(key, limit))  # none, or made under another limit
    return plan


def cached_plan(key: str):
    """The plan `prepare_keyed(key, ...)` would take from the graph cache now, or None
    (counts nothing)."""
    current = session.current()
    with current.lock:
        return _lookup(current, _cache(current), _plan_key(current, key))


def writes_inputs(plan) -> bool:
    """Whether `plan`'s code writes graph inputs in place (fx_graph "in_place"): a graph
    compiled whole that kept its pairs (checks.py drops them from a graph with check
    flags; a split graph's or a big graph's segments have none)."""
    return type(plan) is Compiled and bool(plan.executable.in_place)


def _plan(current, target, graph, key: str):
    """`graph`: the document, or a function that builds it (called on a cache miss)."""
    key = _plan_key(current, key)
    cache, plan = _cached_plan(current, key)
    if plan is not None:
        return plan
    if callable(graph):
        graph = graph()
    plan = _dynamic_plan(current, target, graph)
    if plan is not None:  # this graph's sizes, served by a graph with symbolic sizes
        cache.put(_memory_key(current, key, graph), plan)
        return plan
    compiles = current.metrics.counter("UncachedCompile")
    # A miss may fork a compile worker: not while a background run is in its code.
    drain()
    plan = _make_plan(current, target, graph, key)
    note = None
    if isinstance(plan, partition.Partitioned) and plan.eager:  # segments logged as they compile
        note = (f"does not lower as a whole: split around "
                f"{sorted({partition.op_name(graph['nodes'][i]) for i in plan.eager})}")
    elif isinstance(plan, partition.Partitioned):
        note = f"compiled as {len(plan.plans)} segments (LAZYMLIR_SEGMENT_NODES)"
    diagnostics.on_compile(current, graph, key, target.name, _sync_location,
                           from_disk=current.metrics.counter("UncachedCompile") == compiles,
                           note=note)
    cache.put(_memory_key(current, key, graph), plan)
    return plan


def _dynamic_plan(current, target, graph: dict):
    """The plan of the symbolic graph serving `graph`'s group (dynamic_policy.py), or None."""
    if not current.settings.dynamic_after:
        return None
    if current.dynamic_policy is None:
        current.dynamic_policy = dynamic_policy.Policy()

    def compile_symbolic(document: dict):
        key = _plan_key(current, fx_graph.structural_hash(document, target.name))
        return _make_plan(current, target, document, key)

    return current.dynamic_policy.plan(current, target.name, graph, compile_symbolic)


def _instrumented(current, graph: dict):
    """checks.py's form of `graph` (None: bounds checks are off or it needs none; a graph
    with symbolic sizes is taken only without guarded ops, lazymlir/dynamo_dynamic.py)."""
    if not current.settings.bounds_checks or graph.get("symbols"):
        return None
    return checks.instrument(graph)


def _cached_artifact(current, target, key: str, text: str):
    """(disk cache entry, its artifact folder or None); (None, None) without a disk cache."""
    disk = _disk(current)
    if disk is None:
        return None, None
    entry = disk.entry(key, target.fingerprint())
    # Dumps are of compiles: while dumping, every graph compiles (and is stored) even if
    # the disk cache holds it, or a warm cache would leave the dump folder empty.
    if _dumping(current):
        return entry, None
    return entry, disk.load(entry, text, target.is_complete)


def compile_ahead(graph: dict, key: str, background: bool = False) -> None:
    """Start compiling `graph` now, in a compile worker, without waiting: its first
    `execute` takes the artifact (or the compile error) from there.

    For graphs known before they run: torch.compile hands over a step's forward and
    backward graphs together, and they compile at once in two workers while Dynamo
    finishes its own work. Does nothing where `execute` would not compile: a plan in
    memory or in the disk cache, in-process compiles (LAZYMLIR_COMPILE_WORKER=0),
    a graph that raises before compiling (checks.py's static errors).

    `background`: the program goes on without waiting for this compile (it runs the
    graph eagerly meanwhile), so the compile takes the background workers, which
    run at low CPU priority (_worker).
    """
    _compile_ahead(graph, key, background)


def _compile_ahead(graph: dict, key: str, background: bool, whole: bool = False) -> None:
    """compile_ahead; `whole`: a segment, never split again (it may be a little over
    LAZYMLIR_SEGMENT_NODES: partition.cut_points)."""
    current = session.current()
    if not current.settings.compile_worker:
        return
    target = targets.active()
    with current.lock:
        key = _plan_key(current, key)
        # (a segment is whole: its plan and its compile are under its own key)
        ahead_key = key if whole else _memory_key(current, key, graph)
        if ahead_key in current.compiles_ahead or ahead_key in _cache(current):
            return
        split = None if ahead_key == key else _split(current, graph)
        if split is not None:
            # The segments' compiles start now; the graph's own entry, under the key of
            # its plan (this limit's cuts), is the split (made once) and a future done
            # when they all are (compile_pending).
            futures = []
            for sub, sub_key in zip(split.segments(), split.keys):
                _compile_ahead(sub, sub_key, background, whole=True)
                ahead = current.compiles_ahead.get(_plan_key(current, sub_key))
                if ahead is not None:
                    futures.append(ahead[1])
            current.compiles_ahead[ahead_key] = (split, _worker(current, background).submit(
                _all_done, futures))
            return
        checked = _instrumented(current, graph)
        if checked is not None and checked.static_error:
            return
        text = fx_graph.dumps(checked.graph if checked is not None else graph)
        entry, artifact = _cached_artifact(current, target, key, text)
        if artifact is not None:
            return
        payload = _compile_payload(current, target, text, key)
        pool = _worker(current, background)
        current.compiles_ahead[key] = (payload, pool.submit(
            _compile_and_store, pool, payload, _disk(current), entry, text))


def _all_done(futures: list) -> None:
    for future in futures:
        future.exception()  # waits; each segment's outcome stays in its own future


def compile_pending(key: str) -> bool:
    """Whether the compile of `key` started ahead (compile_ahead) is still running."""
    current = session.current()
    key = _plan_key(current, key)
    ahead = current.compiles_ahead.get(key)
    if ahead is None and current.settings.segment_nodes:  # a big graph's segments
        ahead = current.compiles_ahead.get(_segments_key(key, current.settings.segment_nodes))
    return ahead is not None and not ahead[1].done()


def wait_for_compiles() -> None:
    """Block until every compile started ahead has ended. A failed one is not raised
    here: its graph's next run reports it (or falls back), as without waiting."""
    current = session.current()
    with current.lock:
        futures = [future for _, future in current.compiles_ahead.values()]
    for future in futures:
        future.exception()  # waits; the outcome stays in the future


def _compile_and_store(pool, payload: dict, disk, entry, text: str) -> dict:
    """A compile started ahead, stored in the disk cache as soon as it is done: a graph
    that never runs in this process (a backward at exit) is not compiled again by the next."""
    result = pool.request("compile", payload)
    if disk is not None:
        disk.save(entry, Path(payload["out_dir"]), text)
    return result


def _split(current, graph: dict) -> partition.Partitioned | None:
    """A graph of more than LAZYMLIR_SEGMENT_NODES nodes, cut into segments (their
    structural hashes in `.keys`); None for a smaller one, or one with symbolic sizes
    (its sizes are read from its inputs by position: lowering/front/symbolic.py)."""
    if _whole(current, graph):
        return None
    cuts = partition.cut_points(graph, current.settings.segment_nodes)
    if not cuts:
        return None
    split = partition.Partitioned(graph, {}, execute, cuts)
    target = targets.active().name
    split.keys = [fx_graph.structural_hash(sub, target) for sub in split.segments()]
    return split


def _segmented(current, target, graph: dict, key: str) -> partition.Partitioned | None:
    """The plan of a big graph (`_split`): its segments compile at once in the compile
    workers (compile_ahead: as many at a time as LAZYMLIR_COMPILE_WORKERS), then each
    segment's plan is taken in order (a compile error of one is raised, or that segment
    falls back, as for any graph)."""
    if _whole(current, graph):
        return None
    ahead = current.compiles_ahead.pop(
        _segments_key(key, current.settings.segment_nodes), None)
    if ahead is not None:  # split by compile_ahead, under this limit
        split = ahead[0]
    elif key in current.compiles_ahead:
        # Compiled ahead whole, under a limit that did not cut the graph: that compile,
        # under way or done, is taken rather than wasted.
        return None
    else:
        split = _split(current, graph)
    if split is None:
        return None
    segments = split.segments()
    for sub, sub_key in zip(segments, split.keys):
        _compile_ahead(sub, sub_key, background=False, whole=True)
    split.bind([_segment_plan(current, target, sub, sub_key)
                for sub, sub_key in zip(segments, split.keys)])
    return split


def _segment_plan(current, target, graph: dict, key: str):
    """A segment's plan, from the graph cache or made now (not a compile of its own for
    diagnostics.py: the big graph's compile is). A segment is compiled whole whatever
    its size: its plan is the one under its own key, never a split plan."""
    key = _plan_key(current, key)
    cache = _cache(current)
    plan = cache.get(key)
    if plan is not None:
        current.metrics.inc("CachedCompile")
        return plan
    plan = _make_plan(current, target, graph, key, whole=True)
    cache.put(key, plan)
    return plan


def _make_plan(current, target, graph: dict, key: str, whole: bool = False):
    """`whole`: a segment of a big graph, not split again (`_split`)."""
    segmented = None if whole else _segmented(current, target, graph, key)
    if segmented is not None:
        return segmented
    original = graph
    checked = _instrumented(current, graph)
    if checked is not None:
        if checked.static_error:  # e.g. `int_tensor % 0`: eager raises its error
            return EagerReference(graph)
        graph = checked.graph
    flags = checked.checks if checked is not None else 0
    text = fx_graph.dumps(graph)
    # A compile started ahead stores its artifact when it ends: found on disk, it is
    # still this process's compile (and its future must be taken, below).
    entry, artifact = (None, None) if key in current.compiles_ahead else \
        _cached_artifact(current, target, key, text)
    disk = _disk(current)
    if artifact is not None:
        try:
            plan = Compiled(_load(target, artifact, graph), original, flags)
            current.metrics.inc("CachedCompile")
            current.metrics.inc("DiskCacheHit")
            return plan
        except (OSError, ValueError) as error:
            log.warning("ignoring unreadable cache entry %s: %s", artifact, error)
    current.metrics.inc("UncachedCompile")
    try:
        with current.metrics.timed("CompileTime"):
            artifact, stored = _compile(current, target, text, key)
    except CompileError as error:
        # A graph with symbolic sizes is not split: its caller compiles it per shape
        # instead (lazymlir/dynamo.py).
        if not fallback.allowed() or graph.get("symbols"):
            raise
        return _partition(current, target, original, error)
    if disk is not None and not stored:
        disk.save(entry, artifact, text)
    return Compiled(_load(target, artifact, graph), original, flags)


def _load(target, artifact, graph: dict):
    """The executable compiled from `graph` (the instrumented one, if checked)."""
    metas, pairs = fx_graph.output_metas(graph), fx_graph.in_place_pairs(graph)
    if graph.get("symbols"):  # sizes known at run time (lowering/front/symbolic.py)
        return target.load(artifact, metas, pairs, symbols=graph["symbols"])
    return target.load(artifact, metas, pairs)


# ------------------------------------------------------------- compiling

def _options(current, target, key: str | None) -> CompileOptions:
    settings = current.settings
    root = current.dump_dirs[-1] if current.dump_dirs else settings.dump_dir
    disk = _disk(current)
    return CompileOptions(
        target=target.name, chip=settings.cuda_chip, repro_dir=settings.repro_dir,
        dump_dir=str(Path(root) / key) if root and key else None,
        sync_location=_sync_location() if root else "<unknown>",
        kernel_images=target.kernel_images,
        # (the cpu target's loop nests: a graph compiles only those no graph before it did)
        object_cache=str(disk.objects(target.fingerprint()))
        if disk is not None and target.name == "cpu" else None)


# The nice value added to background compile workers (the most: 19). They then
# compile on the cores the program leaves idle: on 2 cores, a GPT step's first call
# with eager_while_compiling takes 8.8 s with them, 16.9 s with workers as busy as
# Dynamo's own tracing of the optimizer step (docs/cpu-performance.md). A program
# never waiting would starve them: dynamo.py's graphs wait from their second run.
BACKGROUND_NICENESS = 19


def _worker(current, background: bool = False) -> WorkerPool:
    """The session's compile workers: those the program waits for, or (`background`)
    those of compiles it does not wait for, at low CPU priority. Separate pools,
    since a process's priority can be lowered but not raised back."""
    pool = current.background_worker if background else current.worker
    if pool is None:
        settings = current.settings
        pool = WorkerPool(current.metrics, settings.compile_timeout, settings.compile_workers,
                          fork=settings.compile_worker_fork,
                          niceness=BACKGROUND_NICENESS if background else 0)
        if background:
            current.background_worker = pool
        else:
            current.worker = pool
    return pool


def prestart_worker(workers: int = 1, background: bool = False) -> None:
    """Start compile workers ahead of the first compile (called when the device is
    first used, or when Dynamo hands over a graph: they import the compiler while the
    user or AOTAutograd traces), unless compiles are in-process or the disk cache
    holds entries of this compiler version: a warm cache likely serves every graph,
    and a process that compiles nothing should not pay for a worker (it starts at the
    first miss instead). `workers`: how many will be busy at once (2 for a training
    graph, whose forward and backward compile together; `background`: the workers of
    compiles the program will not wait for, compile_ahead's)."""
    current = session.current()
    if not current.settings.compile_worker:
        return
    pool = current.background_worker if background else current.worker
    if pool is not None and (workers <= 1 or pool.started >= workers):
        return
    disk = _disk(current)
    if disk is None or not disk.has_entries():
        _worker(current, background).start(workers)


def _worker_request(current, kind: str, payload: dict):
    if not current.settings.compile_worker:
        function = compile_graph if kind == "compile" else probe
        return function(**payload)
    return _worker(current).request(kind, payload)


def _compile_payload(current, target, text: str, key: str) -> dict:
    return {"fx_text": text, "key": key, "options": _options(current, target, key),
            "out_dir": str(Path(current.scratch_dir()) / key)}


def _compile(current, target, text: str, key: str) -> tuple[Path, bool]:
    """The artifact folder of `text`, and whether the disk cache has it already:
    compiled now, or by the compile started ahead (compile_ahead: stored)."""
    ahead = current.compiles_ahead.pop(key, None)
    if ahead is not None:
        payload, future = ahead
        result = future.result()  # a compile error or crash is raised here, as below
    else:
        payload = _compile_payload(current, target, text, key)
        try:
            result = _worker_request(current, "compile", payload)
        except CompilerCrashError as crash:
            # A worker killed from outside (the kernel's OOM killer on a loaded machine,
            # a broken pipe) looks like a compiler crash. Once in a fresh worker, before
            # the graph is split and its ops probed: a real crash repeats, a transient
            # one must not make a whole step run in pieces with eager fallbacks.
            if crash.timed_out or not current.settings.compile_worker:
                raise
            log.warning("compile of graph %s crashed; retrying once in a fresh worker: %s",
                        key, str(crash).splitlines()[0])
            current.metrics.inc("CompileRetry")
            result = _worker_request(current, "compile", payload)
    for message in result["warnings"]:
        warnings.warn(f"lazymlir: {message}", stacklevel=6)
    timings = result["timings"]
    log.debug("compiled graph %s for %s in %.1f ms (%s)", key, target.name,
              1e3 * timings["total"],
              ", ".join(f"{k} {1e3 * v:.0f}" for k, v in timings.items() if k != "total"))
    return Path(payload["out_dir"]), ahead is not None


def _verdict(current, target, graph: dict) -> str | None:
    """Why this (one-op) graph does not lower for `target`, or None; cached in memory and
    in the disk cache (not a compiler crash: that may be transient), since the answer
    depends only on the op signature and the compiler version."""
    key = fx_graph.structural_hash(graph, target.name)
    if (target.name, key) in current.verdicts:
        return current.verdicts[(target.name, key)]
    disk = _disk(current)
    found, verdict = disk.verdict(key) if disk is not None else (False, None)
    if not found:
        lasting = True
        try:
            verdict = _worker_request(current, "probe", {
                "fx_text": fx_graph.dumps(graph), "options": _options(current, target, None)})
        except CompileError as crash:  # the compiler crashed on this op: it does not lower
            verdict = str(crash)
            # ...in this process: a crash may be a timeout or a kill under memory
            # pressure, which must not make the op fall back in every later process.
            lasting = False
        if disk is not None and lasting:
            disk.store_verdict(key, verdict)
    current.verdicts[(target.name, key)] = verdict
    return verdict


def _partition(current, target, graph: dict, error: CompileError) -> partition.Partitioned:
    """The plan of a graph that does not lower as a whole (partition.py)."""
    reasons = partition.unlowerable_ops(graph, error,
                                        lambda one_op: _verdict(current, target, one_op))
    log.info("graph falls back for ops %s",
             sorted({partition.op_name(graph["nodes"][i]) for i in reasons}))
    return partition.Partitioned(graph, reasons, execute)


# ------------------------------------------------------------- dumps

class dump_to:
    """Context manager: dump every graph compiled inside it to `directory`."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = str(directory)

    def __enter__(self):
        session.current().dump_dirs.append(self.directory)
        return Path(self.directory)

    def __exit__(self, *exc):
        session.current().dump_dirs.pop()
        return False


def _sync_location() -> str:
    """The user's frame that triggered this compile (outside lazymlir and torch)."""
    package = str(Path(__file__).resolve().parent.parent)
    # The lowering package as a whole: its modules sit in subpackages.
    lowering_root = str(Path(lowering.__file__).resolve().parent)
    torch_root = str(Path(torch.__file__).resolve().parent)
    for frame in reversed(traceback.extract_stack()):
        path = str(Path(frame.filename).resolve())
        if not path.startswith((package, lowering_root, torch_root)):
            return f"{frame.filename}:{frame.lineno} in {frame.name}"
    return "<unknown>"
