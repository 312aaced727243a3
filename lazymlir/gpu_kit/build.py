"""Building the GPU check kit: the cases of cases.py -> self-contained bundles.

    KIT_DIR/run.py                   the runner (kit_runner.py; no lazymlir, torch-mlir, MLIR)
    KIT_DIR/CMakeLists.txt, cuda_runtime/   the C++ runtime's sources (built there with CMake)
    KIT_DIR/runtime/builtins.c       compiler runtime functions emulator images may call
    KIT_DIR/kit.json                 the bundles, what could not be built, the commit
    KIT_DIR/bundles/<name>/
        bundle.json                  inputs, outputs, kernels, bytes/flops, options
        plan.txt                     the launch plan exactly as the runtime executes it
        kernel<N>.cubin|.ptx         sm_90 cubin (where ptxas is on PATH) and PTX
        kernel<N>.emulator           the same kernels built for the CPU (emulator driver;
                                     not for gpu_only bundles)
        in<K>.npy                    inputs (bfloat16 as uint16 bit patterns)
        out<K>.f64.npy               expected outputs, float64 eager
        out<K>.cpu.npy               expected outputs, the cpu target
        graph.py                     the graph as PyTorch code (eager baseline on the GPU)

Each case is traced by the real tracer in a child process (cpu target, fresh cache,
fx graphs dumped, the values each graph ran on recorded: the bundle's inputs), then
each fx graph is compiled for the cuda target through the stage registry (as the
compile worker does), its PTX assembled with ptxas, its gpu-stage kernels built for the
CPU (lowering/gpu/emulator.py), and the graph run by the cpu target and by PyTorch in
float64 on the same inputs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from . import cases, kit_runner
from ..execution.compiler import CompileOptions, compile_graph
from ..lowering import stages
from ..lowering.errors import LoweringError
from ..lowering.front import checks, fx_graph
from ..lowering.gpu import emulator as gpu_emulator, stages as gpu_stages
from ..support.errors import CompileError
from ..targets import cpu_builtins
from ..targets.cpu import CpuTarget

REPO = Path(__file__).resolve().parents[2]
CHIP, CHIP_CC = "sm_90", (9, 0)
SAMPLE = 4096  # outputs of gpu_only bundles: positions kept as the expectation
LIMIT_BYTES = 64 << 20
MATMULS = {"mm", "bmm", "addmm", "baddbmm", "convolution"}


def trace(root: Path, names: list[str]) -> None:
    """Trace the cases in a child process (fresh graph cache: every graph is compiled,
    so dumped) on the cpu target."""
    env = dict(os.environ, LAZYMLIR_TARGET="cpu", LAZYMLIR_FALLBACK="error",
               LAZYMLIR_CACHE_DIR=str(root / "cache"))
    env.pop("LAZYMLIR_CUDA_DRIVER", None)
    done = subprocess.run([sys.executable, "-m", "lazymlir.gpu_kit.cases", str(root), *names],
                          env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"tracing the kit's cases failed:\n{done.stderr[-4000:]}")


def recorded_run(graph: dict, runs: list):
    """The (input tensors, scalars) a traced graph ran on (cases.trace_all's runs.pt):
    the first run whose inputs have this graph's shapes and dtypes."""
    want = [(list(m["shape"]), m["dtype"]) for m in graph["inputs"]]
    for _, tensors, scalars in runs:
        have = [(list(t.shape), fx_graph.dtype_name(t.dtype)) for t in tensors]
        if have == want and len(scalars) == len(graph.get("scalars", [])):
            return tensors, scalars
    return None


def draw_inputs(graph: dict, options: dict, seed: int,
                recorded=None) -> tuple[list[torch.Tensor], list[dict]]:
    """The bundle's inputs (torch tensors for the references) and their metas: the values
    the graph ran on when traced (`recorded`), else random ones; gpu_only bundles get
    seeded inputs the runner regenerates (kit_runner.generate); bad_index bundles an
    out-of-range value in every integer input."""
    gen = torch.Generator().manual_seed(seed)
    tensors, metas = [], []
    for k, meta in enumerate(graph["inputs"]):
        dtype = fx_graph.dtype_from_name(meta["dtype"])
        entry = {"shape": meta["shape"], "dtype": meta["dtype"]}
        if recorded is not None and not (options.get("gpu_only") and dtype.is_floating_point):
            t = recorded[0][k].clone()
            if t.dtype == torch.bool:
                t = t.to(torch.uint8)
            if options.get("bad_index") and not (t.is_floating_point() or t.dtype ==
                                                 torch.uint8) and t.numel():
                t.view(-1)[t.numel() // 2] = options.get("ints", 4) + 1000
            entry["file"] = f"in{k}.npy"
            tensors.append(t)
            metas.append(entry)
            continue
        if options.get("gpu_only") and dtype.is_floating_point:
            entry["seed"] = seed * 1000 + k
            array = kit_runner.generate(entry, entry["seed"])
            t = torch.from_numpy(array)
            tensors.append(t.view(torch.bfloat16) if meta["dtype"] == "bfloat16" else t)
            metas.append(entry)
            continue
        if dtype.is_floating_point:
            t = torch.randn(meta["shape"], generator=gen, dtype=dtype)
            if options.get("sample") == "near_one":
                t = 1 + 0.01 * t
        elif dtype == torch.bool:
            t = torch.randint(0, 2, meta["shape"], generator=gen).to(torch.uint8)
        else:
            t = torch.randint(0, options.get("ints", 4), meta["shape"], generator=gen,
                              dtype=dtype)
            if options.get("bad_index") and t.numel():
                t.view(-1)[t.numel() // 2] = options.get("ints", 4) + 1000
        entry["file"] = f"in{k}.npy"
        tensors.append(t)
        metas.append(entry)
    # Scalars the tracer made graph inputs (float64 0-d tensors, after the tensors).
    for k, _ in enumerate(graph.get("scalars", [])):
        index = len(graph["inputs"]) + k
        value = recorded[1][k] if recorded is not None else \
            0.5 + float(torch.rand((), generator=gen))
        tensors.append(torch.tensor(value, dtype=fx_graph.SCALAR_DTYPE))
        metas.append({"shape": [], "dtype": "float64", "file": f"in{index}.npy",
                      "scalar": True})
    return tensors, metas


def numpy_of(t: torch.Tensor) -> np.ndarray:
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    if t.dtype == torch.bool:
        return t.to(torch.uint8).numpy()
    return t.numpy()


def eager_module(graph: dict) -> torch.fx.GraphModule:
    """The graph as a GraphModule eager PyTorch runs: the fx graph has value semantics
    (torch-mlir's), where `view` of a permuted or expanded value is a reshape, which
    eager's `view` refuses for such strides."""
    gm = fx_graph.to_graph_module(graph)
    for node in gm.graph.nodes:
        if node.target in (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default):
            node.target = torch.ops.aten.reshape.default
    gm.recompile()
    return gm


def float64_module(graph: dict) -> torch.fx.GraphModule:
    """The graph with every floating dtype it names made float64: the reference."""
    gm = eager_module(graph)

    def widen(value):
        if isinstance(value, torch.dtype) and value.is_floating_point:
            return torch.float64
        if isinstance(value, (list, tuple)):
            return type(value)(widen(v) for v in value)
        if isinstance(value, dict):
            return {k: widen(v) for k, v in value.items()}
        return value

    for node in gm.graph.nodes:
        node.args, node.kwargs = widen(node.args), widen(node.kwargs)
    gm.recompile()
    return gm


def graph_source(gm: torch.fx.GraphModule) -> str:
    """The graph as a standalone module: `forward(*inputs)` -> list of outputs, on
    DEVICE (set by the runner) wherever the graph names a device."""
    # Factories (arange, full, ...) whose device the fx graph leaves out would make CPU
    # tensors: give them the CPU device, which the module's `device()` maps to DEVICE.
    for node in gm.graph.nodes:
        schema = getattr(node.target, "_schema", None)
        if node.op == "call_function" and schema is not None and "device" not in node.kwargs \
                and any(a.name == "device" and a.kwarg_only for a in schema.arguments):
            node.kwargs = {**node.kwargs, "device": torch.device("cpu")}
    gm.recompile()
    code = gm.code.replace("def forward(self, ", "def _forward(self, ", 1)
    return ('"""A graph of the lazymlir GPU check kit as PyTorch code (torch.fx, generated)."""\n'
            "import torch\n\n"
            "DEVICE = torch.device('cpu')\n"
            "inf, nan = float('inf'), float('nan')\n\n\n"
            "def device(type=None, index=None):\n"
            "    return DEVICE\n\n"
            f"{code}\n\n"
            "def forward(*inputs):\n"
            "    return list(_forward(None, *inputs))\n")


def cost(graph: dict, gm: torch.fx.GraphModule) -> tuple[int, int, str]:
    """(bytes the graph must move at least: its inputs and outputs, flops: 2MNK per
    matmul/convolution plus one per element of every other op, the matmuls' dtype)."""
    def nbytes(meta):
        return int(np.prod(meta["shape"], dtype=np.int64)) * \
            fx_graph.dtype_from_name(meta["dtype"]).itemsize
    moved = sum(nbytes(m) for m in graph["inputs"]) + sum(
        int(np.prod(s, dtype=np.int64)) * d.itemsize for s, d in fx_graph.output_metas(graph))
    flops, compute = 0, "float32"
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if node.op != "call_function" or not isinstance(val, torch.Tensor):
            continue
        op = getattr(node.target, "_opname", "")
        if op in MATMULS:
            a = node.args[1] if op in ("addmm", "baddbmm") else node.args[0]
            k = a.meta["val"].shape[-1] if op != "convolution" else \
                int(np.prod(node.args[1].meta["val"].shape[1:]))
            flops += 2 * val.numel() * k
            compute = str(a.meta["val"].dtype).removeprefix("torch.")
        else:
            flops += val.numel()
    return moved, flops, compute


def has_check_flag(graph: dict) -> bool:
    """Whether the graph's last output is the bounds/divisor check flag of
    lowering/front/checks.py (the tracer compiles graphs instrumented so): a 0-d bool
    the executor reads after the run, raising eager's error when it is set."""
    if not checks.has_guarded_ops(graph):
        return False
    shape, dtype = fx_graph.output_metas(graph)[-1]
    return list(shape) == [] and dtype == torch.bool


def build_bundle(fx_text: str, name: str, case: str, options: dict, folder: Path,
                 seed: int, runs: list) -> dict:
    graph = fx_graph.loads(fx_text)
    recorded = recorded_run(graph, runs)
    folder.mkdir(parents=True)
    # The cuda target: fx -> ... -> gpu -> plan -> nvvm -> ptx, as the compile worker.
    stage_options = stages.Options(target="cuda", chip=CHIP)
    gpu_text = stages.run_stages(fx_text, stage_options, start="fx", stop="gpu").text
    ptx_text = stages.run_stages(gpu_text, stage_options, start="gpu", stop="ptx").text
    plan_text, native = gpu_stages.executable_parts(ptx_text)
    # gpu_only bundles never run on the emulator, and their CPU builds would be slow:
    # the emulator unrolls the matmul's k loop (2048 deep: minutes of llc).
    images = [(n, None) for n, _, _ in native] if options.get("gpu_only") else \
        gpu_emulator.emulator_images_from_text(gpu_text)
    if [n for n, _ in images] != [n for n, _, _ in native]:
        raise RuntimeError("emulator modules differ from the PTX modules")
    (folder / "plan.txt").write_text(plan_text)
    kernels = []
    ptxas = shutil.which("ptxas")
    for index, ((module, ptx, _), (_, emu)) in enumerate(zip(native, images)):
        entry = {"module": module, "ptx": f"kernel{index}.ptx"}
        (folder / entry["ptx"]).write_bytes(ptx)
        if emu is not None:
            entry["emulator"] = f"kernel{index}.emulator"
            (folder / entry["emulator"]).write_bytes(emu)
        if ptxas:
            entry["cubin"] = f"kernel{index}.cubin"
            subprocess.run([ptxas, f"-arch={CHIP}", str(folder / entry["ptx"]), "-o",
                            str(folder / entry["cubin"])], check=True, capture_output=True)
        kernels.append(entry)

    tensors, input_metas = draw_inputs(graph, options, seed, recorded)
    if recorded is None and graph.get("scalars"):
        raise ValueError("no recorded run of this graph: its scalar inputs are unknown")
    for t, meta in zip(tensors, input_metas):
        if "file" in meta:
            np.save(folder / meta["file"], numpy_of(t))
    gm = eager_module(graph)
    (folder / "graph.py").write_text(graph_source(gm))
    moved, flops, compute = cost(graph, gm)
    bundle = {"name": name, "case": case, "chip": CHIP, "chip_cc": CHIP_CC,
              "kernels": kernels, "inputs": input_metas, "bytes": moved, "flops": flops,
              "compute_dtype": compute, "gpu_only": bool(options.get("gpu_only")),
              "tolerance": options.get("tolerance"),
              "expect_error": bool(options.get("bad_index")),
              "launches": sum(line.startswith("launch") for line in plan_text.splitlines())}
    metas = [(tuple(s), torch.uint8 if d == torch.bool else d)
             for s, d in fx_graph.output_metas(graph)]
    outputs = [{"shape": list(s), "dtype": fx_graph.dtype_name(d),
                "nbytes": max(int(np.prod(s, dtype=np.int64)) * d.itemsize, 1)}
               for s, d in metas]
    if has_check_flag(graph):
        outputs[-1]["check_flag"] = True
    bundle["outputs"] = outputs
    if options.get("bad_index"):  # no expectation: the run must report the index
        (folder / "bundle.json").write_text(json.dumps(bundle, indent=1))
        return bundle

    with torch.no_grad():
        wide = [t.double() if t.is_floating_point() else t for t in tensors]
        reference = [numpy_of(o) for o in float64_module(graph)(*wide)]
    # graph.py must be the same computation: check it here, on the CPU (not for gpu_only
    # bundles: a 2048^3 bfloat16 matmul takes PyTorch's CPU kernels long).
    if not options.get("gpu_only"):
        namespace: dict = {}
        exec(compile((folder / "graph.py").read_text(), "graph.py", "exec"), namespace)
        eager = namespace["forward"](*tensors)
        direct = gm(*tensors)
        for a, b in zip(eager, direct):
            if not torch.equal(a, b) and not (a.is_floating_point() and
                                              torch.allclose(a, b, equal_nan=True)):
                raise RuntimeError("graph.py differs from the fx graph")
    cpu_outputs = None if options.get("gpu_only") else run_cpu_target(fx_text, metas, tensors)
    rng = np.random.default_rng(seed)
    for k, (want, out) in enumerate(zip(reference, outputs)):
        want = want.astype(np.float64)
        if options.get("gpu_only") and want.size > SAMPLE:
            index = np.sort(rng.choice(want.size, SAMPLE, replace=False))
            out["index"] = f"out{k}.index.npy"
            np.save(folder / out["index"], index)
            want = want.reshape(-1)[index]
        out["f64"] = f"out{k}.f64.npy"
        np.save(folder / out["f64"], want)
        if cpu_outputs is not None:
            out["cpu"] = f"out{k}.cpu.npy"
            np.save(folder / out["cpu"], cpu_outputs[k])
            # The cpu target against float64, with the runner's own comparison: where
            # they differ, the bundle's inputs or reference are suspect, not the GPU.
            out["cpu_vs_f64"] = kit_runner.compare(cpu_outputs[k], want, out["dtype"],
                                                   tolerance=options.get("tolerance"))
            if not out["cpu_vs_f64"]["ok"] and not out.get("check_flag"):
                raise ValueError(f"output {k}: the cpu target and float64 eager differ "
                                 f"({out['cpu_vs_f64']}); not a bundle to check a GPU with")
    (folder / "bundle.json").write_text(json.dumps(bundle, indent=1))
    return bundle


def run_cpu_target(fx_text: str, metas, tensors) -> list[np.ndarray]:
    with tempfile.TemporaryDirectory() as tmp:
        compile_graph(fx_text, "gpu-kit", CompileOptions(target="cpu"), tmp)
        exe = CpuTarget().load(Path(tmp), metas)
        return [numpy_of(o) for o in exe.run([t.contiguous() for t in tensors])]


def commit(source: Path) -> str:
    done = subprocess.run(["git", "-C", str(source), "describe", "--always", "--dirty"],
                          capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def kit_size(kit_dir: Path) -> int:
    return sum(p.stat().st_size for p in Path(kit_dir).rglob("*") if p.is_file())


def build(kit_dir: str | os.PathLike, only: list[str] | None = None,
          source: str | os.PathLike | None = None, log=print) -> dict:
    """Write the kit into `kit_dir` (emptied first); returns kit.json's content.
    `source`: the lazymlir checkout whose cuda_runtime/ the kit carries (default: the
    one this package runs from; an installed wheel has no C++ sources)."""
    kit_dir = Path(kit_dir)
    source = Path(source) if source else REPO
    if not (source / "cuda_runtime" / "CMakeLists.txt").is_file():
        raise ValueError(f"no cuda_runtime/ sources in {source}: pass the lazymlir checkout "
                         f"(--source DIR)")
    names = list(cases.CASES) if not only else only
    unknown = [n for n in names if n not in cases.CASES]
    if unknown:
        raise ValueError(f"unknown cases {unknown}; cases: {', '.join(cases.CASES)}")
    if kit_dir.exists():
        shutil.rmtree(kit_dir)
    (kit_dir / "bundles").mkdir(parents=True)
    began = time.perf_counter()
    bundles, not_built = [], []
    with tempfile.TemporaryDirectory() as tmp:
        trace(Path(tmp), names)
        log(f"traced {len(names)} cases in {time.perf_counter() - began:.0f} s")
        for seed, case in enumerate(names):
            _, _, options = cases.CASES[case]
            graphs = sorted(Path(tmp, case).glob("*/00-fx.fx.json"))
            runs = torch.load(Path(tmp, case, "runs.pt"), weights_only=False)
            if not graphs:
                not_built.append({"case": case, "why": "the tracer recorded no graph"})
            for k, path in enumerate(graphs):
                name = case if len(graphs) == 1 else f"{case}.g{k}"
                started = time.perf_counter()
                try:
                    bundle = build_bundle(path.read_text(), name, case, options,
                                          kit_dir / "bundles" / name, seed, runs)
                except (LoweringError, CompileError, ValueError) as error:
                    shutil.rmtree(kit_dir / "bundles" / name, ignore_errors=True)
                    why = " ".join(str(error).split())[:300]
                    not_built.append({"case": name, "why": why})
                    log(f"  {name}: not built ({why})")
                    continue
                bundles.append({k2: bundle[k2] for k2 in ("name", "case", "gpu_only",
                                                          "expect_error")})
                log(f"  {name}: {len(bundle['kernels'])} kernel modules, "
                    f"{bundle['launches']} launches ({time.perf_counter() - started:.1f} s)")
    shutil.copy(Path(__file__).with_name("kit_runner.py"), kit_dir / "run.py")
    shutil.copytree(source / "cuda_runtime", kit_dir / "cuda_runtime")
    shutil.copy(source / "CMakeLists.txt", kit_dir / "CMakeLists.txt")  # C++17, cuda_runtime/
    (kit_dir / "runtime").mkdir()
    (kit_dir / "runtime" / "builtins.c").write_text(cpu_builtins.SOURCE)
    kit = {"format": 1, "commit": commit(source), "date": time.strftime("%Y-%m-%d"),
           "bundles": bundles, "not_built": not_built}
    (kit_dir / "kit.json").write_text(json.dumps(kit, indent=1))
    size = kit_size(kit_dir)
    kit["bytes"] = size
    log(f"kit: {len(bundles)} bundles, {len(not_built)} cases not built, "
        f"{size / 2**20:.1f} MiB in {kit_dir} ({time.perf_counter() - began:.0f} s)")
    if size >= LIMIT_BYTES:
        raise RuntimeError(f"the kit is {size / 2**20:.1f} MiB, over the 64 MiB a GPU call "
                           f"carries")
    return kit
