"""Parallel loops of compiled CPU graphs on PyTorch's OpenMP pool (targets/cpu_threads.py).

The library's C functions are exercised in child processes (native code: a bug must not
take the test session down): it defines every OpenMP entry point the generated code may
call, and its static schedule splits any iteration space into one contiguous block per
thread, covering every iteration once. Then through the device: a graph with a parallel
loop forks onto libgomp's team and matches eager, also with one thread.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import DEVICE, assert_no_fallback, target_name

from lazymlir import session
from lazymlir.lowering.cpu import codegen as cpu_codegen, parallel as cpu_parallel
from lazymlir.targets import cpu_threads

pytestmark = pytest.mark.skipif(target_name() != "cpu", reason="the cpu target's threads")


def _child(code: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args],
                          capture_output=True, text=True, timeout=120,
                          env=None if env is None else {**os.environ, **env})


def test_library_defines_every_entry_point_the_generated_code_calls(tmp_path):
    library = cpu_threads.build(tmp_path)
    done = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True,
                          text=True, check=True)
    defined = {line.split()[-1] for line in done.stdout.splitlines() if line.strip()}
    assert cpu_parallel.OPENMP_ENTRY_POINTS <= defined
    assert f"#define MAX_ARGS {cpu_parallel.MAX_FORK_ARGS}" in cpu_threads.SOURCE


# For each variant, team size and trip count: the [lower, upper] block each thread gets
# (thread ids and team size come from Python callbacks bound in place of libgomp's).
_SCHEDULE = """
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
state = {"tid": 0, "n": 1}
TID = ctypes.CFUNCTYPE(ctypes.c_int)(lambda: state["tid"])
NUM = ctypes.CFUNCTYPE(ctypes.c_int)(lambda: state["n"])
lib.lazymlir_threads_bind(None, None, ctypes.cast(TID, ctypes.c_void_p),
                          ctypes.cast(NUM, ctypes.c_void_p), None)
out = []
i32, u32, i64, u64 = ctypes.c_int32, ctypes.c_uint32, ctypes.c_int64, ctypes.c_uint64
for suffix, T, ST in (("4", i32, i32), ("4u", u32, i32), ("8", i64, i64), ("8u", u64, i64)):
    init = getattr(lib, "__kmpc_for_static_init_" + suffix)
    init.argtypes = [ctypes.c_void_p, i32, i32, ctypes.POINTER(i32),
                     ctypes.POINTER(T), ctypes.POINTER(T), ctypes.POINTER(ST), ST, ST]
    for n in (1, 2, 3, 5):
        for trips in (0, 1, 2, 3, 7, 12):
            for start in (0, 5):
                for tid in range(n):
                    state.update(tid=tid, n=n)
                    last, lo, hi, stride = ctypes.c_int32(9), T(start), T(start + trips - 1), ST(0)
                    init(None, tid, 34, ctypes.byref(last), ctypes.byref(lo), ctypes.byref(hi),
                         ctypes.byref(stride), 1, 0)
                    out.append([suffix, n, trips, start, tid, lo.value, hi.value, last.value])
print(json.dumps(out))
"""


def _wrap(value: int, suffix: str) -> int:
    """The generated code's view of a bound: its trip count is (upper - lower + 1) in the
    variant's width."""
    bits = 32 if suffix.startswith("4") else 64
    return value % (1 << bits)


def test_static_schedule_gives_each_thread_one_block_covering_every_iteration(tmp_path):
    done = _child(_SCHEDULE, str(cpu_threads.build(tmp_path)))
    assert done.returncode == 0, done.stderr
    blocks: dict[tuple, list] = {}
    for suffix, n, trips, start, tid, lo, hi, last in json.loads(done.stdout):
        blocks.setdefault((suffix, n, trips, start), []).append((tid, lo, hi, last))
    assert len(blocks) == 4 * 4 * 6 * 2
    for (suffix, n, trips, start), per_thread in blocks.items():
        covered = []
        lasts = 0
        for _tid, lo, hi, last in per_thread:
            count = _wrap(hi - lo + 1, suffix)  # what the generated loop runs
            covered += [start + i for i in range(lo - start, lo - start + count)] if count else []
            lasts += last
            if count:
                # balanced: block sizes differ by at most one
                assert trips // n <= count <= trips // n + 1
        assert sorted(covered) == list(range(start, start + trips)), (suffix, n, trips, start)
        assert lasts == (1 if trips else 0)


# The runtime's fork and static-schedule entries as the child scripts call them
# (`lib`: the runtime library, already loaded).
_KMPC_ENTRIES = """
i32 = ctypes.c_int32
TASK = ctypes.CFUNCTYPE(None, ctypes.POINTER(i32), ctypes.POINTER(i32))
init = lib.__kmpc_for_static_init_4
init.argtypes = [ctypes.c_void_p, i32, i32, ctypes.POINTER(i32), ctypes.POINTER(i32),
                 ctypes.POINTER(i32), ctypes.POINTER(i32), i32, i32]
fork = lib.__kmpc_fork_call
fork.argtypes = [ctypes.c_void_p, i32, TASK]
"""

# A fork from the main thread runs on PyTorch's team; a fork from inside an OpenMP region
# (each thread of an outer team, as a graph run from a PyTorch intra-op thread) runs on
# that thread alone: thread 0 of a team of one, every iteration, no new threads.
_NESTED = """
import ctypes, json, os, sys, threading
# PyTorch's libgomp, bound as targets/cpu_threads.py binds it (no torch import: fast)
gomp = ctypes.CDLL(sys.argv[2], mode=ctypes.RTLD_GLOBAL)
gomp.omp_set_num_threads(2)
lib = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
lib.lazymlir_threads_bind(*[ctypes.cast(getattr(gomp, name), ctypes.c_void_p) for name in (
    "GOMP_parallel", "GOMP_barrier", "omp_get_thread_num", "omp_get_num_threads",
    "omp_in_parallel")])
lib.lazymlir_threads_throttle(0, ctypes.c_uint64(0))  # a late fork starts no thread here
lib.lazymlir_threads_inline_forks.restype = ctypes.c_uint64
""" + _KMPC_ENTRIES + """lock, seen = threading.Lock(), []
def task(gtid, btid):
    last, lo, hi, stride = i32(0), i32(0), i32(9), i32(0)
    init(None, gtid[0], 34, ctypes.byref(last), ctypes.byref(lo), ctypes.byref(hi),
         ctypes.byref(stride), 1, 0)
    with lock:
        seen.append([gomp.omp_get_thread_num(), gtid[0], lib.__kmpc_global_thread_num(None),
                     lo.value, hi.value])
    lib.__kmpc_barrier(None, gtid[0])
task_c = TASK(task)
fork(None, 0, task_c)
top = sorted(seen)
seen.clear()
tasks_before = len(os.listdir("/proc/self/task"))
OUTER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda data: fork(None, 0, task_c))
gomp.GOMP_parallel(OUTER, None, 2, 0)
print(json.dumps({"top": top, "nested": sorted(seen), "inline": lib.lazymlir_threads_inline_forks(),
                  "new_threads": len(os.listdir("/proc/self/task")) - tasks_before}))
"""


def test_a_fork_inside_an_openmp_region_runs_on_the_calling_thread_alone():
    # OMP_NESTED=true: libgomp would start a nested team of two in each outer thread
    # (four threads at work on two cores); the library must not.
    library = session.runtime_library(cpu_threads.build)  # built once per machine
    gomp = cpu_threads.loaded_libgomp()
    if gomp is None:
        pytest.skip("this PyTorch does not run on GNU OpenMP")
    done = _child(_NESTED, str(library), gomp, env={"OMP_NESTED": "true"})
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    # top level: two threads, one block of the 10 iterations each
    assert [row[1:] for row in got["top"]] == [[0, 0, 0, 4], [1, 1, 5, 9]]
    # nested: each outer thread ran the region once, as thread 0 of 1, all 10 iterations
    assert [row[1:] for row in got["nested"]] == [[0, 0, 0, 9], [0, 0, 0, 9]]
    assert got["inline"] == 2 and got["new_threads"] == 0


# A stand-in for GOMP_parallel runs the team's two threads one after the other: the
# other thread first (on time), or `delay` seconds after the caller's share (a thread
# that waited for a core): the forks after a late
# one run alone (the stand-in is not called) and still cover every iteration; once the
# window is over, one fork tries the team again, and a team on time keeps it. The late
# fork also starts the throttle thread, whose one team has a thread more than this
# process may use cores, and which ends 300 ms after the late fork.
_LATE = """
import ctypes, json, os, sys, threading, time
lib = ctypes.CDLL(sys.argv[1])
state = {"tid": 0, "n": 2, "delay": 0.0, "teams": 0}
throttle_teams = []
TID = ctypes.CFUNCTYPE(ctypes.c_int)(lambda: state["tid"])
NUM = ctypes.CFUNCTYPE(ctypes.c_int)(lambda: state["n"])
REGION = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def parallel(fn, data, n, flags):
    if threading.current_thread() is not threading.main_thread():
        throttle_teams.append(n)  # the throttle thread's team
        return
    state["teams"] += 1
    region = REGION(fn)
    # on time: the other thread is done when the caller reaches the end
    order = (0, 1) if state["delay"] else (1, 0)
    for tid in order:
        state["tid"] = tid
        region(data)
        if tid == 0 and state["delay"]:
            time.sleep(state["delay"])
    state["tid"] = 0
PARALLEL = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint)(
    parallel)
lib.lazymlir_threads_bind(ctypes.cast(PARALLEL, ctypes.c_void_p), None,
                          ctypes.cast(TID, ctypes.c_void_p), ctypes.cast(NUM, ctypes.c_void_p),
                          None)
# late after 50 ms of waiting, alone for 300 ms then: far beyond a busy machine's hiccups
lib.lazymlir_threads_tune(ctypes.c_uint64(50_000_000), ctypes.c_uint64(300_000_000),
                          ctypes.c_uint64(10**9))
lib.lazymlir_threads_throttle(1, ctypes.c_uint64(300_000_000))
for name in ("forks", "late_forks", "alone_forks", "throttles"):
    getattr(lib, "lazymlir_threads_" + name).restype = ctypes.c_uint64
""" + _KMPC_ENTRIES + """done = []
def task(gtid, btid):
    last, lo, hi, stride = i32(0), i32(0), i32(9), i32(0)
    init(None, gtid[0], 34, ctypes.byref(last), ctypes.byref(lo), ctypes.byref(hi),
         ctypes.byref(stride), 1, 0)
    done.extend(range(lo.value, hi.value + 1))
    lib.__kmpc_barrier(None, gtid[0])
task_c = TASK(task)
out = []
def step(delay):
    state["delay"] = delay
    teams = state["teams"]
    done.clear()
    fork(None, 0, task_c)
    out.append([state["teams"] - teams, sorted(done) == list(range(10)),
                lib.lazymlir_threads_late_forks(), lib.lazymlir_threads_alone_forks(),
                lib.lazymlir_threads_throttles(), lib.lazymlir_threads_throttling()])
step(0.0)      # on time: the team
step(0.1)      # late: the team, then...
step(0.0)      # ...alone, within the window
time.sleep(0.35)
step(0.0)      # the window is over: the team again, on time
step(0.0)      # and it stays
print(json.dumps({"steps": out, "throttle_teams": throttle_teams,
                  "cores": len(os.sched_getaffinity(0))}))
"""


def test_forks_after_a_late_team_run_alone_until_the_window_ends():
    done = _child(_LATE, str(session.runtime_library(cpu_threads.build)))
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    # [teams started, every iteration ran once, late forks, forks run alone,
    #  throttle threads started, throttling now]
    assert got["steps"] == [[1, True, 0, 0, 0, 0], [1, True, 1, 0, 1, 1],
                            [0, True, 1, 1, 1, 1], [1, True, 1, 1, 1, 0], [1, True, 1, 1, 1, 0]]
    assert got["throttle_teams"] == [got["cores"] + 1]


def test_graph_with_parallel_loop_forks_onto_torch_threads_and_matches_eager():
    from lazymlir.targets import cpu

    torch.manual_seed(0)
    a, b = torch.randn(128, 512), torch.randn(512, 512)  # 2 blocks of 64 rows: threaded
    before = cpu.threads_stats()
    got = (a.to(DEVICE) @ b.to(DEVICE)).cpu()
    assert_no_fallback()
    stats = cpu.threads_stats()
    assert stats["runtime"] is not None and "libgomp" in stats["runtime"]
    assert stats["forks"] > (before["forks"] if before else 0)
    torch.testing.assert_close(got, a @ b, rtol=1e-4, atol=1e-4)
    threads = torch.get_num_threads()
    try:  # a team of one runs every block on the calling thread
        torch.set_num_threads(1)
        got = (a.to(DEVICE) @ b.to(DEVICE) * 2).cpu()
        assert_no_fallback()
        torch.testing.assert_close(got, a @ b * 2, rtol=1e-4, atol=1e-4)
    finally:
        torch.set_num_threads(threads)


def test_a_graph_calling_an_openmp_function_the_runtime_lacks_is_refused_when_built():
    ir = ("declare void @__kmpc_reduce_nowait(ptr, i32)\n"
          "declare i32 @__kmpc_global_thread_num(ptr)\n")
    with pytest.raises(RuntimeError, match="__kmpc_reduce_nowait"):
        cpu_codegen._check_openmp_calls(ir)
    many = "call void (ptr, i32, ptr, ...) @__kmpc_fork_call(ptr @1, i32 17, ptr @f, ptr %a)"
    with pytest.raises(RuntimeError, match="17 arguments"):
        cpu_codegen._check_openmp_calls(many)
    cpu_codegen._check_openmp_calls("declare void @__kmpc_barrier(ptr, i32)\n")


@pytest.mark.parametrize("shape", [(512, 256), (48, 80), (3, 4, 40, 24), (30, 50)])
def test_transposes_match_eager(shape):
    """The CPU schedule's transpose tiles (edges of 16 or 8; other sizes: loops)."""
    torch.manual_seed(0)
    w = torch.randn(shape)
    x = torch.randn(7, shape[-1])
    got = (x.to(DEVICE) @ w.to(DEVICE).transpose(-1, -2)).cpu()
    transposed = w.to(DEVICE).transpose(-1, -2).contiguous().cpu()
    assert_no_fallback()
    torch.testing.assert_close(transposed, w.transpose(-1, -2).contiguous(), rtol=0, atol=0)
    torch.testing.assert_close(got, x @ w.transpose(-1, -2), rtol=1e-4, atol=1e-4)


# Background runs read while they run (no fork late, nothing throttled): their parallel
# loops go to the reading thread's team ("delegate"), so the execution thread starts no
# libgomp pool: one new thread. Without delegation ("own") the execution thread forks on
# its own team, a pool, and exits at each run's end, its pool freed: no new thread, one
# start per run. The control ("keep": the thread never told that its pool should go)
# keeps the thread and its pool's worker: two.
_POOL = """
import ctypes, json, os, sys, time
os.environ.update(LAZYMLIR_TARGET="cpu", LAZYMLIR_ASYNC="1", LAZYMLIR_FALLBACK="error")
import torch
import lazymlir
from lazymlir.targets import cpu, cpu_threads
torch.set_num_threads(2)
torch.manual_seed(0)
a, w = torch.randn(128, 512), torch.randn(512, 512) / 24
def chain(x, w):
    for _ in range(24):  # ~3 GFLOP: the read waits for most of the run
        x = torch.tanh(x @ w)
    return x
expected = chain(a, w)  # eager: the user's thread's pool exists from here on
threads, background = cpu.threads_library(), cpu.background_library()
threads.lazymlir_threads_throttle(0, 0)  # no throttle thread (a late fork on a busy machine)
threads.lazymlir_threads_tune(10**15, 10**7, 10**9)  # no fork is late: every one on a team
mode = sys.argv[1]
threads.lazymlir_threads_delegate_forks(int(mode == "delegate"))
if mode == "keep":  # bound as the library binds it, but its pool never "should go"
    NEVER = ctypes.CFUNCTYPE(ctypes.c_int32)(lambda: 0)
    background.lazymlir_background_bind(
        ctypes.cast(ctypes.CDLL(cpu_threads.loaded_libgomp()).omp_set_num_threads,
                    ctypes.c_void_p),
        ctypes.cast(threads.lazymlir_threads_background, ctypes.c_void_p),
        ctypes.cast(threads.lazymlir_threads_waiting, ctypes.c_void_p),
        ctypes.cast(NEVER, ctypes.c_void_p))
al, wl = a.to("lazy_mlir"), w.to("lazy_mlir")
settings = lazymlir.config.settings()
settings.async_execution = False  # compile and first run on this thread
chain(al, wl).cpu()
settings.async_execution = True
tasks = len(os.listdir("/proc/self/task"))
starts = background.lazymlir_background_starts()
delegated = threads.lazymlir_threads_delegated_forks()
close = True
for _ in range(3):
    y = chain(al, wl)
    lazymlir.mark_step()
    close &= torch.allclose(y.cpu(), expected, rtol=1e-4, atol=1e-5)
lazymlir.wait()
time.sleep(0.3)  # an exiting thread frees its pool after its run's end is signalled
print(json.dumps({"new_threads": len(os.listdir("/proc/self/task")) - tasks,
                  "starts": background.lazymlir_background_starts() - starts,
                  "delegated": threads.lazymlir_threads_delegated_forks() > delegated,
                  "close": close}))
"""


@pytest.mark.parametrize("mode, expected", [
    ("delegate", {"new_threads": 1, "starts": 1, "delegated": True}),
    ("own", {"new_threads": 0, "starts": 3, "delegated": False}),
    ("keep", {"new_threads": 2, "starts": 1, "delegated": False})])
def test_no_openmp_pool_of_the_background_thread_outlives_its_run(mode, expected):
    if cpu_threads.loaded_libgomp() is None:
        pytest.skip("this PyTorch does not run on GNU OpenMP")
    done = _child(_POOL, mode)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {**expected, "close": True}
