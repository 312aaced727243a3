//===- Allocator.h - Caching device memory allocator ----------------------===//
//
// Device allocations are slow (cuMemAlloc/cuMemFree synchronize the device),
// and compiled graphs allocate the same sizes over and over. The allocator
// rounds requests to size classes and keeps freed blocks in per-class free
// lists for reuse; the driver is asked only on a miss. All users of a
// runtime enqueue work on its single stream, so a block freed after enqueued
// work may be handed out again at once: the stream orders the reuse.
//
// Blocks are reference counted: allocate() gives one reference, retain()
// adds one (a DLPack export holds one until its consumer releases it), and
// deallocate() drops one; the block goes back to the cache at zero. The
// allocator also tracks external buffers (DLPack imports): memory it did not
// allocate and never frees, whose owner's release callback runs when their
// last reference is dropped.
//
//===----------------------------------------------------------------------===//

#ifndef LAZYMLIR_CUDA_RUNTIME_ALLOCATOR_H
#define LAZYMLIR_CUDA_RUNTIME_ALLOCATOR_H

#include "Driver.h"
#include "lazymlir_runtime.h"

#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace lzrt {

class CachingAllocator {
public:
  explicit CachingAllocator(const DriverApi &api) : api(api) {}
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator &) = delete;
  CachingAllocator &operator=(const CachingAllocator &) = delete;

  /// Size class of a request: 512-byte steps up to 1 MiB, 2 MiB steps above
  /// (large buffers are few, so the coarse steps waste little but make
  /// slightly different sizes share blocks).
  static size_t roundSize(size_t nbytes);

  CUdeviceptr allocate(size_t nbytes);
  /// Drops one reference to a block or external buffer; at zero a block goes
  /// back to the cache and an external buffer's release callback runs (after
  /// the allocator's lock is released; exceptions from it are not caught).
  void deallocate(CUdeviceptr ptr);
  /// Adds a reference to a live block or external buffer starting at `ptr`.
  void retain(CUdeviceptr ptr);
  /// Adds a reference to `nbytes` of memory at `ptr` owned by someone else;
  /// `release(context)` runs when the last reference is dropped. A pointer
  /// adopted twice (two imports of one producer buffer) keeps both callbacks.
  /// If `ptr` is a live block of this allocator (a DLPack export imported
  /// back), the block gains a reference and `release` runs at once: the
  /// block's own reference count keeps it alive.
  void adoptExternal(CUdeviceptr ptr, size_t nbytes, void (*release)(void *),
                     void *context);
  bool isExternal(CUdeviceptr ptr) const;
  /// Bytes requested for the live block starting at `ptr`; 0 if `ptr` is not
  /// the start of a block this allocator handed out.
  size_t requestedBytes(CUdeviceptr ptr) const;
  /// Returns every cached block to the driver.
  void emptyCache();
  lzrt_allocator_stats stats() const;

private:
  CUdeviceptr take(size_t nbytes);
  void releaseCachedLocked();

  const DriverApi &api;
  mutable std::mutex mutex;
  std::unordered_map<CUdeviceptr, size_t> live;          // ptr -> class size
  std::unordered_map<CUdeviceptr, size_t> requested;     // ptr -> bytes asked
  std::map<size_t, std::vector<CUdeviceptr>> freeLists;  // class -> blocks
  std::unordered_map<CUdeviceptr, size_t> refs;          // live ptr -> count
  struct External {
    size_t nbytes;
    std::vector<std::pair<void (*)(void *), void *>> releases;
  };
  static void runReleases(const External &owner);
  std::unordered_map<CUdeviceptr, External> external;    // adopted memory
  lzrt_allocator_stats counters{};
};

} // namespace lzrt

#endif // LAZYMLIR_CUDA_RUNTIME_ALLOCATOR_H
