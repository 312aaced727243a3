//===- CApi.cpp - extern "C" entry points of the runtime ------------------===//
//
// The only place where C++ exceptions (lzrt::Error and allocation failures)
// are turned into return codes and the thread-local last-error string, so
// that ctypes and other C callers never see an exception.
//
//===----------------------------------------------------------------------===//

#include "Allocator.h"
#include "DLPack.h"
#include "Driver.h"
#include "Plan.h"
#include "lazymlir_runtime.h"

#include <atomic>
#include <cstring>
#include <memory>
#include <new>

using namespace lzrt;

struct lzrt_runtime {
  const DriverApi *api = nullptr;
  int ordinal = 0;
  CUdevice device = 0;
  CUcontext context = nullptr;
  CUstream stream = nullptr;
  std::unique_ptr<CachingAllocator> allocator;
  bool syncLaunches = false; // lzrt_runtime_set_sync
  /// The creator's reference plus one per DLPack export not yet released by
  /// its consumer: an exported buffer outlives lzrt_runtime_destroy.
  std::atomic<long> refs{1};

  /// CUDA contexts are per-thread state; make ours current on the calling
  /// thread before touching the device (Python may call from any thread).
  const DriverApi &bind() const {
    check(*api, api->cuCtxSetCurrent(context), "cuCtxSetCurrent");
    return *api;
  }

  ~lzrt_runtime() {
    if (!context)
      return;
    // Best effort teardown; a dead context makes these fail harmlessly.
    api->cuCtxSetCurrent(context);
    if (stream)
      api->cuStreamSynchronize(stream);
    allocator.reset();
    if (stream)
      api->cuStreamDestroy(stream);
    api->cuDevicePrimaryCtxRelease(device);
  }
};

struct lzrt_module {
  lzrt_runtime *rt;
  CUmodule module;
};

struct lzrt_plan {
  std::unique_ptr<Plan> plan;
};

struct lzrt_event {
  lzrt_runtime *rt;
  CUevent event;
};

namespace {

thread_local std::string lastError;

void releaseRuntime(lzrt_runtime *rt) {
  if (rt && rt->refs.fetch_sub(1) == 1)
    delete rt;
}

/// What a DLPack export owns: one reference to the buffer and one to the
/// runtime, the shape/strides arrays the DLTensor points at, and the managed
/// tensor itself (legacy or versioned).
struct ExportContext {
  lzrt_runtime *rt;
  uint64_t ptr;
  CUstream consumer; // the stream the consumer named; null if unknown
  std::vector<int64_t> shape, strides;
  dlpack::ManagedTensor legacy{};
  dlpack::ManagedTensorVersioned versioned{};
};

/// Makes work enqueued on `to` from now on wait for the work enqueued on
/// `from` so far (an event; the host does not wait). False if the driver
/// refused (e.g. a stream that no longer exists).
bool orderAfter(const DriverApi &api, CUstream from, CUstream to) {
  CUevent event = nullptr;
  if (api.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
    return false;
  bool ok = api.cuEventRecord(event, from) == CUDA_SUCCESS &&
            api.cuStreamWaitEvent(to, event, 0) == CUDA_SUCCESS;
  api.cuEventDestroy(event); // the driver keeps it until the wait is done
  return ok;
}

/// The deleter of every exported tensor (called by the consumer, on any
/// thread, at most once). The consumer may still have kernels reading the
/// buffer, while the allocator hands freed blocks out again at once for work
/// on our stream: so our stream is ordered after the consumer's stream (the
/// one it named when it asked for the tensor), or, when that is unknown or
/// fails, the whole context (every stream) is waited for. Never throws.
void releaseExport(ExportContext *ctx) noexcept {
  lzrt_runtime *rt = ctx->rt;
  try {
    const DriverApi &api = rt->bind();
    if (!ctx->consumer || !orderAfter(api, ctx->consumer, rt->stream))
      check(api, api.cuCtxSynchronize(), "cuCtxSynchronize");
    rt->allocator->deallocate(ctx->ptr);
  } catch (...) {
    // Nothing to report to: the consumer's deleter returns void. The block
    // stays referenced (leaked) rather than reused while possibly in use.
  }
  delete ctx;
  releaseRuntime(rt);
}

void deleteLegacy(dlpack::ManagedTensor *self) {
  releaseExport(static_cast<ExportContext *>(self->manager_ctx));
}

void deleteVersioned(dlpack::ManagedTensorVersioned *self) {
  releaseExport(static_cast<ExportContext *>(self->manager_ctx));
}

template <typename Fn> int guard(Fn &&fn) {
  try {
    fn();
    return 0;
  } catch (const std::bad_alloc &) {
    lastError = "out of host memory";
  } catch (const std::exception &e) {
    lastError = e.what();
  }
  return 1;
}

void require(const void *p, const char *what) {
  if (!p)
    throw Error(std::string(what) + " is null");
}

} // namespace

extern "C" {

const char *lzrt_last_error(void) { return lastError.c_str(); }

int lzrt_runtime_create(int fake, int ordinal, lzrt_runtime **out) {
  return guard([&] {
    require(out, "out");
    *out = nullptr;
    auto rt = std::make_unique<lzrt_runtime>();
    if (fake < 0 || fake > 2)
      throw Error("driver kind " + std::to_string(fake) +
                  " is not 0 (real), 1 (fake) or 2 (emulator)");
    rt->api = fake == 2 ? &emulatorDriver()
              : fake    ? &fakeDriver()
                        : &realDriver();
    const DriverApi &api = *rt->api;
    check(api, api.cuInit(0), "cuInit");
    int count = 0;
    check(api, api.cuDeviceGetCount(&count), "cuDeviceGetCount");
    if (ordinal < 0 || ordinal >= count)
      throw Error("CUDA device " + std::to_string(ordinal) +
                  " does not exist (" + std::to_string(count) +
                  " devices found); use LAZYMLIR_TARGET=cpu");
    rt->ordinal = ordinal;
    check(api, api.cuDeviceGet(&rt->device, ordinal), "cuDeviceGet");
    check(api, api.cuDevicePrimaryCtxRetain(&rt->context, rt->device),
          "cuDevicePrimaryCtxRetain");
    rt->bind();
    // Flag 1 = CU_STREAM_NON_BLOCKING: do not serialize with the legacy
    // default stream that other libraries (e.g. torch) may use.
    check(api, api.cuStreamCreate(&rt->stream, 1), "cuStreamCreate");
    rt->allocator = std::make_unique<CachingAllocator>(api);
    *out = rt.release();
  });
}

int lzrt_runtime_set_sync(lzrt_runtime *rt, int sync) {
  return guard([&] {
    require(rt, "runtime");
    rt->syncLaunches = sync != 0;
  });
}

int lzrt_runtime_destroy(lzrt_runtime *rt) {
  return guard([&] { releaseRuntime(rt); });
}

int lzrt_stream_get(lzrt_runtime *rt, uint64_t *stream) {
  return guard([&] {
    require(rt, "runtime");
    require(stream, "stream");
    *stream = reinterpret_cast<uintptr_t>(rt->stream);
  });
}

int lzrt_device_count(int *count) {
  return guard([&] {
    require(count, "count");
    const DriverApi &api = realDriver();
    check(api, api.cuInit(0), "cuInit");
    check(api, api.cuDeviceGetCount(count), "cuDeviceGetCount");
  });
}

int lzrt_device_info_get(lzrt_runtime *rt, lzrt_device_info *info) {
  return guard([&] {
    require(rt, "runtime");
    require(info, "info");
    const DriverApi &api = rt->bind();
    std::memset(info, 0, sizeof *info);
    info->ordinal = rt->ordinal;
    info->fake = api.isEmulator ? 2 : api.isFake ? 1 : 0;
    check(api, api.cuDeviceGetCount(&info->device_count), "cuDeviceGetCount");
    check(api,
          api.cuDeviceGetName(info->name, sizeof info->name - 1, rt->device),
          "cuDeviceGetName");
    auto attribute = [&](int attr, int *value) {
      check(api, api.cuDeviceGetAttribute(value, attr, rt->device),
            "cuDeviceGetAttribute");
    };
    attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &info->cc_major);
    attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &info->cc_minor);
    attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
              &info->multiprocessor_count);
  });
}

int lzrt_synchronize(lzrt_runtime *rt) {
  return guard([&] {
    require(rt, "runtime");
    const DriverApi &api = rt->bind();
    check(api, api.cuStreamSynchronize(rt->stream), "cuStreamSynchronize");
  });
}

int lzrt_malloc(lzrt_runtime *rt, size_t nbytes, uint64_t *ptr) {
  return guard([&] {
    require(rt, "runtime");
    require(ptr, "ptr");
    rt->bind();
    *ptr = rt->allocator->allocate(nbytes);
  });
}

int lzrt_free(lzrt_runtime *rt, uint64_t ptr) {
  return guard([&] {
    require(rt, "runtime");
    // An external buffer goes back to its producer when this is its last
    // reference: kernels of ours still reading it must be done by then.
    if (rt->allocator->isExternal(ptr)) {
      const DriverApi &api = rt->bind();
      check(api, api.cuStreamSynchronize(rt->stream), "cuStreamSynchronize");
    }
    rt->allocator->deallocate(ptr);
  });
}

int lzrt_retain(lzrt_runtime *rt, uint64_t ptr) {
  return guard([&] {
    require(rt, "runtime");
    rt->allocator->retain(ptr);
  });
}

int lzrt_adopt_external(lzrt_runtime *rt, uint64_t ptr, size_t nbytes,
                        void (*release)(void *), void *context) {
  return guard([&] {
    require(rt, "runtime");
    rt->allocator->adoptExternal(ptr, nbytes, release, context);
  });
}

int lzrt_dlpack_export(lzrt_runtime *rt, uint64_t ptr, uint64_t byte_offset,
                       int ndim, const int64_t *shape, const int64_t *strides,
                       uint8_t dtype_code, uint8_t dtype_bits, int versioned,
                       uint64_t flags, uint64_t consumer_stream, void **out) {
  return guard([&] {
    require(rt, "runtime");
    require(out, "out");
    *out = nullptr;
    if (ndim < 0 || (ndim > 0 && (!shape || !strides)))
      throw Error("DLPack export needs ndim >= 0 and shape/strides arrays");
    if (dtype_bits == 0 || dtype_bits % 8)
      throw Error("DLPack export of a " + std::to_string(dtype_bits) +
                  "-bit element type");
    size_t have = rt->allocator->requestedBytes(ptr);
    if (!have && !rt->allocator->isExternal(ptr))
      throw Error("DLPack export of " + std::to_string(ptr) +
                  ", which is not the start of a live buffer of this runtime");
    // The last byte the view reaches must lie inside the buffer.
    uint64_t last = 0;
    bool empty = false;
    for (int i = 0; i < ndim; ++i) {
      if (shape[i] < 0 || strides[i] < 0)
        throw Error("DLPack export with a negative size or stride");
      empty |= shape[i] == 0;
      last += uint64_t(shape[i] ? shape[i] - 1 : 0) * uint64_t(strides[i]);
    }
    uint64_t extent = empty ? 0 : (last + 1) * (dtype_bits / 8);
    if (byte_offset + extent > have)
      throw Error("DLPack export of " + std::to_string(extent) +
                  " bytes at offset " + std::to_string(byte_offset) +
                  " of a " + std::to_string(have) + "-byte buffer");
    const DriverApi &api = rt->bind();
    // The result must be complete before the consumer's work reads it: its
    // stream waits for ours (no host wait), or, when the consumer named no
    // stream, the host waits for ours.
    CUstream consumer = reinterpret_cast<CUstream>(uintptr_t(consumer_stream));
    if (!consumer || !orderAfter(api, rt->stream, consumer))
      check(api, api.cuStreamSynchronize(rt->stream), "cuStreamSynchronize");
    auto ctx = std::make_unique<ExportContext>();
    ctx->rt = rt;
    ctx->ptr = ptr;
    ctx->consumer = consumer;
    ctx->shape.assign(shape, shape + ndim);
    ctx->strides.assign(strides, strides + ndim);
    dlpack::Tensor tensor{};
    // Like PyTorch's exporter: `data` points at the first element, offset 0.
    tensor.data = reinterpret_cast<void *>(uintptr_t(ptr + byte_offset));
    tensor.device = {dlpack::kDLCUDA, rt->ordinal};
    tensor.ndim = ndim;
    tensor.dtype = {dtype_code, dtype_bits, 1};
    tensor.shape = ndim ? ctx->shape.data() : nullptr;
    tensor.strides = ndim ? ctx->strides.data() : nullptr;
    tensor.byte_offset = 0;
    rt->allocator->retain(ptr);
    rt->refs.fetch_add(1);
    ExportContext *raw = ctx.release();
    if (versioned) {
      raw->versioned = {{1, 0}, raw, deleteVersioned, flags, tensor};
      *out = &raw->versioned;
    } else {
      raw->legacy = {tensor, raw, deleteLegacy};
      *out = &raw->legacy;
    }
  });
}

int lzrt_memcpy_htod(lzrt_runtime *rt, uint64_t dst, const void *src,
                     size_t nbytes) {
  return guard([&] {
    require(rt, "runtime");
    const DriverApi &api = rt->bind();
    check(api, api.cuMemcpyHtoDAsync(dst, src, nbytes, rt->stream),
          "cuMemcpyHtoDAsync_v2");
  });
}

int lzrt_memcpy_dtoh(lzrt_runtime *rt, void *dst, uint64_t src,
                     size_t nbytes) {
  return guard([&] {
    require(rt, "runtime");
    const DriverApi &api = rt->bind();
    check(api, api.cuMemcpyDtoHAsync(dst, src, nbytes, rt->stream),
          "cuMemcpyDtoHAsync_v2");
    check(api, api.cuStreamSynchronize(rt->stream), "cuStreamSynchronize");
  });
}

int lzrt_memcpy_dtod(lzrt_runtime *rt, uint64_t dst, uint64_t src,
                     size_t nbytes) {
  return guard([&] {
    require(rt, "runtime");
    const DriverApi &api = rt->bind();
    check(api, api.cuMemcpyDtoDAsync(dst, src, nbytes, rt->stream),
          "cuMemcpyDtoDAsync_v2");
  });
}

int lzrt_memset(lzrt_runtime *rt, uint64_t dst, int byte, size_t nbytes) {
  return guard([&] {
    require(rt, "runtime");
    const DriverApi &api = rt->bind();
    check(api,
          api.cuMemsetD8Async(dst, static_cast<unsigned char>(byte), nbytes,
                              rt->stream),
          "cuMemsetD8Async");
  });
}

int lzrt_allocator_stats_get(lzrt_runtime *rt, lzrt_allocator_stats *stats) {
  return guard([&] {
    require(rt, "runtime");
    require(stats, "stats");
    *stats = rt->allocator->stats();
  });
}

int lzrt_empty_cache(lzrt_runtime *rt) {
  return guard([&] {
    require(rt, "runtime");
    rt->bind();
    rt->allocator->emptyCache();
  });
}

int lzrt_module_load(lzrt_runtime *rt, const void *image, size_t nbytes,
                     lzrt_module **out) {
  return guard([&] {
    require(rt, "runtime");
    require(image, "image");
    require(out, "out");
    *out = nullptr;
    const DriverApi &api = rt->bind();
    // cuModuleLoadData takes no size: PTX must be NUL-terminated, so load
    // from a copy with a terminator (harmless after a cubin).
    std::string bytes(static_cast<const char *>(image), nbytes);
    auto mod = std::make_unique<lzrt_module>(lzrt_module{rt, nullptr});
    check(api, api.cuModuleLoadData(&mod->module, bytes.c_str()),
          "cuModuleLoadData");
    *out = mod.release();
  });
}

int lzrt_module_unload(lzrt_module *mod) {
  return guard([&] {
    if (!mod)
      return;
    std::unique_ptr<lzrt_module> owner(mod);
    const DriverApi &api = mod->rt->bind();
    check(api, api.cuModuleUnload(mod->module), "cuModuleUnload");
  });
}

int lzrt_plan_parse(const char *text, lzrt_plan **out) {
  return guard([&] {
    require(text, "text");
    require(out, "out");
    *out = nullptr;
    auto plan = std::make_unique<lzrt_plan>();
    plan->plan = Plan::parse(text);
    *out = plan.release();
  });
}

int lzrt_plan_destroy(lzrt_plan *plan) {
  return guard([&] { delete plan; });
}

int lzrt_plan_info_get(const lzrt_plan *plan, lzrt_plan_info *info) {
  return guard([&] {
    require(plan, "plan");
    require(info, "info");
    *info = plan->plan->info();
  });
}

int lzrt_plan_run(lzrt_runtime *rt, lzrt_plan *plan,
                  lzrt_module *const *modules, size_t num_modules,
                  const uint64_t *args, size_t num_args) {
  return guard([&] {
    require(rt, "runtime");
    require(plan, "plan");
    std::vector<CUmodule> mods(num_modules);
    for (size_t i = 0; i < num_modules; ++i) {
      require(modules[i], "module");
      if (modules[i]->rt != rt)
        throw Error("module " + std::to_string(i) +
                    " was loaded by another runtime");
      mods[i] = modules[i]->module;
    }
    const DriverApi &api = rt->bind();
    plan->plan->run(api, *rt->allocator, rt->stream, mods, args, num_args,
                    rt->syncLaunches);
  });
}

int lzrt_event_create(lzrt_runtime *rt, lzrt_event **out) {
  return guard([&] {
    require(rt, "runtime");
    require(out, "out");
    const DriverApi &api = rt->bind();
    auto ev = std::make_unique<lzrt_event>(lzrt_event{rt, nullptr});
    check(api, api.cuEventCreate(&ev->event, 0), "cuEventCreate");
    *out = ev.release();
  });
}

int lzrt_event_record(lzrt_event *ev) {
  return guard([&] {
    require(ev, "event");
    const DriverApi &api = ev->rt->bind();
    check(api, api.cuEventRecord(ev->event, ev->rt->stream), "cuEventRecord");
  });
}

int lzrt_event_elapsed_ms(lzrt_event *start, lzrt_event *end, float *ms) {
  return guard([&] {
    require(start, "start");
    require(end, "end");
    require(ms, "ms");
    const DriverApi &api = end->rt->bind();
    check(api, api.cuEventSynchronize(end->event), "cuEventSynchronize");
    check(api, api.cuEventElapsedTime(ms, start->event, end->event),
          "cuEventElapsedTime");
  });
}

int lzrt_event_destroy(lzrt_event *ev) {
  return guard([&] {
    if (!ev)
      return;
    std::unique_ptr<lzrt_event> owner(ev);
    const DriverApi &api = ev->rt->bind();
    check(api, api.cuEventDestroy(ev->event), "cuEventDestroy_v2");
  });
}

} // extern "C"
