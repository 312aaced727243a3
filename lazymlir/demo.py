"""Demo: train a small MLP on the lazy_mlir device and compare with eager PyTorch.

    python -m lazymlir.demo [--steps N]

Prints the loss of each step on both, the max weight difference at the end,
and the metrics report (one compile per distinct step, cache hits after).
"""

from __future__ import annotations

import argparse
import time

import torch

import lazymlir


def make_model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    eager = make_model()
    lazy = make_model()
    lazy.load_state_dict(eager.state_dict())
    lazy = lazy.to("lazy_mlir")
    opt_eager = torch.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9)
    opt_lazy = torch.optim.SGD(lazy.parameters(), lr=0.05, momentum=0.9)
    x, y = torch.randn(64, 16), torch.randn(64, 4)
    x_lazy, y_lazy = x.to("lazy_mlir"), y.to("lazy_mlir")
    print(f"lazymlir {lazymlir.__version__}: target={lazymlir.target()}")
    print(f"{'step':>4} {'eager loss':>12} {'lazy_mlir loss':>15} {'step ms':>9}")
    for step in range(args.steps):
        opt_eager.zero_grad()
        loss_eager = torch.nn.functional.mse_loss(eager(x), y)
        loss_eager.backward()
        opt_eager.step()
        began = time.perf_counter()
        opt_lazy.zero_grad()
        loss_lazy = torch.nn.functional.mse_loss(lazy(x_lazy), y_lazy)
        loss_lazy.backward()
        opt_lazy.step()
        lazymlir.mark_step()  # one graph per step: compiled once, then cache hits
        ms = 1e3 * (time.perf_counter() - began)
        print(f"{step:>4} {loss_eager.item():>12.6f} {loss_lazy.item():>15.6f} {ms:>9.1f}")
    diff = max((pe - pl.cpu()).abs().max().item()
               for pe, pl in zip(eager.parameters(), lazy.parameters()))
    print(f"max |weight(eager) - weight(lazy_mlir)| after {args.steps} steps: {diff:.3g}")
    print(lazymlir.metrics.report())
    return 0 if diff < 1e-4 else 1


if __name__ == "__main__":
    raise SystemExit(main())
