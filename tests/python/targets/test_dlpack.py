"""DLPack between lazy_mlir and other libraries (lazymlir/dlpack.py, targets/dlpack_abi.py).

The cuda target's cases (dlpack_cases.py) run in one child process on the emulator
driver, whose device memory is host memory: the pointers handed out are read back,
lifetimes are checked with the runtime's allocator counters, and a stand-in for a
torch.cuda tensor (this torch has no CUDA) produces kDLCUDA memory. A wrong pointer can
crash a process, hence the child. The cpu target's cases run here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import lazymlir
from lazymlir.targets import cuda_driver, dlpack_abi
from lazymlir.tracing import values

from conftest import target_name

CASES = Path(__file__).resolve().parents[1] / "cases" / "dlpack_cases.py"


@pytest.fixture(scope="module")
def cuda_results(tmp_path_factory, _runtime_library):
    try:
        cuda_driver.CudaRuntime.create(emulator=True).close()
    except (cuda_driver.CudaError, OSError) as error:
        pytest.fail("the CUDA runtime library does not load (the package install builds it: "
                    f"pip install .): {error}")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("LAZYMLIR_") or k == "LAZYMLIR_RUNTIME_LIB"}
    env.update(LAZYMLIR_TARGET="cuda", LAZYMLIR_CUDA_DRIVER="emulator",
               LAZYMLIR_FALLBACK="error",
               LAZYMLIR_CACHE_DIR=str(tmp_path_factory.mktemp("dlpack-cache")))
    done = subprocess.run([sys.executable, str(CASES)], env=env, capture_output=True,
                          text=True, timeout=600)
    results, started = {}, None
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if "start" in record:
                started = record["start"]
            else:
                results[record["case"]] = record
    return results, started, done


def _case_names() -> list[str]:
    names = []
    for line in CASES.read_text().splitlines():
        if line.startswith("def ") and names and names[-1] == "@case":
            names[-1] = line[4:line.index("(")]
        elif line == "@case":
            names.append("@case")
    return names


@pytest.mark.parametrize("name", _case_names())
def test_cuda_target_case(cuda_results, name):
    results, started, done = cuda_results
    if name not in results:
        pytest.fail(f"the child process stopped (exit {done.returncode}) during "
                    f"{started!r}, before {name!r}:\n{done.stderr[-4000:]}")
    assert results[name]["ok"], results[name]["error"]


@pytest.fixture
def cpu_target():
    if target_name() != "cpu":
        pytest.skip("the cpu target's DLPack cases")


def _value(tensor):
    torch._sync(tensor)
    return values.value_of(values.inner(tensor))


def test_cpu_target_round_trip_shares_memory(cpu_target):
    y = torch.arange(6, dtype=torch.float32).to("lazy_mlir") * 2
    assert y.__dlpack_device__() == (dlpack_abi.KDLCPU, 0)
    out = torch.from_dlpack(y)
    assert out.device.type == "cpu" and out.data_ptr() == _value(y).data.data_ptr()
    assert out.tolist() == [0, 2, 4, 6, 8, 10]
    source = torch.arange(4, dtype=torch.int64)
    back = lazymlir.from_dlpack(source)
    assert _value(back).data.data_ptr() == source.data_ptr()  # used in place
    assert (back + 1).cpu().tolist() == [1, 2, 3, 4]
    # A non-contiguous kDLCPU tensor is copied into a dense value.
    t = torch.arange(6.).reshape(2, 3).t()
    assert torch.equal(lazymlir.from_dlpack(t).cpu(), t)


class _CudaProducer:
    def __dlpack_device__(self):
        return (dlpack_abi.KDLCUDA, 0)

    def __dlpack__(self, **kwargs):
        raise AssertionError("the cpu target asked a kDLCUDA producer for its memory")


def test_cpu_target_refuses_cuda_tensors(cpu_target):
    with pytest.raises(ValueError, match="a DLPack tensor on kDLCUDA:0 cannot be used by the "
                                         "cpu target .* kDLCUDA needs LAZYMLIR_TARGET=cuda"):
        lazymlir.from_dlpack(_CudaProducer())


def test_cpu_target_compile_refuses_cuda_inputs(cpu_target):
    from torch._subclasses.fake_tensor import FakeTensorMode

    from lazymlir import dynamo

    with FakeTensorMode():  # a tensor on cuda without CUDA
        on_cuda = torch.empty(2, device="cuda")
    dynamo._check_devices([torch.ones(1)], lazymlir.targets.active())
    with pytest.raises(RuntimeError, match="got torch.cuda inputs, but the lazymlir target "
                                           "is cpu"):
        dynamo._check_devices([torch.ones(1), on_cuda], lazymlir.targets.active())
