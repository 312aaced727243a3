"""Memory of lazy-device training steps with buffer donation on and off (LAZYMLIR_DONATE).

    PYTHONPATH=. python -m benchmarks.donation_memory [--only mlp,gpt,wide] [--steps 6]
        [--label NAME]

Each workload and setting runs in a fresh process (peak RSS is per process): the model
moves to the device, one untimed step compiles, then `--steps` steps of `mark_step();
wait()`. Figures: the graphs' output buffers allocated per step (bytes the cpu target's
executables allocate for outputs: a donated output writes its input's buffer instead),
the process's peak RSS growth over the measured steps' start (VmHWM minus VmRSS before
them: what a step holds at once beyond what lives between steps), and DonatedInputs per
step. Workloads: "mlp" and "gpt" as benchmarks.run's training_workload (SGD; AdamW),
"wide": a 4-layer 1024-wide MLP with AdamW (16 MB of parameters, 32 MB of state).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import torch

from .results_dir import load_averages, report
from .run import TrainingPair, _mse, training_workload


def _wide():
    def make_model():
        torch.manual_seed(0)
        layers = []
        for _ in range(4):
            layers += [torch.nn.Linear(1024, 1024), torch.nn.ReLU()]
        return torch.nn.Sequential(*layers[:-1])

    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(64, 1024, generator=generator), torch.randn(64, 1024, generator=generator)
    return make_model, (lambda p: torch.optim.AdamW(p, lr=1e-3)), _mse, x, y


def _status(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def child(key: str, steps: int) -> dict:
    """One workload in this process: the figures as a dict."""
    import lazymlir
    from lazymlir.targets import cpu

    workload = _wide() if key == "wide" else training_workload(key)
    pair = TrainingPair(*workload)
    allocated = [0]
    empty = cpu._empty_strided

    def counting(shape, strides, dtype):
        out = empty(shape, strides, dtype)
        allocated[0] += out.untyped_storage().nbytes()
        return out

    cpu._empty_strided = counting
    pair.lazy_step().item()  # compiles
    lazymlir.wait()
    before = lazymlir.metrics.counter("DonatedInputs")
    allocated[0] = 0
    rss = _status("VmRSS")
    # VmHWM cannot be reset without privileges: the growth over the current RSS is a
    # lower bound of the steps' peak when the compile's peak was higher.
    for _ in range(steps):
        pair.lazy_step(wait=True)
    pair.lazy_step().item()
    return {"allocated_per_step": allocated[0] / (steps + 1),
            "peak_growth": _status("VmHWM") - rss,
            "donated_per_step": (lazymlir.metrics.counter("DonatedInputs") - before) / (steps + 1),
            "fallbacks": sum(lazymlir.metrics.fallback_ops().values())}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="mlp,gpt,wide")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--label", default=None)
    parser.add_argument("--child", default=None)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.steps)))
        return
    load_before = os.getloadavg()
    rows = []
    for key in args.only.split(","):
        results = {}
        for donate in ("0", "1", "0", "1"):  # alternated processes
            env = dict(os.environ, LAZYMLIR_DONATE=donate, PYTHONPATH=".")
            out = subprocess.run([sys.executable, "-m", "benchmarks.donation_memory",
                                  "--child", key, "--steps", str(args.steps)],
                                 env=env, capture_output=True, text=True, check=True)
            results.setdefault(donate, []).append(json.loads(out.stdout.splitlines()[-1]))
        for donate, runs in results.items():
            allocated = " / ".join(f"{r['allocated_per_step'] / 2**20:.2f}" for r in runs)
            peaks = " / ".join(f"{r['peak_growth'] / 2**20:.1f}" for r in runs)
            rows.append(f"| {key} | {'on' if donate == '1' else 'off'} | {allocated} | {peaks} | "
                        f"{runs[0]['donated_per_step']:.0f} | {runs[0]['fallbacks']} |")
    text = "\n".join([
        "## Lazy-device step memory, donation off and on "
        f"({args.steps} steps after a compile; two processes each, alternated)", "",
        f"load: {load_averages(load_before, os.getloadavg())}", "",
        "| workload | donation | output MiB allocated / step | peak RSS growth MiB "
        "| donated inputs / step | fallbacks |",
        "| --- | --- | ---: | ---: | ---: | ---: |", *rows])
    report(text, args.label)


if __name__ == "__main__":
    main()
