"""The one ordered registry of lowering stages, per target.

Each stage is named for the IR it produces and is a documented pass pipeline
(see torch_stages, cpu_pipeline, gpu_pipeline) followed by a check of what its
output may contain (contracts). The device compiler and `lazymlir-opt` both
run stages through `run_stages`, so what a user reproduces on the command
line is exactly what the compiler ran.

    fx -> torch -> torch-backend -> linalg -> bufferized -> loops -> llvm   (cpu)
                           ... -> bufferized -> gpu -> plan -> nvvm -> ptx [-> cubin] (cuda)

Every MLIR stage output starts with a `// lazymlir-stage: <name>` line, so a
dumped file names the stage it holds and `lazymlir-opt` resumes after it.

Stages hand each other text, not modules, although most of them run in one
MLIR build: a stage mutates its module in place, so the reproducer a failing
stage saves must be its input printed beforehand anyway, and printing plus
parsing costs 1-12 ms per stage on an MLP training step against ~1.5 s for
the whole compile (measured 2026-11-22; torch-mlir's linalg pipeline and llc
dominate).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass

from . import contracts
from .bufferize import stage as bufferize_stage
from .cpu import stages as cpu_stages
from .front import stages as front_stages
from .errors import LoweringError, save_repro
from .mlir_runner import PipelineFailure, print_module

TARGETS = ("cpu", "cuda")


@dataclass(frozen=True)
class Options:
    target: str = "cpu"
    chip: str = "sm_90"           # CUDA: the PTX/cubin architecture
    repro_dir: str | None = None  # where a failing stage's input is written


@dataclass(frozen=True)
class Stage:
    name: str
    ext: str                                   # file extension of its dumped output
    run: Callable[[str, Options], object] | None  # input text -> module (None: source stage)
    doc: str


def _gpu(fn_name: str):
    """Late-bound CUDA stage: the GPU pipeline imports only when a CUDA stage runs."""
    def run(text: str, options: Options):
        from .gpu import stages as gpu_stages
        return getattr(gpu_stages, fn_name)(text, options)
    return run


_ALL = {
    s.name: s for s in (
        Stage("fx", "fx.json", None, "functional ATen graph recorded by the tracer"),
        Stage("torch", "mlir", lambda t, o: front_stages.import_fx(t),
              "torch dialect as imported by torch-mlir's FxImporter"),
        Stage("torch-backend", "mlir", lambda t, o: front_stages.to_torch_backend(t),
              "torch backend contract: value semantics, shapes and dtypes refined"),
        Stage("linalg", "mlir", lambda t, o: front_stages.to_linalg(t),
              "linalg-on-tensors (+arith/math/tensor)"),
        Stage("bufferized", "mlir", lambda t, o: bufferize_stage.to_bufferized(t, o.target),
              "linalg on memrefs, results as out-parameters"),
        Stage("loops", "mlir", lambda t, o: cpu_stages.to_loops(t),
              "CPU: scf loops over memrefs"),
        Stage("llvm", "mlir", lambda t, o: cpu_stages.to_llvm(t),
              "CPU: LLVM dialect, ready for mlir-translate + llc (lowering/cpu/codegen.py)"),
        Stage("gpu", "mlir", _gpu("to_gpu"),
              "CUDA: outlined gpu.module kernels mapped to blocks/threads + host launches"),
        Stage("plan", "mlir", _gpu("to_plan"),
              "CUDA: host side as an lzrt launch plan next to the kernels"),
        Stage("nvvm", "mlir", _gpu("to_nvvm"), "CUDA: kernels in the NVVM/LLVM dialects"),
        Stage("ptx", "mlir", _gpu("to_ptx"), "CUDA: kernels as PTX (gpu.binary) + plan"),
        Stage("cubin", "mlir", _gpu("to_cubin"), "CUDA: kernels as cubin (needs ptxas) + plan"),
    )
}

PIPELINES: dict[str, tuple[str, ...]] = {
    "cpu": ("fx", "torch", "torch-backend", "linalg", "bufferized", "loops", "llvm"),
    "cuda": ("fx", "torch", "torch-backend", "linalg", "bufferized", "gpu", "plan", "nvvm",
             "ptx"),
}
# cubin is an optional last CUDA stage (needs ptxas); PTX is JIT-compiled by the driver.
OPTIONAL_TAIL = {"cuda": ("cubin",)}
# Where a probe ("does this op lower?") stops: the last stage in MLIR, before
# code generation tools (llc, ptxas) that only fail when MLIR already did.
PROBE_STOP = {"cpu": "llvm", "cuda": "plan"}


def stage(name: str) -> Stage:
    try:
        return _ALL[name]
    except KeyError:
        raise ValueError(f"unknown stage '{name}'; stages: {', '.join(_ALL)}") from None


def stage_names(target: str) -> tuple[str, ...]:
    if target not in PIPELINES:
        raise ValueError(f"unknown target '{target}'; targets: {', '.join(TARGETS)}")
    return PIPELINES[target] + OPTIONAL_TAIL.get(target, ())


STAGE_MARKER = "// lazymlir-stage: "


def marked(stage_name: str, text: str) -> str:
    return f"{STAGE_MARKER}{stage_name}\n{text}"


def detect_stage(text: str) -> str:
    """The stage whose output `text` is: from the marker line, else from its content."""
    head = text.lstrip()
    if head.startswith("{") and '"lazymlir-fx"' in head[:200]:
        return "fx"
    for line in text.splitlines()[:5]:
        if line.startswith(STAGE_MARKER):
            return line[len(STAGE_MARKER):].strip()
    # No marker (handwritten input): guess from the dialects present, ignoring
    # comments (a test's prose may name ops of other stages).
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))
    checks = (
        ("gpu.binary", "ptx"), ("lzrt.", "plan"), ("gpu.module", "gpu"),
        ("torch.aten", "torch"), ("torch.vtensor", "torch"), ("llvm.func", "llvm"),
        ("tensor<", "linalg"), ("linalg.", "bufferized"), ("scf.for", "loops"),
    )
    for needle, name in checks:
        if needle in text:
            return name
    return "bufferized"  # memref code with no linalg left: resume at the next stage


class StageRecord:
    """One stage's output module, printed (with its stage marker) when first asked for:
    the last stage's text is often never needed (the cpu target translates its LLVM
    dialect module in-process; the GPT backward graph's is 2.3 MB, ~0.45 s to print)."""

    def __init__(self, name: str, ext: str, module, seconds: float):
        self.name, self.ext, self.module, self.seconds = name, ext, module, seconds

    @functools.cached_property
    def text(self) -> str:
        return marked(self.name, print_module(self.module))


class Result:
    """The output of the last stage run: `text`, `stage` (its name) and, when a stage
    ran, `module` (its MLIR module, not to be modified: `text` prints it lazily)."""

    def __init__(self, text: str, stage: str):
        self._text, self.stage, self.record = text, stage, None

    @property
    def text(self) -> str:
        return self._text if self.record is None else self.record.text

    @property
    def module(self):
        return None if self.record is None else self.record.module


def run_stages(text: str, options: Options, *, start: str | None = None, stop: str | None = None,
               on_stage: Callable[[StageRecord], None] | None = None,
               on_start: Callable[[str], None] | None = None) -> Result:
    """Run the stages after `start` (detected from the text if None) up to `stop` (inclusive).

    `on_start(name)` is called before each stage (the compile worker reports it,
    so a native crash names its stage); `on_stage(record)` after each.
    """
    names = stage_names(options.target)
    start = start or detect_stage(text)
    stop = stop or PIPELINES[options.target][-1]
    if start not in names:
        raise ValueError(f"stage '{start}' is not part of the {options.target} pipeline "
                         f"({' -> '.join(names)})")
    if stop not in names:
        raise ValueError(f"stage '{stop}' is not part of the {options.target} pipeline "
                         f"({' -> '.join(names)})")
    first, last = names.index(start) + 1, names.index(stop)
    if first > last + 1:
        raise ValueError(f"stage '{stop}' comes before the input's stage '{start}'")
    result = Result(text, start)
    for name in names[first:last + 1]:
        if on_start is not None:
            on_start(name)
        result.record = _run_one(stage(name), result.text, options, on_stage)
        result.stage = name
    return result


# What a stage may raise for "the compiler cannot do this" (anything else is a
# bug in lazymlir and propagates unchanged): MLIR failures and lowering
# limitations (PipelineFailure); torch-mlir's FX importer and FakeTensor
# propagation report unsupported types/ops as NotImplementedError.
_COMPILER_ERRORS = {"torch": (PipelineFailure, NotImplementedError)}


def _run_one(st: Stage, text: str, options: Options, on_stage) -> StageRecord:
    began = time.perf_counter()
    try:
        module = st.run(text, options)
    except _COMPILER_ERRORS.get(st.name, PipelineFailure) as error:
        raise _failure(st, text, options, str(error)) from None
    problem = contracts.check_contract(st.name, module.operation)
    if problem:
        raise _failure(st, text, options, problem)
    record = StageRecord(st.name, st.ext, module, time.perf_counter() - began)
    if on_stage is not None:
        on_stage(record)
    return record


def _failure(st: Stage, text: str, options: Options, detail: str) -> LoweringError:
    prev_ext = "fx.json" if text.lstrip().startswith("{") else "mlir"
    path = save_repro(st.name, text, prev_ext, options.repro_dir)
    return LoweringError(st.name, options.target, detail, path)
