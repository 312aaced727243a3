//===- Driver.h - CUDA driver API table, loaded at run time ---------------===//
//
// The few CUDA driver types and entry points the runtime uses, declared here
// so that building needs no CUDA headers. All calls go through a DriverApi
// table of function pointers, filled either from libcuda.so.1 (dlopen), by
// the fake driver used in tests, or by the emulator driver (fake + kernels
// run on the CPU).
//
//===----------------------------------------------------------------------===//

#ifndef LAZYMLIR_CUDA_RUNTIME_DRIVER_H
#define LAZYMLIR_CUDA_RUNTIME_DRIVER_H

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace lzrt {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = uint64_t;
using CUcontext = struct CUctx_st *;
using CUmodule = struct CUmod_st *;
using CUfunction = struct CUfunc_st *;
using CUstream = struct CUstream_st *;
using CUevent = struct CUevent_st *;

// Values from cuda.h (stable ABI).
constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
constexpr CUresult CUDA_ERROR_NOT_FOUND = 500;
constexpr unsigned CU_EVENT_DISABLE_TIMING = 2;
constexpr int CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;

// X-macro: (member, symbol, parameter list). The symbol carries the `_v2`
// suffix where the 64-bit ABI introduced one; dlsym needs the real name.
#define LZRT_DRIVER_FUNCTIONS(X)                                               \
  X(cuInit, "cuInit", (unsigned))                                             \
  X(cuDeviceGetCount, "cuDeviceGetCount", (int *))                            \
  X(cuDeviceGet, "cuDeviceGet", (CUdevice *, int))                            \
  X(cuDeviceGetName, "cuDeviceGetName", (char *, int, CUdevice))              \
  X(cuDeviceGetAttribute, "cuDeviceGetAttribute", (int *, int, CUdevice))     \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain",                     \
    (CUcontext *, CUdevice))                                                  \
  X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", (CUdevice))    \
  X(cuCtxSetCurrent, "cuCtxSetCurrent", (CUcontext))                          \
  X(cuCtxSynchronize, "cuCtxSynchronize", ())                                 \
  X(cuStreamCreate, "cuStreamCreate", (CUstream *, unsigned))                 \
  X(cuStreamDestroy, "cuStreamDestroy_v2", (CUstream))                        \
  X(cuStreamSynchronize, "cuStreamSynchronize", (CUstream))                   \
  X(cuStreamWaitEvent, "cuStreamWaitEvent", (CUstream, CUevent, unsigned))    \
  X(cuMemAlloc, "cuMemAlloc_v2", (CUdeviceptr *, size_t))                     \
  X(cuMemFree, "cuMemFree_v2", (CUdeviceptr))                                 \
  X(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2",                                \
    (CUdeviceptr, const void *, size_t, CUstream))                            \
  X(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2",                                \
    (void *, CUdeviceptr, size_t, CUstream))                                  \
  X(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2",                                \
    (CUdeviceptr, CUdeviceptr, size_t, CUstream))                             \
  X(cuMemsetD8Async, "cuMemsetD8Async",                                       \
    (CUdeviceptr, unsigned char, size_t, CUstream))                           \
  X(cuModuleLoadData, "cuModuleLoadData", (CUmodule *, const void *))         \
  X(cuModuleGetFunction, "cuModuleGetFunction",                               \
    (CUfunction *, CUmodule, const char *))                                   \
  X(cuModuleUnload, "cuModuleUnload", (CUmodule))                             \
  X(cuLaunchKernel, "cuLaunchKernel",                                         \
    (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,  \
     unsigned, CUstream, void **, void **))                                   \
  X(cuEventCreate, "cuEventCreate", (CUevent *, unsigned))                    \
  X(cuEventRecord, "cuEventRecord", (CUevent, CUstream))                      \
  X(cuEventSynchronize, "cuEventSynchronize", (CUevent))                      \
  X(cuEventElapsedTime, "cuEventElapsedTime_v2", (float *, CUevent, CUevent)) \
  X(cuEventDestroy, "cuEventDestroy_v2", (CUevent))                           \
  X(cuGetErrorName, "cuGetErrorName", (CUresult, const char **))              \
  X(cuGetErrorString, "cuGetErrorString", (CUresult, const char **))

struct DriverApi {
#define LZRT_DECLARE_MEMBER(member, symbol, params) CUresult(*member) params;
  LZRT_DRIVER_FUNCTIONS(LZRT_DECLARE_MEMBER)
#undef LZRT_DECLARE_MEMBER
  bool isFake = false;
  bool isEmulator = false;
  /// Fill every block the allocator hands out with 0xFF bytes (NaN for
  /// floats) so that reads of never-written memory show; emulator only.
  bool poisonAllocations = false;
};

/// The error type thrown inside the runtime; the C API turns it into the
/// thread-local last-error string. Exceptions never cross the C boundary.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Loads libcuda.so.1 once per process; throws Error when it is absent or
/// lacks an entry point.
const DriverApi &realDriver();
/// The process-wide fake driver (see FakeDriver.cpp).
const DriverApi &fakeDriver();
/// The fake driver plus kernel execution on the CPU (see EmulatorDriver.cpp).
const DriverApi &emulatorDriver();

/// Formats `<call> failed: <CUDA error name> (<description>)`.
std::string describeFailure(const DriverApi &api, const char *call,
                            CUresult result);

/// Throws Error naming `call` unless `result` is CUDA_SUCCESS.
inline void check(const DriverApi &api, CUresult result, const char *call,
                  const std::string &context = {}) {
  if (result != CUDA_SUCCESS)
    throw Error(describeFailure(api, call, result) + context);
}

} // namespace lzrt

#endif // LAZYMLIR_CUDA_RUNTIME_DRIVER_H
