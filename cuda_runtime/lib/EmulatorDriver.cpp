//===- EmulatorDriver.cpp - Run the compiled kernels on the CPU -----------===//
//
// A CUDA driver stand-in that executes kernels. Memory, copies, memsets,
// streams and events are the fake driver's (host memory, everything
// synchronous); what differs:
//
// * cuModuleLoadData takes an emulator image instead of PTX/cubin: the magic
//   "LZEMU2\0\0", the byte counts of a shared object and of a symbol prefix
//   (little-endian uint64s), the prefix, then the shared object, built by
//   lowering/gpu/emulator.py from the same gpu-stage kernels the PTX comes
//   from (one .so may hold all modules of a graph; the prefix names the
//   module's kernels). It is written to a temporary file and dlopen'ed, once
//   for all modules holding the same shared object.
// * cuModuleGetFunction(name) finds `__lzemu_<prefix><name>`, which runs one
//   block: `void(void **params, const int64_t ids[9])` with ids = block id
//   (x,y,z), grid size, block size. `__lzemu_nargs_<prefix><name>` (int32) is
//   its parameter count, checked against the null-terminated params of every
//   launch.
// * cuLaunchKernel runs every block of the grid, in order or (option) in
//   reverse order to expose order dependence between blocks.
// * The allocator poisons every allocation it hands out (bytes 0xFF: NaN for
//   floats, -1 for integers), so a kernel that misses a write shows.
//
// Launches run on the calling thread before cuLaunchKernel returns; that is
// a valid schedule of the stream.
//
//===----------------------------------------------------------------------===//

#include "Driver.h"
#include "lazymlir_runtime.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>

namespace lzrt {
namespace {

constexpr char kMagic[8] = {'L', 'Z', 'E', 'M', 'U', '2', '\0', '\0'};
constexpr CUresult kInvalidImage = 200; // CUDA_ERROR_INVALID_IMAGE
constexpr CUresult kInvalidHandle = 400;
constexpr CUresult kLaunchFailed = 719;

using EmuEntry = void (*)(void **params, const int64_t *ids);

struct EmuFunction {
  std::string name;
  EmuEntry entry;
  int32_t numParams;
};

struct EmuModule {
  void *handle = nullptr;
  std::string prefix; // of its kernels' symbols
  std::string object; // the shared object's bytes: its key in EmuState::loaded
  std::deque<EmuFunction> functions; // deque: handles stay valid
};

/// A shared object dlopen'ed once however many modules (all gpu.modules of a
/// graph, usually) it holds.
struct Loaded {
  void *handle = nullptr;
  int refs = 0;
};

struct EmuState {
  std::mutex mutex;
  std::set<EmuModule *> modules;
  std::map<std::string, Loaded> loaded; // by shared object bytes
  bool reverseBlocks = false;
  uint64_t launches = 0, blocks = 0;
};

EmuState &emuState() {
  static EmuState s;
  return s;
}

CUresult emuDeviceGetName(char *name, int len, CUdevice) {
  std::snprintf(name, len, "lazymlir emulator device (kernels run on the CPU)");
  return CUDA_SUCCESS;
}

void *dlopenImage(const char *data, uint64_t size);

CUresult emuModuleLoadData(CUmodule *module, const void *image) {
  const auto *bytes = static_cast<const char *>(image);
  if (!image || std::memcmp(bytes, kMagic, sizeof kMagic) != 0)
    return kInvalidImage; // PTX or cubin: the emulator needs its CPU build
  uint64_t size = 0, prefixSize = 0;
  std::memcpy(&size, bytes + sizeof kMagic, sizeof size);
  std::memcpy(&prefixSize, bytes + sizeof kMagic + sizeof size, sizeof prefixSize);
  if (prefixSize > 4096)
    return kInvalidImage;
  const char *prefix = bytes + sizeof kMagic + 2 * sizeof size;
  const char *data = prefix + prefixSize;
  std::string object(data, size);
  EmuState &s = emuState();
  std::lock_guard<std::mutex> lock(s.mutex);
  Loaded &entry = s.loaded[object];
  if (!entry.handle) {
    entry.handle = dlopenImage(data, size);
    if (!entry.handle) {
      s.loaded.erase(object);
      return kInvalidImage;
    }
  }
  ++entry.refs;
  auto *mod = new EmuModule;
  mod->handle = entry.handle;
  mod->prefix.assign(prefix, prefixSize);
  mod->object = std::move(object);
  s.modules.insert(mod);
  *module = reinterpret_cast<CUmodule>(mod);
  return CUDA_SUCCESS;
}

/// Writes a shared object to a temporary file and dlopens it (null on failure).
void *dlopenImage(const char *data, uint64_t size) {
  const char *tmpdir = std::getenv("TMPDIR");
  std::string path = std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") +
                     "/lazymlir-emu-XXXXXX.so";
  int fd = mkstemps(path.data(), 3);
  if (fd < 0)
    return nullptr;
  bool written = true;
  for (uint64_t done = 0; done < size;) {
    ssize_t n = write(fd, data + done, size - done);
    if (n <= 0) {
      written = false;
      break;
    }
    done += static_cast<uint64_t>(n);
  }
  close(fd);
  void *handle = written ? dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL) : nullptr;
  unlink(path.c_str()); // the mapping stays valid after the file is gone
  return handle;
}

CUresult emuModuleGetFunction(CUfunction *fn, CUmodule module,
                              const char *name) {
  EmuState &s = emuState();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto *mod = reinterpret_cast<EmuModule *>(module);
  if (!s.modules.count(mod))
    return kInvalidHandle;
  std::string symbol = mod->prefix + name;
  void *sym = dlsym(mod->handle, ("__lzemu_" + symbol).c_str());
  void *count = dlsym(mod->handle, ("__lzemu_nargs_" + symbol).c_str());
  if (!sym || !count)
    return CUDA_ERROR_NOT_FOUND;
  mod->functions.push_back({name, reinterpret_cast<EmuEntry>(sym),
                            *static_cast<const int32_t *>(count)});
  *fn = reinterpret_cast<CUfunction>(&mod->functions.back());
  return CUDA_SUCCESS;
}

CUresult emuModuleUnload(CUmodule module) {
  EmuState &s = emuState();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto *mod = reinterpret_cast<EmuModule *>(module);
  if (!s.modules.erase(mod))
    return kInvalidHandle;
  auto entry = s.loaded.find(mod->object);
  if (entry != s.loaded.end() && --entry->second.refs == 0) {
    dlclose(entry->second.handle);
    s.loaded.erase(entry);
  }
  delete mod;
  return CUDA_SUCCESS;
}

CUresult emuLaunchKernel(CUfunction fn, unsigned gx, unsigned gy, unsigned gz,
                         unsigned bx, unsigned by, unsigned bz, unsigned shared,
                         CUstream, void **params, void **extra) {
  if (!fn || !gx || !gy || !gz || !bx || !by || !bz || extra)
    return CUDA_ERROR_INVALID_VALUE;
  if (shared)
    return kLaunchFailed; // no kernel uses dynamic shared memory yet
  const auto *f = reinterpret_cast<const EmuFunction *>(fn);
  // The runtime ends `params` with a null sentinel (see Plan.cpp).
  int32_t count = 0;
  while (params && params[count])
    ++count;
  if (count != f->numParams)
    return CUDA_ERROR_INVALID_VALUE;
  bool reverse;
  {
    EmuState &s = emuState();
    std::lock_guard<std::mutex> lock(s.mutex);
    reverse = s.reverseBlocks;
    ++s.launches;
    s.blocks += uint64_t(gx) * gy * gz;
  }
  uint64_t total = uint64_t(gx) * gy * gz;
  int64_t ids[9] = {0, 0, 0, gx, gy, gz, bx, by, bz};
  for (uint64_t i = 0; i < total; ++i) {
    uint64_t linear = reverse ? total - 1 - i : i;
    ids[0] = int64_t(linear % gx);
    ids[1] = int64_t(linear / gx % gy);
    ids[2] = int64_t(linear / (uint64_t(gx) * gy));
    f->entry(params, ids);
  }
  return CUDA_SUCCESS;
}

} // namespace

const DriverApi &emulatorDriver() {
  static const DriverApi api = [] {
    DriverApi a = fakeDriver();
    a.cuDeviceGetName = emuDeviceGetName;
    a.cuModuleLoadData = emuModuleLoadData;
    a.cuModuleGetFunction = emuModuleGetFunction;
    a.cuModuleUnload = emuModuleUnload;
    a.cuLaunchKernel = emuLaunchKernel;
    a.isFake = false;
    a.isEmulator = true;
    a.poisonAllocations = true;
    return a;
  }();
  return api;
}

} // namespace lzrt

extern "C" {

int lzrt_emulator_set_reverse_blocks(int reverse) {
  auto &s = lzrt::emuState();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.reverseBlocks = reverse != 0;
  return 0;
}

int lzrt_emulator_stats(uint64_t *launches, uint64_t *blocks) {
  auto &s = lzrt::emuState();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (launches)
    *launches = s.launches;
  if (blocks)
    *blocks = s.blocks;
  return 0;
}

} // extern "C"
