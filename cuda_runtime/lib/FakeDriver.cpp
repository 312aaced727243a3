//===- FakeDriver.cpp - A CUDA driver stand-in for tests without a GPU ----===//
//
// "Device memory" is host memory, copies and memsets really move bytes, and
// launches run nothing but are logged with decoded arguments. Arguments are
// decoded from the `.entry` signatures of the loaded PTX (cuLaunchKernel
// itself carries no types), so modules must be PTX text; an unknown kernel
// name fails like the real driver (CUDA_ERROR_NOT_FOUND). Any entry point can
// be made to fail on its nth call, and a memory limit produces real OOMs.
//
// The state is process-wide because driver entry points are plain functions
// without user data; a mutex serializes all fake calls.
//
//===----------------------------------------------------------------------===//

#include "Driver.h"
#include "lazymlir_runtime.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <vector>

namespace lzrt {
namespace {

struct Param {
  std::string type; // PTX type without the dot, e.g. "u64", "f32", "b8"
  size_t count = 1; // array length for `.b8 name[16]` style parameters
  size_t elementSize = 0;
};

struct FakeFunction {
  std::string name;
  std::vector<Param> params;
};

struct FakeModule {
  std::string image;
  std::map<std::string, std::vector<Param>> entries;
  std::deque<FakeFunction> functions; // deque: handles stay valid
};

struct FakeEvent {
  bool recorded = false;
  std::chrono::steady_clock::time_point time;
};

struct State {
  std::mutex mutex;
  std::map<uint64_t, size_t> allocations; // base -> size
  uint64_t liveBytes = 0, memoryLimit = 0;
  std::map<std::string, uint64_t> callCounts;
  std::string failCall; // empty: any call
  int failCountdown = 0, failError = 0;
  std::string log;
  std::set<FakeModule *> modules;
  std::set<FakeEvent *> events;
};

State &state() {
  static State s;
  return s;
}

// Counts the call and applies failure injection. `symbol` is the exported
// name; injection also accepts it without the `_v2` suffix.
CUresult enter(State &s, const char *symbol) {
  ++s.callCounts[symbol];
  if (s.failCountdown <= 0)
    return CUDA_SUCCESS;
  std::string name = symbol;
  bool matches = s.failCall.empty() || s.failCall == name ||
                 s.failCall + "_v2" == name;
  if (!matches || --s.failCountdown > 0)
    return CUDA_SUCCESS;
  return s.failError;
}

#define FAKE_ENTER(symbol)                                                     \
  State &s = state();                                                          \
  std::lock_guard<std::mutex> lock(s.mutex);                                   \
  if (CUresult injected = enter(s, symbol))                                    \
  return injected

bool inRange(State &s, uint64_t ptr, size_t n) {
  auto it = s.allocations.upper_bound(ptr);
  if (it == s.allocations.begin())
    return false;
  --it;
  return ptr >= it->first && ptr + n <= it->first + it->second;
}

size_t ptxTypeSize(const std::string &type) {
  if (type == "pred")
    return 1;
  size_t bits = std::strtoul(type.c_str() + 1, nullptr, 10);
  return bits / 8;
}

// Parses `.entry name ( .param .u64 a, .param .align 8 .b8 b[16] )`.
std::map<std::string, std::vector<Param>> parseEntries(const std::string &ptx) {
  std::map<std::string, std::vector<Param>> entries;
  for (size_t pos = ptx.find(".entry"); pos != std::string::npos;
       pos = ptx.find(".entry", pos + 6)) {
    size_t nameBegin = ptx.find_first_not_of(" \t\r\n", pos + 6);
    size_t nameEnd = ptx.find_first_of(" \t\r\n(", nameBegin);
    if (nameBegin == std::string::npos || nameEnd == std::string::npos)
      break;
    std::vector<Param> &params =
        entries[ptx.substr(nameBegin, nameEnd - nameBegin)];
    size_t open = ptx.find_first_not_of(" \t\r\n", nameEnd);
    if (open == std::string::npos || ptx[open] != '(')
      continue;
    size_t close = ptx.find(')', open);
    std::stringstream list(ptx.substr(open + 1, close - open - 1));
    std::string decl;
    while (std::getline(list, decl, ',')) {
      std::stringstream words(decl);
      std::string word;
      Param param;
      while (words >> word) {
        if (word == ".align") {
          words >> word; // the alignment value
        } else if (word[0] == '.' && word != ".param" && word != ".ptr" &&
                   word != ".global" && word != ".const" &&
                   word != ".shared" && word != ".local") {
          param.type = word.substr(1);
        } else if (word[0] != '.' && !param.type.empty()) {
          size_t bracket = word.find('[');
          if (bracket != std::string::npos)
            param.count = std::strtoul(word.c_str() + bracket + 1, nullptr, 10);
        }
      }
      if (param.type.empty())
        continue;
      param.elementSize = ptxTypeSize(param.type);
      params.push_back(param);
    }
  }
  return entries;
}

std::string formatParam(const Param &param, const void *value) {
  const auto *bytes = static_cast<const unsigned char *>(value);
  char buf[64];
  if (param.count != 1 || param.elementSize == 0 || param.elementSize > 8) {
    std::string hex = param.type + "[" + std::to_string(param.count) + "]:";
    for (size_t i = 0; i < param.count * param.elementSize; ++i) {
      std::snprintf(buf, sizeof buf, "%02x", bytes[i]);
      hex += buf;
    }
    return hex;
  }
  uint64_t raw = 0;
  std::memcpy(&raw, value, param.elementSize);
  char kind = param.type[0];
  if (kind == 'f') {
    std::snprintf(buf, sizeof buf, "%0*llx", int(param.elementSize * 2),
                  static_cast<unsigned long long>(raw));
  } else if (kind == 's') {
    // Sign-extend from the parameter width.
    unsigned shift = 64 - 8 * param.elementSize;
    long long v = static_cast<long long>(raw << shift) >> shift;
    std::snprintf(buf, sizeof buf, "%lld", v);
  } else {
    std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(raw));
  }
  return param.type + ":" + buf;
}

struct ErrorInfo {
  CUresult code;
  const char *name, *text;
};
constexpr ErrorInfo kErrors[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS",
     "an illegal memory access was encountered"},
    {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
     "too many resources requested for launch"},
    {719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

const ErrorInfo *findError(CUresult code) {
  for (const ErrorInfo &e : kErrors)
    if (e.code == code)
      return &e;
  return nullptr;
}

// --- Entry points ---------------------------------------------------------

CUresult fakeInit(unsigned) { FAKE_ENTER("cuInit"); return CUDA_SUCCESS; }

CUresult fakeDeviceGetCount(int *count) {
  FAKE_ENTER("cuDeviceGetCount");
  *count = 1;
  return CUDA_SUCCESS;
}

CUresult fakeDeviceGet(CUdevice *device, int ordinal) {
  FAKE_ENTER("cuDeviceGet");
  if (ordinal != 0)
    return 101; // CUDA_ERROR_INVALID_DEVICE
  *device = 0;
  return CUDA_SUCCESS;
}

CUresult fakeDeviceGetName(char *name, int len, CUdevice) {
  FAKE_ENTER("cuDeviceGetName");
  std::snprintf(name, len, "lazymlir fake device");
  return CUDA_SUCCESS;
}

CUresult fakeDeviceGetAttribute(int *value, int attribute, CUdevice) {
  FAKE_ENTER("cuDeviceGetAttribute");
  switch (attribute) {
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = 9; break;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = 0; break;
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = 4; break;
  default: *value = 0;
  }
  return CUDA_SUCCESS;
}

CUresult fakePrimaryCtxRetain(CUcontext *ctx, CUdevice) {
  FAKE_ENTER("cuDevicePrimaryCtxRetain");
  static char context;
  *ctx = reinterpret_cast<CUcontext>(&context);
  return CUDA_SUCCESS;
}

CUresult fakePrimaryCtxRelease(CUdevice) {
  FAKE_ENTER("cuDevicePrimaryCtxRelease_v2");
  return CUDA_SUCCESS;
}

CUresult fakeCtxSetCurrent(CUcontext) {
  FAKE_ENTER("cuCtxSetCurrent");
  return CUDA_SUCCESS;
}

// Every fake stream is synchronous: waiting for the context waits for nothing.
CUresult fakeCtxSynchronize() {
  FAKE_ENTER("cuCtxSynchronize");
  return CUDA_SUCCESS;
}

CUresult fakeStreamCreate(CUstream *stream, unsigned) {
  FAKE_ENTER("cuStreamCreate");
  *stream = reinterpret_cast<CUstream>(new char);
  return CUDA_SUCCESS;
}

CUresult fakeStreamDestroy(CUstream stream) {
  FAKE_ENTER("cuStreamDestroy_v2");
  delete reinterpret_cast<char *>(stream);
  return CUDA_SUCCESS;
}

CUresult fakeStreamSynchronize(CUstream) {
  FAKE_ENTER("cuStreamSynchronize");
  return CUDA_SUCCESS;
}

CUresult fakeMemAlloc(CUdeviceptr *ptr, size_t size) {
  FAKE_ENTER("cuMemAlloc_v2");
  if (size == 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (s.memoryLimit && s.liveBytes + size > s.memoryLimit)
    return CUDA_ERROR_OUT_OF_MEMORY;
  // 256-byte alignment, like cuMemAlloc.
  void *mem = std::aligned_alloc(256, (size + 255) / 256 * 256);
  if (!mem)
    return CUDA_ERROR_OUT_OF_MEMORY;
  *ptr = reinterpret_cast<uintptr_t>(mem);
  s.allocations[*ptr] = size;
  s.liveBytes += size;
  return CUDA_SUCCESS;
}

CUresult fakeMemFree(CUdeviceptr ptr) {
  FAKE_ENTER("cuMemFree_v2");
  auto it = s.allocations.find(ptr);
  if (it == s.allocations.end())
    return CUDA_ERROR_INVALID_VALUE;
  s.liveBytes -= it->second;
  s.allocations.erase(it);
  std::free(reinterpret_cast<void *>(ptr));
  return CUDA_SUCCESS;
}

CUresult fakeMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n, CUstream) {
  FAKE_ENTER("cuMemcpyHtoDAsync_v2");
  if (!inRange(s, dst, n))
    return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(reinterpret_cast<void *>(dst), src, n);
  return CUDA_SUCCESS;
}

CUresult fakeMemcpyDtoH(void *dst, CUdeviceptr src, size_t n, CUstream) {
  FAKE_ENTER("cuMemcpyDtoHAsync_v2");
  if (!inRange(s, src, n))
    return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(dst, reinterpret_cast<const void *>(src), n);
  return CUDA_SUCCESS;
}

CUresult fakeMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream) {
  FAKE_ENTER("cuMemcpyDtoDAsync_v2");
  if (!inRange(s, dst, n) || !inRange(s, src, n))
    return CUDA_ERROR_INVALID_VALUE;
  std::memmove(reinterpret_cast<void *>(dst),
               reinterpret_cast<const void *>(src), n);
  return CUDA_SUCCESS;
}

CUresult fakeMemsetD8(CUdeviceptr dst, unsigned char value, size_t n,
                      CUstream) {
  FAKE_ENTER("cuMemsetD8Async");
  if (!inRange(s, dst, n))
    return CUDA_ERROR_INVALID_VALUE;
  std::memset(reinterpret_cast<void *>(dst), value, n);
  return CUDA_SUCCESS;
}

CUresult fakeModuleLoadData(CUmodule *module, const void *image) {
  FAKE_ENTER("cuModuleLoadData");
  const char *text = static_cast<const char *>(image);
  if (std::strncmp(text, "\x7f" "ELF", 4) == 0)
    return 200; // CUDA_ERROR_INVALID_IMAGE: the fake understands PTX only
  auto mod = std::make_unique<FakeModule>();
  mod->image = text;
  if (mod->image.find(".version") == std::string::npos)
    return 218; // CUDA_ERROR_INVALID_PTX
  mod->entries = parseEntries(mod->image);
  *module = reinterpret_cast<CUmodule>(mod.get());
  s.modules.insert(mod.release());
  return CUDA_SUCCESS;
}

CUresult fakeModuleGetFunction(CUfunction *fn, CUmodule module,
                               const char *name) {
  FAKE_ENTER("cuModuleGetFunction");
  auto *mod = reinterpret_cast<FakeModule *>(module);
  if (!s.modules.count(mod))
    return 400; // CUDA_ERROR_INVALID_HANDLE
  auto it = mod->entries.find(name);
  if (it == mod->entries.end())
    return CUDA_ERROR_NOT_FOUND;
  mod->functions.push_back({name, it->second});
  *fn = reinterpret_cast<CUfunction>(&mod->functions.back());
  return CUDA_SUCCESS;
}

CUresult fakeModuleUnload(CUmodule module) {
  FAKE_ENTER("cuModuleUnload");
  auto *mod = reinterpret_cast<FakeModule *>(module);
  if (!s.modules.erase(mod))
    return 400;
  delete mod;
  return CUDA_SUCCESS;
}

CUresult fakeLaunchKernel(CUfunction fn, unsigned gx, unsigned gy, unsigned gz,
                          unsigned bx, unsigned by, unsigned bz,
                          unsigned shared, CUstream, void **params, void **) {
  FAKE_ENTER("cuLaunchKernel");
  if (!fn || !gx || !gy || !gz || !bx || !by || !bz)
    return CUDA_ERROR_INVALID_VALUE;
  const auto *f = reinterpret_cast<const FakeFunction *>(fn);
  // The runtime ends `params` with a null sentinel (harmless to the real
  // driver), which lets the fake reject argument-count mismatches instead of
  // reading out of bounds.
  size_t count = 0;
  while (params && params[count])
    ++count;
  if (count != f->params.size())
    return CUDA_ERROR_INVALID_VALUE;
  // Plain string appends, no ostream: on the H200 machine (GCC 13, torch 2.11+cu130 in
  // the process) an ostream's number insertion here crashed the process inside the
  // locale's num_put facet (docs/gpu-results.md); std::to_string needs no locale.
  auto three = [](unsigned a, unsigned b, unsigned c) {
    return std::to_string(a) + ',' + std::to_string(b) + ',' + std::to_string(c);
  };
  std::string line = f->name + " grid=" + three(gx, gy, gz) +
                     " block=" + three(bx, by, bz) +
                     " shared=" + std::to_string(shared) + " args=";
  for (size_t i = 0; i < f->params.size(); ++i)
    line += (i ? "," : "") + formatParam(f->params[i], params[i]);
  s.log += line + "\n";
  return CUDA_SUCCESS;
}

CUresult fakeEventCreate(CUevent *event, unsigned) {
  FAKE_ENTER("cuEventCreate");
  auto *ev = new FakeEvent;
  s.events.insert(ev);
  *event = reinterpret_cast<CUevent>(ev);
  return CUDA_SUCCESS;
}

CUresult fakeEventRecord(CUevent event, CUstream) {
  FAKE_ENTER("cuEventRecord");
  auto *ev = reinterpret_cast<FakeEvent *>(event);
  if (!s.events.count(ev))
    return 400;
  ev->recorded = true;
  ev->time = std::chrono::steady_clock::now();
  return CUDA_SUCCESS;
}

// Streams are synchronous here: waiting for a recorded event is a no-op, but the
// event must exist (counted, so tests can see that an order was set up).
CUresult fakeStreamWaitEvent(CUstream, CUevent event, unsigned) {
  FAKE_ENTER("cuStreamWaitEvent");
  return s.events.count(reinterpret_cast<FakeEvent *>(event))
             ? CUDA_SUCCESS
             : CUDA_ERROR_INVALID_VALUE;
}

CUresult fakeEventSynchronize(CUevent event) {
  FAKE_ENTER("cuEventSynchronize");
  return s.events.count(reinterpret_cast<FakeEvent *>(event)) ? CUDA_SUCCESS
                                                               : 400;
}

CUresult fakeEventElapsedTime(float *ms, CUevent start, CUevent end) {
  FAKE_ENTER("cuEventElapsedTime_v2");
  auto *a = reinterpret_cast<FakeEvent *>(start);
  auto *b = reinterpret_cast<FakeEvent *>(end);
  if (!s.events.count(a) || !s.events.count(b) || !a->recorded || !b->recorded)
    return 400;
  *ms = std::chrono::duration<float, std::milli>(b->time - a->time).count();
  return CUDA_SUCCESS;
}

CUresult fakeEventDestroy(CUevent event) {
  FAKE_ENTER("cuEventDestroy_v2");
  auto *ev = reinterpret_cast<FakeEvent *>(event);
  if (!s.events.erase(ev))
    return 400;
  delete ev;
  return CUDA_SUCCESS;
}

// Error queries are neither counted nor subject to injection: they are how
// failures get described.
CUresult fakeGetErrorName(CUresult code, const char **name) {
  const ErrorInfo *e = findError(code);
  *name = e ? e->name : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult fakeGetErrorString(CUresult code, const char **text) {
  const ErrorInfo *e = findError(code);
  *text = e ? e->text : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

} // namespace

const DriverApi &fakeDriver() {
  static const DriverApi api = [] {
    DriverApi a;
    a.cuInit = fakeInit;
    a.cuDeviceGetCount = fakeDeviceGetCount;
    a.cuDeviceGet = fakeDeviceGet;
    a.cuDeviceGetName = fakeDeviceGetName;
    a.cuDeviceGetAttribute = fakeDeviceGetAttribute;
    a.cuDevicePrimaryCtxRetain = fakePrimaryCtxRetain;
    a.cuDevicePrimaryCtxRelease = fakePrimaryCtxRelease;
    a.cuCtxSetCurrent = fakeCtxSetCurrent;
    a.cuCtxSynchronize = fakeCtxSynchronize;
    a.cuStreamCreate = fakeStreamCreate;
    a.cuStreamDestroy = fakeStreamDestroy;
    a.cuStreamSynchronize = fakeStreamSynchronize;
    a.cuMemAlloc = fakeMemAlloc;
    a.cuMemFree = fakeMemFree;
    a.cuMemcpyHtoDAsync = fakeMemcpyHtoD;
    a.cuMemcpyDtoHAsync = fakeMemcpyDtoH;
    a.cuMemcpyDtoDAsync = fakeMemcpyDtoD;
    a.cuMemsetD8Async = fakeMemsetD8;
    a.cuModuleLoadData = fakeModuleLoadData;
    a.cuModuleGetFunction = fakeModuleGetFunction;
    a.cuModuleUnload = fakeModuleUnload;
    a.cuLaunchKernel = fakeLaunchKernel;
    a.cuEventCreate = fakeEventCreate;
    a.cuEventRecord = fakeEventRecord;
    a.cuStreamWaitEvent = fakeStreamWaitEvent;
    a.cuEventSynchronize = fakeEventSynchronize;
    a.cuEventElapsedTime = fakeEventElapsedTime;
    a.cuEventDestroy = fakeEventDestroy;
    a.cuGetErrorName = fakeGetErrorName;
    a.cuGetErrorString = fakeGetErrorString;
    a.isFake = true;
    return a;
  }();
  return api;
}

} // namespace lzrt

// --- Fake-driver controls of the C API ---------------------------------------

using lzrt::state;

extern "C" {

int lzrt_fake_reset(void) {
  auto &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.log.clear();
  s.callCounts.clear();
  s.failCall.clear();
  s.failCountdown = s.failError = 0;
  s.memoryLimit = 0;
  return 0;
}

int lzrt_fake_fail_call(const char *call, int nth, int error) {
  auto &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.failCall = call ? call : "";
  s.failCountdown = nth;
  s.failError = error;
  return 0;
}

int lzrt_fake_set_memory_limit(uint64_t bytes) {
  auto &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.memoryLimit = bytes;
  return 0;
}

int lzrt_fake_launch_log(char *buf, size_t cap, size_t *len) {
  auto &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  *len = s.log.size();
  if (buf && cap) {
    size_t n = std::min(cap - 1, s.log.size());
    std::memcpy(buf, s.log.data(), n);
    buf[n] = '\0';
  }
  return 0;
}

int lzrt_fake_call_count(const char *call, uint64_t *count) {
  auto &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.callCounts.find(call);
  if (it == s.callCounts.end())
    it = s.callCounts.find(std::string(call) + "_v2");
  *count = it == s.callCounts.end() ? 0 : it->second;
  return 0;
}

int lzrt_fake_memory(uint64_t *live_allocs, uint64_t *live_bytes) {
  auto &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  *live_allocs = s.allocations.size();
  *live_bytes = s.liveBytes;
  return 0;
}

} // extern "C"
