//===- Allocator.cpp - Caching device memory allocator --------------------===//
//
// See Allocator.h. On CUDA_ERROR_OUT_OF_MEMORY the cache is released and the
// allocation retried once: cached-but-unused blocks are the usual reason a
// long-running process runs out of device memory.
//
//===----------------------------------------------------------------------===//

#include "Allocator.h"

#include <algorithm>

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
  // External memory still referenced belongs to its producer: hand it back.
  for (auto &entry : external)
    runReleases(entry.second);
}

void CachingAllocator::runReleases(const External &owner) {
  for (auto &release : owner.releases)
    if (release.first)
      release.first(release.second);
}

size_t CachingAllocator::requestedBytes(CUdeviceptr ptr) const {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = requested.find(ptr);
  if (it != requested.end())
    return it->second;
  auto ext = external.find(ptr);
  return ext == external.end() ? 0 : ext->second.nbytes;
}

bool CachingAllocator::isExternal(CUdeviceptr ptr) const {
  std::lock_guard<std::mutex> lock(mutex);
  return external.count(ptr) != 0;
}

void CachingAllocator::retain(CUdeviceptr ptr) {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = refs.find(ptr);
  if (it == refs.end())
    throw Error("retain of a device pointer that is not the start of a live "
                "buffer: " + std::to_string(ptr));
  ++it->second;
  ++counters.retained_refs;
}

void CachingAllocator::adoptExternal(CUdeviceptr ptr, size_t nbytes,
                                     void (*release)(void *), void *context) {
  std::unique_lock<std::mutex> lock(mutex);
  if (ptr == 0)
    throw Error("cannot adopt a null device pointer");
  auto ext = external.find(ptr);
  if (ext != external.end()) {
    ext->second.nbytes = std::max(ext->second.nbytes, nbytes);
    ext->second.releases.emplace_back(release, context);
    ++refs[ptr];
    ++counters.retained_refs;
    return;
  }
  auto own = refs.find(ptr);
  if (own != refs.end()) { // one of our blocks, come back: no foreign owner
    ++own->second;
    ++counters.retained_refs;
    lock.unlock();
    if (release)
      release(context);
    return;
  }
  external[ptr] = External{nbytes, {{release, context}}};
  refs[ptr] = 1;
  ++counters.external_buffers;
}

CUdeviceptr CachingAllocator::allocate(size_t nbytes) {
  CUdeviceptr ptr = take(nbytes);
  {
    std::lock_guard<std::mutex> lock(mutex);
    requested[ptr] = nbytes;
    refs[ptr] = 1;
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
  std::unique_lock<std::mutex> lock(mutex);
  auto ref = refs.find(ptr);
  if (ref != refs.end() && ref->second > 1) {
    --ref->second;
    --counters.retained_refs;
    return;
  }
  auto ext = external.find(ptr);
  if (ext != external.end()) {
    External owner = ext->second;
    external.erase(ext);
    refs.erase(ptr);
    --counters.external_buffers;
    lock.unlock(); // the callback is foreign code (it may re-enter the runtime)
    runReleases(owner);
    return;
  }
  auto it = live.find(ptr);
  if (it == live.end())
    throw Error("free of a device pointer the allocator does not own: " +
                std::to_string(ptr));
  size_t size = it->second;
  live.erase(it);
  requested.erase(ptr);
  refs.erase(ptr);
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
