"""The whole lazy_mlir device on the cuda target with the emulator driver.

`LAZYMLIR_TARGET=cuda LAZYMLIR_CUDA_DRIVER=emulator` makes every graph compile for
the cuda target with emulator images of its kernels in the artifact
(lowering/artifacts.py), and the cuda target run them through the real launch plan,
caching allocator and C API on the emulator driver. Each program runs in a fresh
process (the target is resolved once per session). The device test suites run on
this configuration too (scripts/test.sh); this file checks the selection itself.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from lazymlir.support import settings
from lazymlir.targets import cuda_driver

PROGRAM = textwrap.dedent("""
    import json, sys, torch, lazymlir
    from lazymlir.targets import cuda_driver
    torch.manual_seed(0)
    x = torch.randn(6, 24)
    y = x.to("lazy_mlir")
    got = {
        "slice": (y[:, 1:] * 2).cpu(), "chunk": (y.chunk(3, 1)[1] * 1.5).cpu(),
        "prod": (1 + 0.01 * y).prod(1).cpu(), "sum": y.sum().cpu(),
        "argmax": y.argmax(1).cpu(),
    }
    want = {
        "slice": x[:, 1:] * 2, "chunk": x.chunk(3, 1)[1] * 1.5,
        "prod": (1 + 0.01 * x).prod(1), "sum": x.sum(), "argmax": x.argmax(1),
    }
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-5, atol=1e-5, msg=k)
    target = lazymlir.targets.active()
    print(json.dumps({"target": target.name, "fingerprint": target.fingerprint(),
                      "driver": target.driver,
                      "info": target.runtime.device_info()["emulator"],
                      "launches": cuda_driver.emulator.stats()["launches"],
                      "fallbacks": lazymlir.metrics.counter("FallbackOps")}))
""")


def _run(tmp_path, **env) -> dict:
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    full = {k: v for k, v in os.environ.items()
            if not k.startswith("LAZYMLIR_") or k == "LAZYMLIR_RUNTIME_LIB"}
    full.update(LAZYMLIR_CACHE_DIR=str(tmp_path / "cache"), LAZYMLIR_FALLBACK="error", **env)
    done = subprocess.run([sys.executable, str(script)], env=full, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.fixture(scope="module", autouse=True)
def _emulator_usable(_runtime_library):  # conftest's: the device's library first
    try:
        cuda_driver.CudaRuntime.create(emulator=True).close()
    except (cuda_driver.CudaError, OSError) as error:
        pytest.fail("the CUDA runtime library does not load (the package install builds it: "
                    f"pip install .): {error}")


def _artifact_kinds(cache) -> set[str]:
    kinds = set()
    for manifest in cache.rglob("artifact.json"):
        kinds |= {k["kind"] for k in json.loads(manifest.read_text()).get("kernels", [])}
    return kinds


def test_emulator_driver_runs_the_device(tmp_path):
    """Slices, chunks (the double-offset bug), prod and reductions match eager; the
    kernels ran on the emulator; the cached artifacts hold emulator images."""
    out = _run(tmp_path, LAZYMLIR_TARGET="cuda", LAZYMLIR_CUDA_DRIVER="emulator")
    assert out["target"] == "cuda" and out["driver"] == "emulator" and out["info"]
    # ...-rt<hash of the runtime library>: a rebuilt runtime is a cache miss
    assert re.fullmatch(r"cuda-sm_90-emulator-rt[0-9a-f]{8}", out["fingerprint"]), out
    assert out["launches"] >= 5 and out["fallbacks"] == 0
    assert _artifact_kinds(tmp_path / "cache") == {"emulator"}


def test_auto_target_with_emulator_driver_is_cuda(tmp_path):
    """Reversed block order and bounds verification change nothing in correct kernels;
    verified images are cached apart from plain ones."""
    out = _run(tmp_path, LAZYMLIR_TARGET="auto", LAZYMLIR_CUDA_DRIVER="emulator",
               LAZYMLIR_CUDA_EMULATOR_VERIFY="1", LAZYMLIR_CUDA_EMULATOR_REVERSE="1",
               LAZYMLIR_CUDA_SYNC="1")
    assert out["target"] == "cuda", out
    assert re.fullmatch(r"cuda-sm_90-emulator-verify-rt[0-9a-f]{8}", out["fingerprint"]), out
    assert out["launches"] >= 5


def test_driver_setting_is_validated(monkeypatch):
    monkeypatch.setenv("LAZYMLIR_CUDA_DRIVER", "Emulator")
    assert settings.from_env().cuda_driver == "emulator"
    monkeypatch.setenv("LAZYMLIR_CUDA_DRIVER", "gpu")
    with pytest.raises(ValueError, match="LAZYMLIR_CUDA_DRIVER='gpu' is not one of: "
                                         "real, emulator, fake"):
        settings.from_env()
    monkeypatch.setenv("LAZYMLIR_CUDA_DRIVER", "real")
    monkeypatch.setenv("LAZYMLIR_CUDA_EMULATOR_VERIFY", "1")
    with pytest.raises(ValueError, match="needs LAZYMLIR_CUDA_DRIVER=emulator"):
        settings.from_env()


def test_emulator_runtime_refuses_ptx_artifacts():
    """An artifact's kernel images must fit the driver (the fingerprints keep them
    apart in the disk cache; this is the check behind that)."""
    from lazymlir.targets.cuda import CudaExecutable

    rt = cuda_driver.CudaRuntime.create(emulator=True)
    with pytest.raises(ValueError, match="is a ptx image, but the runtime's driver is the "
                                         "emulator"):
        CudaExecutable("lazymlir-plan 1\nbuffers 0\n", [("m", b".version 8.0", "ptx")], [], rt)


SYNC_PROGRAM = textwrap.dedent("""
    import torch, lazymlir
    from lazymlir.targets import cuda_driver
    y = torch.randn(4).to("lazy_mlir") * 2
    cuda_driver.fake.fail_call("cuStreamSynchronize", 1, 999)  # the kernel "faults"
    try:
        y.cpu()
    except cuda_driver.CudaError as error:
        print("ERROR", error)
    print("DRIVER", lazymlir.targets.active().driver)
""")


def test_sync_mode_names_the_failing_kernel_and_plan_line(tmp_path):
    """LAZYMLIR_CUDA_SYNC=1 synchronizes after each launch, so an asynchronous kernel
    failure (injected on the fake driver) names its kernel and plan line."""
    script = tmp_path / "sync.py"
    script.write_text(SYNC_PROGRAM)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("LAZYMLIR_") or k == "LAZYMLIR_RUNTIME_LIB"}
    env.update(LAZYMLIR_TARGET="cuda", LAZYMLIR_CUDA_DRIVER="fake", LAZYMLIR_CUDA_SYNC="1")
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stdout.splitlines()
    assert lines[-1] == "DRIVER fake"
    assert "cuStreamSynchronize failed" in lines[0]
    assert "after kernel 'main_kernel' (plan line " in lines[0], lines
