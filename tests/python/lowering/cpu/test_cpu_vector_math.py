"""libm calls outside LLVM's LIBMVEC table vectorize through glibc's libmvec
(lowering/cpu/vector_math.py), and GELU's erf on the device matches eager."""

from __future__ import annotations

import subprocess

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE, assert_no_fallback, target_name

from lazymlir.lowering.cpu import codegen as cpu_codegen, vector_math as cpu_vector_math

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
    from lazymlir.lowering.cpu import stages as cpu_pipeline
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


@needs_libmvec
@pytest.mark.skipif(target_name() != "cpu", reason="CPU code generation")
@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_schedule_vectorized_libm_is_one_call_per_8_lanes(tmp_path, monkeypatch, isa):
    """LLVM 22's LIBMVEC table maps float math at 8 lanes, not 16: with the AVX-512
    tiles (16-lane registers) a reduction's `llvm.exp.v16f32` became 16 scalar expf calls.
    The schedule's libm steps are 8 lanes under either ISA's tiles (the AVX2 variants
    also run on AVX-512 hosts); the same for an elementwise exp it vectorizes."""
    from lazymlir.lowering.cpu import stages as cpu_pipeline
    from lazymlir.targets.cpu import CpuExecutable

    monkeypatch.setenv("LAZYMLIR_CPU_VECTOR_ISA", isa)
    for name, text, expected in (("sum", EXP_SUM, lambda x: x.exp().sum(-1)),
                                 ("rows", EXP_ROWS, lambda x: x.exp() * 2)):
        loops = cpu_pipeline.to_loops(text)
        assert "vector<8xf32>" in str(loops)
        directory = tmp_path / f"{isa}-{name}"  # its own path: dlopen caches by path
        directory.mkdir()
        so = cpu_codegen.build_shared_object(str(cpu_pipeline.to_llvm(str(loops))), directory)
        listing = subprocess.run(["objdump", "-d", str(so)], capture_output=True, text=True,
                                 check=True).stdout
        assert "_ZGVdN8v_expf@plt>" in listing
        assert "<expf@plt>" not in listing and "<__expf_finite@plt>" not in listing
        x = torch.randn(64, 1024)
        (out,) = CpuExecutable(so, [(tuple(expected(x).shape), torch.float32)]).run([x])
        torch.testing.assert_close(out, expected(x), rtol=1e-5, atol=1e-3)


EXP_ROWS = """// lazymlir-stage: bufferized
#map = affine_map<(d0, d1) -> (d0, d1)>
module {
  func.func @main(%arg0: memref<64x1024xf32>, %arg1: memref<64x1024xf32>) {
    %two = arith.constant 2.0 : f32
    linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]}
        ins(%arg0 : memref<64x1024xf32>) outs(%arg1 : memref<64x1024xf32>) {
    ^bb0(%in: f32, %out: f32):
      %0 = math.exp %in : f32
      %1 = arith.mulf %0, %two : f32
      linalg.yield %1 : f32
    }
    return
  }
}
"""


@pytest.mark.parametrize("fn", [
    lambda x: torch.erf(x).sum(-1),       # no vector lowering for erf: the reduction keeps loops
    lambda x: torch.asinh(x).mean(-1),
    lambda x: torch.tanh(x).sum(-1),      # vector tanh: one scalar tanhf per lane
    lambda x: torch.erf(x) * 2 + 1,       # elementwise: LLVM's vectorizer (erff variants)
    lambda x: torch.pow(x.abs() + 1, 0.5) + x.exp(),  # elementwise, libmvec pow and exp
], ids=["erf_sum", "asinh_mean", "tanh_sum", "erf_elementwise", "pow_exp_elementwise"])
def test_libm_payloads_of_scheduled_ops_match_eager(fn):
    """A payload calling libm in an op the schedule vectorizes: `torch.erf(x).sum(-1)`
    failed to compile (the vectorized erf has no LLVM lowering) and ran eagerly."""
    x = torch.randn(64, 256)
    torch.testing.assert_close(fn(x.to(DEVICE)).cpu(), fn(x), rtol=1e-5, atol=1e-5)
    assert_no_fallback()
