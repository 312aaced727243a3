"""The GPU check kit's runner: copied into the kit as `run.py`, run there with

    python run.py [--driver cuda|emulator] [--out DIR] [--only a,b] [--repeat N]

One file, longer than most here, because the kit carries it alone. It imports no
lazymlir, torch-mlir or MLIR (the kit is built elsewhere): the C++ runtime
(the kit's `cuda_runtime/` sources, built with CMake, or a given/prebuilt library) is
driven through its C API with ctypes, data is numpy. torch is imported only on the cuda
driver, for the eager baselines (each bundle's `graph.py`).

Every bundle (`bundles/<name>/bundle.json`) runs in a worker process, one after the
other; a worker that dies (a device-side assert aborts it on the emulator, a sticky
CUDA error ruins its context on a GPU) is replaced and the run goes on with the next
bundle, so nothing stops at the first failure. Per bundle: the launch plan runs on
the inputs, each output is compared with the float64 reference (normwise relative
error within the output dtype's tolerance; a NaN or infinity where the reference has
none fails; integer outputs exactly), on the emulator once more with the blocks of
every grid run last to first, then it is timed with the runtime's events after warm-up
(median of --repeat runs), and on a GPU next to torch eager CUDA and as a fraction
of the roofline (an H100 SXM's; an H200's memory bandwidth on one). On a GPU,
compute-sanitizer (memcheck, racecheck) runs a subset once more where the machine has
it, and DLPack is tried both ways with torch.cuda.
Writes report.md and report.json under --out; the last line printed is
`RESULT pass=N/T ...`.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import platform
import shutil
import site
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np

KIT = Path(__file__).resolve().parent
LIB_NAME = "liblazymlir_cuda_runtime.so"
# H100 SXM roofline (docs/gpu-results.md): HBM bytes/s and dense FLOP/s per dtype. An
# H200 has the same SMs and clocks (the same FLOP/s) with faster HBM3e.
HBM_BYTES_PER_S = 3.35e12
HBM_BYTES_PER_S_BY_NAME = {"H200": 4.8e12}
PEAK_FLOPS = {"float32": 60e12, "float16": 990e12, "bfloat16": 990e12, "float64": 60e12}
# Normwise relative error allowed against float64, by output dtype: a few roundings
# of the output type over the accumulation lengths of the kit's graphs.
TOLERANCE = {"float64": 1e-9, "float32": 1e-4, "float16": 4e-3, "bfloat16": 3e-2}
NP_DTYPES = {"float32": np.float32, "float64": np.float64, "float16": np.float16,
             "bfloat16": np.uint16, "int64": np.int64, "int32": np.int32, "int16": np.int16,
             "int8": np.int8, "uint8": np.uint8, "bool": np.uint8}
# How an out-of-range index may be reported: the checked graph's flag (lowering/front/
# checks.py), or a device-side assert (CUDA_ERROR_ASSERT; `Assertion ... failed` printed
# by the kernel), or the emulator's bounds verification aborting.
ASSERT_WORDS = ("bounds-check flag is set", "device-side assert", "cuda_error_assert",
                "assertion", "out-of-bounds access")


# ------------------------------------------------------------------ data helpers
def to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), rounding to nearest even."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(nan, ((bits >> 16) | 0x40).astype(np.uint16), rounded)


def from_bf16_bits(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def as_float64(array: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        return from_bf16_bits(array).astype(np.float64)
    return np.asarray(array).astype(np.float64)


def generate(meta: dict, seed: int) -> np.ndarray:
    """A gpu_only bundle's input, made here from its seed (standard normal values)."""
    values = np.random.default_rng(seed).standard_normal(meta["shape"], dtype=np.float32)
    if meta["dtype"] == "bfloat16":
        return to_bf16_bits(values)
    return values.astype(NP_DTYPES[meta["dtype"]])


def compare(got: np.ndarray, want: np.ndarray, dtype: str,
            index: np.ndarray | None = None, tolerance: float | None = None) -> dict:
    """`got` (this run, in its storage dtype) against the float64 reference `want` (at
    the flat positions `index` when only a sample is kept), within `tolerance` (default:
    the dtype's)."""
    flat = got.reshape(-1)
    if index is not None:
        flat = flat[index]
    if dtype not in TOLERANCE:  # integers and bools: exact
        mismatches = int(np.count_nonzero(flat.astype(np.float64) != want.reshape(-1)))
        return {"ok": mismatches == 0, "mismatches": mismatches}
    g, w = as_float64(flat, dtype), want.reshape(-1)
    bad_nan = int(np.count_nonzero(np.isnan(g) != np.isnan(w)))
    bad_inf = int(np.count_nonzero(np.isinf(g) & ~np.isinf(w)))
    finite = np.isfinite(w) & np.isfinite(g)
    scale = float(np.max(np.abs(w[finite]))) if finite.any() else 0.0
    err = float(np.max(np.abs(g[finite] - w[finite]))) if finite.any() else 0.0
    rel = err / scale if scale > 0 else err
    tolerance = tolerance or TOLERANCE[dtype]
    return {"ok": bad_nan == 0 and bad_inf == 0 and rel <= tolerance,
            "rel_err": rel, "max_abs_err": err, "nan_mismatches": bad_nan,
            "inf_mismatches": bad_inf, "tolerance": tolerance}


# ------------------------------------------------------------------ the runtime's C API
class Runtime:
    """The few C API functions the kit needs (cuda_runtime/include/lazymlir_runtime.h)."""

    def __init__(self, library: Path, driver: str):
        self.lib = lib = ctypes.CDLL(str(library))
        vp, u64, P = ctypes.c_void_p, ctypes.c_uint64, ctypes.POINTER
        sigs = {"lzrt_runtime_create": [ctypes.c_int, ctypes.c_int, P(vp)],
                "lzrt_device_info_get": [vp, ctypes.c_void_p], "lzrt_synchronize": [vp],
                "lzrt_malloc": [vp, ctypes.c_size_t, P(u64)], "lzrt_free": [vp, u64],
                "lzrt_memcpy_htod": [vp, u64, vp, ctypes.c_size_t],
                "lzrt_memcpy_dtoh": [vp, vp, u64, ctypes.c_size_t],
                "lzrt_module_load": [vp, vp, ctypes.c_size_t, P(vp)],
                "lzrt_plan_parse": [ctypes.c_char_p, P(vp)],
                "lzrt_plan_run": [vp, vp, P(vp), ctypes.c_size_t, P(u64), ctypes.c_size_t],
                "lzrt_event_create": [vp, P(vp)], "lzrt_event_record": [vp],
                "lzrt_event_elapsed_ms": [vp, vp, P(ctypes.c_float)],
                "lzrt_emulator_set_reverse_blocks": [ctypes.c_int]}
        for name, argtypes in sigs.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = argtypes, ctypes.c_int
        lib.lzrt_last_error.argtypes, lib.lzrt_last_error.restype = [], ctypes.c_char_p
        handle = vp()
        self.check(lib.lzrt_runtime_create(2 if driver == "emulator" else 0, 0,
                                           ctypes.byref(handle)))
        self.h = handle.value
        raw = ctypes.create_string_buffer(256 + 4 * 6)  # DeviceInfo: name, 6 ints
        self.check(lib.lzrt_device_info_get(self.h, raw))
        ints = np.frombuffer(raw.raw[256:], dtype=np.int32)
        self.device = raw.raw[:256].split(b"\0")[0].decode()
        self.cc = (int(ints[2]), int(ints[3]))

    def check(self, rc: int) -> None:
        if rc != 0:
            raise RuntimeError(self.lib.lzrt_last_error().decode(errors="replace"))

    def alloc(self, nbytes: int) -> int:
        ptr = ctypes.c_uint64()
        self.check(self.lib.lzrt_malloc(self.h, max(nbytes, 1), ctypes.byref(ptr)))
        return ptr.value

    def free(self, ptr: int) -> None:
        self.check(self.lib.lzrt_free(self.h, ptr))

    def upload(self, array: np.ndarray) -> int:
        array = np.ascontiguousarray(array)
        ptr = self.alloc(array.nbytes)
        if array.nbytes:
            self.check(self.lib.lzrt_memcpy_htod(self.h, ptr, array.ctypes.data, array.nbytes))
        return ptr

    def download(self, ptr: int, shape, dtype) -> np.ndarray:
        out = np.empty(shape, dtype=dtype)
        if out.nbytes:
            self.check(self.lib.lzrt_memcpy_dtoh(self.h, out.ctypes.data, ptr, out.nbytes))
        return out

    def load_module(self, image: bytes) -> int:
        handle = ctypes.c_void_p()
        self.check(self.lib.lzrt_module_load(self.h, image, len(image), ctypes.byref(handle)))
        return handle.value

    def parse_plan(self, text: str) -> int:
        handle = ctypes.c_void_p()
        self.check(self.lib.lzrt_plan_parse(text.encode(), ctypes.byref(handle)))
        return handle.value

    def run_plan(self, plan: int, modules: list[int], pointers: list[int]) -> None:
        mods = (ctypes.c_void_p * max(len(modules), 1))(*modules)
        args = (ctypes.c_uint64 * max(len(pointers), 1))(*pointers)
        self.check(self.lib.lzrt_plan_run(self.h, plan, mods, len(modules), args,
                                          len(pointers)))

    def synchronize(self) -> None:
        self.check(self.lib.lzrt_synchronize(self.h))

    def event(self) -> int:
        handle = ctypes.c_void_p()
        self.check(self.lib.lzrt_event_create(self.h, ctypes.byref(handle)))
        return handle.value

    def record(self, event: int) -> None:
        self.check(self.lib.lzrt_event_record(event))

    def elapsed_ms(self, start: int, end: int) -> float:
        ms = ctypes.c_float()
        self.check(self.lib.lzrt_event_elapsed_ms(start, end, ctypes.byref(ms)))
        return ms.value

    def reverse_blocks(self, on: bool) -> None:
        self.check(self.lib.lzrt_emulator_set_reverse_blocks(int(on)))


# ------------------------------------------------------------------ locating the runtime
def installed_library() -> Path | None:
    """An installed lazymlir's runtime library (site-packages/lazymlir/_lib), found
    without importing lazymlir."""
    for sp in [*site.getsitepackages(), sysconfig.get_paths()["platlib"]]:
        path = Path(sp) / "lazymlir" / "_lib" / LIB_NAME
        if path.is_file():
            return path
    return None


def build_library(build_dir: Path) -> Path:
    """The kit's cuda_runtime/ built with CMake (it needs no CUDA toolkit: libcuda.so.1
    is opened at run time)."""
    built = build_dir / LIB_NAME
    if built.is_file():
        return built
    source = KIT  # its CMakeLists.txt: C++17, add_subdirectory(cuda_runtime)
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    for command in (["cmake", "-S", str(source), "-B", str(build_dir), *generator,
                     "-DCMAKE_BUILD_TYPE=Release",
                     f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={build_dir}"],
                    ["cmake", "--build", str(build_dir), "-j", str(os.cpu_count() or 2)]):
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout[-3000:]}"
                               f"{done.stderr[-3000:]}")
    found = [Path(p) for p in glob.glob(str(build_dir / "**" / LIB_NAME), recursive=True)]
    if not found:
        raise RuntimeError(f"the CMake build made no {LIB_NAME} under {build_dir}")
    return found[0]


def locate_library(args) -> tuple[Path, str]:
    if args.runtime_lib:
        return Path(args.runtime_lib), "given (--runtime-lib)"
    if args.driver == "emulator":
        installed = installed_library()
        if installed is not None:
            return installed, "the installed lazymlir package's"
    return build_library(Path(args.out) / "runtime-build"), "built from the kit's cuda_runtime/"


def emulator_builtins(out: Path) -> Path:
    """The compiler runtime functions emulator images may call (`__truncsfbf2`): the
    kit's builtins.c, compiled once and loaded globally before any image."""
    target = out / "libkit_builtins.so"
    if not target.is_file():
        done = subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(target),
                               str(KIT / "runtime" / "builtins.c")],
                              capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"cc failed on builtins.c: {done.stderr[-2000:]}")
    return target


# ------------------------------------------------------------------ one bundle
def load_inputs(folder: Path, bundle: dict) -> list[np.ndarray]:
    return [generate(meta, meta["seed"]) if "seed" in meta else np.load(folder / meta["file"])
            for meta in bundle["inputs"]]


def kernel_images(folder: Path, bundle: dict, driver: str, cc) -> tuple[list[bytes], str]:
    """The images the driver loads: emulator images, or cubin for the kit's chip when
    the device is that chip, else PTX for the driver's JIT."""
    kinds = ["emulator"] if driver == "emulator" else (
        ["cubin", "ptx"] if cc == tuple(bundle["chip_cc"]) else ["ptx"])
    for kind in kinds:
        files = [k.get(kind) for k in bundle["kernels"]]
        if all(files):
            return [(folder / f).read_bytes() for f in files], kind
    raise RuntimeError(f"no {' or '.join(kinds)} images in the bundle")


def run_bundle(rt: Runtime, folder: Path, driver: str, repeat: int, torch_cuda) -> dict:
    bundle = json.loads((folder / "bundle.json").read_text())
    result = {"name": bundle["name"], "case": bundle["case"]}
    inputs = load_inputs(folder, bundle)
    images, kind = kernel_images(folder, bundle, driver, rt.cc)
    modules = []
    for image in images:
        try:
            modules.append(rt.load_module(image))
        except RuntimeError as error:
            if kind != "cubin":
                raise
            result["cubin_error"] = str(error)  # second try: the PTX, JIT-compiled
            images, kind = [(folder / k["ptx"]).read_bytes() for k in bundle["kernels"]], "ptx"
            modules = [rt.load_module(i) for i in images]
            break
    result["images"] = kind
    plan = rt.parse_plan((folder / "plan.txt").read_text())
    in_ptrs = [rt.upload(a) for a in inputs]
    outs = bundle["outputs"]

    def run_once():
        ptrs = [rt.alloc(o["nbytes"]) for o in outs]
        rt.run_plan(plan, modules, in_ptrs + ptrs)
        rt.synchronize()
        got = [rt.download(p, o["shape"], NP_DTYPES[o["dtype"]]) for p, o in zip(ptrs, outs)]
        for p in ptrs:
            rt.free(p)
        return got

    def check(got, label):
        checks = []
        for k, (array, meta) in enumerate(zip(got, outs)):
            want = np.load(folder / meta["f64"])
            index = np.load(folder / meta["index"]) if meta.get("index") else None
            c = compare(array, want, meta["dtype"], index, bundle.get("tolerance"))
            c["output"], c["against"] = k, label
            checks.append(c)
        return checks

    got = run_once()
    flags = [bool(a.any()) for a, o in zip(got, outs) if o.get("check_flag")]
    if any(flags):  # how lazymlir reports it: the executor reads the flag, raises
        raise RuntimeError("the graph's bounds-check flag is set: an index is out of range "
                           "(lazymlir raises eager's IndexError here)")
    if bundle.get("expect_error"):
        result["ok"] = False
        return result
    result["checks"] = check(got, "float64")
    if driver == "emulator":  # every grid's blocks last to first: same results
        rt.reverse_blocks(True)
        try:
            result["checks"] += check(run_once(), "float64, blocks reversed")
        finally:
            rt.reverse_blocks(False)
    result["ok"] = all(c["ok"] for c in result["checks"])
    result.update(time_bundle(rt, plan, modules, in_ptrs, outs, repeat))
    if torch_cuda is not None and not bundle.get("no_eager"):
        try:  # a baseline that fails says nothing about the compiled plan's results
            result.update(eager(torch_cuda, folder, bundle, inputs, repeat))
        except Exception as e:  # noqa: BLE001 - reported next to the bundle's result
            result["eager_error"] = f"{type(e).__name__}: {e}"[:500]
    result.update(roofline(bundle, result, driver, getattr(rt, "device", "")))
    return result


def time_bundle(rt, plan, modules, in_ptrs, outs, repeat) -> dict:
    ptrs = [rt.alloc(o["nbytes"]) for o in outs]
    for _ in range(2):  # warm-up: module functions resolved, allocator cache filled
        rt.run_plan(plan, modules, in_ptrs + ptrs)
    rt.synchronize()
    start, end, times = rt.event(), rt.event(), []
    for _ in range(repeat):
        rt.record(start)
        rt.run_plan(plan, modules, in_ptrs + ptrs)
        rt.record(end)
        times.append(rt.elapsed_ms(start, end))
    for p in ptrs:
        rt.free(p)
    return {"ms": statistics.median(times), "ms_min": min(times), "runs": repeat}


def eager(torch, folder: Path, bundle: dict, inputs, repeat) -> dict:
    """The same graph as torch eager on the GPU (graph.py): its time, and its error
    against float64 as a third reference."""
    namespace = {"__name__": "graph"}
    exec(compile((folder / "graph.py").read_text(), str(folder / "graph.py"), "exec"),
         namespace)
    namespace["DEVICE"] = torch.device("cuda")
    tensors = []
    for array, meta in zip(inputs, bundle["inputs"]):
        t = torch.from_numpy(np.ascontiguousarray(array))
        if meta["dtype"] == "bfloat16":
            t = t.view(torch.bfloat16)
        # A scalar input is read with .item(): on the CPU, as PyTorch's own Python scalars.
        tensors.append(t if meta.get("scalar") else t.cuda())
    forward = namespace["forward"]
    with torch.no_grad():
        got = forward(*tensors)
        for _ in range(2):
            forward(*tensors)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(repeat):
            start.record()
            forward(*tensors)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    checks = []
    for k, (t, meta) in enumerate(zip(got, bundle["outputs"])):
        t = t.detach().cpu()
        array = t.view(torch.int16).numpy().view(np.uint16) if meta["dtype"] == "bfloat16" \
            else t.numpy()
        want = np.load(folder / meta["f64"])
        index = np.load(folder / meta["index"]) if meta.get("index") else None
        c = compare(array, want, meta["dtype"], index, bundle.get("tolerance"))
        c["output"], c["against"] = k, "float64 (torch eager)"
        checks.append(c)
    return {"eager_ms": statistics.median(times), "eager_checks": checks}


def hbm_bytes_per_s(device: str) -> float:
    """The memory roofline of the GPU named `device` (the driver's name for it)."""
    return next((v for k, v in HBM_BYTES_PER_S_BY_NAME.items() if k in device),
                HBM_BYTES_PER_S)


def roofline(bundle: dict, result: dict, driver: str, device: str = "") -> dict:
    seconds = result["ms"] * 1e-3
    out = {"bytes": bundle["bytes"], "flops": bundle["flops"]}
    if seconds <= 0:
        return out
    out["GB/s"] = bundle["bytes"] / seconds / 1e9
    out["TFLOP/s"] = bundle["flops"] / seconds / 1e12
    if driver == "cuda":  # on the emulator a fraction of an H100 means nothing
        floor = max(bundle["bytes"] / hbm_bytes_per_s(device),
                    bundle["flops"] / PEAK_FLOPS.get(bundle["compute_dtype"], 60e12))
        out["roofline_us"] = floor * 1e6
        out["fraction_of_roofline"] = floor / seconds
    return out


# ------------------------------------------------------------------ DLPack with torch.cuda
def dlpack_check(args) -> dict:
    """Both directions with torch.cuda (written without a GPU to try it on: its result
    is reported apart from the bundles). Export: a runtime buffer read by torch on a
    consumer stream (ordered by the runtime's event), after the runtime dropped its own
    reference. Import: a torch tensor's memory used in place by the runtime, after the
    producer's tensor is gone, released through its deleter."""
    try:
        import torch
    except ImportError:
        return {"ok": None, "why": "no torch"}
    if not torch.cuda.is_available():
        return {"ok": None, "why": "torch.cuda is not available"}
    rt = Runtime(Path(args.runtime_lib), "cuda")
    lib, vp, u64 = rt.lib, ctypes.c_void_p, ctypes.c_uint64
    i64p = ctypes.POINTER(ctypes.c_int64)
    lib.lzrt_dlpack_export.argtypes = [vp, u64, u64, ctypes.c_int, i64p, i64p, ctypes.c_uint8,
                                       ctypes.c_uint8, ctypes.c_int, u64, u64,
                                       ctypes.POINTER(vp)]
    lib.lzrt_adopt_external.argtypes = [vp, u64, ctypes.c_size_t, vp, vp]
    lib.lzrt_stream_get.argtypes = [vp, ctypes.POINTER(u64)]
    for fn in (lib.lzrt_dlpack_export, lib.lzrt_adopt_external, lib.lzrt_stream_get):
        fn.restype = ctypes.c_int
    api = ctypes.pythonapi
    api.PyCapsule_New.restype, api.PyCapsule_New.argtypes = ctypes.py_object, [vp, ctypes.c_char_p,
                                                                              vp]
    api.PyCapsule_GetPointer.restype = vp
    api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
    n, out = 1 << 22, {}
    # Export, read on a consumer stream after the producer's reference is dropped.
    data = np.arange(n, dtype=np.float32) % 1000
    ptr = rt.upload(data)
    consumer, managed = torch.cuda.Stream(), vp()
    shape, strides = (ctypes.c_int64 * 1)(n), (ctypes.c_int64 * 1)(1)
    rt.check(lib.lzrt_dlpack_export(rt.h, ptr, 0, 1, shape, strides, 2, 32, 0, 0,
                                    consumer.cuda_stream, ctypes.byref(managed)))
    capsule = api.PyCapsule_New(managed.value, b"dltensor", None)
    rt.free(ptr)
    with torch.cuda.stream(consumer):
        total = float((torch.from_dlpack(capsule).double() * 2).sum())
    consumer.synchronize()
    out["export"] = {"ok": total == 2 * float(data.astype(np.float64).sum()), "sum": total}
    # Import: torch orders its stream before the runtime's; its tensor dies first.
    stream = u64()
    rt.check(lib.lzrt_stream_get(rt.h, ctypes.byref(stream)))
    source = torch.arange(n, device="cuda", dtype=torch.float32) * 3
    capsule = source.__dlpack__(stream=stream.value)
    managed = api.PyCapsule_GetPointer(capsule, b"dltensor")
    api.PyCapsule_SetName(capsule, b"used_dltensor")
    fields = (ctypes.c_uint64 * 8).from_address(managed)  # DLManagedTensor, 64 bytes
    address, deleter = fields[0] + fields[5], fields[7]  # data + byte_offset, deleter
    rt.check(lib.lzrt_adopt_external(rt.h, address, n * 4, deleter, managed))
    del source, capsule
    torch.cuda.empty_cache()
    got = rt.download(address, (n,), np.float32)
    rt.free(address)  # runs the producer's deleter
    out["import"] = {"ok": bool(np.array_equal(got, np.arange(n, dtype=np.float32) * 3))}
    out["ok"] = out["export"]["ok"] and out["import"]["ok"]
    return out


def run_dlpack_check(args, library: Path) -> dict | None:
    if args.driver != "cuda" or args.no_eager or \
            args.deadline - (time.monotonic() - args.began) < 60:
        return None
    command = [sys.executable, str(Path(__file__).resolve()), "--dlpack-check", "--driver",
               "cuda", "--out", args.out, "--runtime-lib", str(library)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=50)
    except subprocess.TimeoutExpired:
        return {"ok": False, "why": "timed out after 50 s"}
    lines = done.stdout.strip().splitlines()
    if done.returncode == 0 and lines:
        return json.loads(lines[-1])
    return {"ok": False, "why": f"exit {done.returncode}: {done.stderr.strip()[-1500:]}"}


# ------------------------------------------------------------------ the worker process
def worker(args) -> int:
    """Runs the named bundles in order, one JSON line per event on --results."""
    out = Path(args.out)
    results = open(args.results, "a", buffering=1)
    if args.driver == "emulator":
        ctypes.CDLL(str(emulator_builtins(out)), mode=ctypes.RTLD_GLOBAL)
    rt = Runtime(Path(args.runtime_lib), args.driver)
    torch_cuda = None
    if args.driver == "cuda" and not args.no_eager:
        try:
            import torch

            torch_cuda = torch if torch.cuda.is_available() else None
        except ImportError:
            pass
    for name in args.bundles.split(","):
        results.write(json.dumps({"event": "start", "name": name}) + "\n")
        began = time.perf_counter()
        try:
            result = run_bundle(rt, KIT / "bundles" / name, args.driver, args.repeat,
                                torch_cuda)
        except Exception as error:  # noqa: BLE001 - reported, and the run goes on
            result = {"name": name, "ok": False, "error": f"{type(error).__name__}: {error}"}
        result["seconds"] = time.perf_counter() - began
        results.write(json.dumps({"event": "done", **result}) + "\n")
        if "error" in result:
            return 3  # the context may be unusable (a sticky CUDA error): a fresh worker
    if args.check_imports:  # the kit must run without the compiler stack
        banned = sorted(m for m in sys.modules
                        if m.split(".")[0] in ("torch_mlir", "mlir", "lazymlir"))
        results.write(json.dumps({"event": "imports", "banned": banned}) + "\n")
    return 0


# ------------------------------------------------------------------ the parent
def run_all(args, names: list[str], library: Path) -> tuple[list[dict], list[str]]:
    """Runs `names` in workers; a worker that dies is replaced after its bundle."""
    out = Path(args.out)
    log = out / "results.jsonl"
    log.unlink(missing_ok=True)
    results, pending, banned = {}, list(names), []
    while pending:
        left = args.deadline - (time.monotonic() - args.began)
        if left < 5:  # the whole run has a time limit (one GPU call): report what ran
            for n in pending:
                results[n] = {"name": n, "ok": False,
                              "error": f"not run: the run's --deadline ({args.deadline:.0f} s) "
                                       f"was reached"}
            break
        command = [sys.executable, str(Path(__file__).resolve()), "--worker",
                   "--driver", args.driver, "--out", str(out), "--runtime-lib", str(library),
                   "--repeat", str(args.repeat), "--results", str(log),
                   "--bundles", ",".join(pending)]
        if args.no_eager:
            command.append("--no-eager")
        if args.check_imports:
            command.append("--check-imports")
        try:
            done = subprocess.run(command, capture_output=True, text=True,
                                  timeout=min(args.timeout, left))
            stderr, code = done.stdout[-2000:] + done.stderr[-4000:], done.returncode
        except subprocess.TimeoutExpired as error:
            stderr = f"timed out after {args.timeout} s; {error.stderr!r}"[-4000:]
            code = "timeout"
        started = None
        for line in log.read_text().splitlines():
            event = json.loads(line)
            if event["event"] == "start":
                started = event["name"]
            elif event["event"] == "done":
                results[event["name"]] = event
                started = None
            elif event["event"] == "imports":
                banned = event["banned"]
        if started is not None:  # the worker died inside this bundle
            results[started] = {"name": started, "ok": False, "crashed": True,
                                "error": f"worker exited ({code}) during the bundle: "
                                         f"{stderr.strip()[-1500:]}"}
        elif code not in (0, 3) and not any(n in results for n in pending):
            for n in pending:  # it never got to a bundle: report, do not loop
                results[n] = {"name": n, "ok": False, "error": f"worker failed ({code}): "
                                                              f"{stderr.strip()[-1500:]}"}
        pending = [n for n in names if n not in results]
    return [results[n] for n in names], banned


def sanitize(args, names: list[str], library: Path) -> list[dict]:
    """compute-sanitizer's memcheck and racecheck over the first --sanitize bundles (one
    run each, no timing worth reading), where the machine has the tool."""
    exe = shutil.which("compute-sanitizer")
    if args.driver != "cuda" or exe is None or not names or args.sanitize <= 0:
        return []
    subset, rows = names[:args.sanitize], []
    for tool in ("memcheck", "racecheck"):
        if args.deadline - (time.monotonic() - args.began) < args.sanitize_timeout + 60:
            break  # keep time for the rest and the report
        log = Path(args.out) / f"sanitizer-{tool}.jsonl"
        log.unlink(missing_ok=True)
        command = [exe, "--tool", tool, "--error-exitcode", "99", sys.executable,
                   str(Path(__file__).resolve()), "--worker", "--driver", "cuda", "--out",
                   args.out, "--runtime-lib", str(library), "--repeat", "1", "--no-eager",
                   "--results", str(log), "--bundles", ",".join(subset)]
        try:
            done = subprocess.run(command, capture_output=True, text=True,
                                  timeout=args.sanitize_timeout)
            text, code = done.stdout + done.stderr, done.returncode
        except subprocess.TimeoutExpired:
            text, code = "", "timeout"
        summary = [line for line in text.splitlines() if "ERROR SUMMARY" in line]
        rows.append({"tool": tool, "bundles": subset, "exit": code, "ok": code == 0,
                     "summary": summary[-1] if summary else text.strip()[-300:]})
        (Path(args.out) / f"sanitizer-{tool}.log").write_text(text[-200_000:])
    return rows


def expected_error(result: dict, bundle: dict) -> dict:
    """A bundle whose run must fail (an out-of-range index): passes when it failed with
    a message naming the check, fails when it ran to the end."""
    message = result.get("error", "")
    reported = any(w in message.lower() for w in ASSERT_WORDS)
    return {"name": result["name"], "case": bundle["case"], "expect_error": True,
            "ok": reported, "error": message[-1500:] if message else
            "ran to the end without reporting the out-of-range index",
            "seconds": result.get("seconds")}


def fmt(value, spec=".3g"):
    return "" if value is None else format(value, spec)


def report(args, device: str, library_note: str, rows: list[dict], skipped: list[dict],
           kit: dict, banned: list[str], sanitizer: list[dict]) -> tuple[str, dict]:
    passed = sum(r["ok"] for r in rows)
    summary = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "driver": args.driver,
               "device": device, "runtime": library_note, "kit_commit": kit.get("commit"),
               "host": platform.node(), "python": platform.python_version(),
               "pass": passed, "total": len(rows), "skipped": skipped, "results": rows,
               "not_built": kit.get("not_built", []), "banned_imports": banned,
               "sanitizer": sanitizer}
    lines = [f"# GPU check kit report: {device}", "",
             f"{summary['date']}, driver `{args.driver}`, kit built at "
             f"`{kit.get('commit')}`, runtime {library_note}, {args.repeat} timed runs "
             f"(median).", "",
             f"**{passed}/{len(rows)} bundles pass**" + (
                 f", {len(skipped)} skipped" if skipped else "") + ".", "",
             "| bundle | result | worst rel. err (tol) | images | ms | eager ms | GB/s | "
             "TFLOP/s | of roofline |", "| --- | --- | --- | --- | ---: | ---: | ---: | ---: "
             "| ---: |"]
    for r in rows:
        checks = [c for c in r.get("checks", []) if "rel_err" in c]
        worst = max(checks, key=lambda c: c["rel_err"] / c["tolerance"], default=None)
        err = f"{worst['rel_err']:.2g} ({worst['tolerance']:.0e})" if worst else ""
        verdict = "pass" if r["ok"] else "**FAIL**"
        if r.get("expect_error"):
            verdict += " (error reported)" if r["ok"] else ""
        fraction = r.get("fraction_of_roofline")
        lines.append(f"| {r['name']} | {verdict} | {err} | {r.get('images', '')} | "
                     f"{fmt(r.get('ms'))} | {fmt(r.get('eager_ms'))} | {fmt(r.get('GB/s'))} | "
                     f"{fmt(r.get('TFLOP/s'))} | "
                     f"{'' if fraction is None else f'{fraction:.0%}'} |")
    failures = [r for r in rows if not r["ok"] or r.get("expect_error")]
    if failures:
        lines += ["", "## Errors", ""]
        for r in failures:
            bad = [c for c in r.get("checks", []) if not c["ok"]]
            detail = r.get("error") or "; ".join(json.dumps(c) for c in bad)
            lines.append(f"- `{r['name']}`{' (expected)' if r.get('expect_error') else ''}: "
                         f"{detail.strip()[:600]}")
    baseline_errors = [r for r in rows if r.get("eager_error")]
    if baseline_errors:
        lines += ["", "## Eager baselines that failed (the bundle's own result stands)", ""]
        lines += [f"- `{r['name']}`: {r['eager_error'][:300]}" for r in baseline_errors]
    if sanitizer:
        lines += ["", "## compute-sanitizer", ""] + [
            f"- {s['tool']} over {', '.join(s['bundles'])}: "
            f"{'clean' if s['ok'] else 'FAILED'} (exit {s['exit']}; {s['summary']})"
            for s in sanitizer]
    if skipped:
        lines += ["", "Skipped: " + ", ".join(f"`{s['name']}` ({s['why']})" for s in skipped)]
    if kit.get("not_built"):
        lines += ["", "Cases the builder could not compile for the cuda target: " + ", ".join(
            f"`{n['case']}` ({n['why'][:160]})" for n in kit["not_built"])]
    return "\n".join(lines) + "\n", summary


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--driver", choices=("cuda", "emulator"), default="cuda")
    parser.add_argument("--out", default=os.environ.get("OUT") or str(Path.cwd() / "kit-out"))
    parser.add_argument("--only", help="comma-separated bundle names")
    parser.add_argument("--repeat", type=int, help="timed runs per bundle (median)")
    parser.add_argument("--runtime-lib", help="liblazymlir_cuda_runtime.so to use")
    parser.add_argument("--timeout", type=float, default=240, help="seconds per worker")
    parser.add_argument("--deadline", type=float, default=420,
                        help="seconds for the whole run: bundles not started by then are "
                             "reported as not run, sanitizers and DLPack left out")
    parser.add_argument("--no-eager", action="store_true", help="no torch eager baselines")
    parser.add_argument("--sanitize", type=int, default=8,
                        help="bundles run under compute-sanitizer memcheck and racecheck "
                             "(cuda driver, where the tool is on PATH; 0: none)")
    parser.add_argument("--sanitize-timeout", type=float, default=60)
    parser.add_argument("--check-imports", action="store_true",
                        help="record modules of torch-mlir, MLIR or lazymlir the worker "
                             "imported (there must be none)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--dlpack-check", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--bundles", help=argparse.SUPPRESS)
    parser.add_argument("--results", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.began = time.monotonic()
    if args.repeat is None:
        args.repeat = 3 if args.driver == "emulator" else 20
    if args.worker:
        return worker(args)
    if args.dlpack_check:
        print(json.dumps(dlpack_check(args)))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    kit = json.loads((KIT / "kit.json").read_text())
    names = [b["name"] for b in kit["bundles"]]
    if args.only:
        wanted = set(args.only.split(","))
        names = [n for n in names if n in wanted or n.split(".")[0] in wanted]
    by_name = {b["name"]: b for b in kit["bundles"]}
    skipped = [{"name": n, "why": "gpu_only: too large for the emulator"} for n in names
               if args.driver == "emulator" and by_name[n].get("gpu_only")]
    names = [n for n in names if n not in {s["name"] for s in skipped}]
    try:
        library, library_note = locate_library(args)
        device = Runtime(library, args.driver).device if args.driver == "cuda" else "emulator"
    except Exception as error:  # noqa: BLE001 - no runtime: every bundle fails, reported
        library, library_note, device = None, f"unusable: {error}", "none"
    normal = [n for n in names if not by_name[n].get("expect_error")]
    failing = [n for n in names if by_name[n].get("expect_error")]
    sanitizer, dlpack = [], None
    if library is None:
        rows = [{"name": n, "ok": False, "error": library_note} for n in names]
        banned = []
    else:
        rows, banned = run_all(args, normal, library)
        for name in failing:  # last, each alone: the assert may end its process
            (row,), _ = run_all(args, [name], library)
            rows.append(expected_error(row, by_name[name]))
        small = [r["name"] for r in rows if r["ok"] and not r.get("expect_error")
                 and r.get("bytes", 1 << 30) < 16 << 20]
        sanitizer = sanitize(args, small, library)
        dlpack = run_dlpack_check(args, library)
    if args.check_imports:  # this process too
        banned = sorted(set(banned) | {m for m in sys.modules if m.split(".")[0] in
                                       ("torch_mlir", "mlir", "lazymlir")})
    text, summary = report(args, device, library_note, rows, skipped, kit, banned, sanitizer)
    summary["dlpack"] = dlpack
    if dlpack is not None:
        text += f"\nDLPack with torch.cuda (both directions): {json.dumps(dlpack)}\n"
    (out / "report.md").write_text(text)
    (out / "report.json").write_text(json.dumps(summary, indent=1))
    print(text)
    failed = [r["name"] for r in rows if not r["ok"]]
    print(f"RESULT pass={summary['pass']}/{summary['total']} skipped={len(skipped)} "
          f"driver={args.driver} device={device.replace(' ', '_')}"
          + (f" failed={','.join(failed)}" if failed else "")
          + (f" banned_imports={','.join(banned)}" if banned else "")
          + "".join(f" {s['tool']}={'clean' if s['ok'] else 'FAILED'}" for s in sanitizer)
          + ("" if dlpack is None else f" dlpack={dlpack.get('ok')}"))
    return 0 if not failed and not banned else 1


if __name__ == "__main__":
    sys.exit(main())
