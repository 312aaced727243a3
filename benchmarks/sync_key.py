"""The sync side of a lazy step: the graph's key without the document, against the
document and its hash, on the same pending trace.

    PYTHONPATH=. python -m benchmarks.sync_key [--only mlp,gpt] [--rounds 15] [--label NAME]

One process. For each workload (the training steps of benchmarks.run), one step is
traced (3 warm-up steps first, so that every cache is warm) and not synced; then, per
round, alternating: `graph_key(pending)` (what a sync with a cached plan does now) and
`build_graph(pending)` + `fx_graph.structural_hash` (what it did before: the document
was built and hashed at every sync). Process CPU time, medians over the rounds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch


def measure(key: str, rounds: int) -> dict:
    import lazymlir
    from lazymlir.lowering.front import fx_graph
    from lazymlir.tracing.graph import build_graph, graph_key
    from lazymlir.tracing.values import live_pending_values

    from .run import TrainingPair, training_workload

    pair = TrainingPair(*training_workload(key))
    for _ in range(3):
        pair.lazy_step(wait=True)
    pair.lazy_step(mark_step=False)
    pending = live_pending_values()
    clock = time.process_time
    new, old = [], []
    for _ in range(rounds):
        began = clock()
        _, _, _, count = graph_key(pending, "cpu")
        new.append(clock() - began)
        began = clock()
        graph, _, _ = build_graph(pending)
        fx_graph.structural_hash(graph, "cpu")
        old.append(clock() - began)
    lazymlir.mark_step()
    lazymlir.wait()
    return {"nodes": count, "new": 1e3 * statistics.median(new),
            "old": 1e3 * statistics.median(old)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="mlp,gpt")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--label", default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("LAZYMLIR_TARGET", "cpu")
    import lazymlir

    from .results_dir import report

    before = os.getloadavg()
    rows = [(k, measure(k, args.rounds)) for k in args.only.split(",")]
    after = os.getloadavg()
    label = args.label or "unlabeled"
    lines = [f"# Sync side of a lazy step: graph key vs document + hash ({label})",
             "", f"    PYTHONPATH=. python -m benchmarks.sync_key {' '.join(sys.argv[1:])}", "",
             f"lazymlir {lazymlir.__version__}, torch {torch.__version__}; load average "
             f"{before[0]:.1f} before, {after[0]:.1f} after (2-core machine shared with other "
             f"jobs); process CPU ms, medians of {args.rounds} alternated rounds.", "",
             "| step | nodes | build_graph + structural_hash ms | graph_key ms | ratio |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for key, r in rows:
        lines.append(f"| {key} | {r['nodes']} | {r['old']:.2f} | {r['new']:.2f} | "
                     f"{r['new'] / r['old']:.2f} |")
    report("\n".join(lines), args.label)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
