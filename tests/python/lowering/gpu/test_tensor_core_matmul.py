"""f16/bf16 matmuls on tensor cores (lowering/gpu/kernels/mma.py), executed by the emulator driver.

Each case of tensor_core_cases.py is traced by the real tracer (child process, cpu
target, no fallback allowed), compiled for the cuda target and run through the C++
runtime on the emulator driver (protocol of test_cuda_emulator.py), which executes the
warp-level `gpu.subgroup_mma_*` ops once per warp (lowering/gpu/emulator_warps.py). The
gpu stage must hold the WMMA kernel (f16/bf16) or the FP32 FMA kernel (f32, unchanged).

Tolerance: eager CPU also accumulates half/bfloat16 products in float32 and rounds the
output once, so results may differ only by the accumulation order: one unit in the last
place of the output dtype (rtol 2^-10 for float16, 2^-7 for bfloat16, atol for values
near zero). `linear` with a bias is two ops in the lowered graph (mm rounded to the
dtype, then the bias added and rounded again; eager's addmm rounds once): checked at
one ulp against that two-rounding model and at two ulps against eager.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tensor_core_cases  # noqa: E402
from test_cuda_emulator import (  # noqa: E402
    _eager,
    _inputs,
    _emulator_runtime,
    compile_for_emulator,
    run_on_emulator,
    trace_cases,
)

from lazymlir.lowering import stages  # noqa: E402
from lazymlir.lowering.front import fx_graph  # noqa: E402
from lazymlir.lowering.gpu import pipeline as gpu_pipeline, stages as gpu_stages  # noqa: E402
from lazymlir.targets import cuda_driver  # noqa: E402

TESTS_DIR = Path(__file__).resolve().parents[2]  # conftest.py, imported by the child
CASES = tensor_core_cases.CASES
ULP = {torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7, torch.float32: 1e-5}


@pytest.fixture(scope="module")
def runtime():
    return _emulator_runtime()


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    return trace_cases("tensor_core_cases.py", CASES, tmp_path_factory.mktemp("tc-traces"))


def _gpu_text(fx_text: str, **options) -> str:
    opts = stages.Options(target="cuda")
    if not options:
        return stages.run_stages(fx_text, opts, start="fx", stop="gpu").text
    bufferized = stages.run_stages(fx_text, opts, start="fx", stop="bufferized").text
    module = gpu_stages.parse(bufferized.split("\n", 1)[1])
    gpu_pipeline.to_gpu(module, options)
    return str(module)


def _close(got, want, dtype, ulps: int, what: str):
    tol = ULP[dtype] * ulps
    torch.testing.assert_close(got.float(), want.float(), rtol=tol, atol=tol,
                               msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager_on_emulator(name, runtime, traced):
    graphs = traced[name]
    assert len(graphs) == 1, f"case {name} traced {len(graphs)} graphs"
    dtype = CASES[name][3]
    fx_text = graphs[0]
    gpu_text = _gpu_text(fx_text)
    if dtype == torch.float32:  # the FP32 kernel, unchanged: 64 FMAs per k, no WMMA
        assert "math.fma" in gpu_text and "subgroup_mma" not in gpu_text
    else:
        assert "gpu.subgroup_mma_compute" in gpu_text and "math.fma" not in gpu_text
    graph = fx_graph.loads(fx_text)
    plan_text, kernels = compile_for_emulator(fx_text)
    tensors, scalars = _inputs(graph, CASES[name][2], seed=0)
    want = _eager(graph, tensors, scalars)
    before = cuda_driver.emulator.stats()["launches"]
    (got,) = run_on_emulator(runtime, graph, plan_text, kernels, tensors, scalars)
    assert cuda_driver.emulator.stats()["launches"] > before
    assert got.dtype == want[0].dtype == dtype and got.shape == want[0].shape
    assert not torch.isnan(got).any()
    if name.startswith("linear_bias"):
        w, b, x = tensors  # graph input order: weight, bias, input
        model = (x.float() @ w.float().t()).to(dtype) + b  # round, add, round
        _close(got, model, dtype, 1, f"{name} vs two-rounding model")
        _close(got, want[0], dtype, 2, f"{name} vs eager")
    else:
        _close(got, want[0], dtype, 1, name)


def test_gpu_stage_structure(traced):
    """The WMMA kernel: 3 workgroup tiles (A, B, per-warp output staging), a k loop of
    step 32 carrying 8 accumulator fragments, f16 -> m16n16k16 fragments, bf16 widened
    to f32 (tf32 m16n16k8), the epilogue through the staging tile between barriers."""
    f16 = _gpu_text(traced["mm_f16_odd"][0])
    space = r", #gpu.address_space<workgroup>> \{llvm.align = 32 : i64\}"
    assert re.search(rf"workgroup\(%\w+ : memref<128x40xf16{space}, "
                     rf"%\w+ : memref<32x136xf16{space}, %\w+ : memref<8x16x16xf32{space}\)",
                     f16)
    assert f16.count('-> !gpu.mma_matrix<16x16xf16, "AOp">') == 4
    assert f16.count("gpu.subgroup_mma_compute") == 16  # 2 k steps x 2 x 4 fragments
    assert f16.count("gpu.subgroup_mma_store_matrix") == 8
    assert f16.count("gpu.barrier") == 2 + 2 * 8
    bf16 = _gpu_text(traced["mm_bf16_odd"][0])
    assert "memref<128x36xf32, #gpu.address_space<workgroup>>" in bf16
    assert '!gpu.mma_matrix<16x8xf32, "AOp">' in bf16
    assert bf16.count("gpu.subgroup_mma_compute") == 32  # 4 k steps of 8
    off = _gpu_text(traced["mm_f16_odd"][0], tensor_cores=False)
    assert "subgroup_mma" not in off


@pytest.mark.skipif(not __import__("shutil").which("ptxas"), reason="needs ptxas")
@pytest.mark.parametrize("name,instr", [("mm_f16_tiles", "m16n16k16.f32.f32"),
                                        ("mm_bf16_tiles", "m16n16k8.f32.tf32.tf32.f32")])
def test_ptx_uses_wmma_without_spills(name, instr, traced, tmp_path):
    text = stages.run_stages(traced[name][0], stages.Options(target="cuda"), start="fx",
                             stop="gpu").text
    module = gpu_stages.parse(text.split("\n", 1)[1])
    ptx = gpu_pipeline.to_ptx(module)
    (mma,) = [p for p in ptx.values() if "wmma.mma.sync" in p]
    assert f"wmma.mma.sync.aligned.row.row.{instr}" in mma
    assert re.search(r"\.shared \.align 32 \.b8", mma)
    path = tmp_path / "k.ptx"
    path.write_text(mma)
    done = subprocess.run(["ptxas", "-v", "-arch=sm_90", str(path), "-o", os.devnull],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "0 bytes spill stores, 0 bytes spill loads" in done.stderr, done.stderr


DEVICE_SCRIPT = r"""
import sys, torch, torch.nn.functional as F
sys.path.insert(0, sys.argv[1])
import conftest, lazymlir
assert lazymlir.targets.active().name == "cuda", lazymlir.targets.active().name
lazymlir.metrics.reset()
gen = torch.Generator().manual_seed(0)
ULP = {torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7}
def check(got, want, ulps=1):
    tol = ULP[want.dtype] * ulps
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.float(), want.float(), rtol=tol, atol=tol)
x, w = (torch.randn(s, generator=gen).half() for s in ((37, 53), (29, 53)))
check((x.to("lazy_mlir") @ w.to("lazy_mlir").t()).cpu(), x @ w.t())
x, w, b = (torch.randn(s, generator=gen).bfloat16() for s in ((37, 53), (29, 53), (29,)))
got = F.linear(x.to("lazy_mlir"), w.to("lazy_mlir"), b.to("lazy_mlir")).cpu()
check(got, F.linear(x, w, b), ulps=2)  # mm rounded, then + bias (eager: addmm, once)
xb, wb = (torch.randn(s, generator=gen).bfloat16() for s in ((2, 17, 40), (2, 40, 20)))
check(torch.bmm(xb.to("lazy_mlir"), wb.to("lazy_mlir")).cpu(), torch.bmm(xb, wb))
conftest.assert_no_fallback()
print("device ok")
"""


def test_on_device_with_emulator_driver(tmp_path):
    """The lazy_mlir device itself on the cuda target (emulator driver, child process):
    f16 x @ w.t(), bf16 linear with bias, bf16 bmm match eager, no fallback."""
    _emulator_runtime()
    env = dict(os.environ, LAZYMLIR_TARGET="cuda", LAZYMLIR_CUDA_DRIVER="emulator",
               LAZYMLIR_CACHE_DIR="off", LAZYMLIR_DUMP_DIR=str(tmp_path / "dump"))
    done = subprocess.run([sys.executable, "-c", DEVICE_SCRIPT, str(TESTS_DIR)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "device ok" in done.stdout, done.stderr[-4000:]


FRAGMENT_KERNEL = """
!S = memref<16x16xf16, #gpu.address_space<workgroup>>
!A = !gpu.mma_matrix<16x16xf16, "AOp">
!B = !gpu.mma_matrix<16x16xf16, "BOp">
!C = !gpu.mma_matrix<16x16xf32, "COp">
module attributes {gpu.container_module} {
  gpu.module @frag {
    gpu.func @frag(%out: memref<16x16xf32>, %flag: i1) workgroup(%a: !S, %b: !S) kernel
        ATTRS {
      %c0 = arith.constant 0 : index
      %zero = arith.constant 0.0 : f32
      %fa = gpu.subgroup_mma_load_matrix %a[%c0, %c0] {leadDimension = 16 : index} : !S -> !A
      %fb = gpu.subgroup_mma_load_matrix %b[%c0, %c0] {leadDimension = 16 : index} : !S -> !B
      %fc = gpu.subgroup_mma_constant_matrix %zero : !C
      BODY
      gpu.return
    }
  }
}
"""
STRAIGHT = """%d = gpu.subgroup_mma_compute %fa, %fb, %fc : !A, !B -> !C
      gpu.subgroup_mma_store_matrix %d, %out[%c0, %c0] {leadDimension = 16 : index}
          : !C, memref<16x16xf32>"""
KNOWN = "attributes {known_block_size = array<i32: 32, 1, 1>}"


@pytest.mark.parametrize("attrs,body,message", [
    ("", STRAIGHT, "known block size"),
    (KNOWN, """scf.if %flag {
        %d = gpu.subgroup_mma_compute %fa, %fb, %fc : !A, !B -> !C
        gpu.subgroup_mma_store_matrix %d, %out[%c0, %c0] {leadDimension = 16 : index}
            : !C, memref<16x16xf32>
      }""", "inside control flow"),
    (KNOWN, """%d = gpu.subgroup_mma_elementwise addf %fc, %fc : (!C, !C) -> !C""",
     "subgroup_mma_elementwise"),
    (KNOWN, STRAIGHT.replace("%fc :", "%fc {a_transpose} :"), "a_transpose"),
])
def test_emulator_rejects_unsupported_fragment_code(attrs, body, message):
    from lazymlir.lowering.gpu import emulator as gpu_emulator

    text = FRAGMENT_KERNEL.replace("ATTRS", attrs).replace("BODY", body)
    with pytest.raises(gpu_pipeline.GpuLoweringError, match=message):
        gpu_emulator.emulator_images_from_text(text)


def test_emulator_runs_one_fragment_product(runtime):
    """A single warp: C = A @ B of two 16x16 f16 tiles staged in workgroup memory by
    its 32 lanes, through the lane-0 fragment emulation."""
    from lazymlir.lowering.gpu import emulator as gpu_emulator
    from lazymlir.targets.cuda import CudaExecutable

    # Lane t stages elements 8t .. 8t+7 of both tiles.
    stage = """%t = gpu.thread_id x
      %c1 = arith.constant 1 : index
      %c8 = arith.constant 8 : index
      %c16 = arith.constant 16 : index
      %first = arith.muli %t, %c8 : index
      scf.for %e = %c0 to %c8 step %c1 {
        %k = arith.addi %first, %e : index
        %y = arith.divui %k, %c16 : index
        %x = arith.remui %k, %c16 : index
        %va = memref.load %in[%c0, %y, %x] : memref<2x16x16xf16>
        %vb = memref.load %in[%c1, %y, %x] : memref<2x16x16xf16>
        memref.store %va, %a[%y, %x] : !S
        memref.store %vb, %b[%y, %x] : !S
      }
      gpu.barrier
"""
    text = FRAGMENT_KERNEL.replace("ATTRS", KNOWN).replace(
        "%out: memref<16x16xf32>, %flag: i1", "%in: memref<2x16x16xf16>, %out: memref<16x16xf32>"
    ).replace("%c0 = arith.constant 0 : index\n", "%c0 = arith.constant 0 : index\n      "
              + stage).replace("BODY", STRAIGHT)
    images = gpu_emulator.emulator_images_from_text(text)
    plan = ("lazymlir-plan 1\nbuffers 2\narg 0 0\narg 1 1\n"
            "launch 0 frag 1 1 1 32 1 1 0 2 p0 p1\n")
    exe = CudaExecutable(plan, [(n, i, "emulator") for n, i in images], [], runtime)
    gen = torch.Generator().manual_seed(0)
    ab = torch.randn(2, 16, 16, generator=gen).to(torch.float16)
    src, out = runtime.copy_in(ab), runtime.alloc(16 * 16 * 4)
    exe._plan.run(exe._modules, [src, out], runtime)
    got = torch.empty(16, 16)
    runtime.copy_out(out, got)
    torch.testing.assert_close(got, ab[0].float() @ ab[1].float(), rtol=1e-5, atol=1e-5)
