//===- Allocator.cpp - Caching device memory allocator --------------------===//
//
// See Allocator.h. On CUDA_ERROR_OUT_OF_MEMORY the cache is released and the
// allocation retried once: cached-but-unused blocks are the usual reason a
// long-running process runs out of device memory.
//
//===----------------------------------------------------------------------===//

#include "Allocator.h"

namespace lzrt {

namespace {
constexpr size_t kSmallStep = 512;
constexpr size_t kSmallLimit = size_t(1) << 20;
constexpr size_t kLargeStep = size_t(2) << 20;

size_t roundUp(size_t n, size_t step) { return (n + step - 1) / step * step; }
} // namespace

size_t CachingAllocator::roundSize(size_t nbytes) {
  if (nbytes == 0)
    return kSmallStep; // zero-size buffers still get a distinct pointer
  return nbytes <= kSmallLimit ? roundUp(nbytes, kSmallStep)
                               : roundUp(nbytes, kLargeStep);
}

CachingAllocator::~CachingAllocator() {
  // Best effort: the context may already be failing; errors are ignored.
  std::lock_guard<std::mutex> lock(mutex);
  try {
    releaseCachedLocked();
  } catch (const Error &) {
  }
  for (auto &entry : live)
    api.cuMemFree(entry.first);
}

size_t CachingAllocator::requestedBytes(CUdeviceptr ptr) const {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = requested.find(ptr);
  return it == requested.end() ? 0 : it->second;
}

CUdeviceptr CachingAllocator::allocate(size_t nbytes) {
  CUdeviceptr ptr = take(nbytes);
  {
    std::lock_guard<std::mutex> lock(mutex);
    requested[ptr] = nbytes;
  }
  // Emulator: every block handed out, fresh or reused, starts as 0xFF bytes.
  if (api.poisonAllocations)
    check(api, api.cuMemsetD8Async(ptr, 0xFF, roundSize(nbytes), nullptr),
          "cuMemsetD8Async", " while poisoning a new allocation");
  return ptr;
}

CUdeviceptr CachingAllocator::take(size_t nbytes) {
  size_t size = roundSize(nbytes);
  std::lock_guard<std::mutex> lock(mutex);
  auto it = freeLists.find(size);
  if (it != freeLists.end() && !it->second.empty()) {
    CUdeviceptr ptr = it->second.back();
    it->second.pop_back();
    counters.bytes_cached -= size;
    counters.bytes_in_use += size;
    ++counters.cache_hits;
    live[ptr] = size;
    return ptr;
  }
  ++counters.cache_misses;
  CUdeviceptr ptr = 0;
  CUresult result = api.cuMemAlloc(&ptr, size);
  if (result == CUDA_ERROR_OUT_OF_MEMORY && counters.bytes_cached) {
    ++counters.oom_retries;
    releaseCachedLocked();
    result = api.cuMemAlloc(&ptr, size);
  }
  check(api, result, "cuMemAlloc_v2",
        " while allocating " + std::to_string(nbytes) + " bytes (" +
            std::to_string(counters.bytes_in_use) + " bytes in use)");
  ++counters.driver_allocs;
  counters.bytes_in_use += size;
  live[ptr] = size;
  return ptr;
}

void CachingAllocator::deallocate(CUdeviceptr ptr) {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = live.find(ptr);
  if (it == live.end())
    throw Error("free of a device pointer the allocator does not own: " +
                std::to_string(ptr));
  size_t size = it->second;
  live.erase(it);
  requested.erase(ptr);
  freeLists[size].push_back(ptr);
  counters.bytes_in_use -= size;
  counters.bytes_cached += size;
}

void CachingAllocator::emptyCache() {
  std::lock_guard<std::mutex> lock(mutex);
  releaseCachedLocked();
}

void CachingAllocator::releaseCachedLocked() {
  // Keep going after a failure so that one bad block does not pin the rest;
  // report the first failure.
  CUresult first = CUDA_SUCCESS;
  for (auto &entry : freeLists) {
    for (CUdeviceptr ptr : entry.second) {
      CUresult result = api.cuMemFree(ptr);
      if (result != CUDA_SUCCESS && first == CUDA_SUCCESS)
        first = result;
      ++counters.driver_frees;
      counters.bytes_cached -= entry.first;
    }
  }
  freeLists.clear();
  check(api, first, "cuMemFree_v2");
}

lzrt_allocator_stats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex);
  return counters;
}

} // namespace lzrt
