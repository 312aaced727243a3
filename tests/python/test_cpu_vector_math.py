"""libm calls outside LLVM's LIBMVEC table vectorize through glibc's libmvec
(lowering/cpu_vector_math.py), and GELU's erf on the device matches eager."""

from __future__ import annotations

import subprocess

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE, assert_no_fallback, target_name

from lazymlir.lowering import cpu_codegen, cpu_vector_math

# A loop calling erff then expf, as convert-math-to-libm and mlir-translate leave it.
LOOP = """target triple = "x86_64-unknown-linux-gnu"
declare float @erff(float)
declare float @llvm.exp.f32(float)
define void @f(ptr %a, ptr %b, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %loop]
  %pa = getelementptr float, ptr %a, i64 %i
  %x = load float, ptr %pa
  %y = call float @erff(float %x)
  %z = call float @llvm.exp.f32(float %y)
  %pb = getelementptr float, ptr %b, i64 %i
  store float %z, ptr %pb
  %i1 = add i64 %i, 1
  %c = icmp slt i64 %i1, %n
  br i1 %c, label %loop, label %exit
exit:
  ret void
}
"""

needs_libmvec = pytest.mark.skipif(
    not cpu_vector_math._exported("_ZGVdN8v_erff"),
    reason="this host's glibc has no vector erff (glibc < 2.35 or not x86_64)")


def _optimized_calls(ll_text: str, tmp_path) -> str:
    source = tmp_path / "loop.ll"
    source.write_text(ll_text)
    done = subprocess.run([cpu_codegen._tools()["opt"], "-O3", "-mcpu=x86-64-v3",
                           f"-mtriple={cpu_codegen.HOST_TRIPLE}", "-vector-library=LIBMVEC",
                           str(source), "-S", "-o", "-"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


@needs_libmvec
def test_an_erf_loop_vectorizes_only_with_the_variants(tmp_path):
    # Without the annotation one erff call keeps the whole loop scalar (exp included).
    plain = _optimized_calls(LOOP, tmp_path)
    assert "call <8 x float> @_ZGVdN8v_erff" not in plain
    assert "call <8 x float> @_ZGVdN8v_expf" not in plain
    annotated = cpu_vector_math.annotate(LOOP)
    assert '"vector-function-abi-variant"="_ZGV_LLVM_N8v_erff(_ZGVdN8v_erff)' in annotated
    assert "@llvm.compiler.used" in annotated
    vectorized = _optimized_calls(annotated, tmp_path)
    assert "call <8 x float> @_ZGVdN8v_erff" in vectorized
    assert "call <8 x float> @_ZGVdN8v_expf" in vectorized


@needs_libmvec
@pytest.mark.parametrize("host", ["avx2", "avx512"])
def test_avx512_variants_only_on_avx512_hosts(monkeypatch, host):
    """glibc exports the 16-lane AVX-512 erff everywhere; on an AVX2-only CPU a loop
    vectorized with it died with SIGILL (the OpInfo sweep's float16 erf)."""
    monkeypatch.setattr(cpu_vector_math.host_isa, "detected", lambda: host)
    annotated = cpu_vector_math.annotate(LOOP)
    assert "_ZGVdN8v_erff" in annotated
    if cpu_vector_math._exported("_ZGVeN16v_erff"):
        assert ("_ZGVeN16v_erff" in annotated) == (host == "avx512")


def test_functions_llvm_maps_itself_are_left_alone():
    text = "declare float @expf(float)\ndeclare double @log(double)\n"
    assert cpu_vector_math.annotate(text) == text


@pytest.mark.skipif(target_name() != "cpu", reason="cpu codegen")
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_forward_and_backward_match_eager(approximate):
    torch.manual_seed(0)
    x = torch.randn(64, 515) * 3   # odd width: the vector loop's scalar remainder too
    # Not +-inf: eager's own GELU gives NaN there in its vectorized body (its erf
    # polynomial) and +-inf / 0 in its scalar tail, so no single answer is eager's.
    x[0, :4] = torch.tensor([float("nan"), 60.0, -60.0, 0.0])
    g = torch.randn(64, 515)

    def step(inp, grad):
        inp = inp.detach().requires_grad_()
        out = F.gelu(inp, approximate=approximate)
        (out * grad).sum().backward()
        return out, inp.grad

    expected = step(x, g)
    actual = [t.cpu() for t in step(x.to(DEVICE), g.to(DEVICE))]
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5, equal_nan=True)
    assert_no_fallback()


EXP_SUM = """// lazymlir-stage: bufferized
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
module {
  func.func @main(%arg0: memref<64x1024xf32>, %arg1: memref<64xf32>) {
    %zero = arith.constant 0.0 : f32
    linalg.fill ins(%zero : f32) outs(%arg1 : memref<64xf32>)
    linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]}
        ins(%arg0 : memref<64x1024xf32>) outs(%arg1 : memref<64xf32>) {
    ^bb0(%in: f32, %out: f32):
      %0 = math.exp %in : f32
      %1 = arith.addf %0, %out : f32
      linalg.yield %1 : f32
    }
    return
  }
}
"""


@needs_libmvec
@pytest.mark.skipif(target_name() != "cpu", reason="CPU code generation")
def test_vectorized_exp_of_a_reduction_calls_libmvec(tmp_path):
    """The schedule vectorizes a softmax's exp-sum itself (MLIR vectors, not LLVM's loop
    vectorizer): its exp must still be a vector libmvec call, not one scalar expf per
    element (log_softmax took 3x eager's time that way)."""
    from lazymlir.lowering import cpu_pipeline
    from lazymlir.targets.cpu import CpuExecutable

    loops = cpu_pipeline.to_loops(EXP_SUM)
    so = cpu_codegen.build_shared_object(str(cpu_pipeline.to_llvm(str(loops))), tmp_path)
    listing = subprocess.run(["objdump", "-d", str(so)], capture_output=True, text=True,
                             check=True).stdout
    assert "_ZGVdN8v_expf@plt>" in listing or "_ZGVeN16v_expf@plt>" in listing
    assert "<expf@plt>" not in listing and "<__expf_finite@plt>" not in listing
    x = torch.randn(64, 1024)
    (out,) = CpuExecutable(so, [((64,), torch.float32)]).run([x])
    torch.testing.assert_close(out, x.exp().sum(-1), rtol=1e-5, atol=1e-3)
