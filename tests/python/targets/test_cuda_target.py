"""The cuda target without a GPU: graphs compile to PTX + plan and run on the fake driver.

The fake driver executes no kernel code, so these tests check what the
compiler hands the runtime (plan parses, modules load, launches have the
right argument counts, cache round trip); numerics need a GPU (marked gpu).
"""

import json
import os
import subprocess
import sys

import pytest
import torch

import lazymlir  # noqa: F401  registers the device
from lazymlir.lowering import artifacts, stages
from lazymlir.lowering.front import fx_graph
from lazymlir.lowering.front.fx_graph import output_metas
from lazymlir.targets import cuda_driver as cuda
from lazymlir.targets.cuda import CudaTarget, unavailable_reason


def _mlp_graph() -> dict:
    def inp(shape):
        return {"shape": shape, "dtype": "float32"}

    def ref(kind, i):
        return {"ref": [kind, i, 0]}

    return {
        "format": fx_graph.FORMAT, "version": fx_graph.VERSION,
        "inputs": [inp([8, 16]), inp([16, 32]), inp([32])],
        "nodes": [
            {"op": "aten.mm.default", "args": [ref("input", 0), ref("input", 1)], "kwargs": {},
             "outputs": [inp([8, 32])]},
            {"op": "aten.add.Tensor", "args": [ref("node", 0), ref("input", 2)], "kwargs": {},
             "outputs": [inp([8, 32])]},
            {"op": "aten.relu.default", "args": [ref("node", 1)], "kwargs": {},
             "outputs": [inp([8, 32])]},
            {"op": "aten.sum.default", "args": [ref("node", 2)], "kwargs": {},
             "outputs": [inp([])]},
        ],
        "outputs": [ref("node", 2), ref("node", 3)],
    }


@pytest.fixture
def fake_runtime():
    cuda.fake.reset()
    return cuda.CudaRuntime.create(fake=True)


def test_graph_compiles_to_ptx_and_runs_on_fake_driver(fake_runtime, tmp_path):
    graph = _mlp_graph()
    result = stages.run_stages(json.dumps(graph), stages.Options(target="cuda"), start="fx")
    assert result.stage == "ptx"
    artifact = artifacts.package("cuda", result.text, tmp_path / "artifact")
    target = CudaTarget(fake_runtime)
    exe = target.load(artifact, output_metas(graph))
    assert exe.kernels and all(kind in ("ptx", "cubin") for _, _, kind in exe.kernels)
    inputs = [fake_runtime.copy_in(torch.randn(m["shape"])) for m in graph["inputs"]]
    outputs = exe.run(inputs)
    assert [o.nbytes for o in outputs] == [8 * 32 * 4, 4]
    launches = cuda.fake.launches()
    assert launches, "the plan launched no kernel"
    assert all(max(launch["grid"]) * max(launch["block"]) > 1 for launch in launches)
    assert target.is_complete(artifact)
    # What the disk cache keeps is the artifact folder; loading it parses no IR.
    again = target.load(artifact, output_metas(graph))
    assert again.plan_text == exe.plan_text
    assert [k[1] for k in again.kernels] == [k[1] for k in exe.kernels]


def test_cuda_target_without_driver_fails_clearly():
    """Without a usable GPU (the real driver's verdict, asked here independently), the cuda
    target must refuse to run: a program that succeeds is the bug this test guards."""
    if unavailable_reason(lazymlir.config.settings().runtime_lib) is None:
        pytest.skip("a CUDA device is usable here")
    code = "import torch, lazymlir; torch.ones(2).to('lazy_mlir').cpu()"
    env = dict(os.environ, LAZYMLIR_TARGET="cuda")
    env.pop("LAZYMLIR_CUDA_DRIVER", None)  # the real driver, whatever this process runs on
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode != 0, "the cuda target ran without a usable GPU:\n" + done.stderr
    assert "LAZYMLIR_TARGET=cuda but no usable GPU" in done.stderr
    assert done.stderr.count("LAZYMLIR_TARGET=cpu") == 1, done.stderr  # said once


def test_auto_target_picks_cpu_without_driver():
    code = "import lazymlir; print(lazymlir.target())"
    env = dict(os.environ, LAZYMLIR_TARGET="auto")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ("cpu" if unavailable_reason() else "cuda")
