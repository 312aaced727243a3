"""CUDA lowering without a GPU: samples -> gpu -> nvvm -> PTX, ptxas, launch plan checks."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_samples  # noqa: E402
from mlir import ir  # noqa: E402

from lazymlir.lowering.gpu import pipeline as gp  # noqa: E402
from lazymlir.lowering.gpu import launch_plan as lp  # noqa: E402

NAMES = sorted(gpu_samples.SAMPLES)


@functools.cache
def lowered(name: str):
    """(plan, ptx dict, gpu-stage text) of a sample, lowered once per session."""
    ctx = ir.Context()
    module = gpu_samples.bufferized_module(name, ctx)
    gp.to_gpu(module)
    gpu_text = str(module)
    plan = lp.extract_plan(module)
    ptx = gp.to_ptx(gp.to_nvvm(module))
    return plan, ptx, gpu_text


@pytest.mark.parametrize("name", NAMES)
def test_ptx_per_module(name):
    plan, ptx, _ = lowered(name)
    assert ptx and all(".target sm_90" in p and ".entry" in p for p in ptx.values())
    launched = {op.module_index for op in plan.ops if op.kind == "launch"}
    assert launched == set(range(len(ptx))), "every gpu.module is launched, in order"
    # Calls into libdevice (`__nv_expf`, `__nv_powif`, ...) are fine once linked: the
    # PTX then defines them. An unlinked one is an `.extern .func` declaration.
    extern = re.compile(r"\.extern\s+\.func[^;]*?(__nv_\w+)")
    unlinked = [m for p in ptx.values() for m in extern.findall(p)]
    assert not unlinked, f"libdevice functions not linked: {unlinked}"


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
@pytest.mark.parametrize("chip", ["sm_90", "sm_80"])
@pytest.mark.parametrize("name", ["softmax", "mlp_step", "sum_all", "elementwise"])
def test_ptxas_accepts(name, chip, tmp_path):
    if chip == "sm_90":
        ptx = lowered(name)[1]
    else:
        module = gpu_samples.bufferized_module(name, ir.Context())
        ptx = gp.to_ptx(gp.to_gpu(module, {"chip": chip}), {"chip": chip})
    for mod, text in ptx.items():
        assert f".target {chip}" in text
        src = tmp_path / f"{mod}.ptx"
        src.write_text(text)
        res = subprocess.run(["ptxas", f"-arch={chip}", str(src), "-o", str(tmp_path / "o")],
                             capture_output=True, text=True)
        assert res.returncode == 0, res.stderr


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
def test_cubin():
    module = gpu_samples.bufferized_module("matmul", ir.Context())
    cubins = gp.to_cubin(gp.to_gpu(module))
    assert cubins and all(b[:4] == b"\x7fELF" for b in cubins.values())


@pytest.mark.parametrize("name", NAMES)
def test_kernels_mapped(name):
    plan, _, _ = lowered(name)
    for op in plan.ops:
        if op.kind != "launch":
            continue
        total = op.grid[0] * op.grid[1] * op.grid[2] * op.block[0] * op.block[1] * op.block[2]
        # Every kernel except one-element ones (a scalar init) runs many threads.
        assert total > 1 or all(a.kind == "ptr" for a in op.args)
        assert op.block[0] <= 1024


def _launch_threads(plan):
    return [op.grid[0] * op.block[0] for op in plan.ops if op.kind == "launch"]


def test_full_reduction_is_parallel():
    plan, ptx, gpu_text = lowered("sum_all")
    # 64*300 elements: chunked into >= 64 threads combined by atomics, not one thread.
    assert max(_launch_threads(plan)) >= 64
    assert "memref.atomic_rmw" in gpu_text
    assert any("atom.global.add.f32" in p for p in ptx.values())


def test_dim_reduction_is_parallel():
    plan, _, _ = lowered("sum_dim")  # 32 rows x 1000: split over rows and chunks
    assert max(_launch_threads(plan)) >= 32
    plan, ptx, gpu_text = lowered("softmax")  # max + sum per row: one block per row
    # 16 rows of 128: one warp of 32 threads per row (4 elements each), reduced by
    # shuffles alone: no shared memory, no barrier; no row is split.
    assert "gpu.shuffle" in gpu_text and "gpu.barrier" not in gpu_text
    assert "#gpu.address_space<workgroup>" not in gpu_text
    assert "memref.atomic_rmw" not in gpu_text
    assert any("shfl.sync.bfly.b32" in p for p in ptx.values())
    assert min(_launch_threads(plan)) >= 16


def test_elementwise_fused():
    plan, _, _ = lowered("elementwise")
    assert [op.kind for op in plan.ops].count("launch") == 1


def test_matmul_tiled():
    plan, ptx, gpu_text = lowered("matmul")
    (launch,) = [op for op in plan.ops if op.kind == "launch"]
    # 64x80 fits one 128x128 tile: one block of 256 threads, 8x8 outputs each; the zero
    # fill of the output is folded into the kernel's store (no memset).
    assert launch.grid[0] == 1 and launch.block[0] == 256
    assert [op.kind for op in plan.ops] == ["launch"]
    assert "#gpu.address_space<workgroup>" in gpu_text and "gpu.barrier" in gpu_text
    assert any("fma.rn.f32" in p for p in ptx.values())


@pytest.mark.parametrize("name", NAMES)
def test_plan_consistent(name):
    plan, _, _ = lowered(name)
    state = {slot: "arg" for slot, _, _ in plan.args}
    sizes = {slot: n for slot, _, n in plan.args}
    for op in plan.ops:
        if op.kind == "alloc":
            assert op.slot not in state and op.nbytes > 0
            state[op.slot], sizes[op.slot] = "live", op.nbytes
        elif op.kind == "free":
            assert state.get(op.slot) == "live"
            state[op.slot] = "freed"
        elif op.kind == "copy":
            assert state[op.slot] in ("arg", "live") and state[op.src] in ("arg", "live")
            assert op.nbytes <= min(sizes[op.slot], sizes[op.src])
        elif op.kind == "memset":
            assert state[op.slot] in ("arg", "live") and op.nbytes <= sizes[op.slot]
        else:
            for a in op.args:
                if a.kind == "ptr":
                    assert state.get(a.slot) in ("arg", "live"), f"slot {a.slot} not live"
    assert "live" not in state.values(), "every temporary is freed"
    assert max(state, default=-1) + 1 == plan.num_buffers


def test_plan_frees_each_temporary_after_its_last_use():
    """A training step's temporaries are freed as soon as nothing reads them: the most
    bytes alive at once is below the sum of all temporaries, and every free follows
    (past other frees) an op that uses its slot, or the slot's alloc."""
    plan, _, _ = lowered("mlp_step")
    temporaries = sum(op.nbytes for op in plan.ops if op.kind == "alloc")
    assert 0 < lp.peak_temporary_bytes(plan) < temporaries
    for index, op in enumerate(plan.ops):
        if op.kind != "free":
            continue
        previous = index - 1
        while plan.ops[previous].kind == "free":
            previous -= 1
        before = plan.ops[previous]
        assert (before.kind == "alloc" and before.slot == op.slot) or \
            op.slot in lp._slots_used(before), (index, op, before)
        assert all(op.slot not in lp._slots_used(later) for later in plan.ops[index + 1:])


@pytest.mark.parametrize("name", ["softmax", "mlp_step"])
def test_plan_lzrt_round_trip(name):
    plan, _, _ = lowered(name)
    text = lp.plan_to_text(plan)
    ctx = ir.Context()
    lz = lp.plan_to_lzrt(plan, ctx)
    assert lz.operation.verify()
    assert lp.lzrt_text_to_plan_text(str(lz)) == text
    assert text.startswith("lazymlir-plan 1\nbuffers ")
    assert lp.plan_to_json(plan)["num_buffers"] == plan.num_buffers


def test_scalar_args_text():
    assert lp.Arg("f32", value=1.0).text() == "f32:3f800000"
    assert lp.Arg("f64", value=-2.0).text() == "f64:c000000000000000"
    assert lp.Arg("i32", value=-3).text() == "i32:-3"
    assert lp.Arg("ptr", slot=2, offset=16).text() == "p2+16"


HOST_LOOP = """
func.func @main(%arg0: memref<131072xf32>, %arg1: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %cn = arith.constant 131072 : index
  scf.for %i = %c0 to %cn step %c1 {
    %v = memref.load %arg0[%i] : memref<131072xf32>
    %p = memref.load %arg1[%c0] : memref<4xf32>
    %m = arith.mulf %p, %v : f32
    memref.store %m, %arg1[%c0] : memref<4xf32>
  }
  return
}
"""
# (every iteration multiplies element 0 by one input: a running product, which no loop
# can run in parallel and no atomic takes, unlike the nests
# lowering/gpu/kernels/host_loops.py turns into kernels; one thread would run a short one
# in order, this one is longer than host_loops.MAX_SERIAL_ITERATIONS)


def test_host_only_ops_error():
    module = ir.Module.parse(HOST_LOOP, ir.Context())
    with pytest.raises(gp.GpuLoweringError, match="op 'scf.for' is left in the host"):
        gp.to_gpu(module)


def test_plan_rejects_host_ops():
    module = ir.Module.parse(HOST_LOOP, ir.Context())
    with pytest.raises(gp.GpuLoweringError, match="'scf.for' on the host side"):
        lp.extract_plan(module)


def test_contract_ptx_requires_serialised_kernels():
    """After ptx/cubin every gpu.module must be a gpu.binary, next to the plan."""
    from lazymlir.lowering.gpu import contracts

    with ir.Context() as ctx:
        module = gpu_samples.bufferized_module("elementwise", ctx)
        gp.to_gpu(module)
        assert contracts.check_contract("gpu", module.operation) is None
        problem = contracts.check_contract("ptx", module.operation)
        assert problem and "was not serialised after stage 'ptx'" in problem
        gp.to_ptx(gp.to_nvvm(module))
        assert contracts.check_contract("ptx", module.operation) is None
        problem = contracts.check_contract("nvvm", module.operation)
        assert problem and "gpu.binary found after stage 'nvvm'" in problem


def test_contract_names_host_op_left_behind():
    from lazymlir.lowering.gpu import contracts

    text = """
module attributes {gpu.container_module} {
  func.func @main(%arg0: memref<f32>) {
    %0 = memref.load %arg0[] : memref<f32>
    return
  }
}"""
    with ir.Context():
        module = ir.Module.parse(text)
        problem = contracts.check_contract("gpu", module.operation)
    assert problem and "op 'memref.load' is left in the host function @main" in problem
