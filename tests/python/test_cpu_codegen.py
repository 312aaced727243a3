"""CPU code generation of large graphs (lowering/cpu_outline.py, lowering/cpu_codegen.py).

A graph with many loop nests is outlined into one function per nest, and a large
module is split into parts compiled by parallel `opt`/`llc` processes and linked into
one shared object: the object must compute what the unsplit one does.
"""

from __future__ import annotations

import pytest
import torch
from conftest import target_name

from lazymlir.lowering import cpu_codegen, cpu_pipeline
from lazymlir.targets.cpu import CpuExecutable

pytestmark = pytest.mark.skipif(target_name() != "cpu", reason="CPU code generation")

NESTS = 12


def _loops_module() -> str:
    """`main(x, out)`: out = x * (k + 1) after NESTS nests, through a temporary."""
    nests = []
    for k in range(NESTS):
        source = "%arg0" if k == 0 else "%tmp"
        nests.append(f"""    scf.for %i{k} = %c0 to %c256 step %c1 {{
      %v{k} = memref.load {source}[%i{k}] : memref<256xf32>
      %x{k} = memref.load %arg0[%i{k}] : memref<256xf32>
      %w{k} = arith.addf %v{k}, %x{k} : f32
      memref.store %w{k}, %tmp[%i{k}] : memref<256xf32>
    }}""")
    return ("// lazymlir-stage: loops\nmodule {\n"
            "  func.func @main(%arg0: memref<256xf32>, %arg1: memref<256xf32>) {\n"
            "    %c0 = arith.constant 0 : index\n    %c1 = arith.constant 1 : index\n"
            "    %c256 = arith.constant 256 : index\n"
            "    %tmp = memref.alloc() {alignment = 64 : i64} : memref<256xf32>\n"
            + "\n".join(nests) + "\n"
            "    memref.copy %tmp, %arg1 : memref<256xf32> to memref<256xf32>\n"
            "    memref.dealloc %tmp : memref<256xf32>\n    return\n  }\n}\n")


@pytest.mark.parametrize("split", [False, True])
def test_outlined_and_split_module_computes_like_eager(tmp_path, monkeypatch, split):
    commands = []
    real_run = cpu_codegen._run
    monkeypatch.setattr(cpu_codegen, "_run", lambda cmd: (commands.append(cmd), real_run(cmd)))
    if split:  # small enough to stay whole by default: force 3 parts
        monkeypatch.setattr(cpu_codegen, "SPLIT_MIN_BYTES", 1)
        monkeypatch.setattr(cpu_codegen.os, "cpu_count", lambda: 3)
    llvm = cpu_pipeline.to_llvm(_loops_module())
    text = str(llvm)
    assert text.count("llvm.func internal @main$nest") == NESTS
    so = cpu_codegen.build_shared_object(text, tmp_path)
    splits = [c for c in commands if c[0].endswith("llvm-split")]
    assert len(splits) == (1 if split else 0)
    assert sum(1 for c in commands if c[0].endswith("llc")) == (3 if split else 1)
    x = torch.randn(256)
    (out,) = CpuExecutable(so, [((256,), torch.float32)]).run([x])
    torch.testing.assert_close(out, x * (NESTS + 1), rtol=1e-6, atol=1e-5)
    assert sorted(p.name for p in tmp_path.iterdir()) == [cpu_codegen.SO_NAME]


def test_split_module_keeps_helpers_defined_once_per_process(tmp_path, monkeypatch):
    """convert-math-to-funcs' linkonce_odr helpers (x ** 2 with an i64 exponent) must stay
    defined in the part that uses them (else: undefined symbol when the graph loads)."""
    monkeypatch.setattr(cpu_codegen, "SPLIT_MIN_BYTES", 1)
    monkeypatch.setattr(cpu_codegen.os, "cpu_count", lambda: 3)
    text = _loops_module().replace(
        "%w0 = arith.addf %v0, %x0 : f32",
        "%c2 = arith.constant 2 : i64\n      %p0 = math.fpowi %v0, %c2 : f32, i64\n"
        "      %w0 = arith.addf %p0, %x0 : f32")
    split_inputs = []
    real_split = cpu_codegen._split
    def split(ll, directory):
        parts = real_split(ll, directory)
        split_inputs.append(ll.read_text())  # after the rewrite: what llvm-split read
        return parts

    monkeypatch.setattr(cpu_codegen, "_split", split)
    so = cpu_codegen.build_shared_object(str(cpu_pipeline.to_llvm(text)), tmp_path)
    # What llvm-split got: the helper as an internal (one part's hidden) definition.
    assert "define linkonce_odr" not in split_inputs[0]
    assert "define internal float @__mlir_math_fpowi_f32_i64" in split_inputs[0]
    x = torch.randn(256)
    (out,) = CpuExecutable(so, [((256,), torch.float32)]).run([x])
    torch.testing.assert_close(out, x * x + x * NESTS, rtol=1e-5, atol=1e-4)


def test_identical_nests_are_merged_before_code_generation(tmp_path, monkeypatch):
    """Nests 1..NESTS-1 are the same loop (tmp += x): one definition reaches opt/llc."""
    split_inputs = []
    real_split = cpu_codegen._split
    monkeypatch.setattr(cpu_codegen, "_split", lambda ll, directory: (
        split_inputs.append(ll.read_text()), real_split(ll, directory))[1])
    so = cpu_codegen.build_shared_object(str(cpu_pipeline.to_llvm(_loops_module())), tmp_path)
    (text,) = split_inputs
    # nest0 (reads x twice) and the first of the NESTS - 1 identical ones are left;
    # main calls that one for all of them.
    assert text.count('define internal void @"main$nest') == 2, text[:3000]
    assert text.count('call void @"main$nest1"(') == NESTS - 1
    x = torch.randn(256)
    (out,) = CpuExecutable(so, [((256,), torch.float32)]).run([x])
    torch.testing.assert_close(out, x * (NESTS + 1), rtol=1e-6, atol=1e-5)
