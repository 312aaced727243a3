"""What a view costs under PyTorch's functionalization with a backend that does nothing.

    python benchmarks/view_floor.py [--repeats N]

The lazy device records a view below functionalization: PyTorch's FunctionalTensorWrapper
turns `x.view(64)` into `view_copy` on the inner tensor, keeps the view's ViewMeta, and
autograd's ADInplaceOrView kernel makes the view's autograd metadata (with a view-replay
function: a functional tensor does not support as_strided). This script measures that
part alone, in a process without lazymlir: a C++ PrivateUse1 backend (built here with
torch.utils.cpp_extension) whose `view_copy` only makes a storage-less TensorImpl of the
output's sizes ("new impl", what any backend must do), or returns a cached one ("cached
impl": PyTorch's layers alone). The workloads are trace_overhead.py's view rows; eager
CPU runs in the same loop, interleaved, process CPU time, one torch thread.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time

import torch
from torch.utils import cpp_extension

_SOURCE = r"""
#include <torch/extension.h>
#include <map>

namespace {
int mode = 0;  // 0: a new TensorImpl per call; 1: one cached per output shape
std::map<std::vector<int64_t>, at::Tensor> cache;

at::Tensor make(c10::IntArrayRef sizes, caffe2::TypeMeta dtype) {
  int64_t numel = 1;
  for (auto s : sizes) numel *= s;
  c10::Storage storage(c10::Storage::use_byte_size_t(), numel * dtype.itemsize(),
                       c10::DataPtr(nullptr, c10::Device(c10::DeviceType::PrivateUse1, 0)),
                       nullptr, false);
  auto t = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dtype);
  t.unsafeGetTensorImpl()->set_sizes_contiguous(sizes);
  return t;
}

at::Tensor view_copy(const at::Tensor& self, c10::SymIntArrayRef size) {
  std::vector<int64_t> s;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < size.size(); i++) {
    int64_t v = size[i].expect_int();
    if (v == -1) infer = i; else known *= v;
    s.push_back(v);
  }
  if (infer >= 0) s[infer] = self.numel() / known;
  if (mode == 1) {
    auto found = cache.find(s);
    if (found != cache.end()) return found->second;
    return cache[s] = make(s, self.dtype());
  }
  return make(s, self.dtype());
}

void refuse(const c10::OperatorHandle& op, torch::jit::Stack*) {
  TORCH_CHECK(false, "view floor backend: no kernel for ", op.schema().operator_name());
}
}  // namespace

at::Tensor make_input() { return make({8, 8}, caffe2::TypeMeta::Make<float>()); }
void set_mode(int64_t m) { mode = static_cast<int>(m); }

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("view_copy", &view_copy); }
TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse>());
}
"""

OPS = 1000


def _view(x):
    out = None
    for _ in range(OPS):
        out = x.view(64)
    return out


def _reshape_view(x):  # trace_overhead.py's "reshape / view" row
    out = None
    for _ in range(OPS // 2):
        out = x.reshape(64).view(8, 8)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    ext = cpp_extension.load_inline("lazymlir_view_floor", _SOURCE,
                                    functions=["make_input", "set_mode"], extra_cflags=["-O2"],
                                    verbose=False)
    torch.utils.rename_privateuse1_backend("viewfloor")
    cases = {  # name: (tensor, view_copy mode)
        "eager CPU": (torch.randn(8, 8), 0),
        "functionalization over a backend making a new TensorImpl": (
            torch._to_functional_tensor(ext.make_input()), 0),
        "functionalization over a backend returning a cached TensorImpl": (
            torch._to_functional_tensor(ext.make_input()), 1),
        "functionalization over CPU (view_copy copies)": (
            torch._to_functional_tensor(torch.randn(8, 8)), 0),
    }
    rows = []
    for workload in (_view, _reshape_view):
        times: dict = {name: [] for name in cases}
        for x, mode in cases.values():
            ext.set_mode(mode)
            workload(x)
        for _ in range(args.repeats):
            for name, (x, mode) in cases.items():
                ext.set_mode(mode)
                gc.collect()
                began = time.process_time()
                keep = workload(x)
                times[name].append(time.process_time() - began)
                del keep
        eager = statistics.median(times["eager CPU"])
        for name, samples in times.items():
            m = statistics.median(samples)
            rows.append(f"| {workload.__name__.strip('_')} | {name} | {1e6 * m / OPS:.2f} "
                        f"| {m / eager:.2f}x |")
    print("| workload | case | us/op | x eager |\n| --- | --- | ---: | ---: |")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
