"""The one ordered registry of lowering stages, per target.

Each stage is named for the IR it produces and is a documented pass pipeline
(see front/fx_import.py, front/stages.py, bufferize/stage.py, cpu/stages.py, gpu/stages.py) followed
by a check of what its output may contain (its contract). The front stages and
`bufferized` are shared; the stages after them are the target's backend's
(backend.py), listed in the backend table below. The device compiler and `lazymlir-opt` both
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
the whole compile (torch-mlir's linalg pipeline and llc dominate).
"""

from __future__ import annotations

import functools
import importlib
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from . import contracts
from .backend import Backend, Stage
from .bufferize import stage as bufferize_stage
from .errors import LoweringError, save_repro
from .front import stages as front_stages
from .mlir_runner import PipelineFailure, print_module

# The backend table: target -> the module whose BACKEND implements it (backend.py).
# A module is imported on the first use of its target, by name: importing the CUDA
# pipeline costs time that a cpu-only process never needs to spend.
BACKENDS = {
    "cpu": ".cpu.backend",
    "cuda": ".gpu.backend",
}
TARGETS = tuple(BACKENDS)


@dataclass(frozen=True)
class Options:
    target: str = "cpu"
    chip: str = "sm_90"           # CUDA: the PTX/cubin architecture
    repro_dir: str | None = None  # where a failing stage's input is written


@functools.cache
def backend(target: str) -> Backend:
    if target not in BACKENDS:
        raise ValueError(f"unknown target '{target}'; targets: {', '.join(TARGETS)}")
    return importlib.import_module(BACKENDS[target], __package__).BACKEND


def _import_fx(text: str, options: Options):
    # Imported on the first FX import, by name: it imports torch (~2 s), which
    # `lazymlir-opt` on MLIR text never needs.
    return importlib.import_module(".front.fx_import", __package__).import_fx(text)


def _bufferize(text: str, options: Options):
    return bufferize_stage.to_bufferized(text, backend(options.target).bufferize)


def _shared(name: str, doc: str, run) -> Stage:
    return Stage(name, "mlir", run, doc, contracts.check_contract)


# The stages every target runs, in order, before its backend's.
SHARED_STAGES = (
    Stage("fx", "fx.json", None, "functional ATen graph recorded by the tracer"),
    # torch-mlir's FX importer and FakeTensor propagation report unsupported
    # types/ops as NotImplementedError.
    Stage("torch", "mlir", _import_fx,
          "torch dialect as imported by torch-mlir's FxImporter", contracts.check_contract,
          errors=(PipelineFailure, NotImplementedError)),
    _shared("torch-backend", "torch backend contract: value semantics, shapes and dtypes refined",
            lambda t, o: front_stages.to_torch_backend(t)),
    _shared("linalg", "linalg-on-tensors (+arith/math/tensor)",
            lambda t, o: front_stages.to_linalg(t)),
    _shared("bufferized", "linalg on memrefs, results as out-parameters", _bufferize),
)
_SHARED = {s.name: s for s in SHARED_STAGES}


def _pipeline(target: str) -> tuple[str, ...]:
    return tuple(_SHARED) + tuple(s.name for s in backend(target).stages)


class _PerTarget(Mapping):
    """target -> value, computed from its backend on first use (no backend is imported
    before its target is asked for)."""

    def __init__(self, compute):
        self._compute = compute

    def __getitem__(self, target: str):
        if target not in BACKENDS:
            raise KeyError(target)
        return self._compute(target)

    def __iter__(self) -> Iterator[str]:
        return iter(BACKENDS)

    def __len__(self) -> int:
        return len(BACKENDS)


# Each target's pipeline (stage names, in order) and where its probes stop.
PIPELINES: Mapping[str, tuple[str, ...]] = _PerTarget(_pipeline)
PROBE_STOP: Mapping[str, str] = _PerTarget(lambda target: backend(target).probe_stop)


def stage(name: str) -> Stage:
    if name in _SHARED:
        return _SHARED[name]
    for target in BACKENDS:
        found = backend(target)
        for st in found.stages + found.optional_stages:
            if st.name == name:
                return st
    raise ValueError(f"unknown stage '{name}'; stages: {', '.join(all_stage_names())}")


def _target_stage(target: str, name: str) -> Stage:
    if name in _SHARED:
        return _SHARED[name]
    found = backend(target)
    return next(s for s in found.stages + found.optional_stages if s.name == name)


def all_stage_names() -> tuple[str, ...]:
    """Every stage of every target, shared ones first (imports every backend)."""
    names = list(_SHARED)
    for target in BACKENDS:
        found = backend(target)
        names += [s.name for s in found.stages + found.optional_stages if s.name not in names]
    return tuple(names)


def stage_names(target: str) -> tuple[str, ...]:
    if target not in BACKENDS:
        raise ValueError(f"unknown target '{target}'; targets: {', '.join(TARGETS)}")
    return PIPELINES[target] + tuple(s.name for s in backend(target).optional_stages)


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
        result.record = _run_one(_target_stage(options.target, name), result.text, options,
                                 on_stage)
        result.stage = name
    return result


def _run_one(st: Stage, text: str, options: Options, on_stage) -> StageRecord:
    began = time.perf_counter()
    try:
        module = st.run(text, options)
    except st.errors as error:
        raise _failure(st, text, options, str(error)) from None
    problem = st.contract(st.name, module.operation) if st.contract is not None else None
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
