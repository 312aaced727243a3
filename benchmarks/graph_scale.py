"""Cost per node of the Python phases before a compile, for lazy graphs of growing size.

A synthetic concat-heavy training step (DenseNet-like dense blocks of 6 layers: each
layer concatenates the block's features so far, then a reduction, a scale and a relu;
backward included) is traced on the lazy device at 1k, 5k, 20k (and 50k) nodes; for
each size the table gives microseconds per node of:

- trace: recording the forward and `backward()` (the tracer, functionalization,
  autograd),
- build: the graph document built from the pending values (tracing/graph.py),
- hash: its structural hash (the graph cache key),
- checks: the bounds-check instrumentation (lowering/front/checks.py),
- dumps: the JSON text sent to the compiler,
- split: partition.subgraph over all nodes (what a split around a failing op does per
  segment).

Per-node time that grows with the size is superlinear cost. The compile itself (MLIR)
is not run. Usage: `PYTHONPATH=. python -m benchmarks.graph_scale [--sizes 1000,5000]`.
"""

from __future__ import annotations

import argparse
import gc
import time

import torch

import lazymlir
from lazymlir import session
from lazymlir.execution import partition
from lazymlir.lowering.front import checks, fx_graph
from lazymlir.tracing.graph import build_graph
from lazymlir.tracing.values import live_pending_values

from .results_dir import result_path

BLOCK = 6  # layers per dense block


def _step(blocks: int) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 4).to("lazy_mlir")
    scales = [torch.randn(1, 1).to("lazy_mlir").requires_grad_() for _ in range(blocks * BLOCK)]
    h = x
    k = 0
    for _ in range(blocks):
        features = [h]
        for _ in range(BLOCK):
            joined = torch.cat(features, 1)
            features.append((joined.sum(1, keepdim=True) * scales[k]).relu())
            k += 1
        h = torch.cat(features, 1)[:, :4]
    h.sum().backward()
    return scales


def measure(target_nodes: int, nodes_per_block: float | None) -> dict:
    blocks = max(1, round(target_nodes / nodes_per_block)) if nodes_per_block else 1
    gc.collect()
    began = time.perf_counter()
    keep = _step(blocks)
    traced = time.perf_counter()
    pending = live_pending_values()
    graph, _, _ = build_graph(pending, frozenset(session.current().static_scalar_ops))
    built = time.perf_counter()
    fx_graph.structural_hash(graph, "cpu")
    hashed = time.perf_counter()
    checks.instrument(graph)
    checked = time.perf_counter()
    fx_graph.dumps(graph)
    dumped = time.perf_counter()
    outputs = [tuple(o["ref"]) for o in graph["outputs"]]
    partition.subgraph(graph, list(range(len(graph["nodes"]))), outputs)
    split = time.perf_counter()
    nodes = len(graph["nodes"])
    del keep, pending, graph
    session.reset()
    return {"blocks": blocks, "nodes": nodes, "trace": traced - began, "build": built - traced,
            "hash": hashed - built, "checks": checked - hashed, "dumps": dumped - checked,
            "split": split - dumped}


PHASES = ("trace", "build", "hash", "checks", "dumps", "split")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000,20000,50000")
    parser.add_argument("--out", default="graph-scale.md")
    args = parser.parse_args(argv)
    per_block = measure(1, None)  # one block: the size of a block
    per_block_nodes = per_block["nodes"]
    rows = [measure(int(n), per_block_nodes) for n in args.sizes.split(",")]
    lines = ["| nodes | " + " | ".join(f"{p} us/node" for p in PHASES) + " | total s |",
             "| --- |" + " --- |" * (len(PHASES) + 1)]
    for r in rows:
        total = sum(r[p] for p in PHASES)
        lines.append(f"| {r['nodes']} | " + " | ".join(f"{1e6 * r[p] / r['nodes']:.1f}"
                                                      for p in PHASES) + f" | {total:.1f} |")
    table = "\n".join(lines)
    print(table)
    path = result_path(args.out)
    path.write_text(f"# Lazy graph phases per node, by graph size\n\n"
                    f"`PYTHONPATH=. python -m benchmarks.graph_scale --sizes {args.sizes}`; "
                    f"torch {torch.__version__}, lazymlir {lazymlir.__version__}; "
                    f"{per_block_nodes} nodes per dense block.\n\n{table}\n")
    print(f"written: {path}")


if __name__ == "__main__":
    main()
