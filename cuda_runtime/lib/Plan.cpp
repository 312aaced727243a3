//===- Plan.cpp - Parse and execute launch plans --------------------------===//
//
// Parsing tracks the state of every buffer slot through the statements so
// that use-before-alloc, use-after-free and double binding are rejected up
// front. Execution resolves kernels once (cached), then walks the ops.
//
//===----------------------------------------------------------------------===//

#include "Plan.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace lzrt {

namespace {

enum class SlotState : uint8_t { Unused, Arg, Live, Freed };

/// Thrown by the helpers below; the line loop adds the line number and text.
struct LineError {
  std::string message;
};

uint64_t parseUnsigned(const std::string &token, uint64_t max,
                       const char *what) {
  if (token.empty() || token[0] < '0' || token[0] > '9')
    throw LineError{std::string("bad ") + what + " '" + token + "'"};
  errno = 0;
  char *end = nullptr;
  unsigned long long value = std::strtoull(token.c_str(), &end, 10);
  if (*end || errno == ERANGE)
    throw LineError{std::string("bad ") + what + " '" + token + "'"};
  if (value > max)
    throw LineError{std::string(what) + " " + token + " out of range (max " +
                    std::to_string(max) + ")"};
  return value;
}

int64_t parseSigned(const std::string &token, int64_t min, int64_t max,
                    const char *what) {
  errno = 0;
  char *end = nullptr;
  long long value = std::strtoll(token.c_str(), &end, 10);
  if (token.empty() || *end || errno == ERANGE || value < min || value > max)
    throw LineError{std::string("bad ") + what + " value '" + token + "'"};
  return value;
}

uint64_t parseHexBits(const std::string &token, size_t digits,
                      const char *what) {
  bool ok = token.size() == digits;
  for (char c : token)
    ok = ok && std::isxdigit(static_cast<unsigned char>(c));
  if (!ok)
    throw LineError{std::string("bad ") + what + " bits '" + token +
                    "' (expected " + std::to_string(digits) + " hex digits)"};
  return std::strtoull(token.c_str(), nullptr, 16);
}

} // namespace

std::unique_ptr<Plan> Plan::parse(const std::string &text) {
  auto plan = std::make_unique<Plan>();
  std::vector<SlotState> slots;
  std::vector<uint64_t> slotBytes; // alloc size, for bounds checks
  std::vector<uint64_t> slotNeed;  // caller-argument slots: bytes accessed
  bool sawHeader = false, sawBuffers = false;

  std::istringstream lines(text);
  std::string raw;
  uint32_t lineNo = 0;
  while (std::getline(lines, raw)) {
    ++lineNo;
    std::string body = raw.substr(0, raw.find('#'));
    std::istringstream words(body);
    std::vector<std::string> tok;
    for (std::string w; words >> w;)
      tok.push_back(w);
    if (tok.empty())
      continue;
    try {
      const std::string &op = tok[0];
      auto expectCount = [&](size_t n) {
        if (tok.size() != n)
          throw LineError{"'" + op + "' expects " + std::to_string(n - 1) +
                          " operands, got " + std::to_string(tok.size() - 1)};
      };
      auto slotIndex = [&](const std::string &t) {
        uint64_t slot = parseUnsigned(t, UINT32_MAX, "slot");
        if (slot >= plan->numBuffers)
          throw LineError{"slot " + t + " out of range (plan has " +
                          std::to_string(plan->numBuffers) + " buffers)"};
        return static_cast<uint32_t>(slot);
      };
      auto usable = [&](uint32_t slot) {
        if (slots[slot] == SlotState::Unused)
          throw LineError{"slot " + std::to_string(slot) +
                          " used before 'arg' or 'alloc'"};
        if (slots[slot] == SlotState::Freed)
          throw LineError{"slot " + std::to_string(slot) + " used after 'free'"};
        return slot;
      };
      auto checkBytes = [&](uint32_t slot, uint64_t end) {
        if (slots[slot] == SlotState::Arg)
          slotNeed[slot] = std::max(slotNeed[slot], end);
        if (slots[slot] == SlotState::Live && end > slotBytes[slot])
          throw LineError{"access of " + std::to_string(end) +
                          " bytes exceeds slot " + std::to_string(slot) +
                          " (" + std::to_string(slotBytes[slot]) + " bytes)"};
      };

      if (!sawHeader) {
        if (op != "lazymlir-plan" || tok.size() != 2)
          throw LineError{"expected header 'lazymlir-plan 1'"};
        if (tok[1] != "1")
          throw LineError{"unsupported plan version '" + tok[1] + "'"};
        sawHeader = true;
        continue;
      }
      if (!sawBuffers) {
        if (op != "buffers")
          throw LineError{"expected 'buffers <N>' after the header"};
        expectCount(2);
        plan->numBuffers = static_cast<uint32_t>(
            parseUnsigned(tok[1], 1u << 20, "buffer count"));
        slots.assign(plan->numBuffers, SlotState::Unused);
        slotBytes.assign(plan->numBuffers, 0);
        slotNeed.assign(plan->numBuffers, 0);
        sawBuffers = true;
        continue;
      }
      PlanOp o{};
      o.line = lineNo;
      if (op == "arg") {
        if (tok.size() != 4)
          expectCount(3); // `arg <slot> <index> [<nbytes>]`
        uint32_t slot = slotIndex(tok[1]);
        if (slots[slot] != SlotState::Unused)
          throw LineError{"slot " + tok[1] + " is already bound"};
        auto index =
            static_cast<uint32_t>(parseUnsigned(tok[2], 1u << 16, "arg index"));
        slots[slot] = SlotState::Arg;
        if (tok.size() == 4)
          checkBytes(slot, parseUnsigned(tok[3], UINT64_MAX, "byte count"));
        plan->bindings.emplace_back(slot, index);
        plan->numCallerArgs = std::max(plan->numCallerArgs, index + 1);
        continue;
      }
      if (op == "alloc") {
        expectCount(3);
        o.kind = PlanOp::Alloc;
        o.dst = slotIndex(tok[1]);
        if (slots[o.dst] == SlotState::Arg || slots[o.dst] == SlotState::Live)
          throw LineError{"slot " + tok[1] + " is already bound"};
        o.bytes = parseUnsigned(tok[2], UINT64_MAX, "byte count");
        slots[o.dst] = SlotState::Live;
        slotBytes[o.dst] = o.bytes;
      } else if (op == "free") {
        expectCount(2);
        o.kind = PlanOp::Free;
        o.dst = slotIndex(tok[1]);
        if (slots[usable(o.dst)] != SlotState::Live)
          throw LineError{"slot " + tok[1] + " is a caller argument, not an "
                          "allocation"};
        slots[o.dst] = SlotState::Freed;
      } else if (op == "copy") {
        expectCount(4);
        o.kind = PlanOp::Copy;
        // `<slot>[+<byte offset>]`: a contiguous view of a slot.
        auto slotRef = [&](const std::string &ref, uint64_t &offset) {
          size_t plus = ref.find('+');
          uint32_t slot = usable(slotIndex(ref.substr(0, plus)));
          offset = plus == std::string::npos
                       ? 0
                       : parseUnsigned(ref.substr(plus + 1), UINT64_MAX,
                                       "copy offset");
          return slot;
        };
        o.dst = slotRef(tok[1], o.dstOffset);
        o.src = slotRef(tok[2], o.srcOffset);
        o.bytes = parseUnsigned(tok[3], UINT64_MAX, "byte count");
        if (o.bytes > UINT64_MAX - std::max(o.dstOffset, o.srcOffset))
          throw LineError{"copy extent overflows"};
        checkBytes(o.dst, o.dstOffset + o.bytes);
        checkBytes(o.src, o.srcOffset + o.bytes);
      } else if (op == "memset") {
        expectCount(4);
        o.kind = PlanOp::Memset;
        o.dst = usable(slotIndex(tok[1]));
        o.src = static_cast<uint32_t>(parseUnsigned(tok[2], 255, "byte value"));
        o.bytes = parseUnsigned(tok[3], UINT64_MAX, "byte count");
        checkBytes(o.dst, o.bytes);
      } else if (op == "launch") {
        if (tok.size() < 11)
          throw LineError{"'launch' expects <module> <kernel> <gx> <gy> <gz> "
                          "<bx> <by> <bz> <shared_bytes> <nargs> <arg>..."};
        o.kind = PlanOp::Launch;
        auto module =
            static_cast<uint32_t>(parseUnsigned(tok[1], 1u << 16, "module"));
        Kernel kernel{module, tok[2]};
        for (int i = 0; i < 3; ++i) {
          o.grid[i] = static_cast<uint32_t>(
              parseUnsigned(tok[3 + i], UINT32_MAX, "grid dimension"));
          o.block[i] = static_cast<uint32_t>(
              parseUnsigned(tok[6 + i], UINT32_MAX, "block dimension"));
          if (!o.grid[i] || !o.block[i])
            throw LineError{"grid and block dimensions must be positive"};
        }
        o.sharedBytes = static_cast<uint32_t>(
            parseUnsigned(tok[9], UINT32_MAX, "shared bytes"));
        uint64_t nargs = parseUnsigned(tok[10], 4096, "argument count");
        if (tok.size() - 11 != nargs)
          throw LineError{"launch declares " + std::to_string(nargs) +
                          " arguments but has " +
                          std::to_string(tok.size() - 11)};
        o.firstArg = static_cast<uint32_t>(plan->args.size());
        o.numArgs = static_cast<uint32_t>(nargs);
        for (size_t i = 11; i < tok.size(); ++i) {
          const std::string &a = tok[i];
          PlanArg arg{};
          std::string tail = a.substr(a.find(':') + 1);
          if (a[0] == 'p' && a.find(':') == std::string::npos) {
            // p<slot>[+<offset>][[<nbytes>]]: nbytes = bytes the kernel may
            // access from the pointer.
            size_t bracket = a.find('[');
            std::string ref = a.substr(0, bracket);
            uint64_t extent = 0;
            if (bracket != std::string::npos) {
              if (a.back() != ']')
                throw LineError{"bad kernel argument '" + a + "'"};
              extent = parseUnsigned(a.substr(bracket + 1, a.size() - bracket - 2),
                                     UINT64_MAX, "argument byte count");
            }
            size_t plus = ref.find('+');
            arg.kind = PlanArg::Ptr;
            arg.slot = usable(slotIndex(ref.substr(1, plus - 1)));
            if (plus != std::string::npos)
              arg.value = parseUnsigned(ref.substr(plus + 1), UINT64_MAX,
                                        "pointer offset");
            if (extent > UINT64_MAX - arg.value)
              throw LineError{"argument extent overflows: '" + a + "'"};
            if (extent || plus != std::string::npos)
              checkBytes(arg.slot, arg.value + extent);
          } else if (a.rfind("i32:", 0) == 0) {
            arg.kind = PlanArg::I32;
            arg.value = static_cast<uint32_t>(
                parseSigned(tail, INT32_MIN, INT32_MAX, "i32"));
          } else if (a.rfind("i64:", 0) == 0) {
            arg.kind = PlanArg::I64;
            arg.value = static_cast<uint64_t>(
                parseSigned(tail, INT64_MIN, INT64_MAX, "i64"));
          } else if (a.rfind("f32:", 0) == 0) {
            arg.kind = PlanArg::F32;
            arg.value = parseHexBits(tail, 8, "f32");
          } else if (a.rfind("f64:", 0) == 0) {
            arg.kind = PlanArg::F64;
            arg.value = parseHexBits(tail, 16, "f64");
          } else {
            throw LineError{"bad kernel argument '" + a + "'"};
          }
          plan->args.push_back(arg);
        }
        size_t k = 0;
        while (k < plan->kernels.size() &&
               (plan->kernels[k].module != module ||
                plan->kernels[k].name != kernel.name))
          ++k;
        if (k == plan->kernels.size())
          plan->kernels.push_back(kernel);
        o.dst = static_cast<uint32_t>(k);
        plan->numModules = std::max(plan->numModules, module + 1);
        ++plan->numLaunches;
      } else if (op == "buffers" || op == "lazymlir-plan") {
        throw LineError{"duplicate '" + op + "' statement"};
      } else {
        throw LineError{"unknown statement '" + op + "'"};
      }
      plan->ops.push_back(o);
    } catch (const LineError &e) {
      throw Error("plan line " + std::to_string(lineNo) + ": " + e.message +
                  ": '" + raw + "'");
    }
  }
  plan->argBytes.assign(plan->numCallerArgs, 0);
  for (auto &b : plan->bindings)
    plan->argBytes[b.second] = slotNeed.empty() ? 0 : slotNeed[b.first];
  if (!sawHeader)
    throw Error("plan: missing header 'lazymlir-plan 1'");
  if (!sawBuffers)
    throw Error("plan: missing 'buffers <N>' statement");
  return plan;
}

lzrt_plan_info Plan::info() const {
  lzrt_plan_info i{};
  i.num_buffers = static_cast<int>(numBuffers);
  i.num_args = static_cast<int>(numCallerArgs);
  i.num_modules = static_cast<int>(numModules);
  i.num_launches = static_cast<int>(numLaunches);
  i.num_ops = static_cast<int>(ops.size());
  return i;
}

std::vector<CUfunction>
Plan::resolveKernels(const DriverApi &api,
                     const std::vector<CUmodule> &modules) {
  std::lock_guard<std::mutex> lock(cacheMutex);
  resolvedFor.resize(kernels.size(), nullptr);
  functions.resize(kernels.size(), nullptr);
  for (size_t k = 0; k < kernels.size(); ++k) {
    CUmodule module = modules[kernels[k].module];
    if (resolvedFor[k] == module && functions[k])
      continue;
    check(api,
          api.cuModuleGetFunction(&functions[k], module,
                                  kernels[k].name.c_str()),
          "cuModuleGetFunction",
          " for kernel '" + kernels[k].name + "' of module " +
              std::to_string(kernels[k].module));
    resolvedFor[k] = module;
  }
  return functions; // a copy: concurrent runs may re-resolve the cache
}

void Plan::run(const DriverApi &api, CachingAllocator &allocator,
               CUstream stream, const std::vector<CUmodule> &modules,
               const uint64_t *callerArgs, size_t numArgs,
               bool syncEachLaunch) {
  if (numArgs < numCallerArgs)
    throw Error("plan needs " + std::to_string(numCallerArgs) +
                " pointer arguments, got " + std::to_string(numArgs));
  if (modules.size() < numModules)
    throw Error("plan needs " + std::to_string(numModules) +
                " modules, got " + std::to_string(modules.size()));
  for (CUmodule m : modules)
    if (!m)
      throw Error("plan run with an unloaded module");
  std::vector<CUfunction> fns = resolveKernels(api, modules);

  // A caller buffer that the allocator knows must hold what the plan's
  // kernels access in it (foreign or interior pointers cannot be checked).
  for (size_t i = 0; i < argBytes.size(); ++i) {
    size_t have = argBytes[i] ? allocator.requestedBytes(callerArgs[i]) : 0;
    if (have && have < argBytes[i])
      throw Error("plan argument " + std::to_string(i) + " is a " +
                  std::to_string(have) + "-byte buffer, but the plan accesses " +
                  std::to_string(argBytes[i]) + " bytes of it");
  }
  std::vector<CUdeviceptr> ptrs(numBuffers, 0);
  for (auto &b : bindings)
    ptrs[b.first] = callerArgs[b.second];

  // Slots allocated by this run and not yet freed; returned on every exit.
  struct Temporaries {
    CachingAllocator &allocator;
    std::vector<CUdeviceptr> &ptrs;
    std::vector<bool> owned;
    ~Temporaries() {
      for (size_t i = 0; i < owned.size(); ++i)
        if (owned[i]) {
          try {
            allocator.deallocate(ptrs[i]);
          } catch (const Error &) {
          }
        }
    }
  } temps{allocator, ptrs, std::vector<bool>(numBuffers, false)};

  std::vector<uint64_t> values;
  std::vector<void *> params;
  for (const PlanOp &o : ops) {
    try {
      switch (o.kind) {
      case PlanOp::Alloc:
        ptrs[o.dst] = allocator.allocate(o.bytes);
        temps.owned[o.dst] = true;
        break;
      case PlanOp::Free:
        temps.owned[o.dst] = false;
        allocator.deallocate(ptrs[o.dst]);
        break;
      case PlanOp::Copy:
        check(api,
              api.cuMemcpyDtoDAsync(ptrs[o.dst] + o.dstOffset,
                                    ptrs[o.src] + o.srcOffset, o.bytes, stream),
              "cuMemcpyDtoDAsync_v2");
        break;
      case PlanOp::Memset:
        check(api,
              api.cuMemsetD8Async(ptrs[o.dst], static_cast<unsigned char>(o.src),
                                  o.bytes, stream),
              "cuMemsetD8Async");
        break;
      case PlanOp::Launch: {
        // Each value sits in its own 8-byte slot; the driver reads as many
        // bytes as the kernel parameter has (little-endian, so a 4-byte
        // value is the low half). The trailing null is for the fake driver.
        values.assign(o.numArgs, 0);
        params.assign(o.numArgs + 1, nullptr);
        for (uint32_t i = 0; i < o.numArgs; ++i) {
          const PlanArg &a = args[o.firstArg + i];
          values[i] = a.kind == PlanArg::Ptr ? ptrs[a.slot] + a.value : a.value;
          params[i] = &values[i];
        }
        check(api,
              api.cuLaunchKernel(fns[o.dst], o.grid[0], o.grid[1], o.grid[2],
                                 o.block[0], o.block[1], o.block[2],
                                 o.sharedBytes, stream, params.data(),
                                 nullptr),
              "cuLaunchKernel", " for kernel '" + kernels[o.dst].name + "'");
        if (syncEachLaunch)
          check(api, api.cuStreamSynchronize(stream), "cuStreamSynchronize",
                " after kernel '" + kernels[o.dst].name + "'");
        break;
      }
      }
    } catch (const Error &e) {
      throw Error(std::string(e.what()) + " (plan line " +
                  std::to_string(o.line) + ")");
    }
  }
}

} // namespace lzrt
