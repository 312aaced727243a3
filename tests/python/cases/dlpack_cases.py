"""DLPack cases on the cuda target, run in one child process by test_dlpack.py.

Run as `python dlpack_cases.py` with LAZYMLIR_TARGET=cuda and LAZYMLIR_CUDA_DRIVER=
emulator (or fake: then no kernel runs and only the cases that read no computed
values are meaningful, see VALUES_NEED_KERNELS). Device memory of these drivers is host
memory, so a consumer can read what a pointer points at: wrong pointers show as wrong
values (or a crash, which is why this runs in a child). Each case prints one JSON line
{"case", "ok", "error"}; a crash leaves the cases after it without a line.

`FakeCudaTensor` stands in for a torch.cuda tensor (this torch build has no CUDA):
device memory from a second runtime on the same driver (another library on the same
device), exported through `__dlpack__` with a deleter written in Python that counts
its calls.
"""

from __future__ import annotations

import ctypes
import gc
import json
import sys
import time
import traceback
import types

import numpy as np
import torch

import lazymlir
from lazymlir.targets import cuda_driver, dlpack_abi
from lazymlir.tracing import values

NP = {torch.float32: np.float32, torch.float16: np.float16, torch.int64: np.int64,
      torch.bool: np.bool_, torch.uint8: np.uint8}
CASES = []


def case(fn):
    CASES.append(fn)
    return fn


def target():
    return lazymlir.targets.active()


def stats() -> dict:
    return target().runtime.allocator_stats()


def host_view(address: int, shape, strides, dtype: torch.dtype) -> np.ndarray:
    """What a consumer sees at `address` (strides in elements)."""
    itemsize = np.dtype(NP[dtype]).itemsize
    count = 1 + sum((s - 1) * st for s, st in zip(shape, strides)) if all(shape) else 0
    raw = np.ctypeslib.as_array((ctypes.c_uint8 * max(count * itemsize, 1)).from_address(
        address)).view(NP[dtype])
    return np.lib.stride_tricks.as_strided(raw, shape, [st * itemsize for st in strides])


def value_of(tensor):
    torch._sync(tensor)
    return values.value_of(values.inner(tensor))


class FakeCudaTensor:
    """A producer of kDLCUDA tensors over another runtime's memory (see module doc)."""

    _deleter_type = dlpack_abi.DELETER

    def __init__(self, runtime, array: np.ndarray, device_id: int = 0, strides=None,
                 dtype_code=None, versioned_ok: bool = True, skip: int = 0):
        self.runtime, self.array = runtime, np.ascontiguousarray(array)
        self.skip = skip  # export the 1-d view array[skip:] (data = buffer + skip elements)
        self.buf = runtime.alloc(max(self.array.nbytes, 1))
        runtime.copy_in(self.array, self.buf)
        self.device_id, self.strides = device_id, strides
        self.code = dtype_code or dlpack_abi.dtype_code(torch.from_numpy(self.array[:0]).dtype)
        self.versioned_ok = versioned_ok
        self.deleted, self.streams, self._live = 0, [], {}
        self._deleter = self._deleter_type(self._delete)

    @property
    def device(self):
        return torch.device("cuda", self.device_id)

    def detach(self):
        return self

    def contiguous(self):
        return self

    def host(self) -> np.ndarray:
        """The producer's memory as a numpy array (emulator memory is host memory)."""
        return host_view(self.buf.ptr, self.array.shape,
                         [s // self.array.itemsize for s in self.array.strides],
                         torch.from_numpy(self.array[:0]).dtype)

    def _delete(self, managed):
        self.deleted += 1
        self._live.pop(managed, None)

    def __dlpack_device__(self):
        return (dlpack_abi.KDLCUDA, self.device_id)

    def __dlpack__(self, *, stream=None, max_version=None):
        if max_version is not None and not self.versioned_ok:
            raise TypeError("max_version is not supported")  # an old producer
        self.streams.append(stream)
        versioned = max_version is not None and max_version[0] >= 1
        array = self.array[self.skip:] if self.skip else self.array
        n = array.ndim
        shape = (ctypes.c_int64 * max(n, 1))(*array.shape)
        strides = (ctypes.c_int64 * max(n, 1))(
            *(self.strides or [s // array.itemsize for s in array.strides]))
        data = self.buf.ptr + self.skip * array.itemsize
        tensor = dlpack_abi.DLTensor(data, dlpack_abi.DLDevice(2, self.device_id), n,
                                     dlpack_abi.DLDataType(*self.code, 1), shape, strides, 0)
        deleter = ctypes.cast(self._deleter, ctypes.c_void_p).value
        if versioned:
            managed = dlpack_abi.DLManagedTensorVersioned(
                dlpack_abi.DLPackVersion(1, 0), None, deleter, 0, tensor)
        else:
            managed = dlpack_abi.DLManagedTensor(tensor, None, deleter)
        address = ctypes.addressof(managed)
        self._live[address] = (managed, shape, strides)
        return dlpack_abi.make_capsule(address, versioned)


def producer_runtime():
    info = target().runtime.device_info()
    return cuda_driver.CudaRuntime.create(fake=info["fake"], emulator=info["emulator"])


def consume(capsule):
    tensor = dlpack_abi.consume(capsule)
    strides = tensor.strides or torch.empty(tensor.shape, device="meta").stride()
    return tensor, host_view(tensor.data, tensor.shape, strides, tensor.dtype)


# ---------------------------------------------------------------- export


@case
def export_pointer_layout_and_values():
    """The consumer's pointer is the value's device buffer; shape, strides, dtype and
    values round trip, for contiguous tensors and for views (lazy views are values of
    their own: dense, as their strides say), legacy and versioned capsules."""
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6) - 7
    pairs = []
    for dtype in (torch.float32, torch.float16, torch.int64, torch.bool):
        x, lazy = base.to(dtype), base.to(dtype).to("lazy_mlir")
        compute = (lambda t: ~t) if dtype == torch.bool else (lambda t: t * 3)
        for name, view in (("computed", compute), ("slice", lambda t: t[:, 1:4]),
                           ("transpose", lambda t: t.t()), ("select", lambda t: t[2])):
            pairs.append((f"{dtype} {name}", view(x), view(lazy)))
    lazymlir.mark_step()  # one graph for all of them
    for what, eager, lz in pairs:
        for versioned in (False, True):
            capsule = lazymlir.to_dlpack(lz, versioned=versioned)
            value = value_of(lz)
            tensor, seen = consume(capsule)
            what = f"{what} versioned={versioned}"
            assert tensor.data == value.data.ptr, what
            assert tensor.device == (dlpack_abi.KDLCUDA, target().ordinal), what
            assert tensor.shape == tuple(lz.shape) == tuple(eager.shape), what
            assert tensor.strides == tuple(lz.stride()), (what, tensor.strides)
            assert tensor.dtype == eager.dtype and tensor.read_only == versioned, what
            np.testing.assert_array_equal(seen, eager.numpy(), err_msg=what)
            tensor.release()
    assert stats()["retained_refs"] == 0


@case
def export_protocol_methods():
    """Tensor.__dlpack__/__dlpack_device__ answer for lazy_mlir tensors (what
    torch.from_dlpack and other libraries call); CPU tensors keep PyTorch's."""
    y = torch.arange(6.).to("lazy_mlir") * 3
    assert y.__dlpack_device__() == (dlpack_abi.KDLCUDA, target().ordinal)
    capsule = y.__dlpack__(stream=1, max_version=(1, 0))
    tensor, seen = consume(capsule)
    assert tensor.versioned and tensor.data == value_of(y).data.ptr
    np.testing.assert_array_equal(seen, np.arange(6.) * 3)
    tensor.release()
    legacy = dlpack_abi.consume(y.__dlpack__())
    assert not legacy.versioned
    legacy.release()
    assert torch.arange(3).__dlpack_device__() == (dlpack_abi.KDLCPU, 0)


@case
def export_orders_streams():
    """A consumer that names its stream (torch.from_dlpack passes 1, the legacy default
    stream, or its current stream) is ordered by events both ways, without host waits;
    one that names none gets a synchronized stream, and its release waits for the whole
    context before the block can be reused."""
    y = torch.arange(6.).to("lazy_mlir") * 3
    lazymlir.mark_step()
    names = ("cuStreamWaitEvent", "cuStreamSynchronize", "cuCtxSynchronize")

    def calls():
        return {name: cuda_driver.fake.call_count(name) for name in names}

    for stream, on_export, on_release in (
            (1, (1, 0, 0), (1, 0, 0)), (None, (1, 0, 0), (1, 0, 0)),
            (-1, (0, 1, 0), (0, 0, 1))):
        before = calls()
        tensor = dlpack_abi.consume(y.__dlpack__(stream=stream))
        exported = calls()
        tensor.release()
        released = calls()
        assert tuple(exported[n] - before[n] for n in names) == on_export, (stream, exported)
        assert tuple(released[n] - exported[n] for n in names) == on_release, (stream, released)


@case
def export_view_with_offset_and_strides():
    """The runtime exports a strided view of a buffer: data = buffer + byte offset."""
    rt = target().runtime
    base = torch.arange(20, dtype=torch.float32)
    buf = rt.copy_in(base)
    managed = rt.dlpack_export(buf, [3, 2], [1, 5], 2, 32, byte_offset=8)
    tensor, seen = consume(dlpack_abi.make_capsule(managed, False))
    assert tensor.data == buf.ptr + 8 and tensor.strides == (1, 5)
    np.testing.assert_array_equal(seen, base.as_strided((3, 2), (1, 5), 2).numpy())
    tensor.release()
    try:
        rt.dlpack_export(buf, [4, 5], [5, 1], 2, 32, byte_offset=8)
    except cuda_driver.CudaError as error:
        assert "80 bytes at offset 8 of a 80-byte buffer" in str(error), error
    else:
        raise AssertionError("an export past the end of the buffer was accepted")
    try:
        rt.dlpack_export(types.SimpleNamespace(ptr=buf.ptr + 4), [1], [1], 2, 32)
    except cuda_driver.CudaError as error:
        assert "not the start of a live buffer" in str(error), error
    else:
        raise AssertionError("an export of an interior pointer was accepted")


@case
def capsule_is_consumed_once():
    y = torch.ones(4).to("lazy_mlir") + 1
    capsule = lazymlir.to_dlpack(y)
    tensor = dlpack_abi.consume(capsule)
    for consumer in (dlpack_abi.consume, lazymlir.from_dlpack):
        try:
            consumer(capsule)
        except ValueError as error:
            assert "consumed already" in str(error), error
        else:
            raise AssertionError("a consumed capsule was consumed again")
    tensor.release()
    # An unconsumed capsule releases its reference when it is collected.
    before = stats()["retained_refs"]
    capsule = lazymlir.to_dlpack(y)
    assert stats()["retained_refs"] == before + 1
    del capsule
    gc.collect()
    assert stats()["retained_refs"] == before


@case
def exported_buffer_outlives_the_lazy_tensor():
    """The consumer's reference keeps the block out of the cache after the lazy tensor
    is gone; the block returns when both have let go (in either order)."""
    for consumer_first in (False, True):
        y = torch.arange(256, dtype=torch.float32).to("lazy_mlir") * 2  # a 1 KiB block
        lazymlir.mark_step()
        tensor, seen = consume(lazymlir.to_dlpack(y))
        gc.collect()  # what the expression left behind goes now, not later
        ptr, in_use = tensor.data, stats()["bytes_in_use"]
        assert stats()["retained_refs"] == 1  # the lazy value's and the consumer's
        if consumer_first:
            tensor.release()
            assert stats()["bytes_in_use"] == in_use, "freed while the lazy tensor lives"
            del y
        else:
            del y
            gc.collect()
            assert stats()["bytes_in_use"] == in_use, "freed while the consumer holds it"
            other = target().runtime.alloc(1024)  # same size class: must not get it
            assert other.ptr != ptr
            np.testing.assert_array_equal(seen, np.arange(256) * 2.0)
            del other
            in_use = stats()["bytes_in_use"]
            tensor.release()
        gc.collect()
        assert stats()["bytes_in_use"] == in_use - 1024, (stats(), in_use)
        again = target().runtime.alloc(1024)
        assert again.ptr == ptr, "the released block did not go back to the cache"
        del again
    assert stats()["retained_refs"] == 0


@case
def export_outlives_its_runtime():
    """A runtime closed while a consumer holds an export stays alive until the
    consumer releases it; then its memory goes back to the driver."""
    rt = producer_runtime()
    buf = rt.copy_in(torch.arange(8, dtype=torch.int64))
    allocs = cuda_driver.fake.memory()[0]
    tensor, seen = consume(dlpack_abi.make_capsule(
        rt.dlpack_export(buf, [8], [1], 0, 64), False))
    del buf
    rt.close()
    np.testing.assert_array_equal(seen, np.arange(8))
    assert cuda_driver.fake.memory()[0] == allocs
    tensor.release()
    assert cuda_driver.fake.memory()[0] == allocs - 1


# ---------------------------------------------------------------- import


@case
def import_is_zero_copy_and_deleter_runs_once():
    prod = producer_runtime()
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    producer = FakeCudaTensor(prod, data)
    y = lazymlir.from_dlpack(producer)
    value = value_of(y)
    assert value.data.ptr == producer.buf.ptr, "the import copied"
    assert producer.streams == [target().runtime.stream()], producer.streams
    assert stats()["external_buffers"] == 1
    # Producer writes show on the lazy side: it reads the producer's memory.
    producer.host()[0, 0] = 100.0
    expected = data.copy()
    expected[0, 0] = 100.0
    np.testing.assert_array_equal((y * 2).cpu().numpy(), expected * 2)
    # Writes through the lazy side's runtime buffer show in the producer's memory.
    target().runtime.memset(value.data, 0, 4)
    assert producer.host()[0, 0] == 0.0
    # The deleter waits for every lazy user of the memory (detach shares the value).
    z = y.detach()
    del y, value
    gc.collect()
    assert producer.deleted == 0
    w = (z + 1).cpu()
    assert w[0, 0] == 1.0
    del z
    gc.collect()
    assert producer.deleted == 1 and stats()["external_buffers"] == 0
    gc.collect()
    assert producer.deleted == 1


@case
def import_unaligned_view_is_copied():
    """A view 4 bytes into the producer's buffer (a slice) is not 16-byte aligned, which
    the kernels assume of every buffer (`.align 16` pointer parameters): the import
    copies it into an aligned buffer of ours and gives the producer its memory back."""
    prod = producer_runtime()
    data = np.arange(13, dtype=np.float32)
    producer = FakeCudaTensor(prod, data, skip=1)
    y = lazymlir.from_dlpack(producer)
    value = value_of(y)
    assert value.data.ptr % cuda_driver.KERNEL_ARG_ALIGN == 0, value.data.ptr
    assert value.data.ptr != producer.buf.ptr + 4, "an unaligned view was used in place"
    assert producer.deleted == 1 and stats()["external_buffers"] == 0
    np.testing.assert_array_equal((y * 2).cpu().numpy(), data[1:] * 2)


@case
def import_legacy_producer_and_round_trip():
    """A producer without max_version gives a legacy capsule; our own export imported
    back shares the buffer (no copy) and balances the references."""
    prod = producer_runtime()
    producer = FakeCudaTensor(prod, np.array([[True, False], [False, True]]), versioned_ok=False)
    y = lazymlir.from_dlpack(producer)
    assert y.dtype == torch.bool and value_of(y).data.ptr == producer.buf.ptr
    assert (~y).cpu().tolist() == [[False, True], [True, False]]
    del y
    gc.collect()
    assert producer.deleted == 1
    x = torch.arange(5, dtype=torch.int64).to("lazy_mlir") * 7
    back = lazymlir.from_dlpack(lazymlir.to_dlpack(x))
    assert value_of(back).data.ptr == value_of(x).data.ptr
    assert back.cpu().tolist() == [0, 7, 14, 21, 28]
    del x, back
    gc.collect()
    assert stats()["retained_refs"] == 0 and stats()["external_buffers"] == 0


@case
def import_same_memory_twice():
    """Two imports of one producer buffer (an argument passed twice) share the runtime's
    wrapper; each capsule's deleter runs once, after the last lazy user of either."""
    prod = producer_runtime()
    producer = FakeCudaTensor(prod, np.arange(4, dtype=np.int64))
    a, b = lazymlir.from_dlpack(producer), lazymlir.from_dlpack(producer)
    assert value_of(a).data.ptr == value_of(b).data.ptr == producer.buf.ptr
    assert stats()["external_buffers"] == 1
    assert (a + b).cpu().tolist() == [0, 2, 4, 6]
    del a
    gc.collect()
    assert producer.deleted == 0
    del b
    gc.collect()
    assert producer.deleted == 2 and stats()["external_buffers"] == 0


@case
def import_cpu_source_is_copied():
    cpu = torch.arange(6, dtype=torch.float16).reshape(2, 3)
    y = lazymlir.from_dlpack(cpu)
    assert value_of(y).data.ptr != cpu.data_ptr()
    assert torch.equal(y.cpu(), cpu)


@case
def import_errors_are_clear_and_release_the_capsule():
    prod = producer_runtime()
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    other = FakeCudaTensor(prod, data, device_id=1)
    expect_error(lambda: lazymlir.from_dlpack(other), ValueError,
                 "kDLCUDA:1 cannot be used by the cuda target, whose runtime is on CUDA "
                 "device 0")
    assert other.streams == []  # refused before a capsule was asked for
    # A capsule whose own device differs from what __dlpack_device__ said.
    capsules = [other.__dlpack__()]
    expect_error(lambda: lazymlir.from_dlpack(capsules[0]), ValueError, "kDLCUDA:1")
    assert other.deleted == 0  # refused before it was consumed: the capsule still owns it
    capsules.clear()
    gc.collect()
    assert other.deleted == 1
    strided = FakeCudaTensor(prod, data, strides=[1, 2])
    expect_error(lambda: lazymlir.from_dlpack(strided), ValueError,
                 r"strides \(1, 2\) for shape \(2, 3\) cannot be used in place")
    assert strided.deleted == 1
    uint32 = FakeCudaTensor(prod, data.view(np.int32), dtype_code=(1, 32))
    expect_error(lambda: lazymlir.from_dlpack(uint32), TypeError,
                 "code=1 bits=32 lanes=1 has no torch dtype")
    assert uint32.deleted == 1
    expect_error(lambda: lazymlir.to_dlpack(torch.ones(2)), TypeError,
                 "takes a lazy_mlir tensor")
    expect_error(lambda: lazymlir.to_dlpack(torch.ones(2).to("lazy_mlir").requires_grad_()),
                 BufferError, "require gradient")
    assert stats()["external_buffers"] == 0


def expect_error(fn, kind, text):
    import re

    try:
        fn()
    except kind as error:
        assert re.search(text, str(error)), str(error)
    else:
        raise AssertionError(f"no {kind.__name__} raised")


# ---------------------------------------------------------------- torch.compile


@case
def compiled_graph_takes_and_returns_cuda_tensors_in_place():
    """The backend's compiled graph (lazymlir.dynamo._compile, what AOTAutograd calls) on
    a graph traced with fake torch.cuda tensors: torch.cuda inputs are read in place and
    CUDA outputs leave as kDLCUDA capsules over the runtime's buffers; a CPU input and
    output in the same graph keep the CPU path."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    from lazymlir import dynamo

    def f(x, y):
        return x * 2 + 1, y + 1

    with FakeTensorMode():
        gm = make_fx(f)(torch.empty(3, 4, device="cuda"), torch.empty(3))
    run = dynamo._compile(gm, None)
    prod = producer_runtime()
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    producer = FakeCudaTensor(prod, data)
    handed = []

    def from_dlpack(capsule):  # this torch has no CUDA: what torch would have wrapped
        tensor, seen = consume(capsule)
        handed.append(tensor)
        return seen.copy()

    def current_stream(device):  # torch's default stream: the legacy one (handle 0)
        assert device == torch.device("cuda", 0), device
        return types.SimpleNamespace(cuda_stream=0)

    saved = torch.from_dlpack, torch.cuda.current_stream
    torch.from_dlpack, torch.cuda.current_stream = from_dlpack, current_stream
    waits = cuda_driver.fake.call_count("cuStreamWaitEvent")
    try:
        out_cuda, out_cpu = run([producer, torch.arange(3.)])
    finally:
        torch.from_dlpack, torch.cuda.current_stream = saved
    # The output was ordered for torch's stream (an event), not by a host wait.
    assert cuda_driver.fake.call_count("cuStreamWaitEvent") == waits + 1
    assert producer.streams == [target().runtime.stream()]
    (tensor,) = handed
    assert tensor.device == (dlpack_abi.KDLCUDA, 0) and tensor.shape == (3, 4)
    np.testing.assert_array_equal(out_cuda, data * 2 + 1)
    assert isinstance(out_cpu, torch.Tensor) and out_cpu.device.type == "cpu"
    assert out_cpu.tolist() == [1.0, 2.0, 3.0]
    gc.collect()
    assert producer.deleted == 1  # the input buffer was dropped after the run
    in_use = stats()["bytes_in_use"]  # the output's block, held by "torch" alone
    tensor.release()
    assert stats()["bytes_in_use"] == in_use - 512, (stats(), in_use)


@case
def compiled_function_with_cpu_tensors_is_unchanged():
    fn = torch.compile(lambda a, b: (a @ b).relu(), backend="lazymlir")
    a, b = torch.randn(4, 5), torch.randn(5, 3)
    out = fn(a, b)
    assert out.device.type == "cpu"
    torch.testing.assert_close(out, (a @ b).relu(), rtol=1e-5, atol=1e-5)


VALUES_NEED_KERNELS = {"export_pointer_layout_and_values", "export_protocol_methods",
                       "exported_buffer_outlives_the_lazy_tensor",
                       "import_is_zero_copy_and_deleter_runs_once",
                       "import_legacy_producer_and_round_trip",
                       "compiled_graph_takes_and_returns_cuda_tensors_in_place",
                       "compiled_function_with_cpu_tensors_is_unchanged"}


def main(selected: list[str]) -> None:
    assert target().name == "cuda", target().name
    for fn in CASES:
        if selected and fn.__name__ not in selected:
            continue
        print(json.dumps({"start": fn.__name__}), flush=True)
        start = time.perf_counter()
        try:
            fn()
            result = {"case": fn.__name__, "ok": True,
                      "seconds": round(time.perf_counter() - start, 2)}
        except BaseException:  # noqa: BLE001  reported to the parent test
            result = {"case": fn.__name__, "ok": False, "error": traceback.format_exc()}
        gc.collect()
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
