"""CPU benchmarks: lazy_mlir against eager PyTorch (and torch.compile), side by side.

    PYTHONPATH=. python -m benchmarks.run [--label NAME] [--reps N] [--inductor] [--quick]

Every workload runs eagerly and on `lazy_mlir` (CPU target) in one process; each
figure is the median of `--reps` timed runs (eager and lazy alternate call by
call, every call timed), and the
first lazy run (trace + compile + run) is reported separately as `first s`.
`lazy ms` is the whole user-visible step: tracing, the graph-cache lookup, the
compiled code and the copy back to a CPU tensor (`.cpu()` / `mark_step()`);
`code ms` is only the compiled code (the `ExecuteTime` timer). Ratios are
lazy/eager: below 1 is faster than eager.

Writes benchmarks/results/<today>/<label>.json, <label>.md and <label>.png (the plot
needs matplotlib; without it the plot is skipped with a message).
Timings are never asserted anywhere: they depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from .results_dir import result_path


@dataclass
class Row:
    name: str
    eager_ms: float
    lazy_ms: float
    code_ms: float
    first_s: float
    flops: float = 0.0            # per run, for GFLOP/s columns (0: not a FLOP benchmark)
    inductor_ms: float | None = None
    inductor_first_s: float | None = None
    dynamo_ms: float | None = None     # torch.compile(backend="lazymlir")
    dynamo_first_s: float | None = None
    max_abs_err: float = 0.0
    fallbacks: int = 0            # ops that ran eagerly instead of compiled (must be 0)
    extra: dict = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        return self.lazy_ms / self.eager_ms


def _execute_total() -> float:
    import lazymlir

    return lazymlir.metrics.timers().get("ExecuteTime", {}).get("total_s", 0.0)


def _fallbacks() -> int:
    import lazymlir

    return sum(lazymlir.metrics.fallback_ops().values())


def _paired_timing(eager_fn: Callable[[], object], lazy_fn: Callable[[], object], reps: int,
                   others: Callable[[], dict[str, Callable[[], object]]] = dict):
    """(eager median ms, lazy first run s, lazy median ms, compiled-code median ms, lazy
    result, {other: median ms}).

    Lazy, eager and the `others` (torch.compile contenders, made by calling `others()`
    after the lazy first run, so that a graph they share is not compiled for the lazy
    side first) alternate call by call, every call timed, as a training script
    alternates eager work (data, metrics) with its steps: all see the same machine load
    (the machine may be shared), and any cost of switching between them (the OpenMP
    pool's threads, caches) lands in the figures instead of being skipped.
    """
    began = time.perf_counter()
    out = lazy_fn()
    first = time.perf_counter() - began
    contenders = others()
    for _ in range(2):  # warm-up, everyone
        lazy_fn()
        eager_fn()
        for fn in contenders.values():
            fn()
    eager, lazy, code = [], [], []
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(max(1, reps)):
        exec_before = _execute_total()
        began = time.perf_counter()
        out = lazy_fn()
        lazy.append(time.perf_counter() - began)
        code.append(_execute_total() - exec_before)
        began = time.perf_counter()
        eager_fn()
        eager.append(time.perf_counter() - began)
        for name, fn in contenders.items():
            began = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - began)
    ms = [1e3 * statistics.median(t) for t in (eager, lazy, code)]
    return ms[0], first, ms[1], ms[2], out, \
        {name: 1e3 * statistics.median(t) for name, t in times.items()}


def _compiled(fn, args, backend: str) -> tuple[Callable[[], object] | None, float | None]:
    """(a call of torch.compile(fn, backend=...) on args, its first call s), or (None,
    None) if it fails."""
    try:
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend=backend, dynamic=False)
        began = time.perf_counter()
        compiled(*args)
        return (lambda: compiled(*args)), time.perf_counter() - began
    except Exception as error:  # optional column: report, do not fail the run
        print(f"  torch.compile({backend}) failed: {type(error).__name__}: {str(error)[:200]}")
        return None, None


def _compile_contenders(row: Row, fn, args, inductor: bool):
    """For _paired_timing's `others`: compiles fn with lazymlir (and inductor), recording
    each first call in `row`."""
    def make() -> dict[str, Callable[[], object]]:
        contenders = {}
        # Inductor after lazymlir: torch._dynamo.reset() between them drops only Dynamo's
        # caches, the compiled callables stay valid.
        call, row.dynamo_first_s = _compiled(fn, args, "lazymlir")
        if call is not None:
            contenders["dynamo"] = call
        if inductor:
            call, row.inductor_first_s = _compiled(fn, args, "inductor")
            if call is not None:
                contenders["inductor"] = call
        return contenders
    return make


def _fill_compiled(row: Row, others: dict[str, float]) -> None:
    row.dynamo_ms = others.get("dynamo")
    row.inductor_ms = others.get("inductor")


def _function_bench(name: str, fn, args: list[torch.Tensor], reps: int, inductor: bool,
                    flops: float = 0.0) -> Row:
    expected = fn(*args)
    lazy_args = [a.to("lazy_mlir") for a in args]
    row = Row(name, 0.0, 0.0, 0.0, 0.0, flops=flops)
    before = _fallbacks()
    eager, first, lazy, code, out, others = _paired_timing(
        lambda: fn(*args), lambda: fn(*lazy_args).cpu(), reps,
        _compile_contenders(row, fn, args, inductor))
    row.fallbacks = _fallbacks() - before
    row.eager_ms, row.lazy_ms, row.code_ms, row.first_s = eager, lazy, code, first
    row.max_abs_err = (out - expected).abs().max().item()
    _fill_compiled(row, others)
    return row


def _chain(x):
    # 8 elementwise ops, fused into one loop by the compiler.
    return (((x * 1.1 + 0.5).relu() * 2.0 - 1.0).exp() + 1.0).sqrt()


def _softmax(x):
    return torch.softmax(x, dim=-1)


def _layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b)


def _matmul(a, b):
    return a @ b


def _mlp(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                               torch.nn.Linear(512, 256))


def _mse(model, x, y):
    return F.mse_loss(model(x), y)


def _train_step(model, opt, x, y, loss_fn=_mse):
    opt.zero_grad()
    loss = loss_fn(model, x, y)
    loss.backward()
    opt.step()
    return loss


def training_workload(key: str):
    """(make_model, make_opt, loss_fn, x, y) of a benchmark training step: "mlp" (SGD)
    or "gpt" (the small GPT of benchmarks/models.py, AdamW); fixed data."""
    from benchmarks import models

    generator = torch.Generator().manual_seed(1)
    if key == "mlp":
        x, y = torch.randn(64, 256, generator=generator), torch.randn(64, 256, generator=generator)
        return (lambda: _mlp(0)), (lambda p: torch.optim.SGD(p, lr=0.01)), _mse, x, y
    config = models.GPTConfig()
    idx, targets = models.gpt_batch(config, models.BENCH_BATCH, generator)
    return (lambda: models.gpt(config, 0)), (lambda p: torch.optim.AdamW(p, lr=1e-3)), \
        models.gpt_loss, idx, targets


class TrainingPair:
    """One training step eagerly and on lazy_mlir, each on its own copy of the same
    initial weights (`make_model()` is deterministic), for benchmarks that alternate
    them; `lazy_copies` more lazy models (with their optimizers) for lazy variants."""

    def __init__(self, make_model, make_opt, loss_fn, x, y, lazy_copies: int = 0):
        self.loss_fn, self.x, self.y = loss_fn, x, y
        self.eager_model = make_model()
        self.eager_opt = make_opt(self.eager_model.parameters())
        self.lazy = []
        for _ in range(1 + lazy_copies):
            model = make_model().to("lazy_mlir")
            self.lazy.append((model, make_opt(model.parameters())))
        self.lazy_model, self.lazy_opt = self.lazy[0]
        self.xl, self.yl = x.to("lazy_mlir"), y.to("lazy_mlir")

    def eager_step(self):
        return _train_step(self.eager_model, self.eager_opt, self.x, self.y, self.loss_fn)

    def lazy_step(self, copy: int = 0, mark_step: bool = True, wait: bool = False):
        """One lazy step (`mark_step()` after it unless told not to; `wait`: and its
        run waited for, not left running in the background); its loss."""
        import lazymlir

        model, opt = self.lazy[copy]
        loss = _train_step(model, opt, self.xl, self.yl, self.loss_fn)
        if mark_step:
            lazymlir.mark_step()
        if wait:
            lazymlir.wait()
        return loss

    def max_abs_err(self, copy: int = 0) -> float:
        """Largest weight difference between eager and a lazy copy (same number of steps
        taken: the same weights, up to rounding)."""
        return max((pe - pl.cpu()).abs().max().item()
                   for pe, pl in zip(self.eager_model.parameters(),
                                     self.lazy[copy][0].parameters()))


def _training_bench(name: str, make_model, make_opt, loss_fn, x, y, reps: int,
                    inductor: bool) -> Row:
    """One training step eagerly, on lazy_mlir (one graph per step) and through
    torch.compile, each on its own copy of the same initial weights."""
    pair = TrainingPair(make_model, make_opt, loss_fn, x, y)
    compiled_model = make_model()
    compiled_opt = make_opt(compiled_model.parameters())
    row = Row(name, 0.0, 0.0, 0.0, 0.0)
    before = _fallbacks()
    # The run waited for: `lazy ms` is the whole step, and it does not run behind the
    # eager call that follows (benchmarks.async_steps measures the overlap).
    eager, first, lazy, code, _, others = _paired_timing(
        pair.eager_step, lambda: pair.lazy_step(wait=True), reps,
        _compile_contenders(row, lambda: _train_step(compiled_model, compiled_opt, x, y,
                                                     loss_fn), [], inductor))
    row.fallbacks = _fallbacks() - before
    row.eager_ms, row.lazy_ms, row.code_ms, row.first_s = eager, lazy, code, first
    # Eager and lazy took the same number of steps from the same weights: compare them.
    row.max_abs_err = pair.max_abs_err()
    _fill_compiled(row, others)
    return row


def _mlp_bench(reps: int, inductor: bool) -> Row:
    return _training_bench("mlp train step 64x256-512-256 SGD", _mlp,
                           lambda p: torch.optim.SGD(p, lr=0.01), _mse,
                           torch.randn(64, 256), torch.randn(64, 256), reps, inductor)


def _gpt_bench(reps: int, inductor: bool) -> Row:
    """One AdamW training step of the small GPT (benchmarks/models.py)."""
    from benchmarks import models

    config = models.GPTConfig()
    idx, targets = models.gpt_batch(config, models.BENCH_BATCH, torch.Generator().manual_seed(1))
    return _training_bench(f"gpt train step {config.layers}x(d{config.dim},h{config.heads}) "
                           f"b{models.BENCH_BATCH}xs{config.seq} AdamW",
                           lambda: models.gpt(config), lambda p: torch.optim.AdamW(p, lr=1e-3),
                           models.gpt_loss, idx, targets, reps, inductor)


def _block_bench(reps: int, inductor: bool) -> Row:
    """A transformer block's forward pass in inference (no autograd)."""
    from benchmarks import models

    config = models.GPTConfig()
    eager_block = models.block(config)
    lazy_block = models.block(config).to("lazy_mlir")
    x = torch.randn(models.BENCH_BATCH, config.seq, config.dim)

    def forward(blk, inp):
        with torch.no_grad():
            return blk(inp)

    name = f"transformer block inference b{models.BENCH_BATCH}xs{config.seq}xd{config.dim}"
    xl = x.to("lazy_mlir")
    row = Row(name, 0.0, 0.0, 0.0, 0.0)
    before = _fallbacks()
    eager, first, lazy, code, out, others = _paired_timing(
        lambda: forward(eager_block, x), lambda: forward(lazy_block, xl).cpu(), reps,
        _compile_contenders(row, lambda inp: forward(eager_block, inp), [x], inductor))
    row.fallbacks = _fallbacks() - before
    row.eager_ms, row.lazy_ms, row.code_ms, row.first_s = eager, lazy, code, first
    row.max_abs_err = (out - forward(eager_block, x)).abs().max().item()
    _fill_compiled(row, others)
    return row


def _selected(name: str, only: str) -> bool:
    """`--only a,b`: workloads whose name contains any of the parts (all when empty)."""
    return not only or any(part and part in name for part in only.split(","))


def run(reps: int, inductor: bool, sizes: list[int], only: str = "") -> list[Row]:
    torch.manual_seed(0)
    rows = []
    for n in sizes if _selected(f"matmul {sizes}", only) else []:
        a, b = torch.randn(n, n), torch.randn(n, n)
        rows.append(_function_bench(f"matmul {n}^3", _matmul, [a, b], reps, inductor,
                                    flops=2.0 * n ** 3))
        print(_format_row(rows[-1]), flush=True)
    work = [
        ("elementwise chain 8 ops, 4M f32", _chain, [torch.randn(4 * 1024 * 1024)]),
        ("softmax (4096,1024)", _softmax, [torch.randn(4096, 1024)]),
        ("layer_norm (4096,1024)", _layer_norm,
         [torch.randn(4096, 1024), torch.randn(1024), torch.randn(1024)]),
    ]
    for name, fn, args in work:
        if not _selected(name, only):
            continue
        rows.append(_function_bench(name, fn, args, reps, inductor))
        print(_format_row(rows[-1]), flush=True)
    for name, bench in (("mlp", _mlp_bench), ("gpt", _gpt_bench),
                        ("transformer block", _block_bench)):
        if _selected(name, only):
            rows.append(bench(reps, inductor))
            print(_format_row(rows[-1]), flush=True)
    return rows


HEADER = (f"{'workload':<36} {'eager ms':>9} {'lazy ms':>9} {'code ms':>9} {'lazy/eager':>10} "
          f"{'first s':>8} {'GFLOP/s e|l':>14} {'compile:lazymlir ms':>19} {'inductor ms':>11} "
          f"{'max err':>9} {'fallbk':>6}")


def _format_row(r: Row) -> str:
    gf = (f"{r.flops / r.eager_ms / 1e6:6.1f}|{r.flops / r.lazy_ms / 1e6:<6.1f}"
          if r.flops else "")
    ind = f"{r.inductor_ms:.3f}" if r.inductor_ms is not None else "-"
    dyn = f"{r.dynamo_ms:.3f}" if r.dynamo_ms is not None else "-"
    return (f"{r.name:<36} {r.eager_ms:9.3f} {r.lazy_ms:9.3f} {r.code_ms:9.3f} {r.ratio:10.2f} "
            f"{r.first_s:8.2f} {gf:>14} {dyn:>19} {ind:>11} {r.max_abs_err:9.2e} "
            f"{r.fallbacks:6d}")


def _markdown(rows: list[Row], meta: dict) -> str:
    lines = [f"# {meta['label']}", "",
             f"`{meta['command']}` at commit `{meta['commit']}`, {meta['date']}, "
             f"{meta['cpu']} ({meta['threads']} torch threads), torch {meta['torch']}, "
             f"median of {meta['reps']} runs, eager and lazy alternating call by call, "
             "load average after the run "
             f"{meta['loadavg_after'][0]:.1f}; compile worker start {meta['worker_start_s']:.2f} s "
             "(not in `first run s`). `fallbacks`: ops run eagerly instead (0 = all compiled).", "",
             "| workload | eager ms | lazy ms | code ms | lazy/eager | first run s | "
             "GFLOP/s eager | GFLOP/s lazy | compile(lazymlir) ms | compile(lazymlir)/eager | "
             "compile(lazymlir) first s | inductor ms | inductor first s | max abs err | "
             "fallbacks |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
             "| ---: | ---: | ---: |"]
    for r in rows:
        gf_e = f"{r.flops / r.eager_ms / 1e6:.1f}" if r.flops else ""
        gf_l = f"{r.flops / r.lazy_ms / 1e6:.1f}" if r.flops else ""
        def opt(value, fmt):
            return format(value, fmt) if value is not None else "-"
        dyn_ratio = r.dynamo_ms / r.eager_ms if r.dynamo_ms is not None else None
        lines.append(f"| {r.name} | {r.eager_ms:.3f} | {r.lazy_ms:.3f} | {r.code_ms:.3f} | "
                     f"{r.ratio:.2f} | {r.first_s:.2f} | {gf_e} | {gf_l} | "
                     f"{opt(r.dynamo_ms, '.3f')} | {opt(dyn_ratio, '.2f')} | "
                     f"{opt(r.dynamo_first_s, '.2f')} | {opt(r.inductor_ms, '.3f')} | "
                     f"{opt(r.inductor_first_s, '.2f')} | {r.max_abs_err:.2e} | {r.fallbacks} |")
    return "\n".join(lines) + "\n"


def _plot(rows: list[Row], path: Path, label: str) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: plot skipped (pip install matplotlib)"
    fig, ax = plt.subplots(figsize=(9, 4.5))
    names = [r.name for r in rows]
    ax.barh(names, [r.ratio for r in rows], color="tab:blue", label="lazy_mlir / eager")
    if any(r.inductor_ms for r in rows):
        ax.barh(names, [(r.inductor_ms or 0) / r.eager_ms for r in rows], height=0.3,
                color="tab:orange", label="torch.compile / eager")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("time relative to CPU eager (log scale, lower is faster)")
    ax.set_title(f"lazy_mlir CPU target: {label}")
    ax.invert_yaxis()
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return None


def _commit(package_dir: Path) -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, cwd=package_dir).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    except OSError:
        pass
    return platform.processor()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", default="latest", help="results file name")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--inductor", action="store_true",
                        help="add torch.compile (inductor) columns (slow cold compiles)")
    parser.add_argument("--only", default="",
                        help="run only workloads whose name contains one of these "
                        "(comma separated)")
    parser.add_argument("--commit", help="name the measured code's commit (default: git HEAD of "
                        "the imported lazymlir)")
    parser.add_argument("--sizes", default="256,512,1024",
                        help="matmul sizes (comma separated; 2048 is slow before optimization)")
    args = parser.parse_args(argv)
    # Private, empty disk caches for both compilers: first runs really compile. Inductor
    # otherwise reuses its FX graph and autotuning caches across runs (then its
    # `first s` is a cache load, not a compile, and the cold-compile ratio is unfair).
    os.environ["LAZYMLIR_CACHE_DIR"] = tempfile.mkdtemp(prefix="lazymlir-bench-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-bench-")
    os.environ["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "0"
    os.environ["TORCHINDUCTOR_AUTOGRAD_CACHE"] = "0"
    import torch._inductor.config as inductor_config  # the env vars may be read already
    inductor_config.fx_graph_cache = False
    inductor_config.autotune_local_cache = False
    os.environ.setdefault("LAZYMLIR_TARGET", "cpu")
    import lazymlir
    import lazymlir.dynamo  # noqa: F401  backend="lazymlir" from a source checkout too

    print(f"lazymlir {lazymlir.__version__}, target {lazymlir.target()}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    # Start the compile worker outside the table (its start-up is not a compile).
    began = time.perf_counter()
    (torch.ones(2).to("lazy_mlir") + 1).cpu()
    worker_s = time.perf_counter() - began
    print(f"compile worker start + first tiny graph: {worker_s:.2f} s")
    print(HEADER)
    rows = run(args.reps, args.inductor, [int(s) for s in args.sizes.split(",") if s], args.only)
    meta = {"label": args.label, "commit": _commit(Path(lazymlir.__file__).parent),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": _cpu_name(),
            "threads": torch.get_num_threads(),
            "torch": torch.__version__, "reps": args.reps,
            "loadavg_after": os.getloadavg(), "worker_start_s": worker_s,
            "command": f"PYTHONPATH={os.environ.get('PYTHONPATH', '')} python "
                       + " ".join(sys.argv),
            "lazymlir_path": str(Path(lazymlir.__file__).parent.parent)}
    if args.commit:
        meta["commit"] = args.commit
    data = {"meta": meta, "rows": [asdict(r) | {"ratio": r.ratio} for r in rows]}
    out = result_path(f"{args.label}.md")
    out.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")
    out.write_text(_markdown(rows, meta))
    note = _plot(rows, out.with_suffix(".png"), args.label)
    print(note or f"wrote {out.with_suffix('')}.{{json,md,png}}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
