"""CPU code generation of large graphs (lowering/cpu/outline.py, lowering/cpu/codegen.py,
lowering/cpu/units.py, lowering/cpu/object_cache.py).

A graph with many loop nests is outlined into one function per nest, and a large
module is cut into units (a nest each) compiled in parts by parallel `opt`/`llc`
processes and linked into one shared object: the object must compute what the
uncut one does. With a cache folder, a unit compiled for one graph is not compiled
again for another.
"""

from __future__ import annotations

import subprocess

import pytest
import torch
from conftest import target_name
from loop_nests import bufferized_nests

from lazymlir.lowering.cpu import codegen as cpu_codegen, entry_blocks, \
    outline as cpu_outline, stages as cpu_pipeline, units as cpu_units
from lazymlir.targets.cpu import CpuExecutable

pytestmark = pytest.mark.skipif(target_name() != "cpu", reason="CPU code generation")

NESTS = 12


def _loops_module(distinct: bool = True) -> str:
    """`main(x, out)`: out = x * (NESTS + 1) (+ 0 + 1 + ... + NESTS - 1 if `distinct`)
    after NESTS nests, through a temporary; without `distinct`, nests 1.. are the same.
    Bufferized-stage IR: cpu_pipeline.to_loops outlines the nests."""
    return bufferized_nests([float(k) if distinct else None for k in range(NESTS)])


@pytest.mark.parametrize("split", [False, True])
def test_outlined_and_split_module_computes_like_eager(tmp_path, monkeypatch, split):
    commands = []
    real_run = cpu_codegen._run
    monkeypatch.setattr(cpu_codegen, "_run", lambda cmd: (commands.append(cmd), real_run(cmd)))
    if split:  # small enough to stay whole by default: force 3 parts
        # and an entry in blocks of 4 ops (entry_blocks.py), as a big graph's is
        monkeypatch.setattr(entry_blocks, "BLOCK_OPS", 4)
        monkeypatch.setattr(cpu_codegen, "SPLIT_MIN_BYTES", 1)
        monkeypatch.setattr(cpu_codegen, "ENTRY_APART_MIN_BYTES", 1)
        monkeypatch.setattr(cpu_codegen.os, "cpu_count", lambda: 3)
    llvm = cpu_pipeline.to_llvm(str(cpu_pipeline.to_loops(_loops_module())))
    text = str(llvm)
    assert text.count("llvm.func internal @main$nest") == NESTS
    entry = text[text.index("@_mlir_ciface_main"):]
    # (two branches in any entry: from the packed arguments, and into the folded body)
    assert entry.count("llvm.br ^bb") == (9 if split else 2)
    so = cpu_codegen.build_shared_object(text, tmp_path)
    # Cut in Python: no tool parses the whole module again.
    assert not [c for c in commands if c[0].endswith(("llvm-split", "llvm-extract"))]
    llcs = [c for c in commands if c[0].endswith("llc")]
    # Split: 3 parts of nests at -O3, and the entry (main's C interface) apart at -O0.
    assert sorted(c[1] for c in llcs) == (["-O0", "-O3", "-O3", "-O3"] if split else ["-O3"])
    x = torch.randn(256)
    (out,) = CpuExecutable(so, [((256,), torch.float32)]).run([x])
    torch.testing.assert_close(out, x * (NESTS + 1) + sum(range(NESTS)), rtol=1e-6, atol=1e-5)
    assert sorted(p.name for p in tmp_path.iterdir()) == [cpu_codegen.SO_NAME]


def test_split_module_keeps_helpers_defined_once_per_process(tmp_path, monkeypatch):
    """convert-math-to-funcs' linkonce_odr helpers (x ** 2 with an i64 exponent) must stay
    defined in the part that uses them (else: undefined symbol when the graph loads)."""
    monkeypatch.setattr(cpu_codegen, "SPLIT_MIN_BYTES", 1)
    monkeypatch.setattr(cpu_codegen, "ENTRY_APART_MIN_BYTES", 1)
    monkeypatch.setattr(cpu_codegen.os, "cpu_count", lambda: 3)
    # The exponent: 2 for every element, but not a constant the canonicalizer folds.
    text = _loops_module().replace(
        "%u0 = arith.addf %v0, %x0 : f32",
        "%i64_0 = arith.index_cast %i0 : index to i64\n"
        "      %c2 = arith.constant 2 : i64\n      %c3 = arith.constant 3 : i64\n"
        "      %m0 = arith.remui %i64_0, %c2 : i64\n      %e0 = arith.subi %c3, %m0 : i64\n"
        "      %o0 = arith.andi %e0, %c2 : i64\n"
        "      %p0 = math.fpowi %v0, %o0 : f32, i64\n"
        "      %u0 = arith.addf %p0, %x0 : f32")
    assert "math.fpowi" in text
    split_inputs = []
    real_cut = cpu_units.cut
    def cut(llvm_ir, prefix, **kwargs):
        split_inputs.append(llvm_ir)  # after the rewrite: what the units are cut from
        return real_cut(llvm_ir, prefix, **kwargs)

    monkeypatch.setattr(cpu_units, "cut", cut)
    so = cpu_codegen.build_shared_object(
        str(cpu_pipeline.to_llvm(str(cpu_pipeline.to_loops(text)))), tmp_path)
    # What the cut got: the helper as an internal definition (a local function of the
    # unit that calls it).
    assert "define linkonce_odr" not in split_inputs[0]
    assert "define internal float @__mlir_math_fpowi_f32_i64" in split_inputs[0]
    x = torch.randn(256)
    (out,) = CpuExecutable(so, [((256,), torch.float32)]).run([x])
    torch.testing.assert_close(out, x * x + x * NESTS + sum(range(NESTS)), rtol=1e-5, atol=1e-4)


def test_entry_is_cut_into_blocks_of_calls():
    """The entry compiled at -O0 gets a block per ENTRY_BLOCK_CALLS calls (SelectionDAG
    selects one block at a time): same instructions, a branch to the next block."""
    body = "".join(f"  call void @f(i64 {i})\n" for i in range(5))
    text = f"define void @main() {{\n{body}  %r = call i64 @g()\n  ret void\n}}\n"
    cut = cpu_codegen._split_into_blocks(text, every=2)
    assert cut.count("  br label %lazymlir.block") == 3
    assert [line for line in cut.splitlines() if "lazymlir.block" not in line] == \
        text.splitlines()
    assert "  call void @f(i64 1)\n  br label %lazymlir.block0\nlazymlir.block0:\n" in cut


@pytest.mark.parametrize("cut", [False, True])
def test_entry_with_loops_stays_with_the_nests_at_o3(tmp_path, monkeypatch, cut):
    """Loops the outliner left in the entry (here: all of them) are the graph's work:
    that entry is not compiled apart at -O0 (cut into units or not)."""
    commands = []
    real_run = cpu_codegen._run
    monkeypatch.setattr(cpu_codegen, "_run", lambda cmd: (commands.append(cmd), real_run(cmd)))
    monkeypatch.setattr(cpu_codegen, "ENTRY_APART_MIN_BYTES", 1)
    if cut:
        monkeypatch.setattr(cpu_codegen, "SPLIT_MIN_BYTES", 1)
    monkeypatch.setattr(cpu_outline, "MIN_NESTS", 10 ** 6)
    loops = str(cpu_pipeline.to_loops(_loops_module()))
    assert "func.func private" not in loops
    so = cpu_codegen.build_shared_object(str(cpu_pipeline.to_llvm(loops)), tmp_path)
    assert [c[1] for c in commands if c[0].endswith("llc")] == ["-O3"]
    x = torch.randn(256)
    (out,) = CpuExecutable(so, [((256,), torch.float32)]).run([x])
    torch.testing.assert_close(out, x * (NESTS + 1) + sum(range(NESTS)), rtol=1e-6, atol=1e-5)
    assert not cpu_codegen._has_loops("; m\ndefine void @f() {\n  br label %1\n1:\n  ret void\n}\n"
                                      "define void @g() {\n  br label %1\n1:\n  ret void\n}\n")


def test_identical_nests_are_one_function(tmp_path):
    """Nests 1..NESTS-1 are the same loop (tmp = tmp + x): they become one function,
    which main calls NESTS - 1 times (cpu_outline._merge_identical)."""
    loops = str(cpu_pipeline.to_loops(_loops_module(distinct=False)))
    assert loops.count("func.func private @main$nest") == 2, loops
    assert loops.count("call @main$nest1(") == NESTS - 1
    so = cpu_codegen.build_shared_object(str(cpu_pipeline.to_llvm(loops)), tmp_path)
    x = torch.randn(256)
    (out,) = CpuExecutable(so, [((256,), torch.float32)]).run([x])
    torch.testing.assert_close(out, x * (NESTS + 1), rtol=1e-6, atol=1e-5)


def test_parallel_nests_are_outlined_before_they_become_openmp_regions():
    """An scf.forall nest is a function too; its OpenMP region is inside it."""
    nests = "\n".join(f"""    scf.forall (%i{k}) in (64) {{
      %r{k} = arith.muli %i{k}, %c1024 : index
      scf.for %j{k} = %c0 to %c1024 step %c1 {{
        %p{k} = arith.addi %r{k}, %j{k} : index
        %v{k} = memref.load %arg0[%p{k}] : memref<65536xf32>
        %w{k} = arith.addf %v{k}, %v{k} : f32
        memref.store %w{k}, %arg1[%p{k}] : memref<65536xf32>
      }}
    }}""" for k in range(8))
    text = ("// lazymlir-stage: bufferized\nmodule {\n"
            "  func.func @main(%arg0: memref<65536xf32>, %arg1: memref<65536xf32>) {\n"
            "    %c0 = arith.constant 0 : index\n    %c1 = arith.constant 1 : index\n"
            "    %c1024 = arith.constant 1024 : index\n" + nests + "\n    return\n  }\n}\n")
    loops = str(cpu_pipeline.to_loops(text))
    main = loops[loops.index("func.func @main"):]
    assert "omp.parallel" not in main and main.count("call @main$nest0(") == 8, loops
    assert loops.count("func.func private @main$nest") == 1 and "omp.parallel" in loops


def _functions_calling(so, symbol: str) -> set[str]:
    """Names of the functions in `so` whose code calls `symbol` (objdump -d)."""
    listing = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(so)],
                             capture_output=True, text=True, check=True).stdout
    found, current = set(), None
    for line in listing.splitlines():
        if line.endswith(">:"):
            current = line.split("<", 1)[1][:-2]
        elif current and f"<{symbol}@plt>" in line:
            found.add(current)
    return found


def test_split_parts_keep_the_vector_math_variants(tmp_path, monkeypatch):
    """Every nest calls erff. Split into 3 parts, each part's loops must still call glibc's
    vector erff as the unsplit module's do: the declarations that offer it to LLVM's
    vectorizer were kept alive in one part only, and the other parts' loops stayed scalar."""
    text = _loops_module()
    for k in range(NESTS):
        text = text.replace(f"%w{k} = arith.addf %u{k}, %k{k} : f32",
                            f"%e{k} = math.erf %u{k} : f32\n"
                            f"      %w{k} = arith.addf %e{k}, %k{k} : f32")
    loops = str(cpu_pipeline.to_loops(text))
    (tmp_path / "whole").mkdir()
    (tmp_path / "split").mkdir()
    whole = cpu_codegen.build_shared_object(str(cpu_pipeline.to_llvm(loops)), tmp_path / "whole")
    vector_erf = "_ZGVdN8v_erff"
    expected = _functions_calling(whole, vector_erf)
    if not expected:
        pytest.skip("this host's libm offers no AVX2 vector erff")
    monkeypatch.setattr(cpu_codegen, "SPLIT_MIN_BYTES", 1)
    monkeypatch.setattr(cpu_codegen, "ENTRY_APART_MIN_BYTES", 1)
    monkeypatch.setattr(cpu_codegen.os, "cpu_count", lambda: 3)
    split = cpu_codegen.build_shared_object(str(cpu_pipeline.to_llvm(loops)), tmp_path / "split")
    # (named for their units' keys there)
    assert len(_functions_calling(split, vector_erf)) == len(expected) == NESTS
    x = torch.randn(256)
    (out,) = CpuExecutable(split, [((256,), torch.float32)]).run([x])
    want = x
    for k in range(NESTS):
        want = torch.erf(want + x) + k
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)


# The child: _loops_module's nests with a run-time assert in the last one (x < 1e6),
# cut into units and parts; a failed assert must be seen through the flag however the
# nests were cut (lowering/cpu/asserts.py), the flag cleared by reading it. In a child
# process: an assert that still reached abort() would kill the test run.
_ASSERT_CHILD = """
import sys, torch
sys.path[:0] = sys.argv[2:]
from test_cpu_codegen import _loops_module, NESTS
from lazymlir.lowering.cpu import codegen, stages, units
from lazymlir.targets.base import CompiledCheckFailed
from lazymlir.targets.cpu import CpuExecutable
codegen.SPLIT_MIN_BYTES = codegen.ENTRY_APART_MIN_BYTES = 1
codegen.os.cpu_count = lambda: 3
cuts = []
real_cut = units.cut
units.cut = lambda *a, **k: cuts.append(real_cut(*a, **k)) or cuts[-1]
k = NESTS - 1
text = _loops_module().replace(
    f"memref.store %w{k}, %tmp[%i{k}]",
    f"%big{k} = arith.constant 1.0e6 : f32\\n      %ok{k} = arith.cmpf olt, %x{k}, %big{k} : f32\\n"
    f"      cf.assert %ok{k}, \\"too large\\"\\n      memref.store %w{k}, %tmp[%i{k}]")
assert "cf.assert" in text
so = codegen.build_shared_object(str(stages.to_llvm(str(stages.to_loops(text)))), sys.argv[1])
assert cuts and cuts[-1] is not None, "not cut into units"
run = CpuExecutable(so, [((256,), torch.float32)]).run
outcomes = []
for big in (False, True, False):
    x = torch.randn(256)
    if big:
        x[7] = 2e6
    try:
        (out,) = run([x])
        outcomes.append(bool(torch.allclose(out, x * (NESTS + 1) + sum(range(NESTS)))))
    except CompiledCheckFailed:
        outcomes.append("failed")
print(outcomes)
"""


def test_a_failed_assert_is_seen_in_a_module_cut_into_units(tmp_path):
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parent
    done = subprocess.run([sys.executable, "-c", _ASSERT_CHILD, str(tmp_path), str(here),
                           str(here.parent.parent), str(here.parent.parent / "cases")],
                          capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[True, 'failed', True]", done.stdout
