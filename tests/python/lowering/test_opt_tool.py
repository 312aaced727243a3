"""`lazymlir-opt` starts without the device: a tool run on MLIR text imports neither torch
nor the tracer (lit runs it at every RUN line), while `import lazymlir` anywhere else
registers the device as before (every device test of this suite runs after it)."""

from __future__ import annotations

import subprocess
import sys

import lazymlir
import pytest

LINALG = """
func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = tensor.empty() : tensor<4xf32>
  %1 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
      iterator_types = ["parallel"]} ins(%arg0 : tensor<4xf32>) outs(%0 : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %2 = arith.addf %in, %in : f32
    linalg.yield %2 : f32
  } -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
"""


@pytest.mark.parametrize("argv, tool", [
    (["python", "-m", "lazymlir.opt", "in.mlir"], True),
    (["python", "-X", "importtime", "-I", "-m", "lazymlir.opt"], True),
    (["/venv/bin/python", "/venv/bin/lazymlir-opt", "in.mlir", "--stage", "loops"], True),
    (["python", "-m", "pytest", "-m", "lazymlir.opt"], False),
    (["python", "train.py", "-m", "lazymlir.opt"], False),
    (["python", "-c", "import lazymlir"], False),
    (["python"], False),
])
def test_the_tool_process_is_recognized_from_the_command_line(monkeypatch, argv, tool):
    monkeypatch.setattr(sys, "orig_argv", argv)
    assert lazymlir._process_is_the_opt_tool() is tool


def test_the_tool_runs_a_stage_without_importing_torch(tmp_path):
    source = tmp_path / "in.mlir"
    source.write_text(LINALG)
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "lazymlir.opt", str(source),
                           "--stage", "bufferized"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "// lazymlir-stage: bufferized" in done.stdout and "memref<4xf32>" in done.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()
                if line.startswith("import time:")}
    assert "lazymlir.lowering.stages" in imported
    assert not imported & {"torch", "lazymlir.device", "lazymlir.tracing"}, \
        sorted(imported & {"torch", "lazymlir.device", "lazymlir.tracing"})

