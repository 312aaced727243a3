//===- Driver.cpp - Load libcuda.so.1 and describe CUDA errors ------------===//
//
// The real driver is opened with dlopen on first use, so the library builds
// and imports on machines without CUDA; only creating a real runtime fails
// there, with a message that points at the CPU target.
//
//===----------------------------------------------------------------------===//

#include "Driver.h"

#include <dlfcn.h>
#include <cstring>
#include <mutex>

namespace lzrt {

namespace {

DriverApi loadDriver() {
  // RTLD_LOCAL: the symbols are only reached through the table.
  void *handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *reason = dlerror();
    throw Error(std::string("no CUDA driver found (libcuda.so.1 could not be "
                            "loaded: ") +
                (reason ? reason : "unknown reason") +
                "); use LAZYMLIR_TARGET=cpu");
  }
  DriverApi api;
  auto resolve = [&](const char *symbol) {
    void *fn = dlsym(handle, symbol);
    // cuEventElapsedTime_v2 only exists in drivers >= 12.8; older drivers
    // have the original, which has the same signature.
    if (!fn && std::strcmp(symbol, "cuEventElapsedTime_v2") == 0)
      fn = dlsym(handle, "cuEventElapsedTime");
    if (!fn)
      throw Error(std::string("the CUDA driver (libcuda.so.1) lacks ") +
                  symbol + "; it is too old for lazymlir");
    return fn;
  };
#define LZRT_RESOLVE(member, symbol, params)                                   \
  api.member = reinterpret_cast<decltype(api.member)>(resolve(symbol));
  LZRT_DRIVER_FUNCTIONS(LZRT_RESOLVE)
#undef LZRT_RESOLVE
  // The handle is deliberately never closed: the table lives for the process.
  return api;
}

} // namespace

const DriverApi &realDriver() {
  // Retry after a failure (a later call may find a driver installed since),
  // but load at most once successfully.
  static std::mutex mutex;
  static DriverApi api;
  static bool loaded = false;
  std::lock_guard<std::mutex> lock(mutex);
  if (!loaded) {
    api = loadDriver();
    loaded = true;
  }
  return api;
}

std::string describeFailure(const DriverApi &api, const char *call,
                            CUresult result) {
  const char *name = nullptr, *text = nullptr;
  if (api.cuGetErrorName(result, &name) != CUDA_SUCCESS || !name)
    name = "CUDA_ERROR_UNKNOWN_CODE";
  if (api.cuGetErrorString(result, &text) != CUDA_SUCCESS || !text)
    text = "unrecognized error code";
  return std::string(call) + " failed: " + name + " (" + text + ")" +
         (std::strcmp(name, "CUDA_ERROR_UNKNOWN_CODE") == 0
              ? " [code " + std::to_string(result) + "]"
              : std::string());
}

} // namespace lzrt
