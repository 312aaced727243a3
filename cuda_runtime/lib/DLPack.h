//===- DLPack.h - The DLPack ABI (dlpack.h v1.0), the parts used here -----===//
//
// Declared here rather than included so that building needs no dlpack
// checkout; layouts follow https://github.com/dmlc/dlpack include/dlpack/
// dlpack.h (v1.0, ABI-stable since v0.2 for DLManagedTensor).
//
//===----------------------------------------------------------------------===//

#ifndef LAZYMLIR_CUDA_RUNTIME_DLPACK_H
#define LAZYMLIR_CUDA_RUNTIME_DLPACK_H

#include <cstdint>

namespace lzrt::dlpack {

enum DeviceType : int32_t { kDLCPU = 1, kDLCUDA = 2 };

struct Device {
  int32_t device_type;
  int32_t device_id;
};

struct DataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};

struct Tensor {
  void *data;
  Device device;
  int32_t ndim;
  DataType dtype;
  int64_t *shape;
  int64_t *strides;
  uint64_t byte_offset;
};

struct ManagedTensor {
  Tensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(ManagedTensor *self);
};

struct Version {
  uint32_t major;
  uint32_t minor;
};

struct ManagedTensorVersioned {
  Version version;
  void *manager_ctx;
  void (*deleter)(ManagedTensorVersioned *self);
  uint64_t flags;
  Tensor dl_tensor;
};

constexpr uint64_t kFlagReadOnly = 1;

} // namespace lzrt::dlpack

#endif // LAZYMLIR_CUDA_RUNTIME_DLPACK_H
