"""torch.distributed with two local processes (gloo on 127.0.0.1): c10d collectives on
lazy_mlir tensors, DDP on lazy_mlir, functional collectives and DDP through
torch.compile(backend="lazymlir"), and the README's torchrun example.

Both ranks run cases/distributed_cases.py in a process of their own, with a time
limit, so a hang or a crash is a test failure with the ranks' output. One pair of
processes runs every check (process start and compiles dominate the cost).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import CASES_DIR
from lazymlir.support.settings import default_compile_workers
from lazymlir.targets import cuda

ROOT = Path(__file__).resolve().parents[3]
# Under the emulator driver every kernel runs on the CPU: the DDP checks take minutes.
TIMEOUT = 1500 if os.environ.get("LAZYMLIR_CUDA_DRIVER") == "emulator" else 400


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The target this run's device suites use (scripts/test.sh's emulator pass sets
# LAZYMLIR_TARGET=cuda LAZYMLIR_CUDA_DRIVER=emulator): the ranks run on it too.
TARGET_SETTINGS = ("LAZYMLIR_TARGET", "LAZYMLIR_CUDA_DRIVER", "LAZYMLIR_RUNTIME_LIB")


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("LAZYMLIR_") or k in TARGET_SETTINGS}
    # Each rank's compiles stay its own (no shared disk cache) unless `extra` names one.
    return {**env, "LAZYMLIR_CACHE_DIR": "off", "OMP_NUM_THREADS": "1", **extra}


# The checks of cases/distributed_cases.py each test reads; the ranks run only those
# of the selected tests (the emulator pass selects the cheap ones).
CHECKS = {
    "test_every_c10d_collective_on_lazy_tensors_equals_eager": ["collectives"],
    "test_lazy_mlir_local_rank_index_names_the_process_device": ["device_index"],
    "test_a_group_without_a_cpu_backend_says_what_to_use": ["no_cpu_backend"],
    "test_ddp_on_lazy_mlir_equals_one_process_on_the_whole_batch":
        ["ddp_sgd", "ddp_adamw_bucket_view"],
    "test_functional_collectives_in_a_compiled_graph": ["functional_compiled"],
    "test_compiled_ddp_equals_one_process_on_the_whole_batch":
        [f"ddp_compiled_{m}" for m in ("ddp_optimizer", "no_optimization", "python_reducer")],
    "test_fsdp2_on_lazy_mlir_raises_what_to_use_instead": ["fsdp2_lazy"],
}


def _run_ranks(checks: list[str], world: int = 2, cache_dir: str = "off") -> list[dict]:
    port = str(_free_port())
    # LOCAL_RANK as torchrun sets it: the checks use lazy_mlir:<LOCAL_RANK>.
    procs = [subprocess.Popen([sys.executable, str(CASES_DIR / "distributed_cases.py"),
                               str(rank), str(world), port, ",".join(checks)],
                              env=_env(LOCAL_RANK=str(rank), LAZYMLIR_CACHE_DIR=cache_dir),
                              text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for rank in range(world)]
    outputs = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            out, err = proc.communicate()
            pytest.fail(f"a rank hung (>{TIMEOUT} s):\n{out[-2000:]}\n{err[-4000:]}")
        outputs.append((proc.returncode, out, err))
    results = []
    for rank, (code, out, err) in enumerate(outputs):
        assert code == 0, f"rank {rank} failed ({code}):\n{out[-2000:]}\n{err[-6000:]}"
        line = next(s for s in out.splitlines() if s.startswith("RESULT "))
        results.append(json.loads(line[len("RESULT "):]))
    return results


@pytest.fixture(scope="module")
def ranks(request):
    selected = {item.originalname for item in request.session.items
                if item.module is request.module}
    return _run_ranks([c for name in CHECKS if name in selected for c in CHECKS[name]])


@pytest.mark.emulator
def test_every_c10d_collective_on_lazy_tensors_equals_eager(ranks):
    """Pending, computed and view inputs; all_reduce once left its tensor unchanged.
    Also funcol's functional collectives called eagerly on lazy tensors."""
    for rank, result in enumerate(ranks):
        errors = result["collectives"]["errors"]
        assert len(errors) == 16, errors
        assert all(e == 0 for e in errors.values()), (rank, errors)
        assert result["collectives"]["fallbacks"] == {}, rank


@pytest.mark.parametrize("check", ["ddp_sgd", "ddp_adamw_bucket_view"])
def test_ddp_on_lazy_mlir_equals_one_process_on_the_whole_batch(ranks, check):
    """init sync from different initial weights, several buckets, no_sync accumulation;
    DDP once failed in its constructor."""
    for rank, result in enumerate(ranks):
        ddp = result[check]
        assert ddp["error"] < 1e-5, (rank, ddp)
        # DDP's bucket views (gradients.as_strided(...)) write through as_strided_scatter,
        # which lowers; nothing, c10d ops least of all, runs as a fallback.
        assert ddp["fallbacks"] == {}, (rank, ddp)
        # Step 1 compiles; step 2 too (DDP rebuilds its buckets in step 2's forward:
        # new, pending bucket tensors), so may step 3 (the rebuilt buckets, now
        # computed); from then on nothing compiles.
        assert ddp["compiles"][3:] == [0] * (len(ddp["compiles"]) - 3), (rank, ddp)


@pytest.mark.emulator
def test_lazy_mlir_local_rank_index_names_the_process_device(ranks):
    """Under torchrun (LOCAL_RANK set), lazy_mlir:<LOCAL_RANK> is the process's device,
    as cuda:<LOCAL_RANK> is for CUDA scripts (DDP's device_ids too); another index
    raises."""
    for rank, result in enumerate(ranks):
        check = result["device_index"]
        assert check["devices"] == ["lazy_mlir:0"] * 3, (rank, check)
        assert check["ddp_error"] == 0, (rank, check)
        assert f"lazy_mlir:{2 + rank} is not this process's device" in check["raised"], check


@pytest.mark.emulator
def test_a_group_without_a_cpu_backend_says_what_to_use(ranks):
    """NCCL on device buffers is not supported yet: an NCCL-only group's collective on
    lazy tensors raises an error naming gloo and cpu:gloo,cuda:nccl."""
    for result in ranks:
        raised = result["no_cpu_backend"]["raised"]
        assert raised and "cpu:gloo,cuda:nccl" in raised and "c10d::allreduce_" in raised, raised


def test_lazy_mlir_index_in_one_process_and_the_gpu_of_a_local_rank(monkeypatch):
    """Outside a launcher only index 0 names the device; on the cuda target (real
    driver) a process's GPU is its LOCAL_RANK's, modulo the GPUs it sees."""
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert torch.ones(1, device="lazy_mlir:0").device == torch.device("lazy_mlir", 0)
    with pytest.raises(ValueError, match="name it lazy_mlir or lazy_mlir:0"):
        torch.ones(1, device="lazy_mlir:1")
    with pytest.raises(ValueError, match="lazy_mlir:1 is not this process's device"):
        torch.lazy_mlir.set_device(1)
    assert cuda.local_ordinal("real") == 0
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setattr(cuda.cuda_driver, "load_library", lambda explicit=None: None)
    for visible, ordinal in ((8, 3), (2, 1), (1, 0)):
        monkeypatch.setattr(cuda.cuda_driver, "device_count", lambda n=visible: n)
        assert cuda.local_ordinal("real") == ordinal, visible
    assert cuda.local_ordinal("emulator") == 0  # one emulated device


@pytest.mark.emulator
def test_functional_collectives_in_a_compiled_graph(ranks):
    """Once garbage (the output copied before its wait_tensor); LAZYMLIR_FALLBACK=error."""
    for rank, result in enumerate(ranks):
        check = result["functional_compiled"]
        assert check["error"] == 0, (rank, check)
        assert check["fallbacks"] == {} and check["collectives"] == 2, (rank, check)


@pytest.mark.parametrize("mode", ["ddp_optimizer", "no_optimization", "python_reducer"])
def test_compiled_ddp_equals_one_process_on_the_whole_batch(ranks, mode):
    for rank, result in enumerate(ranks):
        check = result[f"ddp_compiled_{mode}"]
        assert check["error"] < 1e-5, (rank, check)
        assert check["fallbacks"] == {}, (rank, check)
    if mode == "python_reducer":  # compiled autograd's graph holds the all_reduce
        assert all(r["ddp_compiled_python_reducer"]["collectives"] > 0 for r in ranks)


@pytest.mark.emulator
def test_fsdp2_on_lazy_mlir_raises_what_to_use_instead(ranks):
    for result in ranks:
        check = result["fsdp2_lazy"]
        assert "DeviceMesh((2,), 'lazy_mlir'" in check["mesh"], check
        assert check["raised"] and "DistributedDataParallel" in check["raised"], check


def test_the_readme_torchrun_example(tmp_path):
    """The README's DDP example, as written there, under torchrun with 2 processes."""
    readme = (ROOT / "README.md").read_text()
    match = re.search(r"<!-- torchrun-example -->\s*```python\n(.*?)```", readme, re.S)
    assert match, "README.md has no torchrun example block"
    script = tmp_path / "train_ddp.py"
    script.write_text(match.group(1))
    # `torchrun` is this module's console script: run with this Python.
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node=2", str(script)]
    done = subprocess.run(command, env=_env(), capture_output=True, text=True,
                          timeout=TIMEOUT, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert done.stdout.count("rank 0 step 2 loss") == 1, done.stdout


def test_compile_workers_per_rank_share_the_machine_cores():
    for cores, local_world, workers in ((16, None, 2), (16, "4", 2), (2, "2", 1), (2, None, 2),
                                        (8, "8", 1), (1, None, 1), (4, "x", 2)):
        environ = {} if local_world is None else {"LOCAL_WORLD_SIZE": local_world}
        assert default_compile_workers(cores, environ) == workers, (cores, local_world)


@pytest.mark.slow
def test_ranks_sharing_one_disk_cache(tmp_path):
    """Two ranks, one LAZYMLIR_CACHE_DIR. Cold: both compile the same graphs at once
    (the first entry written stays; test_disk_cache.py's concurrent-fill tests cover
    the folder), both right. Warm: a second run compiles nothing on either rank."""
    cache = str(tmp_path / "cache")
    cold = _run_ranks(["ddp_sgd"], cache_dir=cache)
    warm = _run_ranks(["ddp_sgd"], cache_dir=cache)
    for run in (cold, warm):
        assert all(r["ddp_sgd"]["error"] < 1e-5 for r in run), run
    assert all(sum(r["ddp_sgd"]["compiles"]) > 0 for r in cold), cold
    assert all(sum(r["ddp_sgd"]["compiles"]) == 0 for r in warm), warm
    staging = [p for p in Path(cache).rglob(".*") if p.is_dir()]
    assert not staging, staging
