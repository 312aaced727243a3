"""Tests of the thin CUDA runtime (cuda_runtime/ + lazymlir/runtime/cuda.py).

Most tests run on the fake driver (host memory, recorded launches, failure
injection), so they need no GPU; those marked `gpu` run a real PTX kernel and
skip when no CUDA driver/device is available.
"""

import ctypes.util

import numpy as np
import pytest
import torch

import lazymlir
from lazymlir.targets import cuda_driver as cuda
from lazymlir.targets.cuda_driver import CudaError, CudaRuntime, LaunchPlan, fake

# A PTX module whose entry signatures the fake driver decodes launches with.
FAKE_PTX = """
.version 7.0
.target sm_50
.address_size 64
.visible .entry scale(.param .u64 scale_p0, .param .u64 scale_p1,
    .param .s32 scale_n, .param .f32 scale_s, .param .s64 scale_k,
    .param .f64 scale_d)
{ ret; }
.visible .entry touch(.param .u64 touch_p0)
{ ret; }
"""

# out[i] = in[i] + v for i < n, checked by ptxas for sm_90.
ADD_PTX = """
.version 7.0
.target sm_50
.address_size 64
.visible .entry add_one(.param .u64 p_x, .param .u32 p_n, .param .f32 p_v)
{
    .reg .pred %p<2>;
    .reg .b32 %r<5>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [p_x];
    ld.param.u32 %r2, [p_n];
    ld.param.f32 %f2, [p_v];
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r1, %tid.x;
    mad.lo.s32 %r1, %r3, %r4, %r1;
    setp.ge.u32 %p1, %r1, %r2;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.f32 %f1, [%rd4];
    add.f32 %f3, %f1, %f2;
    st.global.f32 [%rd4], %f3;
DONE:
    ret;
}
"""

HEADER = "lazymlir-plan 1\nbuffers 3\n"


@pytest.fixture
def rt():
    runtime = CudaRuntime.create(fake=True)
    fake.reset()
    yield runtime
    fake.reset()
    runtime.close()


# --- Loading ------------------------------------------------------------------


def test_library_loads():
    lib = cuda.load_library()
    assert lib.lzrt_last_error is not None


def test_missing_library_names_searched_places(monkeypatch, tmp_path):
    monkeypatch.setattr(cuda, "_lib", None)
    monkeypatch.setattr(cuda, "_candidates", lambda explicit=None: [tmp_path / "nope.so"])
    with pytest.raises(CudaError, match=r"not found; searched: .*nope\.so"):
        cuda.load_library()


def test_env_override_is_searched_first(monkeypatch, tmp_path):
    monkeypatch.setenv("LAZYMLIR_RUNTIME_LIB", str(tmp_path))
    explicit = lazymlir.config.reload().runtime_lib
    assert cuda._candidates(explicit)[0] == tmp_path / "liblazymlir_cuda_runtime.so"


@pytest.mark.skipif(ctypes.util.find_library("cuda") is not None,
                    reason="a CUDA driver is installed")
def test_missing_driver_gives_clear_error():
    with pytest.raises(CudaError) as info:
        CudaRuntime.create()
    msg = str(info.value)
    with pytest.raises(CudaError, match="no CUDA driver found"):
        cuda.device_count()
    assert msg.startswith("no CUDA driver found (libcuda.so.1 could not be loaded: ")
    assert msg.endswith("); use LAZYMLIR_TARGET=cpu")


def test_fake_device_info(rt):
    info = rt.device_info()
    assert info["fake"] and info["name"] == "lazymlir fake device"
    assert info["compute_capability"] == (9, 0) and info["device_count"] == 1
    assert rt.device_count() == 1


# --- Plan parsing ---------------------------------------------------------------


def test_parse_valid_plan():
    plan = LaunchPlan(HEADER + """
        # comment line
        arg 0 0
        arg 1 1   # trailing comment
        alloc 2 4096
        memset 2 0 4096
        copy 2 0 16
        launch 0 scale 4 1 1 128 1 1 0 6 p0 p2+16 i32:-5 f32:3f800000 i64:7 f64:4000000000000000

        launch 1 touch 1 1 1 1 1 1 0 1 p1
        free 2
        alloc 2 8
        free 2
    """)
    assert plan.info == {"num_buffers": 3, "num_args": 2, "num_modules": 2,
                         "num_launches": 2, "num_ops": 8}


@pytest.mark.parametrize("body, message", [
    ("", "missing header 'lazymlir-plan 1'"),
    ("buffers 2\n", "plan line 1: expected header 'lazymlir-plan 1'"),
    ("lazymlir-plan 2\n", "plan line 1: unsupported plan version '2'"),
    ("lazymlir-plan 1\narg 0 0\n", "plan line 2: expected 'buffers <N>'"),
    (HEADER + "frob 1\n", "plan line 3: unknown statement 'frob': 'frob 1'"),
    (HEADER + "alloc 5 16\n", "plan line 3: slot 5 out of range (plan has 3 buffers)"),
    (HEADER + "arg 0 0\narg 0 1\n", "plan line 4: slot 0 is already bound"),
    (HEADER + "alloc 0\n", "plan line 3: 'alloc' expects 2 operands, got 1"),
    (HEADER + "copy 0 1 4\n", "plan line 3: slot 0 used before 'arg' or 'alloc'"),
    (HEADER + "alloc 0 8\nfree 0\nmemset 0 1 8\n", "plan line 5: slot 0 used after 'free'"),
    (HEADER + "arg 0 0\nfree 0\n", "plan line 4: slot 0 is a caller argument"),
    (HEADER + "alloc 0 8\narg 1 0\ncopy 1 0 16\n", "plan line 5: access of 16 bytes exceeds"),
    (HEADER + "arg 0 0\nmemset 0 256 4\n", "plan line 4: byte value 256 out of range"),
    (HEADER + "arg 0 0\nlaunch 0 k 1 1 1 1 1 1 0 2 p0\n",
     "plan line 4: launch declares 2 arguments but has 1"),
    (HEADER + "launch 0 k 1 1 1 1 1 1 0 1 f32:3f80\n",
     "plan line 3: bad f32 bits '3f80' (expected 8 hex digits)"),
    (HEADER + "launch 0 k 1 1 1 1 1 1 0 1 f64:zz00000000000000\n", "plan line 3: bad f64 bits"),
    (HEADER + "launch 0 k 1 1 1 1 1 1 0 1 i32:3000000000\n", "plan line 3: bad i32 value"),
    (HEADER + "launch 0 k 1 1 1 1 1 1 0 1 u8:1\n", "plan line 3: bad kernel argument 'u8:1'"),
    (HEADER + "launch 0 k 0 1 1 1 1 1 0 0\n", "plan line 3: grid and block dimensions"),
    (HEADER + "launch 0 k 1 1 1\n", "plan line 3: 'launch' expects"),
    (HEADER + "alloc 0 64\nlaunch 0 k 1 1 1 1 1 1 0 1 p0+16[64]\n",
     "plan line 4: access of 80 bytes exceeds slot 0 (64 bytes)"),
    (HEADER + "alloc 0 64\nlaunch 0 k 1 1 1 1 1 1 0 1 p0[64\n", "bad kernel argument 'p0[64'"),
    (HEADER + "arg 0 0 4 4\n", "plan line 3: 'arg' expects 2 operands, got 4"),
    (HEADER + "alloc 0 64\nalloc 1 64\ncopy 1+8 0 64\n",
     "plan line 5: access of 72 bytes exceeds slot 1 (64 bytes)"),
    (HEADER + "alloc 0 64\nalloc 1 64\ncopy 1 0+x 8\n", "bad copy offset 'x'"),
])
def test_parse_rejects_malformed_plans(body, message):
    with pytest.raises(CudaError) as info:
        LaunchPlan(body)
    assert message in str(info.value)


# --- Plan execution on the fake driver --------------------------------------------


def test_plan_runs_launches_copies_and_memsets(rt):
    module = rt.load_module(FAKE_PTX)
    src = rt.copy_in(np.arange(64, dtype=np.uint8))
    dst = rt.copy_in(np.zeros(64, dtype=np.uint8))
    before = rt.allocator_stats()
    args = "p1+8 p2+64 i32:-3 f32:40490fdb i64:-9 f64:3ff8000000000000"
    plan = LaunchPlan(HEADER + f"""
        arg 0 0
        arg 1 1
        memset 1 255 32
        copy 1 0 16
        alloc 2 1000
        copy 2 0 64
        launch 0 scale 4 2 1 128 1 1 256 6 {args}
        launch 0 touch 1 1 1 32 1 1 0 1 p2
        free 2
    """)
    plan.run([module], [src, dst])
    out = rt.copy_out(dst)
    np.testing.assert_array_equal(out[:16], np.arange(16))
    assert (out[16:32] == 255).all() and (out[32:] == 0).all()
    # Copies between contiguous views: byte offsets into both slots.
    LaunchPlan(HEADER + "arg 0 0\narg 1 1\ncopy 1+40 0+4 8\n").run([], [src, dst])
    np.testing.assert_array_equal(rt.copy_out(dst)[40:48], np.arange(4, 12))

    first, second = fake.launches()
    assert first["kernel"] == "scale" and second["kernel"] == "touch"
    assert first["grid"] == (4, 2, 1) and first["block"] == (128, 1, 1)
    assert first["shared"] == 256 and second["block"] == (32, 1, 1)
    kinds = [kind for kind, _ in first["args"]]
    assert kinds == ["u64", "u64", "s32", "f32", "s64", "f64"]
    values = [value for _, value in first["args"]]
    assert values[0] == dst.ptr + 8
    assert values[1] == second["args"][0][1] + 64  # same temporary, offset 64
    assert values[2] == -3 and values[4] == -9 and values[5] == 1.5
    assert values[3] == pytest.approx(3.14159265, rel=1e-6)
    # The temporary went back to the allocator's cache.
    after = rt.allocator_stats()
    assert after["bytes_in_use"] == before["bytes_in_use"]
    assert after["bytes_cached"] == before["bytes_cached"] + 1024


def test_plan_resolves_kernels_once(rt):
    module = rt.load_module(FAKE_PTX)
    buf = rt.alloc(16)
    plan = LaunchPlan(HEADER + "arg 0 0\n" + "launch 0 touch 1 1 1 1 1 1 0 1 p0\n" * 3)
    for _ in range(3):
        plan.run([module], [buf])
    assert fake.call_count("cuModuleGetFunction") == 1
    assert fake.call_count("cuLaunchKernel") == 9
    # A different module for the same plan re-resolves.
    plan.run([rt.load_module(FAKE_PTX)], [buf])
    assert fake.call_count("cuModuleGetFunction") == 2


def test_plan_frees_temporaries_when_a_launch_fails(rt):
    module = rt.load_module(FAKE_PTX)
    plan = LaunchPlan(HEADER + "alloc 0 4096\nalloc 1 100\n"
                      "launch 0 touch 1 1 1 1 1 1 0 1 p0\n"
                      "launch 0 touch 1 1 1 1 1 1 0 1 p1\n")
    fake.fail_call("cuLaunchKernel", 2, 719)
    with pytest.raises(CudaError) as info:
        plan.run([module], [])
    assert str(info.value) == ("cuLaunchKernel failed: CUDA_ERROR_LAUNCH_FAILED (unspecified "
                               "launch failure) for kernel 'touch' (plan line 6)")
    stats = rt.allocator_stats()
    assert stats["bytes_in_use"] == 0 and stats["bytes_cached"] == 4096 + 512


def test_plan_run_errors(rt):
    module = rt.load_module(FAKE_PTX)
    plan = LaunchPlan(HEADER + "arg 0 1\nlaunch 1 touch 1 1 1 1 1 1 0 1 p0\n")
    with pytest.raises(CudaError, match="plan needs 2 pointer arguments, got 1"):
        plan.run([module], [rt.alloc(4)])
    with pytest.raises(CudaError, match="plan needs 2 modules, got 1"):
        plan.run([module], [0, rt.alloc(4)])
    missing = LaunchPlan(HEADER + "launch 0 nope 1 1 1 1 1 1 0 0\n")
    with pytest.raises(CudaError, match=r"cuModuleGetFunction failed: CUDA_ERROR_NOT_FOUND "
                                        r"\(named symbol not found\) for kernel 'nope'"):
        missing.run([module], [])
    # The fake checks argument counts against the PTX signature.
    wrong = LaunchPlan(HEADER + "launch 0 touch 1 1 1 1 1 1 0 0\n")
    with pytest.raises(CudaError, match="cuLaunchKernel failed: CUDA_ERROR_INVALID_VALUE"):
        wrong.run([module], [])


def test_plan_checks_argument_sizes(rt):
    """`arg <slot> <index> <nbytes>` and `p<slot>[<nbytes>]`: a caller buffer from the
    allocator smaller than what the plan's kernels access is refused before launching."""
    module = rt.load_module(FAKE_PTX)
    plan = LaunchPlan(HEADER + "arg 0 0 32\narg 1 1\nlaunch 0 touch 1 1 1 1 1 1 0 1 p1+8[56]\n")
    plan.run([module], [rt.alloc(32), rt.alloc(64)])
    assert len(fake.launches()) == 1
    with pytest.raises(CudaError, match="plan argument 1 is a 63-byte buffer, but the plan "
                                        "accesses 64 bytes of it"):
        plan.run([module], [rt.alloc(32), rt.alloc(63)])
    with pytest.raises(CudaError, match="plan argument 0 is a 16-byte buffer"):
        plan.run([module], [rt.alloc(16), rt.alloc(64)])
    assert len(fake.launches()) == 1
    # Pointers the allocator did not hand out (interior or foreign) are not checked.
    big = rt.alloc(128)
    plan.run([module], [big.ptr + 64, big.ptr])


def test_plan_refuses_unaligned_buffers(rt):
    """Kernel pointer parameters claim 16-byte alignment (lowering/gpu/kernels/vectorize.py): a
    buffer that does not start at a multiple of 16 is refused before anything runs."""
    module = rt.load_module(FAKE_PTX)
    plan = LaunchPlan(HEADER + "arg 0 0\narg 1 1\nlaunch 0 touch 1 1 1 1 1 1 0 1 p1\n")
    big = rt.alloc(128)
    assert big.ptr % cuda.KERNEL_ARG_ALIGN == 0
    with pytest.raises(ValueError, match=r"plan buffers \[1\] are not 16-byte aligned"):
        plan.run([module], [big.ptr, big.ptr + 4])
    assert not fake.launches()


def test_sync_mode_names_the_failing_kernel_and_line(rt):
    module = rt.load_module(FAKE_PTX)
    plan = LaunchPlan(HEADER + "alloc 0 64\nlaunch 0 touch 1 1 1 1 1 1 0 1 p0\n"
                      "launch 0 touch 1 1 1 1 1 1 0 1 p0\n")
    fake.fail_call("cuStreamSynchronize", 2, 700)  # the second launch faults
    rt.set_sync(True)
    with pytest.raises(CudaError, match=r"cuStreamSynchronize failed: "
                                        r"CUDA_ERROR_ILLEGAL_ADDRESS .* after kernel 'touch' "
                                        r"\(plan line 5\)"):
        plan.run([module], [])
    rt.set_sync(False)
    plan.run([module], [])  # no synchronization, no injected failure reached
    assert fake.call_count("cuStreamSynchronize") == 2


def test_module_load_errors(rt):
    with pytest.raises(CudaError) as info:
        rt.load_module("this is not ptx")
    assert str(info.value) == ("cuModuleLoadData failed: CUDA_ERROR_INVALID_PTX "
                               "(a PTX JIT compilation failed)")
    fake.fail_call("cuModuleLoadData", 1, 12345)  # a code the driver cannot name
    with pytest.raises(CudaError, match=r"CUDA_ERROR_UNKNOWN_CODE .*\[code 12345\]"):
        rt.load_module(FAKE_PTX)


def test_nth_call_of_any_entry_point_fails(rt):
    fake.fail_call(None, 3, 999)
    rt.synchronize()  # calls 1 (cuCtxSetCurrent) and 2 (cuStreamSynchronize)
    with pytest.raises(CudaError, match=r"^cuCtxSetCurrent failed: CUDA_ERROR_UNKNOWN "
                                        r"\(unknown error\)$"):
        rt.synchronize()
    rt.synchronize()  # injection fires once


# --- Memory ------------------------------------------------------------------


def test_copies_and_memset_roundtrip(rt):
    a = rt.copy_in(torch.arange(8, dtype=torch.float32))
    b = rt.alloc(32)
    rt.memset(b, 0)
    rt.copy(b, a, 16)
    out = torch.empty(8, dtype=torch.float32)
    rt.copy_out(b, out)
    assert out.tolist() == [0, 1, 2, 3, 0, 0, 0, 0]
    rt.memset(b, 0x3F, 4)
    assert rt.copy_out(b, dtype=np.uint8)[:5].tolist() == [0x3F] * 4 + [0]
    with pytest.raises(ValueError):
        rt.copy_in(np.zeros(9, dtype=np.float32), dst=a)
    with pytest.raises(ValueError, match="contiguous"):
        rt.copy_out(b, np.zeros((4, 4), dtype=np.uint8)[:, ::2])


def test_allocator_reuses_freed_blocks(rt):
    a = rt.alloc(1000)
    assert rt.allocator_stats()["bytes_in_use"] == 1024
    a.free()
    b = rt.alloc(600)  # same 1024-byte size class
    big = rt.alloc(3 << 20)  # 2 MiB steps above 1 MiB
    s = rt.allocator_stats()
    assert (s["cache_hits"], s["cache_misses"], s["driver_allocs"]) == (1, 2, 2)
    assert s["bytes_in_use"] == 1024 + (4 << 20) and s["bytes_cached"] == 0
    assert fake.memory() == (2, 1024 + (4 << 20))
    del b, big  # dropping a DeviceBuffer returns it to the cache
    s = rt.allocator_stats()
    assert s["bytes_in_use"] == 0 and s["bytes_cached"] == 1024 + (4 << 20)
    rt.empty_cache()
    s = rt.allocator_stats()
    assert s["bytes_cached"] == 0 and s["driver_frees"] == 2
    assert fake.memory() == (0, 0)


def test_allocator_releases_cache_and_retries_on_oom(rt):
    fake.set_memory_limit(4 << 20)
    rt.alloc(3 << 20).free()  # 4 MiB block, now cached
    buf = rt.alloc(1 << 20)  # needs 1 MiB more: OOM, release cache, retry
    s = rt.allocator_stats()
    assert s["oom_retries"] == 1 and s["bytes_cached"] == 0
    assert s["bytes_in_use"] == 1 << 20 and fake.memory() == (1, 1 << 20)
    # Injected OOM with a warm cache is retried too.
    buf.free()
    fake.fail_call("cuMemAlloc", 1, 2)
    rt.alloc(4096)
    assert rt.allocator_stats()["oom_retries"] == 2
    # With nothing to release, the OOM is reported.
    with pytest.raises(CudaError, match=r"^cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY "
                                        r"\(out of memory\) while allocating 8388608 bytes"):
        rt.alloc(8 << 20)


def test_free_of_foreign_pointer_fails(rt):
    with pytest.raises(CudaError, match="does not own"):
        cuda.DeviceBuffer(rt, 12345, 8).free()


def test_events_time_work(rt):
    start, end = rt.event().record(), rt.event()
    rt.memset(rt.alloc(64), 1)
    assert start.elapsed_ms(end.record()) >= 0
    assert cuda.time_ms(rt, rt.synchronize, repeat=2) >= 0
    with pytest.raises(CudaError, match="cuEventElapsedTime failed: CUDA_ERROR_INVALID_HANDLE"):
        start.elapsed_ms(rt.event())  # never recorded


# --- Real GPU ------------------------------------------------------------------


@pytest.fixture
def gpu():
    try:
        runtime = CudaRuntime.create()
    except CudaError as e:
        pytest.skip(f"no CUDA device: {e}")
    yield runtime
    runtime.close()


@pytest.mark.gpu
def test_gpu_plan_runs_ptx_kernel(gpu):
    n = 1000
    x = np.linspace(-1, 1, n, dtype=np.float32)
    buf = gpu.copy_in(x)
    module = gpu.load_module(ADD_PTX)
    plan = LaunchPlan(f"""lazymlir-plan 1
        buffers 2
        arg 0 0
        alloc 1 {4 * n}
        copy 1 0 {4 * n}
        launch 0 add_one {(n + 255) // 256} 1 1 256 1 1 0 3 p1 i32:{n} f32:3f800000
        launch 0 add_one 1 1 1 256 1 1 0 3 p1+64 i32:16 f32:3f800000
        copy 0 1 {4 * n}
        free 1
    """)
    plan.run([module], [buf])
    out = gpu.copy_out(buf, dtype=np.float32)
    expected = x + 1
    expected[16:32] += 1
    np.testing.assert_allclose(out, expected)
    assert gpu.allocator_stats()["bytes_cached"] >= 4 * n
    info = gpu.device_info()
    assert not info["fake"] and info["compute_capability"][0] >= 5


@pytest.mark.gpu
def test_gpu_errors_and_timing(gpu):
    with pytest.raises(CudaError, match="cuModuleLoadData failed: CUDA_ERROR_INVALID_PTX"):
        gpu.load_module(".version 7.0\n.target sm_50\n.address_size 64\nbogus;\n")
    buf = gpu.alloc(1 << 20)
    assert cuda.time_ms(gpu, lambda: gpu.memset(buf, 0), repeat=3) >= 0
