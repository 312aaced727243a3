"""The GPU check kit end to end on the emulator driver: built by `python -m lazymlir.gpu_kit
build`, run by the kit's own `run.py --driver emulator` in a fresh process.

A subset of the kit's cases keeps this under two minutes (the whole kit is built and run
by hand: docs/gpu-results.md): an elementwise chain with scalar inputs, a reduction, a
fused row kernel, a tensor-core matmul, views with offsets, an indexed op and the
out-of-range index, which must be reported, not pass. The runner must import neither
torch-mlir, the MLIR bindings nor lazymlir (the GPU machine has none of them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CASES = ["elementwise_chain", "argmax", "softmax", "matmul_bf16_odd", "views_offsets",
         "embedding", "embedding_out_of_range"]


def test_kit_builds_and_every_bundle_passes_on_the_emulator(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYMLIR_")}
    kit, out = tmp_path / "kit", tmp_path / "out"
    built = subprocess.run([sys.executable, "-m", "lazymlir.gpu_kit", "build", str(kit),
                            "--only", ",".join(CASES), "--source", str(ROOT)],
                           env=env, capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    manifest = json.loads((kit / "kit.json").read_text())
    assert {b["case"] for b in manifest["bundles"]} == set(CASES), manifest["not_built"]
    size = sum(p.stat().st_size for p in kit.rglob("*") if p.is_file())
    assert size < 64 << 20, f"the kit is {size} bytes"
    for name in ("run.py", "CMakeLists.txt", "cuda_runtime/include/lazymlir_runtime.h",
                 "runtime/builtins.c"):
        assert (kit / name).is_file(), name

    # Run from elsewhere, as on the GPU machine: only run.py and the kit.
    ran = subprocess.run([sys.executable, str(kit / "run.py"), "--driver", "emulator",
                          "--out", str(out), "--check-imports"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    last = ran.stdout.strip().splitlines()[-1]
    total = len(manifest["bundles"])
    assert last.startswith(f"RESULT pass={total}/{total} "), ran.stdout[-4000:] + ran.stderr
    assert ran.returncode == 0
    report = json.loads((out / "report.json").read_text())
    assert report["device"] == "emulator" and report["banned_imports"] == []
    rows = {r["name"]: r for r in report["results"]}
    assert all(r["ok"] for r in rows.values())
    bad = rows["embedding_out_of_range"]
    assert bad["expect_error"] and "out of range" in bad["error"], bad
    for name, row in rows.items():
        if not row.get("expect_error"):  # compared (blocks in order and reversed), timed
            assert len(row["checks"]) >= 2 and row["ms"] >= 0, name
    assert "| embedding_out_of_range | pass (error reported) |" in \
        (out / "report.md").read_text()


def test_memory_roofline_follows_the_device_name():
    from lazymlir.gpu_kit import kit_runner

    assert kit_runner.hbm_bytes_per_s("NVIDIA H200") == 4.8e12
    assert kit_runner.hbm_bytes_per_s("NVIDIA H100 80GB HBM3") == 3.35e12
    bundle = {"bytes": 4.8e9, "flops": 0, "compute_dtype": "float32"}
    row = kit_runner.roofline(bundle, {"ms": 2.0}, "cuda", "NVIDIA H200")
    assert abs(row["fraction_of_roofline"] - 0.5) < 1e-9
