"""A native thread that runs compiled CPU graphs launched by `mark_step()`, without the GIL.

Why native: a Python execution thread needs the GIL before and after each compiled
call (waking up, resolving inputs, allocating outputs, binding them), while the
user's thread holds it to trace the next step. CPython hands the GIL over on a
5 ms switch interval, so each handover stalled one thread or the other: on two
cores, an MLP step's tracing overlapping a background run took 4-9 ms of wall time
for 1.3-2 ms of CPU, 1-4.5 ms of it asleep waiting for the GIL (perf: the tracing
thread blocked in `take_gil` ~1.5 times per step), and background runs bought
nothing against runs at `mark_step()`.

Here the user's thread prepares a call completely (inputs, outputs, argument
descriptors: targets/cpu.py) and hands this library the graph's entry point and
its argument array; the thread below calls it and never touches Python. Whoever
next needs the result (the next launch, a read) waits for it in C, with the GIL
released, and binds the outputs itself. One submission at a time: a submit while one
is unfinished is refused (the caller waits first).

A submission is a chain of calls, run in order: a big graph compiled as segments
(execution/segment_chain.py) hands over all its segments at once, each segment's
outputs already allocated as the next one's inputs, so no Python runs between them.

Outputs final before the end (`lazymlir_output_ready`): a graph's code signals each
out-parameter once nothing writes it any more (lowering/cpu/output_signals.py), so a
read of one output of a running graph (a training step's loss, read right after
`mark_step()`) waits only for the code up to it, and the user's thread traces the next
step while the rest (the backward, the optimizer) runs. A submission of one call may
hand over an array of flags, one per out-parameter, which the signal sets; on any
other thread, or without flags, the signal does nothing.

The thread's OpenMP team: compiled loops fork on the calling thread's libgomp team
(targets/cpu_threads.py); each call carries the thread count to use, which the
thread sets with libgomp's `omp_set_num_threads` (PyTorch's count on the user's
thread), as torch.set_num_threads would. While nobody waits for the call, its forks
take one thread fewer, leaving the user's thread a core (cpu_threads.py; on two
threads, this thread alone). A thread that waits for the call gets its forks: it runs
each on its own team while this thread sleeps (`lazymlir_background_delegate`), so
this thread starts no libgomp team, whose pool would make libgomp throttle every
team's spinning, eager's included, for as long as this thread lived (an eager MLP step
1.8 against 0.97 ms: cpu_threads.py). While the process is throttled anyway (a busy
machine), the forks stay on this thread's own team; a thread that owns a pool exits
at the end of its run once nothing throttles (or, idle, when throttling ends:
`lazymlir_background_retire`), and the next submission starts another.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from ..support import toolchain
from .cpu_threads import loaded_libgomp

SOURCE = r"""
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

typedef void (*entry_t)(void *);

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
/* One condition both ways: the thread waits for a call, waiters for its end. */
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static void *const *job_fns; /* the chain's entries and their argument arrays */
static void *const *job_args;
static int job_count, job_threads;
static uint64_t submitted, finished, calls, last_ns, starts;
static int started;
/* The submission's flags, one per out-parameter of its one call (or none), and the
   running call's, on the thread running it. */
static volatile uint8_t *job_ready;
static int64_t job_ready_count;
static __thread volatile uint8_t *running_ready;
static __thread int64_t running_ready_count;
/* Threads in lazymlir_background_wait_output: a signal wakes them only if there are. */
static int output_waiters;
static void (*set_threads)(int);
/* targets/cpu_threads.py: mark this thread's forks as background ones; count waiters. */
static void (*mark_background)(int32_t);
static void (*count_waiting)(int32_t);
/* targets/cpu_threads.py: whether this thread owns an OpenMP pool that should go. */
static int32_t (*owns_pool)(void);
/* A fork of the running call handed to a waiting thread (lazymlir_background_delegate):
   the region to run, and its state (0 none, 1 posted, 2 taken); threads waiting that
   run such forks. */
static void (*posted_fn)(void *);
static void *posted_arg;
static int posted, serving;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The CLOCK_REALTIME time timeout_ns from now (pthread_cond_timedwait's deadline). */
static struct timespec deadline_after(int64_t timeout_ns) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += timeout_ns / 1000000000;
  deadline.tv_nsec += timeout_ns % 1000000000;
  if (deadline.tv_nsec >= 1000000000) {
    deadline.tv_sec++;
    deadline.tv_nsec -= 1000000000;
  }
  return deadline;
}

/* Set by lazymlir_background_retire: the thread, idle, exits if it owns a pool. */
static int retiring;

static void *loop(void *unused) {
  int threads = 0;
  (void)unused;
  if (mark_background) mark_background(1);
  pthread_mutex_lock(&mu);
  for (;;) {
    while (finished == submitted) {
      if (retiring) {
        retiring = 0;
        if (owns_pool && owns_pool()) {
          started = 0;
          pthread_mutex_unlock(&mu);
          return 0;
        }
      }
      pthread_cond_wait(&cv, &mu);
    }
    void *const *fns = job_fns;
    void *const *args = job_args;
    int count = job_count;
    int n = job_threads;
    running_ready = job_ready;
    running_ready_count = job_ready_count;
    pthread_mutex_unlock(&mu);
    if (set_threads && n > 0 && n != threads) {
      set_threads(n);
      threads = n;
    }
    uint64_t began = now_ns();
    for (int i = 0; i < count; i++) ((entry_t)fns[i])(args[i]);
    uint64_t took = now_ns() - began;
    running_ready = 0;
    /* A thread that started a team while the machine was busy leaves once it is not:
       libgomp frees its pool as it exits (the next submission starts a thread). */
    int leave = owns_pool && owns_pool();
    pthread_mutex_lock(&mu);
    last_ns = took;
    calls += (uint64_t)count;
    finished++;
    if (leave) started = 0;
    pthread_cond_broadcast(&cv);
    if (leave) {
      pthread_mutex_unlock(&mu);
      return 0;
    }
  }
}

void lazymlir_background_bind(void *omp_set_num_threads, void *background, void *waiting,
                              void *pooled) {
  set_threads = (void (*)(int))omp_set_num_threads;
  mark_background = (void (*)(int32_t))background;
  count_waiting = (void (*)(int32_t))waiting;
  owns_pool = (int32_t (*)(void))pooled;
}

/* Called by cpu_threads.py when throttling ends: the thread, if idle and owning a pool,
   exits (a running one checks at its run's end). */
void lazymlir_background_retire(void) {
  pthread_mutex_lock(&mu);
  if (started) {
    retiring = 1;
    pthread_cond_broadcast(&cv);
  }
  pthread_mutex_unlock(&mu);
}

/* Called by cpu_threads.py's fork on this library's thread while a thread waits for
   its call: fn(arg) runs on a waiting thread (on that thread's OpenMP team), this
   thread sleeping meanwhile. 1 once it has run there; 0 if no thread waits (or one
   fork is already handed over), fn not run. */
int lazymlir_background_delegate(void (*fn)(void *), void *arg) {
  pthread_mutex_lock(&mu);
  if (!serving || posted) {
    pthread_mutex_unlock(&mu);
    return 0;
  }
  posted_fn = fn;
  posted_arg = arg;
  posted = 1;
  pthread_cond_broadcast(&cv);
  while (posted) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  return 1;
}

/* With mu held, on a waiting thread: runs the posted fork if there is one (mu released
   meanwhile); 1 if it ran one. A waiter runs every fork posted before it stops
   serving, so the execution thread never waits for a fork nobody takes. */
static int serve(void) {
  if (posted != 1) return 0;
  posted = 2;
  void (*fn)(void *) = posted_fn;
  void *arg = posted_arg;
  pthread_mutex_unlock(&mu);
  fn(arg);
  pthread_mutex_lock(&mu);
  posted = 0;
  pthread_cond_broadcast(&cv);
  return 1;
}

/* Called by a graph's code once its out-parameter k holds its final value. */
void lazymlir_output_ready(int64_t k) {
  volatile uint8_t *ready = running_ready;
  if (!ready || k < 0 || k >= running_ready_count) return; /* not a call with flags */
  __atomic_store_n(&ready[k], 1, __ATOMIC_SEQ_CST);
  /* (seq_cst both ways: a waiter counted after this load sees the flag set) */
  if (__atomic_load_n(&output_waiters, __ATOMIC_SEQ_CST)) {
    pthread_mutex_lock(&mu);
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
  }
}

/* Run fns[i](args[i]) for i < count, in order (both arrays stay the caller's, alive
   until the chain has run); `ready`: ready_count flags, zero, that a chain of one call
   sets as its out-parameters become final (or NULL). *seq: the submission's number.
   0: under way; EBUSY: a submission is unfinished; else pthread_create's error. */
int lazymlir_background_submit(void *const *fns, void *const *args, int count, int threads,
                               volatile uint8_t *ready, int64_t ready_count, uint64_t *seq) {
  pthread_mutex_lock(&mu);
  if (finished != submitted) {
    pthread_mutex_unlock(&mu);
    return EBUSY;
  }
  if (!started) {
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int error = pthread_create(&thread, &attr, loop, 0);
    pthread_attr_destroy(&attr);
    if (error) {
      pthread_mutex_unlock(&mu);
      return error;
    }
    started = 1;
    starts++;
  }
  job_fns = fns;
  job_args = args;
  job_count = count;
  job_threads = threads;
  job_ready = count == 1 ? ready : 0;
  job_ready_count = ready_count;
  submitted++;
  *seq = submitted;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
  return 0;
}

/* Waits at most timeout_ns for the call to end; 1 once no call is unfinished. */
int lazymlir_background_wait(int64_t timeout_ns) {
  struct timespec deadline = deadline_after(timeout_ns);
  pthread_mutex_lock(&mu);
  int waited = finished != submitted;
  /* Someone waits: the call's remaining loops take the whole team again (this
     thread's, while the machine is not busy: cpu_threads.py). */
  if (waited) {
    if (count_waiting) count_waiting(1);
    serving++;
  }
  while (finished != submitted) {
    if (serve()) continue;
    if (pthread_cond_timedwait(&cv, &mu, &deadline) == ETIMEDOUT) break;
  }
  while (serve()) {
  }
  if (waited) serving--;
  int idle = finished == submitted;
  pthread_mutex_unlock(&mu);
  if (waited && count_waiting) count_waiting(-1);
  return idle;
}

/* Waits at most timeout_ns for flag k of submission `seq` (`ready`, as submitted):
   1 once it is set, 2 once the submission has finished without setting it, 0 else. */
int lazymlir_background_wait_output(uint64_t seq, volatile const uint8_t *ready, int64_t k,
                                    int64_t timeout_ns) {
  struct timespec deadline = deadline_after(timeout_ns);
  if (__atomic_load_n(&ready[k], __ATOMIC_SEQ_CST)) return 1;
  pthread_mutex_lock(&mu);
  __atomic_add_fetch(&output_waiters, 1, __ATOMIC_SEQ_CST);
  /* Someone waits: the call's loops take the whole team until it has its output. */
  if (count_waiting) count_waiting(1);
  serving++;
  int state = 0;
  for (;;) {
    if (__atomic_load_n(&ready[k], __ATOMIC_SEQ_CST)) { state = 1; break; }
    if (finished >= seq) { state = 2; break; }
    if (serve()) continue;
    if (pthread_cond_timedwait(&cv, &mu, &deadline) == ETIMEDOUT) break;
  }
  while (serve()) {
  }
  serving--;
  __atomic_sub_fetch(&output_waiters, 1, __ATOMIC_SEQ_CST);
  pthread_mutex_unlock(&mu);
  if (count_waiting) count_waiting(-1);
  return state;
}

/* Submissions finished since the process started (tests read it holding the GIL). */
uint64_t lazymlir_background_finished(void) {
  pthread_mutex_lock(&mu);
  uint64_t count = finished;
  pthread_mutex_unlock(&mu);
  return count;
}

/* Calls (a chain's, one each) finished since the process started. */
uint64_t lazymlir_background_calls(void) {
  pthread_mutex_lock(&mu);
  uint64_t count = calls;
  pthread_mutex_unlock(&mu);
  return count;
}

/* Threads started since the process started (one more after each run that started an
   OpenMP team). */
uint64_t lazymlir_background_starts(void) {
  pthread_mutex_lock(&mu);
  uint64_t count = starts;
  pthread_mutex_unlock(&mu);
  return count;
}

/* How long the last finished submission took, in nanoseconds. */
uint64_t lazymlir_background_last_ns(void) {
  pthread_mutex_lock(&mu);
  uint64_t took = last_ns;
  pthread_mutex_unlock(&mu);
  return took;
}

/* In a forked child: the thread is not there (and the lock may be held). */
void lazymlir_background_forget(void) {
  pthread_mutex_init(&mu, 0);
  pthread_cond_init(&cv, 0);
  started = 0;
  submitted = finished = calls = 0;
  output_waiters = 0;
  job_ready = 0;
  posted = serving = retiring = 0;
}
"""

LIBRARY_STEM = "liblazymlir_cpu_background"
WAIT_SLICE_NS = 100_000_000  # a wait returns to Python this often (Ctrl-C is handled)


def build(directory: str | os.PathLike) -> Path:
    """directory/<stem>-<hash>.so, compiled if it is not there yet."""
    return toolchain.build_c_library(SOURCE, LIBRARY_STEM, directory, flags=("-pthread",))


def load(library: Path, threads: ctypes.CDLL) -> ctypes.CDLL:
    """The loaded library, bound to the OpenMP runtime PyTorch uses (if any) and to
    `threads` (targets/cpu_threads.py's library, which runs the graphs' forks); a
    forked child starts without the thread."""
    # RTLD_GLOBAL: graphs' code calls its `lazymlir_output_ready`.
    lib = ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)
    lib.lazymlir_background_submit.argtypes = [
        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
        ctypes.c_int64, ctypes.POINTER(ctypes.c_uint64)]
    lib.lazymlir_background_submit.restype = ctypes.c_int
    lib.lazymlir_background_wait_output.argtypes = [ctypes.c_uint64, ctypes.c_void_p,
                                                    ctypes.c_int64, ctypes.c_int64]
    lib.lazymlir_background_wait_output.restype = ctypes.c_int
    lib.lazymlir_background_wait.argtypes = [ctypes.c_int64]
    lib.lazymlir_background_wait.restype = ctypes.c_int
    lib.lazymlir_background_last_ns.restype = ctypes.c_uint64
    lib.lazymlir_background_finished.restype = ctypes.c_uint64
    lib.lazymlir_background_calls.restype = ctypes.c_uint64
    lib.lazymlir_background_starts.restype = ctypes.c_uint64
    gomp_path = loaded_libgomp()
    if gomp_path is not None:
        gomp = ctypes.CDLL(gomp_path)
        lib.lazymlir_background_bind(
            ctypes.cast(gomp.omp_set_num_threads, ctypes.c_void_p),
            ctypes.cast(threads.lazymlir_threads_background, ctypes.c_void_p),
            ctypes.cast(threads.lazymlir_threads_waiting, ctypes.c_void_p),
            ctypes.cast(threads.lazymlir_threads_pool_to_free, ctypes.c_void_p))
        threads.lazymlir_threads_bind_delegate(
            ctypes.cast(lib.lazymlir_background_delegate, ctypes.c_void_p),
            ctypes.cast(lib.lazymlir_background_retire, ctypes.c_void_p))
    os.register_at_fork(after_in_child=lib.lazymlir_background_forget)
    return lib
