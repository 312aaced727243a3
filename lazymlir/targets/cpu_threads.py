"""Threads for compiled CPU graphs: their parallel loops run on PyTorch's own OpenMP pool.

Why one pool: PyTorch's CPU kernels run on GNU OpenMP (libgomp, shipped in the
torch wheel), whose idle workers spin for a while after each parallel region.
A second pool for compiled loops (MLIR's async runtime) would take the cores
from PyTorch's on a machine with as many cores as threads: with two pools, a
torch.compile(backend="lazymlir") GPT step spends 31% of its perf samples in
libgomp's spin loop, and takes 127 ms against 68 ms with GOMP_SPINCOUNT=0
(docs/cpu-performance.md). On one pool, a compiled loop
wakes the very threads an eager op just used, while they still spin: a dispatch
costs microseconds, so smaller loops pay for threads too.

How: lowering/cpu/parallel.py lowers parallel loops with upstream MLIR's OpenMP
path (`convert-scf-to-openmp`, then LLVM's OpenMPIRBuilder), which emits calls to
the `__kmpc_*` entry points of LLVM's libomp. No pip package here ships libomp,
and libgomp has no `__kmpc_*` ABI, so this library implements the few entry
points that code uses (cpu_parallel.OPENMP_ENTRY_POINTS) on top of libgomp's
`GOMP_parallel` and `GOMP_barrier`: a fork runs the outlined region on the team
of the calling thread (its size is PyTorch's `torch.get_num_threads()`, which
sets the OpenMP thread count), a static loop schedule splits the iterations into
one balanced contiguous block per thread.

Which libgomp: the one already loaded into the process (found in
/proc/self/maps), whose functions are handed to the library by address, so the
graphs share PyTorch's pool even where the system has another libgomp. Without
one (a PyTorch built without OpenMP), `available()` is false and the same code
runs on the calling thread alone: the fork calls the region once, with a team of
one that takes every iteration.

Late teams: on a machine with more runnable threads than cores (other processes
at work), a thread of the team may wait a scheduler time slice for a core, and
the calling thread waits for it at the region's end: milliseconds for a loop of
microseconds (an MLP step's compiled code measured 66 ms against 1 ms alone at
load 7.7 on two cores). A fork whose calling thread waited at the end longer than
its own share of the loop took is late; the forks of the next 10 ms (doubling
while the team stays late, up to 1 s) run on the calling thread alone, then one
fork tries the team again. Same iterations, same code: the same results.

Background runs: a graph the background thread runs while the user's thread is at work
(tracing the next step: targets/cpu_background.py) leaves that thread a core: its
forks take one thread fewer than the team (on two threads: the background thread
alone). Without it, an MLP step's tracing on two cores spent ~1-1.6 ms of its ~2.2 ms
waiting for a core while the team ran the previous step. Once a thread waits for the
run (`lazymlir_threads_waiting`), forks take a whole team again: the waiting thread's
own (the background thread hands each fork over and sleeps while the waiter runs it:
cpu_background.py's `lazymlir_background_delegate`), unless the process is throttled
(below), when the background thread's own team runs it. Why not always the latter:
each thread that starts a team owns a libgomp pool, and once the pools' threads
outnumber the cores libgomp cuts every team's spinning after a region from ~300000
rounds to ~1000, so eager ops sleep and wake at each parallel region. The background
thread's pool did that from the first waited run on, for the life of the process: an
eager MLP step (two threads) took 1.8 ms after it against 0.97 ms before, with 11
voluntary context switches a step against none
(benchmarks/results/2026-11-28/alternation-s24.md). A background thread that owns a
pool while nothing throttles (`lazymlir_threads_pool_to_free`) exits at its run's end,
or at once when idle as throttling ends, and libgomp frees its pool.

Throttled spinning under load: that short spin is what a team needs when other
processes hold the cores: a team of two spinning on two busy cores waits for a
scheduler slice at each region (an eager MLP step 70-130 ms against 1 ms at load 3-4,
in a process with no lazymlir code). libgomp counts only its own threads, so a late
fork (above) stands for that state: it starts a thread that holds a pool of one thread
more than the process may use cores, so libgomp throttles every team of the process,
eager's included, until 2 s pass without a late fork; then the thread exits and
libgomp frees its pool. While throttled, a waited run's forks stay on the background
thread's team: handing each over cost a wake-up of the waiting thread, on a busy
machine often a scheduler slice (the GPT step and its wait 59 against 38-50 ms, load 3).

Nested: a graph run from inside an OpenMP region (from one of the team's threads)
runs its loops on that thread alone, as PyTorch's `at::parallel_for` does there,
so the threads at work never outnumber `torch.get_num_threads()` per calling
thread, whatever nesting the OpenMP settings allow (this libgomp reports an
unbounded max-active-levels).
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from ..support import toolchain

SOURCE = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <time.h>

typedef struct ident ident_t;  /* source location: unused */
typedef void (*microtask_t)(int32_t *gtid, int32_t *btid, ...);

static void (*gomp_parallel)(void (*)(void *), void *, unsigned, unsigned);
static void (*gomp_barrier)(void);
static int (*thread_num)(void);
static int (*num_threads)(void);
static int (*in_parallel)(void);
static int (*max_threads)(void);
static uint64_t forks, inline_forks, late_forks, alone_forks, shrunk_forks, delegated_forks;
/* Background runs: threads blocked until a run ends, the execution thread's mark, and
   whether forks on it leave a core to the user's thread (benchmarks switch it off). */
static int32_t waiting, shrink_background = 1;
static __thread int32_t background;
/* Whether this thread has started a libgomp team (so owns a pool) since it began. */
static __thread int32_t pooled;
/* Forks of the execution thread handed to a thread that waits for its run, to run on
   that thread's team (cpu_background.py's lazymlir_background_delegate: 1 once run
   there, 0 if no thread waits), and whether to (tests and benchmarks switch it off). */
static int (*delegate)(void (*)(void *), void *);
static int32_t delegate_forks = 1;
/* cpu_background.py's lazymlir_background_retire: the end of throttling tells an idle
   execution thread that owns a pool to exit. */
static void (*retire)(void);
/* Depth of regions this thread runs alone (nested, or while the team is late). */
static __thread int alone;

/* Late teams. On a machine busier than its cores (other processes), a thread of the
   team may not get a core for a scheduler time slice: the calling thread then waits
   at the region's barrier for milliseconds, far longer than the loop would take it
   alone. A fork whose caller waited longer than its own share of the work took (and
   longer than LATE_FLOOR_NS, more than waking a sleeping thread costs) is late: the
   forks of the next `backoff` nanoseconds run on the calling thread alone (the same
   iterations, so the same results), then one fork tries the team again; the window
   doubles while the team stays late (up to BACKOFF_MAX_NS) and is reset by a fork
   that is on time. */
static uint64_t LATE_FLOOR_NS = 200000, BACKOFF_MIN_NS = 10000000, BACKOFF_MAX_NS = 1000000000;
static uint64_t alone_until_ns, backoff_ns = 10000000;

/* Throttled spinning while the machine is busier than its cores. libgomp spins each
   idle team thread ~300000 rounds after a region (waits of a few ms) unless its pools
   hold more threads than the process may use cores: then ~1000 rounds, and an idle
   thread sleeps at once. It counts only its own threads: with another process at work
   on a core, a team of two spinning on two cores waits for scheduler slices at every
   region (an eager MLP step took 70-130 ms against 1 ms, with no lazymlir code in the
   process). A late fork shows that state: it starts (or keeps) a thread that holds a
   libgomp pool of one more thread than there are cores, which switches every team of
   the process to the short spin, until THROTTLE_NS pass without a late fork; then the
   thread exits and libgomp frees its pool (every team spins as before). */
static uint64_t THROTTLE_NS = 2000000000;
static int32_t throttle_on = 1;
static int throttling;
static uint64_t throttle_until_ns, throttles;
static pthread_mutex_t throttle_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t throttle_cv = PTHREAD_COND_INITIALIZER;

/* Other limits (the tests use longer ones than a loaded machine's hiccups). */
void lazymlir_threads_tune(uint64_t late_floor_ns, uint64_t backoff_min_ns,
                           uint64_t backoff_max_ns) {
  LATE_FLOOR_NS = late_floor_ns;
  BACKOFF_MIN_NS = backoff_ns = backoff_min_ns;
  BACKOFF_MAX_NS = backoff_max_ns;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void lazymlir_threads_throttle(int32_t on, uint64_t throttle_ns) {
  throttle_on = on;
  THROTTLE_NS = throttle_ns;
}
/* Throttle threads started, and whether one holds its pool now. */
uint64_t lazymlir_threads_throttles(void) {
  return __atomic_load_n(&throttles, __ATOMIC_RELAXED);
}
int32_t lazymlir_threads_throttling(void) {
  return __atomic_load_n(&throttling, __ATOMIC_RELAXED);
}
/* 1 if this thread owns a libgomp pool that should go (nothing throttles now): the
   execution thread exits at its run's end then (cpu_background.py). */
int32_t lazymlir_threads_pool_to_free(void) {
  return pooled && !lazymlir_threads_throttling();
}

void lazymlir_threads_background(int32_t on) { background = on; }
void lazymlir_threads_waiting(int32_t delta) {
  __atomic_add_fetch(&waiting, delta, __ATOMIC_RELAXED);
}
void lazymlir_threads_shrink_background(int32_t on) { shrink_background = on; }
uint64_t lazymlir_threads_shrunk_forks(void) {
  return __atomic_load_n(&shrunk_forks, __ATOMIC_RELAXED);
}
void lazymlir_threads_bind_delegate(void *fn, void *retire_fn) {
  delegate = (int (*)(void (*)(void *), void *))fn;
  retire = (void (*)(void))retire_fn;
}
void lazymlir_threads_delegate_forks(int32_t on) { delegate_forks = on; }
uint64_t lazymlir_threads_delegated_forks(void) {
  return __atomic_load_n(&delegated_forks, __ATOMIC_RELAXED);
}

/* Binds the OpenMP runtime PyTorch uses (all six, or none: a team of one). */
void lazymlir_threads_bind(void *parallel, void *barrier, void *get_thread_num,
                           void *get_num_threads, void *omp_in_parallel,
                           void *get_max_threads) {
  gomp_parallel = (void (*)(void (*)(void *), void *, unsigned, unsigned))parallel;
  gomp_barrier = (void (*)(void))barrier;
  thread_num = (int (*)(void))get_thread_num;
  num_threads = (int (*)(void))get_num_threads;
  in_parallel = (int (*)(void))omp_in_parallel;
  max_threads = (int (*)(void))get_max_threads;
}

uint64_t lazymlir_threads_forks(void) { return __atomic_load_n(&forks, __ATOMIC_RELAXED); }
/* Forks that ran on the calling thread alone because it was in a parallel region. */
uint64_t lazymlir_threads_inline_forks(void) {
  return __atomic_load_n(&inline_forks, __ATOMIC_RELAXED);
}
/* Forks whose team was late, and forks run alone after one. */
uint64_t lazymlir_threads_late_forks(void) {
  return __atomic_load_n(&late_forks, __ATOMIC_RELAXED);
}
uint64_t lazymlir_threads_alone_forks(void) {
  return __atomic_load_n(&alone_forks, __ATOMIC_RELAXED);
}

static int32_t self(void) { return alone || !thread_num ? 0 : thread_num(); }
static int32_t team(void) { return alone || !num_threads ? 1 : num_threads(); }

#define MAX_ARGS 16
typedef struct {
  microtask_t fn;
  int32_t argc;
  void *args[MAX_ARGS];
  uint64_t master_done_ns;  /* when the calling thread finished its share */
} Fork;

/* The fork the calling thread of a team is running (to time its share). */
static __thread Fork *leading;

static void run_region(void *data) {
  Fork *f = (Fork *)data;
  int32_t gtid = self(), btid = gtid;
  void **a = f->args;
  switch (f->argc) {
    case 0: f->fn(&gtid, &btid); break;
    case 1: f->fn(&gtid, &btid, a[0]); break;
    case 2: f->fn(&gtid, &btid, a[0], a[1]); break;
    case 3: f->fn(&gtid, &btid, a[0], a[1], a[2]); break;
    case 4: f->fn(&gtid, &btid, a[0], a[1], a[2], a[3]); break;
    case 5: f->fn(&gtid, &btid, a[0], a[1], a[2], a[3], a[4]); break;
    case 6: f->fn(&gtid, &btid, a[0], a[1], a[2], a[3], a[4], a[5]); break;
    case 7: f->fn(&gtid, &btid, a[0], a[1], a[2], a[3], a[4], a[5], a[6]); break;
    case 8: f->fn(&gtid, &btid, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]); break;
    default:
      f->fn(&gtid, &btid, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10],
            a[11], a[12], a[13], a[14], a[15]);
  }
  if (leading == f && !f->master_done_ns) f->master_done_ns = now_ns();
}

static void run_alone(Fork *f) {
  alone++;
  run_region(f);
  alone--;
}

static void idle_region(void *data) { (void)data; }

/* The throttle thread: a team of cores + 1 threads (its pool stays while it lives),
   then it sleeps until THROTTLE_NS have passed since the last late fork. */
static void *throttle_main(void *unused) {
  (void)unused;
  cpu_set_t cpus;
  int n = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  gomp_parallel(idle_region, 0, (unsigned)n + 1, 0);
  pthread_mutex_lock(&throttle_mu);
  for (;;) {
    uint64_t now = now_ns();
    if (now >= throttle_until_ns) break;
    uint64_t left = throttle_until_ns - now;
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += (time_t)(left / 1000000000u);
    deadline.tv_nsec += (long)(left % 1000000000u);
    if (deadline.tv_nsec >= 1000000000) {
      deadline.tv_sec++;
      deadline.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&throttle_cv, &throttle_mu, &deadline);
  }
  __atomic_store_n(&throttling, 0, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&throttle_mu);
  if (retire) retire();
  return 0;  /* libgomp frees this thread's pool as it exits */
}

/* A late fork: throttle spinning until THROTTLE_NS from `now`. */
static void throttle_from(uint64_t now) {
  if (!throttle_on || !gomp_parallel) return;
  pthread_mutex_lock(&throttle_mu);
  throttle_until_ns = now + THROTTLE_NS;
  if (!throttling) {
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&thread, &attr, throttle_main, 0) == 0) {
      __atomic_store_n(&throttling, 1, __ATOMIC_RELAXED);
      throttles++;
    }
    pthread_attr_destroy(&attr);
  }
  pthread_mutex_unlock(&throttle_mu);
}

/* Runs f on the calling thread's team (size 0: its default size), and starts a late
   window if the team was late (began: when the fork was called). */
static void run_team(Fork *f, unsigned size, uint64_t began) {
  Fork *outer = leading;
  leading = f;
  pooled = 1;
  gomp_parallel(run_region, f, size, 0);
  leading = outer;
  uint64_t ended = now_ns();
  uint64_t share = f->master_done_ns ? f->master_done_ns - began : ended - began;
  uint64_t waited = f->master_done_ns ? ended - f->master_done_ns : 0;
  if (waited > LATE_FLOOR_NS && waited > share) {
    uint64_t window = __atomic_load_n(&backoff_ns, __ATOMIC_RELAXED);
    __atomic_store_n(&alone_until_ns, ended + window, __ATOMIC_RELAXED);
    __atomic_store_n(&backoff_ns, window * 2 < BACKOFF_MAX_NS ? window * 2 : BACKOFF_MAX_NS,
                     __ATOMIC_RELAXED);
    __atomic_add_fetch(&late_forks, 1, __ATOMIC_RELAXED);
    throttle_from(ended);
  } else {
    __atomic_store_n(&backoff_ns, BACKOFF_MIN_NS, __ATOMIC_RELAXED);
  }
}

/* A fork of the execution thread, run by a thread that waits for its run: on that
   thread's team (alone if that thread is itself in a parallel region). */
static void delegated_fork(void *data) {
  Fork *f = (Fork *)data;
  if (alone || (in_parallel && in_parallel())) {
    __atomic_add_fetch(&inline_forks, 1, __ATOMIC_RELAXED);
    run_alone(f);
  } else {
    run_team(f, 0, now_ns());
  }
}

/* LLVM's OpenMPIRBuilder passes the region's captures as one struct pointer
   (argc 1); more than MAX_ARGS is refused when the graph is linked
   (lowering/cpu/codegen.py), so argc never exceeds it here. */
void __kmpc_fork_call(ident_t *loc, int32_t argc, microtask_t fn, ...) {
  Fork f;
  f.fn = fn;
  f.argc = argc;
  f.master_done_ns = 0;
  va_list ap;
  va_start(ap, fn);
  for (int32_t i = 0; i < argc && i < MAX_ARGS; i++) f.args[i] = va_arg(ap, void *);
  va_end(ap);
  __atomic_add_fetch(&forks, 1, __ATOMIC_RELAXED);
  if (!gomp_parallel) {
    run_alone(&f);
  } else if (alone || (in_parallel && in_parallel())) {
    /* Nested (a graph run from inside an OpenMP region, as from a PyTorch intra-op
       thread): the calling thread runs every iteration, as at::parallel_for does there,
       instead of a nested team that would put more threads than cores to work. */
    __atomic_add_fetch(&inline_forks, 1, __ATOMIC_RELAXED);
    run_alone(&f);
  } else {
    uint64_t began = now_ns();
    if (began < __atomic_load_n(&alone_until_ns, __ATOMIC_RELAXED)) {
      __atomic_add_fetch(&alone_forks, 1, __ATOMIC_RELAXED);
      run_alone(&f);
      return;
    }
    unsigned size = 0;  /* the team's default size */
    if (background) {
      /* A thread waits for this run: on a machine that is not busy, its team (idle
         meanwhile, the one eager ops use) runs the loop, so this thread starts no pool
         of its own (see "Background runs" above); on a busy one (throttled), this
         thread's own team, and no wake-up of the waiting thread per fork. */
      int waited = __atomic_load_n(&waiting, __ATOMIC_RELAXED) > 0;
      int handing = waited && delegate_forks && delegate && !lazymlir_threads_throttling();
      if (handing && delegate(delegated_fork, &f)) {
        __atomic_add_fetch(&delegated_forks, 1, __ATOMIC_RELAXED);
        return;
      }
      int n = max_threads();
      if (n > 1 && shrink_background && (!waited || handing)) {
        __atomic_add_fetch(&shrunk_forks, 1, __ATOMIC_RELAXED);
        if (n == 2) {
          run_alone(&f);
          return;
        }
        size = (unsigned)(n - 1);
      }
    }
    run_team(&f, size, began);
  }
}

int32_t __kmpc_global_thread_num(ident_t *loc) { return self(); }

void __kmpc_barrier(ident_t *loc, int32_t gtid) {
  /* The calling thread's share ends where it waits for the others. */
  if (leading && !leading->master_done_ns && self() == 0) leading->master_done_ns = now_ns();
  if (gomp_barrier && !alone) gomp_barrier();
}

void __kmpc_for_static_fini(ident_t *loc, int32_t gtid) {}

/* Static schedule, one contiguous block per thread (chunk sizes are ignored: the
   generated loops ask for the unchunked schedule). Bounds are inclusive; a thread
   without iterations gets lower = upper + incr (an empty range). */
#define STATIC_INIT(SUFFIX, T, UT, ST)                                                   \
  void __kmpc_for_static_init_##SUFFIX(ident_t *loc, int32_t gtid, int32_t schedule,    \
                                       int32_t *last, T *lower, T *upper, ST *stride,    \
                                       ST incr, ST chunk) {                              \
    UT trips;                                                                            \
    if (incr > 0 ? *upper < *lower : *lower < *upper) trips = 0;                         \
    else if (incr > 0) trips = ((UT)*upper - (UT)*lower) / (UT)incr + 1;                  \
    else trips = ((UT)*lower - (UT)*upper) / (UT)(-incr) + 1;                              \
    *stride = (ST)trips * incr;                                                          \
    if (trips == 0) { *last = 0; return; }                                               \
    UT n = (UT)team(), t = (UT)self();                                                   \
    UT base = trips / n, extra = trips % n;                                              \
    UT first = t * base + (t < extra ? t : extra);                                       \
    UT count = base + (t < extra ? 1 : 0);                                               \
    T begin = *lower;                                                                    \
    if (count == 0) {                                                                    \
      *last = 0;                                                                         \
      *lower = *upper + incr;                                                            \
      return;                                                                            \
    }                                                                                    \
    *lower = begin + (T)(first * (UT)incr);                                              \
    *upper = *lower + (T)((count - 1) * (UT)incr);                                       \
    *last = first + count == trips;                                                      \
  }

STATIC_INIT(4, int32_t, uint32_t, int32_t)
STATIC_INIT(4u, uint32_t, uint32_t, int32_t)
STATIC_INIT(8, int64_t, uint64_t, int64_t)
STATIC_INIT(8u, uint64_t, uint64_t, int64_t)
"""

LIBRARY_STEM = "liblazymlir_cpu_threads"


def build(directory: str | os.PathLike) -> Path:
    """directory/<stem>-<hash>.so, compiled if it is not there yet."""
    return toolchain.build_c_library(SOURCE, LIBRARY_STEM, directory, flags=("-pthread",))


def loaded_libgomp() -> str | None:
    """The path of the GNU OpenMP runtime loaded into this process (PyTorch's), if any."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rsplit(None, 1)[-1] if "/" in line else ""
                if os.path.basename(path).startswith("libgomp") and ".so" in path:
                    return path
    except OSError:
        pass
    return None


def load(library: Path) -> tuple[ctypes.CDLL, str | None]:
    """(the loaded library, the libgomp it runs on or None): loaded with RTLD_GLOBAL so
    every graph's `__kmpc_*` calls bind to it."""
    lib = ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)
    lib.lazymlir_threads_forks.restype = ctypes.c_uint64
    lib.lazymlir_threads_inline_forks.restype = ctypes.c_uint64
    lib.lazymlir_threads_late_forks.restype = ctypes.c_uint64
    lib.lazymlir_threads_alone_forks.restype = ctypes.c_uint64
    lib.lazymlir_threads_shrunk_forks.restype = ctypes.c_uint64
    lib.lazymlir_threads_throttles.restype = ctypes.c_uint64
    lib.lazymlir_threads_delegated_forks.restype = ctypes.c_uint64
    lib.lazymlir_threads_throttle.argtypes = [ctypes.c_int32, ctypes.c_uint64]
    gomp_path = loaded_libgomp()
    if gomp_path is not None:
        gomp = ctypes.CDLL(gomp_path)  # the handle of the copy already loaded
        address = [ctypes.cast(getattr(gomp, name), ctypes.c_void_p)
                   for name in ("GOMP_parallel", "GOMP_barrier", "omp_get_thread_num",
                                "omp_get_num_threads", "omp_in_parallel",
                                "omp_get_max_threads")]
        lib.lazymlir_threads_bind(*address)
    return lib, gomp_path

