//===- Plan.h - Launch plans: parse once, run many times ------------------===//
//
// A launch plan is the compiler's description of one compiled function on
// the GPU: which buffer slots are caller arguments, which are temporaries,
// and the copies, memsets and kernel launches to perform in order. The text
// format is in docs/cuda_runtime.md. Parsing validates everything that can
// be checked without a device, so a bad plan fails with a line number
// instead of a launch failure.
//
//===----------------------------------------------------------------------===//

#ifndef LAZYMLIR_CUDA_RUNTIME_PLAN_H
#define LAZYMLIR_CUDA_RUNTIME_PLAN_H

#include "Allocator.h"
#include "Driver.h"
#include "lazymlir_runtime.h"

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace lzrt {

struct PlanArg {
  enum Kind : uint8_t { Ptr, I32, I64, F32, F64 } kind;
  uint32_t slot;  // Ptr only
  uint64_t value; // Ptr: byte offset; otherwise the bits of the value
};

struct PlanOp {
  enum Kind : uint8_t { Alloc, Free, Copy, Memset, Launch } kind;
  uint32_t line;
  uint32_t dst = 0;   // slot; Launch: kernel index
  uint32_t src = 0;   // Copy: source slot; Memset: byte value
  uint64_t bytes = 0; // Alloc, Copy, Memset
  uint64_t dstOffset = 0, srcOffset = 0; // Copy: byte offsets into the slots
  uint32_t grid[3] = {}, block[3] = {}, sharedBytes = 0;
  uint32_t firstArg = 0, numArgs = 0; // into Plan::args
};

class Plan {
public:
  /// Throws Error("plan line N: <problem>: '<line text>'").
  static std::unique_ptr<Plan> parse(const std::string &text);

  /// Runs the plan on `stream`. `args` are the caller's device pointers.
  /// Temporaries are returned to the allocator even when a step fails.
  void run(const DriverApi &api, CachingAllocator &allocator, CUstream stream,
           const std::vector<CUmodule> &modules, const uint64_t *args,
           size_t numArgs, bool syncEachLaunch = false);

  lzrt_plan_info info() const;

private:
  struct Kernel {
    uint32_t module;
    std::string name;
  };
  std::vector<CUfunction> resolveKernels(const DriverApi &api,
                                         const std::vector<CUmodule> &modules);

  uint32_t numBuffers = 0;
  uint32_t numCallerArgs = 0;
  std::vector<uint64_t> argBytes; // per caller argument: bytes accessed (0: ?)
  std::vector<std::pair<uint32_t, uint32_t>> bindings; // (slot, arg index)
  std::vector<PlanOp> ops;
  std::vector<PlanArg> args;
  std::vector<Kernel> kernels;
  uint32_t numModules = 0, numLaunches = 0;

  // cuModuleGetFunction results, cached per plan; re-resolved only when the
  // plan runs with a different module for a kernel.
  std::mutex cacheMutex;
  std::vector<CUmodule> resolvedFor;
  std::vector<CUfunction> functions;
};

} // namespace lzrt

#endif // LAZYMLIR_CUDA_RUNTIME_PLAN_H
