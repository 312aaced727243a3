/*===- lazymlir_runtime.h - C API of the lazymlir CUDA runtime ------------===*
 *
 * The thin CUDA runtime that executes code compiled by lazymlir. It loads the
 * CUDA driver (libcuda.so.1) with dlopen at run time, so neither building nor
 * importing it needs the CUDA toolkit; a fake driver (host memory, recorded
 * launches, failure injection) stands in for it in tests.
 *
 * Conventions: handles are opaque pointers; every function returns 0 on
 * success and nonzero on failure, with a message in lzrt_last_error() (per
 * thread). Device pointers are uint64_t (CUdeviceptr). All work of a runtime
 * runs in order on its one stream.
 *
 *===----------------------------------------------------------------------===*/

#ifndef LAZYMLIR_RUNTIME_H
#define LAZYMLIR_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define LZRT_API __attribute__((visibility("default")))
#else
#define LZRT_API
#endif

typedef struct lzrt_runtime lzrt_runtime;
typedef struct lzrt_module lzrt_module;
typedef struct lzrt_plan lzrt_plan;
typedef struct lzrt_event lzrt_event;

typedef struct lzrt_device_info {
  char name[256];
  int ordinal;
  int device_count;
  int cc_major;
  int cc_minor;
  int multiprocessor_count;
  int fake; /* 1 on the fake driver, 2 on the emulator driver, else 0 */
} lzrt_device_info;

typedef struct lzrt_allocator_stats {
  uint64_t bytes_in_use;   /* rounded sizes of live blocks */
  uint64_t bytes_cached;   /* freed blocks kept for reuse */
  uint64_t driver_allocs;  /* successful cuMemAlloc calls */
  uint64_t driver_frees;   /* cuMemFree calls (empty_cache, OOM release) */
  uint64_t cache_hits;
  uint64_t cache_misses;
  uint64_t oom_retries;    /* times the cache was released after an OOM */
  uint64_t retained_refs;  /* references beyond the first (DLPack exports) */
  uint64_t external_buffers; /* live adopted external buffers (imports) */
} lzrt_allocator_stats;

typedef struct lzrt_plan_info {
  int num_buffers;
  int num_args;     /* 1 + highest argument index bound by `arg` */
  int num_modules;  /* 1 + highest module index used by `launch` */
  int num_launches;
  int num_ops;
} lzrt_plan_info;

/* Errors. The returned string stays valid until the next failing call on
 * the same thread. */
LZRT_API const char *lzrt_last_error(void);

/* Runtime: `fake` picks the driver: 0 = libcuda.so.1, 1 = the fake driver
 * (runs no kernel code), 2 = the emulator driver (the fake driver's memory,
 * kernels from emulator images run on the CPU, allocations poisoned). */
LZRT_API int lzrt_runtime_create(int fake, int ordinal, lzrt_runtime **out);
/* Drops the creator's reference: the runtime is destroyed once no DLPack
 * export of it is alive any more. */
LZRT_API int lzrt_runtime_destroy(lzrt_runtime *rt);
/* Nonzero: plans synchronize after every launch, so an asynchronous kernel
 * failure is reported with the kernel name and plan line that caused it
 * (slow; for debugging). */
LZRT_API int lzrt_runtime_set_sync(lzrt_runtime *rt, int sync);
LZRT_API int lzrt_device_count(int *count); /* real driver only */
LZRT_API int lzrt_device_info_get(lzrt_runtime *rt, lzrt_device_info *info);
LZRT_API int lzrt_synchronize(lzrt_runtime *rt);

/* Memory, through the caching allocator. */
LZRT_API int lzrt_malloc(lzrt_runtime *rt, size_t nbytes, uint64_t *ptr);
LZRT_API int lzrt_free(lzrt_runtime *rt, uint64_t ptr);
LZRT_API int lzrt_memcpy_htod(lzrt_runtime *rt, uint64_t dst, const void *src,
                              size_t nbytes);
/* Synchronizes the stream so that `dst` holds the data on return. */
LZRT_API int lzrt_memcpy_dtoh(lzrt_runtime *rt, void *dst, uint64_t src,
                              size_t nbytes);
LZRT_API int lzrt_memcpy_dtod(lzrt_runtime *rt, uint64_t dst, uint64_t src,
                              size_t nbytes);
LZRT_API int lzrt_memset(lzrt_runtime *rt, uint64_t dst, int byte,
                         size_t nbytes);
LZRT_API int lzrt_allocator_stats_get(lzrt_runtime *rt,
                                      lzrt_allocator_stats *stats);
LZRT_API int lzrt_empty_cache(lzrt_runtime *rt);

/* The runtime's stream (a CUstream), for consumers and producers of DLPack
 * tensors that order their work against it. */
LZRT_API int lzrt_stream_get(lzrt_runtime *rt, uint64_t *stream);

/* Buffer references (DLPack). Every buffer from lzrt_malloc starts with one
 * reference; lzrt_retain adds one, lzrt_free drops one, and the buffer goes
 * back to the cache when none is left. */
LZRT_API int lzrt_retain(lzrt_runtime *rt, uint64_t ptr);
/* Wraps `nbytes` of device memory owned by someone else (a DLPack import)
 * as a buffer with one reference: plans may use it; the allocator never
 * frees it; when the last reference is dropped (lzrt_free, which first
 * synchronizes the stream) `release(context)` runs once, e.g. the
 * producer's DLManagedTensor deleter. */
LZRT_API int lzrt_adopt_external(lzrt_runtime *rt, uint64_t ptr, size_t nbytes,
                                 void (*release)(void *), void *context);
/* Exports the buffer starting at `ptr` (a live one of this runtime) as a
 * DLPack tensor on kDLCUDA (device id = the runtime's ordinal): data =
 * ptr + byte_offset, byte_offset 0, the given shape/strides (in elements)
 * and dtype (DLDataTypeCode, bits; lanes 1). `*out` is a DLManagedTensor,
 * or a DLManagedTensorVersioned (DLPack 1.0, `flags` stored) when
 * `versioned`; it holds a reference to the buffer and to the runtime, both
 * dropped by its deleter.
 * Streams: `consumer_stream` is the CUstream the consumer will read on
 * (CU_STREAM_LEGACY = 1 and CU_STREAM_PER_THREAD = 2 included), or 0 if
 * unknown. Known: it is made to wait for the runtime's pending work (an
 * event, no host wait), and the deleter makes the runtime's stream wait for
 * the consumer's work before the block can be reused. Unknown: the export
 * synchronizes the runtime's stream, and the deleter waits for the whole
 * context (the consumer may read on any stream). */
LZRT_API int lzrt_dlpack_export(lzrt_runtime *rt, uint64_t ptr,
                                uint64_t byte_offset, int ndim,
                                const int64_t *shape, const int64_t *strides,
                                uint8_t dtype_code, uint8_t dtype_bits,
                                int versioned, uint64_t flags,
                                uint64_t consumer_stream, void **out);

/* Modules: cubin or PTX bytes (PTX is JIT-compiled by the driver). */
LZRT_API int lzrt_module_load(lzrt_runtime *rt, const void *image,
                              size_t nbytes, lzrt_module **out);
LZRT_API int lzrt_module_unload(lzrt_module *mod);

/* Launch plans (text format: docs/cuda_runtime.md). */
LZRT_API int lzrt_plan_parse(const char *text, lzrt_plan **out);
LZRT_API int lzrt_plan_destroy(lzrt_plan *plan);
LZRT_API int lzrt_plan_info_get(const lzrt_plan *plan, lzrt_plan_info *info);
LZRT_API int lzrt_plan_run(lzrt_runtime *rt, lzrt_plan *plan,
                           lzrt_module *const *modules, size_t num_modules,
                           const uint64_t *args, size_t num_args);

/* Events, recorded on the runtime's stream. */
LZRT_API int lzrt_event_create(lzrt_runtime *rt, lzrt_event **out);
LZRT_API int lzrt_event_record(lzrt_event *ev);
/* Waits for `end`, then stores the milliseconds between the two records. */
LZRT_API int lzrt_event_elapsed_ms(lzrt_event *start, lzrt_event *end,
                                   float *ms);
LZRT_API int lzrt_event_destroy(lzrt_event *ev);

/* Fake driver controls (process-wide state shared by all fake runtimes). */
/* Clears the launch log, call counters, failure injection, memory limit. */
LZRT_API int lzrt_fake_reset(void);
/* Makes the nth (1-based) next call of `call` (NULL: of any entry point)
 * return `error` (a CUresult). */
LZRT_API int lzrt_fake_fail_call(const char *call, int nth, int error);
/* cuMemAlloc fails with CUDA_ERROR_OUT_OF_MEMORY beyond this many live
 * bytes; 0 means unlimited. */
LZRT_API int lzrt_fake_set_memory_limit(uint64_t bytes);
/* One launch per line: `<kernel> grid=x,y,z block=x,y,z shared=n args=...`
 * with args `<ptx type>:<value>` (integers decimal, floats as hex bits).
 * Copies at most cap bytes (NUL-terminated when room) and sets *len to the
 * full length. */
LZRT_API int lzrt_fake_launch_log(char *buf, size_t cap, size_t *len);
LZRT_API int lzrt_fake_call_count(const char *call, uint64_t *count);
LZRT_API int lzrt_fake_memory(uint64_t *live_allocs, uint64_t *live_bytes);

/* Emulator driver controls (process-wide). Nonzero: run the blocks of each
 * grid in reverse order (exposes order dependence between blocks). */
LZRT_API int lzrt_emulator_set_reverse_blocks(int reverse);
/* Kernel launches and blocks run by the emulator since the process started. */
LZRT_API int lzrt_emulator_stats(uint64_t *launches, uint64_t *blocks);

#ifdef __cplusplus
}
#endif

#endif /* LAZYMLIR_RUNTIME_H */
