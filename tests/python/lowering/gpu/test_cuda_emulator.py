"""CUDA kernels executed on the CPU: the emulator driver against eager PyTorch.

Every case of emulator_cases.py is traced by the real tracer (child process, cpu
target, fx graphs dumped), then each fx graph is compiled for the cuda target
(fx -> ... -> gpu -> plan -> nvvm -> ptx), its gpu-stage kernels are built for the
CPU (lowering/gpu/emulator.py), and the real launch plan runs through the C++
runtime (Plan.cpp, caching allocator, C API, CudaExecutable) on the emulator driver,
which runs every kernel and poisons every allocation with NaN bytes. The outputs are
compared with the same fx graph run eagerly by PyTorch on the same random inputs;
NaN never passes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import emulator_cases  # noqa: E402

from lazymlir.lowering import stages  # noqa: E402
from lazymlir.lowering.front import fx_graph  # noqa: E402
from lazymlir.lowering.gpu import emulator as gpu_emulator, stages as gpu_stages  # noqa: E402
from lazymlir.targets import cuda_driver  # noqa: E402
from lazymlir.targets.cuda import CudaExecutable  # noqa: E402
from lazymlir.targets.cuda_driver import LaunchPlan  # noqa: E402

CASES_DIR = Path(__file__).resolve().parents[2] / "cases"


def _emulator_runtime():
    """A runtime on the emulator driver. The package install builds the runtime library
    (its only native code), so a library that does not load is a broken build: fail."""
    try:
        return cuda_driver.CudaRuntime.create(emulator=True)
    except (cuda_driver.CudaError, OSError, AttributeError) as error:
        pytest.fail("the CUDA runtime library does not load (the package install builds it: "
                    f"pip install .): {error}")


@pytest.fixture(scope="module")
def runtime():
    return _emulator_runtime()


def trace_cases(script: str, cases, root: Path) -> dict[str, list[str]]:
    """Run `script` (emulator_cases.py or a sibling) in a child process that traces each
    case on the cpu target and dumps its stages under root/<case>; returns case name ->
    its fx graph texts."""
    # The child imports lazymlir the way this process did (PYTHONPATH or site-packages).
    # A fresh disk cache: a cached graph is not compiled again, so it would not be dumped.
    env = dict(os.environ, LAZYMLIR_TARGET="cpu", LAZYMLIR_FALLBACK="error",
               LAZYMLIR_CACHE_DIR=str(root / "cache"))
    done = subprocess.run([sys.executable, str(CASES_DIR / script), str(root)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return {name: [p.read_text() for p in sorted((root / name).glob("*/00-fx.fx.json"))]
            for name in cases}


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """case name -> list of fx graph texts (tracer dumps of a child process)."""
    return trace_cases("emulator_cases.py", emulator_cases.CASES,
                       tmp_path_factory.mktemp("emulator-traces"))


def compile_for_emulator(fx_text: str) -> tuple[str, list[tuple[str, bytes, str]]]:
    """fx text -> (plan text, emulator images), through the cuda stage registry."""
    options = stages.Options(target="cuda")
    gpu_text = stages.run_stages(fx_text, options, start="fx", stop="gpu").text
    ptx_text = stages.run_stages(gpu_text, options, start="gpu", stop="ptx").text
    plan_text, kernels = gpu_stages.executable_parts(ptx_text)
    images = gpu_emulator.emulator_images_from_text(gpu_text)
    assert [n for n, _ in images] == [n for n, _, _ in kernels], "module order differs"
    return plan_text, [(n, image, "emulator") for n, image in images]


def _inputs(graph: dict, how: str, seed: int) -> tuple[list, list]:
    gen = torch.Generator().manual_seed(seed)
    tensors = []
    for meta in graph["inputs"]:
        dtype = fx_graph.dtype_from_name(meta["dtype"])
        if dtype.is_floating_point or dtype.is_complex:
            t = torch.randn(meta["shape"], generator=gen, dtype=dtype)
            if how == "with_nan":  # a NaN in every third row, at a different column each
                rows = t.view(-1, t.shape[-1])
                for r in range(0, rows.shape[0], 3):
                    rows[r, (r * 7) % rows.shape[1]] = float("nan")
            if how == "half_edges":  # subnormals, signed zeros, the largest values first
                info = torch.finfo(dtype)
                edges = [info.smallest_normal / 4, -info.smallest_normal / 8,
                         info.smallest_normal, 0.0, -0.0, info.max / 2, 1e-3, -1e-4]
                t.view(-1)[:len(edges)] = torch.tensor(edges).to(dtype)
            tensors.append(1 + 0.01 * t if how == "near_one" else t)
        elif dtype == torch.bool:
            tensors.append(torch.randint(0, 2, meta["shape"], generator=gen).to(torch.uint8))
        else:
            tensors.append(torch.randint(0, 4, meta["shape"], generator=gen, dtype=dtype))
    scalars = [float(torch.rand((), generator=gen)) for _ in graph.get("scalars", [])]
    return tensors, scalars


def _eager(graph: dict, tensors: list, scalars: list) -> list[torch.Tensor]:
    gm = fx_graph.to_graph_module(graph)
    outs = gm(*tensors, *[torch.tensor(s, dtype=fx_graph.SCALAR_DTYPE) for s in scalars])
    return list(outs)


def run_on_emulator(rt, graph: dict, plan_text: str, kernels, tensors, scalars):
    metas = [(tuple(shape), torch.uint8 if dtype == torch.bool else dtype)
             for shape, dtype in fx_graph.output_metas(graph)]
    exe = CudaExecutable(plan_text, kernels, metas, rt)
    bufs = [rt.copy_in(t.contiguous()) for t in tensors]
    bufs += [rt.copy_in(torch.tensor(s, dtype=fx_graph.SCALAR_DTYPE)) for s in scalars]
    outs = exe.run(bufs)
    results = []
    for buf, (shape, dtype) in zip(outs, metas):
        host = torch.empty(shape, dtype=dtype)
        if host.numel():
            rt.copy_out(buf, host)
        results.append(host)
    return results


def assert_matches(got: list, want: list, what: str) -> float:
    """Max abs error; NaN in `got` fails unless eager has NaN at the same place."""
    worst = 0.0
    assert len(got) == len(want), what
    for i, (g, w) in enumerate(zip(got, want)):
        w = w.to(g.dtype) if w.dtype == torch.bool else w
        assert g.shape == w.shape and g.dtype == w.dtype, f"{what} output {i}"
        if g.dtype.is_floating_point or g.dtype.is_complex:
            assert not (torch.isnan(g) & ~torch.isnan(w)).any(), f"{what} output {i}: NaN"
            label = f"{what} output {i}"
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4, equal_nan=True,
                                       msg=lambda m, label=label: f"{label}: {m}")
            if g.numel():
                worst = max(worst, float((g - w).abs().nan_to_num().max()))
        else:
            assert torch.equal(g, w), f"{what} output {i}: {g} != {w}"
    return worst


@pytest.mark.parametrize("name", sorted(emulator_cases.CASES))
def test_case_matches_eager(name, runtime, traced):
    graphs = traced[name]
    assert graphs, f"case {name} traced no graph"
    how = emulator_cases.CASES[name][2]
    for k, fx_text in enumerate(graphs):
        graph = fx_graph.loads(fx_text)
        plan_text, kernels = compile_for_emulator(fx_text)
        tensors, scalars = _inputs(graph, how, seed=k)
        want = _eager(graph, tensors, scalars)
        before = cuda_driver.emulator.stats()["launches"]
        got = run_on_emulator(runtime, graph, plan_text, kernels, tensors, scalars)
        assert cuda_driver.emulator.stats()["launches"] > before or not kernels
        assert_matches(got, want, f"{name} graph {k}")


@pytest.mark.parametrize("name", sorted(n for n, c in emulator_cases.CASES.items()
                                         if c[2] == "half_edges"))
def test_half_results_are_eagers_bits(name, runtime, traced):
    """The CPU build rounds as the cpu target (cpu/bf16_rounding.py): before, LLVM's
    bfloat16 lowering on an AVX512-BF16 host flushed subnormal products to 0, float16
    rsqrt was 1 / sqrt rounded twice (178 of 512 values differed), and expm1 was
    exp(x) - 1 (513 of 1024 bfloat16 values). assert_matches' 1e-4 tolerance hides a
    subnormal: bits here."""
    graph = fx_graph.loads(traced[name][0])
    plan_text, kernels = compile_for_emulator(traced[name][0])
    tensors, scalars = _inputs(graph, "half_edges", seed=0)
    want = _eager(graph, tensors, scalars)
    got = run_on_emulator(runtime, graph, plan_text, kernels, tensors, scalars)
    for i, (g, w) in enumerate(zip(got, want)):
        same = (g.view(torch.int16) == w.view(torch.int16)) | (g.isnan() & w.isnan())
        assert same.all(), (i, g[~same][:4].tolist(), w[~same][:4].tolist())


@pytest.mark.parametrize("name", ["sum_all", "max_min", "softmax", "prod_all", "slice_cols",
                                  "cumsum_cols", "scatter_add", "scatter_overwrite"])
def test_block_order_does_not_matter(name, runtime, traced):
    """Blocks run last to first: same results (the atomics are order independent up
    to float rounding)."""
    assert_matches_with_blocks_reversed(runtime, traced[name][0], emulator_cases.CASES[name][2],
                                        seed=1, what=name)


def assert_matches_with_blocks_reversed(runtime, fx_text: str, sample, seed: int, what: str):
    """Runs the graph on the emulator with every grid's blocks last to first, against eager."""
    graph = fx_graph.loads(fx_text)
    plan_text, kernels = compile_for_emulator(fx_text)
    tensors, scalars = _inputs(graph, sample, seed=seed)
    want = _eager(graph, tensors, scalars)
    cuda_driver.emulator.set_reverse_blocks(True)
    try:
        got = run_on_emulator(runtime, graph, plan_text, kernels, tensors, scalars)
    finally:
        cuda_driver.emulator.set_reverse_blocks(False)
    assert_matches(got, want, f"{what} reversed")


def test_slice_view_plan_passes_base_pointer(traced):
    """The double-offset bug: `x[:, 1:] * 2` once had `p0+4` in its launch while the
    kernel added the view's offset again; the kernel's memref type carries the offset."""
    plan_text, _ = compile_for_emulator(traced["slice_cols"][0])
    launches = [line for line in plan_text.splitlines() if line.startswith("launch")]
    assert launches and all("+" not in line for line in launches), plan_text


@pytest.mark.parametrize("name, width", [
    ("vec4_chain", 4), ("slice_cols_aligned", 4), ("elementwise", 4),
    ("slice_cols_64", 1), ("transposed_chain", 1), ("gelu_pow", 1)])
def test_elementwise_elements_per_thread(name, width, traced):
    """lowering/gpu/kernels/vectorize.py: an elementwise kernel whose accesses are contiguous and
    16-byte aligned in groups of 4 runs one thread per 4 elements (grid x block from the
    plan); a view 4 bytes in, a transposed operand or an odd row (70) keeps one each."""
    fx_text = traced[name][0]
    plan_text, _ = compile_for_emulator(fx_text)
    (launch,) = [line.split() for line in plan_text.splitlines() if line.startswith("launch")]
    grid, block = int(launch[3]), int(launch[6])
    (shape, _), = fx_graph.output_metas(fx_graph.loads(fx_text))
    threads = torch.Size(shape).numel() // width
    assert (grid, block) == (-(-threads // min(256, threads)), min(256, threads)), launch


def _ptx(fx_text: str) -> str:
    text = stages.run_stages(fx_text, stages.Options(target="cuda"), start="fx",
                             stop="ptx").text
    return "".join(data.decode() for _, data, _ in gpu_stages.kernel_objects(text))


def test_ptx_has_16_byte_accesses(traced):
    """4 elements per thread (vector<4xf32> loads/stores) and `.align 16` pointer
    parameters: 16-byte accesses in PTX. The view 4 bytes in keeps 4-byte ones
    (its kernel gets x's own, aligned, pointer: the claim holds, the offset is applied
    inside the kernel)."""
    vec = _ptx(traced["vec4_chain"][0])
    assert ".ptr .align 16" in vec and ".ptr .align 1 " not in vec, vec[:2000]
    # x, y and the broadcast row b: three 16-byte loads, one 16-byte store.
    assert vec.count("ld.global.v4.b32") == 3 and vec.count("st.global.v4.b32") == 1, vec
    scalar = _ptx(traced["slice_cols_64"][0])
    assert ".v4" not in scalar and "ld.global.b32" in scalar, scalar


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
@pytest.mark.parametrize("name", ["scatter_overwrite", "complex_ops"])
def test_ptxas_accepts_scatters_and_complex(name, traced, tmp_path):
    """The last-write-wins scatter (an i32 `atom.max`) and complex parts as LLVM structs
    make PTX that ptxas assembles."""
    text = stages.run_stages(traced[name][0], stages.Options(target="cuda"), start="fx",
                             stop="ptx").text
    modules = [data.decode() for _, data, _ in gpu_stages.kernel_objects(text)]
    if name == "scatter_overwrite":
        assert any(".max.s32" in ptx and "atom." in ptx for ptx in modules), modules
    for k, ptx in enumerate(modules):
        src = tmp_path / f"k{k}.ptx"
        src.write_text(ptx)
        done = subprocess.run(["ptxas", "-arch=sm_90", str(src), "-o", str(tmp_path / "k.o")],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr


def test_missing_write_shows_as_nan(runtime):
    """Poisoning: a fresh allocation reads back as NaN until something writes it."""
    buf = runtime.alloc(64)
    host = torch.empty(16)
    runtime.copy_out(buf, host)
    assert torch.isnan(host).all()
    assert runtime.device_info()["emulator"]


def test_emulator_rejects_ptx(runtime):
    with pytest.raises(cuda_driver.CudaError, match="INVALID_IMAGE"):
        runtime.load_module(".version 8.0\n.target sm_90\n")


def test_bounds_verification_catches_out_of_bounds(tmp_path):
    """With runtime verification, a kernel that reads past its buffer aborts with the
    failing access named (run in a child: the check aborts the process)."""
    gpu_text = """
module attributes {gpu.container_module} {
  gpu.module @oob {
    gpu.func @oob(%arg0: memref<4xf32>, %arg1: memref<4xf32>) kernel {
      %c1 = arith.constant 1 : index
      %t = gpu.thread_id x
      %i = arith.addi %t, %c1 : index
      %v = memref.load %arg0[%i] : memref<4xf32>
      memref.store %v, %arg1[%t] : memref<4xf32>
      gpu.return
    }
  }
}
"""
    code = f"""
import torch
from lazymlir.lowering.gpu import emulator as gpu_emulator
from lazymlir.targets import cuda_driver
from lazymlir.targets.cuda import CudaExecutable
import lazymlir
images = gpu_emulator.emulator_images_from_text({gpu_text!r}, verify={{verify}})
rt = cuda_driver.CudaRuntime.create(emulator=True,
                                    library=lazymlir.config.settings().runtime_lib)
plan = "lazymlir-plan 1\\nbuffers 2\\narg 0 0\\narg 1 1\\nlaunch 0 oob 1 1 1 4 1 1 0 2 p0 p1\\n"
exe = CudaExecutable(plan, [(n, i, "emulator") for n, i in images], [], rt)
a, b = rt.copy_in(torch.ones(4)), rt.alloc(16)
exe._plan.run(exe._modules, [a, b], rt)
print("ran")
"""
    env = dict(os.environ)
    _emulator_runtime()
    plain = subprocess.run([sys.executable, "-c", code.replace("{verify}", "False")],
                           env=env, capture_output=True, text=True)
    assert plain.returncode == 0 and "ran" in plain.stdout, plain.stderr[-2000:]
    checked = subprocess.run([sys.executable, "-c", code.replace("{verify}", "True")],
                             env=env, capture_output=True, text=True)
    assert checked.returncode != 0
    report = checked.stdout + checked.stderr  # MLIR's runtime check prints to stdout
    assert "out-of-bounds access" in report and "memref.load" in report, report


BLOCK_SUM = """
module attributes {gpu.container_module} {
  gpu.module @blocksum {
    gpu.func @blocksum(%x: memref<256xf32>, %out: memref<4xf32>)
        workgroup(%sh: memref<64xf32, #gpu.address_space<workgroup>>) kernel {
      %c0 = arith.constant 0 : index
      %c64 = arith.constant 64 : index
      %b = gpu.block_id x
      %t = gpu.thread_id x
      %base = arith.muli %b, %c64 : index
      %i = arith.addi %base, %t : index
      %v = memref.load %x[%i] : memref<256xf32>
      memref.store %v, %sh[%t] : memref<64xf32, #gpu.address_space<workgroup>>
      gpu.barrier
      %is0 = arith.cmpi eq, %t, %c0 : index
      scf.if %is0 {
        %c1 = arith.constant 1 : index
        %zero = arith.constant 0.0 : f32
        %s = scf.for %k = %c0 to %c64 step %c1 iter_args(%acc = %zero) -> (f32) {
          %e = memref.load %sh[%k] : memref<64xf32, #gpu.address_space<workgroup>>
          %n = arith.addf %acc, %e : f32
          scf.yield %n : f32
        }
        memref.store %s, %out[%b] : memref<4xf32>
      }
      gpu.barrier
      %w = arith.mulf %v, %v : f32
      memref.store %w, %x[%i] : memref<256xf32>
      gpu.return
    }
  }
}
"""


def test_barriers_and_workgroup_memory(runtime):
    """Barriers split the thread loops (every thread finishes a phase before the next
    starts); values crossing a barrier (%t, %i, %v) are kept per thread; workgroup
    memory is one buffer per block. A block sum through shared memory must be exact."""
    images = gpu_emulator.emulator_images_from_text(BLOCK_SUM)
    plan = ("lazymlir-plan 1\nbuffers 2\narg 0 0\narg 1 1\n"
            "launch 0 blocksum 4 1 1 64 1 1 0 2 p0 p1\n")
    exe = CudaExecutable(plan, [(n, i, "emulator") for n, i in images], [], runtime)
    x = torch.randn(256, generator=torch.Generator().manual_seed(0))
    xs, out = runtime.copy_in(x), runtime.alloc(16)
    exe._plan.run(exe._modules, [xs, out], runtime)
    sums, squares = torch.empty(4), torch.empty(256)
    runtime.copy_out(out, sums)
    runtime.copy_out(xs, squares)
    torch.testing.assert_close(sums, x.view(4, 64).sum(1), rtol=1e-5, atol=1e-5)
    assert torch.equal(squares, x * x)


SHUFFLES = """
module attributes {gpu.container_module} {
  gpu.module @shuffles {
    gpu.func @shuffles(%x: memref<128xi32>, %out: memref<6x128xi32>, %ok: memref<4x128xi32>)
        kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %c3 = arith.constant 3 : index
      %c4 = arith.constant 4 : index
      %c5 = arith.constant 5 : index
      %c64 = arith.constant 64 : index
      %i1 = arith.constant 1 : i32
      %i2 = arith.constant 2 : i32
      %i3 = arith.constant 3 : i32
      %i5 = arith.constant 5 : i32
      %i16 = arith.constant 16 : i32
      %i39 = arith.constant 39 : i32
      %w = arith.constant 32 : i32
      %b = gpu.block_id x
      %t = gpu.thread_id x
      %base = arith.muli %b, %c64 : index
      %i = arith.addi %base, %t : index
      %v = memref.load %x[%i] : memref<128xi32>
      %a, %av = gpu.shuffle xor %v, %i5, %w : i32
      %d, %dv = gpu.shuffle down %v, %i3, %w : i32
      %u, %uv = gpu.shuffle up %v, %i2, %w : i32
      %n, %nv = gpu.shuffle idx %v, %i39, %w : i32
      %e, %ev = gpu.shuffle xor %a, %i16, %w : i32
      %f, %fv = gpu.shuffle xor %e, %i1, %w : i32
      memref.store %a, %out[%c0, %i] : memref<6x128xi32>
      memref.store %d, %out[%c1, %i] : memref<6x128xi32>
      memref.store %u, %out[%c2, %i] : memref<6x128xi32>
      memref.store %n, %out[%c3, %i] : memref<6x128xi32>
      memref.store %e, %out[%c4, %i] : memref<6x128xi32>
      memref.store %f, %out[%c5, %i] : memref<6x128xi32>
      %av32 = arith.extui %av : i1 to i32
      %dv32 = arith.extui %dv : i1 to i32
      %uv32 = arith.extui %uv : i1 to i32
      %nv32 = arith.extui %nv : i1 to i32
      memref.store %av32, %ok[%c0, %i] : memref<4x128xi32>
      memref.store %dv32, %ok[%c1, %i] : memref<4x128xi32>
      memref.store %uv32, %ok[%c2, %i] : memref<4x128xi32>
      memref.store %nv32, %ok[%c3, %i] : memref<4x128xi32>
      gpu.return
    }
  }
}
"""


def test_warp_shuffles(runtime):
    """gpu.shuffle on the emulator: a phase boundary of the thread loops; each lane reads
    its partner within its warp (2 blocks of 2 warps), `valid` as PTX shfl.sync with
    width 32 (an invalid lane keeps its own value); chained shuffles (e, f) read the
    previous shuffle's results."""
    images = gpu_emulator.emulator_images_from_text(SHUFFLES)
    plan = ("lazymlir-plan 1\nbuffers 3\narg 0 0\narg 1 1\narg 2 2\n"
            "launch 0 shuffles 2 1 1 64 1 1 0 3 p0 p1 p2\n")
    exe = CudaExecutable(plan, [(n, i, "emulator") for n, i in images], [], runtime)
    x = torch.randint(-1000, 1000, (128,), dtype=torch.int32,
                      generator=torch.Generator().manual_seed(0))
    bufs = [runtime.copy_in(x), runtime.alloc(6 * 128 * 4), runtime.alloc(4 * 128 * 4)]
    exe._plan.run(exe._modules, bufs, runtime)
    out, ok = torch.empty(6, 128, dtype=torch.int32), torch.empty(4, 128, dtype=torch.int32)
    runtime.copy_out(bufs[1], out)
    runtime.copy_out(bufs[2], ok)
    lin = torch.arange(128)
    lane, warp = lin % 32, lin - lin % 32

    def read(src, valid, values=x):
        return torch.where(valid, values[warp + torch.where(valid, src, lane)], values)

    valid = {"xor": lane ^ 5 <= 31, "down": lane + 3 <= 31, "up": lane >= 2,
             "idx": torch.ones(128, dtype=torch.bool)}
    a = read(lane ^ 5, valid["xor"])
    e = read(lane ^ 16, lane ^ 16 <= 31, a)
    want = torch.stack([a, read(lane + 3, valid["down"]), read(lane - 2, valid["up"]),
                        read(torch.full_like(lane, 39 & 31), valid["idx"]), e,
                        read(lane ^ 1, lane ^ 1 <= 31, e)])
    assert torch.equal(out, want), (out - want).nonzero()[:8]
    assert torch.equal(ok, torch.stack(list(valid.values())).to(torch.int32))
    assert not torch.equal(want[1], x) and not torch.equal(want[2], x)  # both kinds of lane


@pytest.mark.parametrize("change, message", [
    # A shuffle under a condition: not every thread of the block reaches it.
    ("      %a, %av = gpu.shuffle xor %v, %i5, %w : i32\n",
     "inside control flow"),
    ("%w = arith.constant 32 : i32", "width other than the constant 32"),
    ("array<i32: 64, 1, 1>", "block of 48 threads"),
])
def test_shuffle_rejections(change, message):
    text = SHUFFLES
    if change.startswith("      %a"):
        text = text.replace(change, "      %cond = arith.cmpi ult, %t, %c4 : index\n"
                            "      %a, %av = scf.if %cond -> (i32, i1) {\n"
                            "        %r, %rv = gpu.shuffle xor %v, %i5, %w : i32\n"
                            "        scf.yield %r, %rv : i32, i1\n"
                            "      } else {\n"
                            "        %false = arith.constant false\n"
                            "        scf.yield %v, %false : i32, i1\n"
                            "      }\n")
    elif change.startswith("%w"):
        text = text.replace(change, "%w = arith.constant 16 : i32")
    else:
        text = text.replace(change, "array<i32: 48, 1, 1>")
    with pytest.raises(gpu_emulator.GpuLoweringError, match=message):
        gpu_emulator.emulator_images_from_text(text)


def test_emulator_image_format():
    assert gpu_emulator.is_emulator_image(gpu_emulator.EMULATOR_MAGIC + b"\0" * 8)
    assert not gpu_emulator.is_emulator_image(b".version 8.0")
    assert json.dumps(sorted(emulator_cases.CASES))  # cases are plain names


def test_modules_sharing_a_shared_object(runtime):
    """Modules whose images hold the same shared object (a graph's gpu.modules) load it
    once; unloading one leaves the others running."""
    (name, image), = gpu_emulator.emulator_images_from_text(BLOCK_SUM)
    first, second = runtime.load_module(image), runtime.load_module(image)
    first.unload()
    plan = LaunchPlan("lazymlir-plan 1\nbuffers 2\narg 0 0\narg 1 1\n"
                      "launch 0 blocksum 4 1 1 64 1 1 0 2 p0 p1\n")
    x = torch.randn(256, generator=torch.Generator().manual_seed(0))
    xs, out = runtime.copy_in(x), runtime.alloc(16)
    plan.run([second], [xs, out], runtime)
    sums = torch.empty(4)
    runtime.copy_out(out, sums)
    torch.testing.assert_close(sums, x.view(4, 64).sum(1), rtol=1e-5, atol=1e-5)
    assert name == "blocksum"
