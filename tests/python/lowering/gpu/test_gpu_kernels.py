"""The redesigned CUDA kernels: structure of the gpu stage, numerics on the emulator.

Each case of gpu_kernel_cases.py is traced by the real tracer (child process, cpu
target), compiled for the cuda target and run through the C++ runtime on the emulator
driver (see test_cuda_emulator.py for the protocol); outputs are compared with eager
PyTorch. The structure checks assert the kernel shape the case exists for (one block
per row, warp shuffles and one barrier per reduction), so a regression to one thread
per row fails here even when the numbers still match.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_kernel_cases  # noqa: E402
from test_cuda_emulator import (  # noqa: E402
    _eager,
    _inputs,
    _emulator_runtime,
    assert_matches,
    assert_matches_with_blocks_reversed,
    compile_for_emulator,
    run_on_emulator,
    trace_cases,
)

from lazymlir.lowering import stages  # noqa: E402
from lazymlir.lowering.front import fx_graph  # noqa: E402
from lazymlir.lowering.gpu import stages as gpu_stages  # noqa: E402
from lazymlir.lowering.gpu.kernels import row_fusion as gpu_row_fusion  # noqa: E402
from lazymlir.targets import cuda_driver  # noqa: E402

HERE = Path(__file__).resolve().parent
CASES = gpu_kernel_cases.CASES


@pytest.fixture(scope="module")
def runtime():
    return _emulator_runtime()


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    return trace_cases("gpu_kernel_cases.py", CASES, tmp_path_factory.mktemp("gpu-kernel-traces"))


def _gpu_text(fx_text: str) -> str:
    return stages.run_stages(fx_text, stages.Options(target="cuda"), start="fx",
                             stop="gpu").text


def _kernels(gpu_text: str) -> list[str]:
    """Text of each gpu.func of a gpu-stage module."""
    return re.findall(r"gpu\.func @.*?gpu\.return", gpu_text, flags=re.S)


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager_on_emulator(name, runtime, traced):
    graphs = traced[name]
    assert graphs, f"case {name} traced no graph"
    for k, fx_text in enumerate(graphs):
        graph = fx_graph.loads(fx_text)
        plan_text, kernels = compile_for_emulator(fx_text)
        tensors, scalars = _inputs(graph, CASES[name][2], seed=k)
        want = _eager(graph, tensors, scalars)
        before = cuda_driver.emulator.stats()["launches"]
        got = run_on_emulator(runtime, graph, plan_text, kernels, tensors, scalars)
        assert cuda_driver.emulator.stats()["launches"] > before
        assert_matches(got, want, f"{name} graph {k}")


@pytest.mark.parametrize("name", ["row_sum_split", "full_sum", "row_amax",
                                  "row_sum_f64_split", "row_max_min_nan", "row_sum_warp"])
def test_block_order_does_not_matter(name, runtime, traced):
    assert_matches_with_blocks_reversed(runtime, traced[name][0], CASES[name][2], seed=3,
                                        what=name)


@pytest.mark.parametrize("name", gpu_kernel_cases.MATMULS)
def test_matmul_is_tiled(name, traced):
    """The contraction runs as the shared-memory tiled kernel: two workgroup tiles,
    barriers around the k step, FMA into register accumulators."""
    kernels = [k for k in _kernels(_gpu_text(traced[name][0])) if "math.fma" in k]
    assert len(kernels) == 1
    (kernel,) = kernels
    assert kernel.count("memref<16x128xf32, #gpu.address_space<workgroup>>") >= 2
    assert kernel.count("gpu.barrier") == 2
    assert kernel.count("math.fma") == 16 * 64


@pytest.mark.parametrize("name", gpu_kernel_cases.TRANSPOSED)
def test_transposed_operand_is_not_copied(name, traced):
    """`x @ w.t()`, `x.t() @ y`, `bmm(q, k.transpose(1, 2))`: the transpose folds into the
    matmul's indexing map (lowering/gpu/transpose_folding.py): the plan is the matmul's launch
    alone, which reads the graph inputs themselves."""
    plan_text, _ = compile_for_emulator(traced[name][0])
    steps = [line.split()[0] for line in plan_text.splitlines()[1:]
             if line.split()[0] in ("launch", "copy", "memset", "alloc")]
    assert steps == ["launch"], plan_text


@pytest.mark.parametrize("name", sorted(set(CASES) - set(gpu_kernel_cases.MATMULS)
                                  - {"col_sum", "col_prod", "row_sum_short"}))
def test_reductions_are_block_per_row(name, traced):
    """Every reducing kernel combines its threads' registers with warp shuffles: a xor
    butterfly per warp (5 steps), then, with W > 1 warps, one barrier per reduction and
    log2(W) more steps over W partials in shared memory (one element per warp). None
    keeps a serial per-thread loop over a whole row, nor a shared-memory tree."""
    gpu_text = _gpu_text(traced[name][0])
    reducing = [k for k in _kernels(gpu_text) if "gpu.shuffle" in k]
    assert reducing, gpu_text[-3000:]
    for kernel in reducing:
        threads = int(re.search(r"known_block_size = array<i32: (\d+), 1, 1>", kernel)[1])
        header = kernel.split("\n")[0]
        partials = re.findall(r"memref<(\d+)x\w+, #gpu.address_space<workgroup>>", header)
        # Rows of one warp are packed 8 to a block (gpu_row_reduce): no partials.
        packed = "arith.minui" in kernel and not partials
        warps = 1 if packed else threads // 32
        assert [int(p) for p in partials] == [warps] * len(partials) if warps > 1 else \
            not partials, header
        assert kernel.count("gpu.barrier") == len(partials)
        # 32-bit values: one shuffle per step; 64-bit ones (int64 sums): two. A single
        # warp has no shared buffer per reduction to count them by.
        steps = 5 + (warps.bit_length() - 1)
        xor = len(re.findall(r"gpu\.shuffle\s+xor", kernel))
        if warps > 1:
            assert xor in (steps * len(partials), 2 * steps * len(partials)), (xor, steps)
        else:
            assert xor and xor % steps == 0, xor
        assert kernel.count("gpu.shuffle") == xor


def test_narrow_and_wide_values_shuffle_as_32_bit_words(traced):
    """f16 is shuffled as the low half of an i32, f64 as two i32 halves: the same bits."""
    f16 = _gpu_text(traced["row_max_min_f16"][0])
    assert "arith.bitcast" in f16 and "i16 to i32" in f16 and "maximumf" in f16
    assert re.search(r"gpu\.shuffle\s+xor %\S+, %\S+, %\S+ : i32", f16)
    f64 = _gpu_text(traced["row_sum_f64_split"][0])
    assert "f64 to i64" in f64 and "i64 to f64" in f64 and "memref.atomic_rmw addf" in f64
    assert not re.search(r"gpu\.shuffle\s+xor [^\n]*: (f16|f64|i64)", f16 + f64)


def test_one_warp_rows_share_a_block(traced):
    """50 rows of 40: one warp per row, 8 rows per block of 256 threads (7 blocks, the
    last with 2 rows), no shared memory or barrier; the spare warps store nothing."""
    fx_text = traced["row_sum_warp"][0]
    plan_text, _ = compile_for_emulator(fx_text)
    launch = next(line for line in plan_text.splitlines() if line.startswith("launch"))
    assert launch.split()[3:9] == ["7", "1", "1", "256", "1", "1"], launch
    (kernel,) = _kernels(_gpu_text(fx_text))
    assert "gpu.barrier" not in kernel and "workgroup" not in kernel
    assert "arith.minui" in kernel and "arith.andi" in kernel


def test_split_only_with_atomic(traced):
    """Few rows split each row over blocks combined by an atomic; a product (no atomic)
    and a GPU-filling row count do not split."""
    assert "memref.atomic_rmw addf" in _gpu_text(traced["row_sum_split"][0])
    assert "memref.atomic_rmw" not in _gpu_text(traced["row_prod"][0])
    assert "memref.atomic_rmw" not in _gpu_text(traced["row_amax"][0])


@pytest.mark.parametrize("name", gpu_kernel_cases.FUSED)
def test_row_ops_fused_to_one_kernel(name, traced):
    """softmax/log_softmax/layer_norm/rms_norm: one launch per graph, nothing else in the
    plan (no fill, memset, copy or temporary), the input read once per element."""
    fx_text = traced[name][0]
    plan_text, _ = compile_for_emulator(fx_text)
    steps = [line.split()[0] for line in plan_text.splitlines()[1:]
             if line.split()[0] in ("launch", "copy", "memset", "alloc")]
    assert steps == ["launch"], plan_text
    (kernel,) = _kernels(_gpu_text(fx_text))
    launch = next(line for line in plan_text.splitlines() if line.startswith("launch"))
    threads = int(launch.split()[6])
    row = fx_graph.loads(fx_text)["inputs"][0]["shape"][-1]
    # Each element of the input row is loaded once: ceil(row / threads) loads of the
    # input in the kernel text (each thread's elements, the tail one under a guard).
    args = re.findall(r"(%arg\d+): memref<[^>]*>", kernel.split("\n")[0])
    loads = max(len(re.findall(rf"memref\.load {a}\[", kernel)) for a in args)
    assert loads == -(-row // threads), kernel
    assert loads <= gpu_row_fusion.MAX_PER_THREAD


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
def test_ptxas_matmul_uses_shared_memory_without_spills(traced, tmp_path):
    ptx_text = stages.run_stages(traced["matmul_tiled"][0], stages.Options(target="cuda"),
                                 start="fx", stop="ptx").text
    _, kernels = gpu_stages.executable_parts(ptx_text)
    (image,) = [image for _, image, _ in kernels if b"fma.rn.f32" in image]
    assert image.count(b"fma.rn.f32") >= 16 * 64
    src = tmp_path / "k.ptx"
    src.write_bytes(image)
    res = subprocess.run(["ptxas", "-v", "-arch=sm_90", str(src), "-o", str(tmp_path / "o")],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "16384 bytes smem" in res.stderr, res.stderr
    assert "0 bytes spill stores, 0 bytes spill loads" in res.stderr, res.stderr


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
@pytest.mark.parametrize("name, reductions", [("row_amax", 1), ("softmax_rows", 2),
                                              ("layer_norm_rows", 2), ("row_sum_int", 1)])
def test_ptxas_row_reduction_uses_shuffles_without_spills(name, reductions, traced, tmp_path):
    """The PTX reduces with `shfl.sync.bfly` (the xor butterfly), one `bar.sync` per
    reduction, and shared memory of one element per warp and reduction, without spills."""
    fx_text = traced[name][0]
    ptx_text = stages.run_stages(fx_text, stages.Options(target="cuda"),
                                 start="fx", stop="ptx").text
    _, kernels = gpu_stages.executable_parts(ptx_text)
    images = [image for _, image, _ in kernels if b"shfl.sync" in image]
    assert len(images) == 1
    (image,) = images
    threads = int(re.search(rb"\.maxntid (\d+), 1, 1", image)[1])
    assert image.count(b"shfl.sync.bfly.b32") >= reductions * 5
    assert image.count(b"bar.sync") == reductions
    src = tmp_path / "k.ptx"
    src.write_bytes(image)
    res = subprocess.run(["ptxas", "-v", "-arch=sm_90", str(src), "-o", str(tmp_path / "o")],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    smem = [int(m) for m in re.findall(r"(\d+) bytes smem", res.stderr)]
    element = 8 if name == "row_sum_int" else 4  # int64 sums
    assert smem == [reductions * threads // 32 * element], res.stderr
    assert "0 bytes spill stores, 0 bytes spill loads" in res.stderr, res.stderr
