"""A caching allocator for the buffers compiled CPU graphs allocate themselves.

Why: a graph's temporaries (activations kept for backward, attention scores,
gradients of intermediate values) are `memref.alloc`s that the generated code
frees when it is done. Through glibc, big blocks come from `mmap` or from the
top of the heap, and glibc hands them back to the kernel when they are freed
(`munmap`, heap trimming), so the next step touches fresh pages: every page of
every temporary costs a page fault and a zeroing in the kernel, every step.
Measured on the small GPT training step (benchmarks/models.py, AdamW,
torch.compile(backend="lazymlir"), steady state): 10,250 page faults and 18.8 ms
of kernel time per step, against 275 faults and 1.3 ms for eager PyTorch on the
same step (docs/cpu-performance.md).

How: `finalize-memref-to-llvm{use-generic-functions=1}` makes the generated
code call `_mlir_memref_to_llvm_alloc` / `_mlir_memref_to_llvm_aligned_alloc`
/ `_mlir_memref_to_llvm_free` (MLIR's hook for exactly this) instead of
malloc/free. This library defines them: blocks of at least 64 KiB are rounded
up to a size class (8 classes per power of two, so a block serves requests up
to 12.5% smaller; pages of the slack that are never touched cost nothing) and
kept on a free list when freed, up to a cap on the bytes kept
(`LAZYMLIR_CPU_ALLOC_CACHE_MB`, set by the cpu target when it loads the
library; default 1024, 0 keeps nothing). Smaller blocks go straight to malloc,
which keeps them in its own free lists without faults. One library per process, loaded with
RTLD_GLOBAL before any graph, so all graphs share one cache (a step's forward,
backward and optimizer graphs reuse each other's blocks), the way PyTorch's
CUDA caching allocator serves all kernels.

The library is built from SOURCE with the same C compiler that links the
graphs (support/toolchain.py), once per machine when a disk cache is configured, else
once per process (~0.1 s). `lazymlir_cpu_alloc_stats` reports hits, misses and
bytes for tests and metrics; `lazymlir_cpu_alloc_trim` returns every cached
block to the system.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..support import toolchain

SOURCE = r"""
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define ALIGNMENT 64            /* every block: a cache line, enough for AVX-512 */
#define HEADER 64               /* bytes before the returned pointer */
#define MIN_CACHED (64 * 1024)  /* smaller blocks: plain malloc */
#define SUBCLASSES 8
#define CLASSES (64 * SUBCLASSES)
#define MAGIC 0x6c617a796d6c6972ull  /* "lazymlir" */

typedef struct {
  void *base;          /* what posix_memalign returned */
  uint64_t size_class; /* CLASSES: not cached */
  uint64_t bytes;      /* usable bytes of the block */
  uint64_t magic;
} Header;

typedef struct Free { struct Free *next; } Free;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static Free *free_lists[CLASSES];
static uint64_t cached_bytes, hits, misses, live_bytes;
/* The cap on cached bytes: 1 GiB until the loader sets the session's value. */
static uint64_t cap_bytes = 1024ull << 20;

/* The size class of n >= MIN_CACHED and its size: 8 classes per power of two. */
static unsigned size_class(uint64_t n, uint64_t *class_bytes) {
  unsigned log2 = 63 - __builtin_clzll(n);
  uint64_t step = (1ull << log2) / SUBCLASSES;
  uint64_t rounded = (n + step - 1) / step * step;
  if (rounded >= (2ull << log2)) { log2 += 1; step *= 2; rounded = 1ull << log2; }
  *class_bytes = rounded;
  return log2 * SUBCLASSES + (unsigned)(rounded / step - SUBCLASSES) % SUBCLASSES;
}

static void *fresh(uint64_t bytes, uint64_t alignment, uint64_t size_class) {
  uint64_t header = alignment > HEADER ? alignment : HEADER;
  void *base = NULL;
  if (posix_memalign(&base, alignment, header + bytes) != 0) return NULL;
  char *user = (char *)base + header;
  Header *h = (Header *)user - 1;
  h->base = base;
  h->size_class = size_class;
  h->bytes = bytes;
  h->magic = MAGIC;
  return user;
}

static void *allocate(uint64_t n, uint64_t alignment) {
  if (n == 0) n = 1;
  if (alignment > ALIGNMENT || n < MIN_CACHED) {
    return fresh(n, alignment > ALIGNMENT ? alignment : ALIGNMENT, CLASSES);
  }
  uint64_t bytes;
  unsigned c = size_class(n, &bytes);
  pthread_mutex_lock(&lock);
  Free *block = free_lists[c];
  if (block) {
    free_lists[c] = block->next;
    cached_bytes -= bytes;
    hits++;
  } else {
    misses++;
  }
  live_bytes += bytes;
  pthread_mutex_unlock(&lock);
  return block ? (void *)block : fresh(bytes, ALIGNMENT, c);
}

void *_mlir_memref_to_llvm_alloc(uint64_t size) { return allocate(size, ALIGNMENT); }

void *_mlir_memref_to_llvm_aligned_alloc(uint64_t alignment, uint64_t size) {
  return allocate(size, alignment);
}

void _mlir_memref_to_llvm_free(void *p) {
  if (!p) return;
  Header *h = (Header *)p - 1;
  if (h->magic != MAGIC) {  /* not ours: a compiler bug; say so rather than corrupt */
    fprintf(stderr, "lazymlir: cpu allocator: free of a pointer it did not allocate\n");
    abort();
  }
  if (h->size_class < CLASSES) {
    pthread_mutex_lock(&lock);
    live_bytes -= h->bytes;
    if (cached_bytes + h->bytes <= cap_bytes) {
      Free *block = (Free *)p;
      block->next = free_lists[h->size_class];
      free_lists[h->size_class] = block;
      cached_bytes += h->bytes;
      pthread_mutex_unlock(&lock);
      return;
    }
    pthread_mutex_unlock(&lock);
  }
  free(h->base);
}

/* hits, misses, bytes kept for reuse, bytes of cached-size blocks in use */
void lazymlir_cpu_alloc_stats(uint64_t out[4]) {
  pthread_mutex_lock(&lock);
  out[0] = hits; out[1] = misses; out[2] = cached_bytes; out[3] = live_bytes;
  pthread_mutex_unlock(&lock);
}

void lazymlir_cpu_alloc_set_cap_mb(uint64_t mb) {
  pthread_mutex_lock(&lock);
  cap_bytes = mb << 20;
  pthread_mutex_unlock(&lock);
}

void lazymlir_cpu_alloc_trim(void) {
  pthread_mutex_lock(&lock);
  for (unsigned c = 0; c < CLASSES; c++) {
    while (free_lists[c]) {
      Free *block = free_lists[c];
      free_lists[c] = block->next;
      free(((Header *)block - 1)->base);
    }
  }
  cached_bytes = 0;
  pthread_mutex_unlock(&lock);
}
"""

LIBRARY_STEM = "liblazymlir_cpu_alloc"


def library_name() -> str:
    """The library's file name: a hash of its source, so an edited allocator is rebuilt."""
    return toolchain.library_name(LIBRARY_STEM, SOURCE)


def build(directory: str | os.PathLike) -> Path:
    """directory/<library_name()>, compiled if it is not there yet."""
    return toolchain.build_c_library(SOURCE, LIBRARY_STEM, directory, ("-pthread",))
