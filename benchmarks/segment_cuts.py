"""Where a real-size training step's graph is cut into segments, and how many segments a
small change leaves as they were (so their compiles are reused).

    PYTHONPATH=. python -m benchmarks.segment_cuts [densenet121] [--limits 6000,3000,2000]

Traces one training step of a model of tests/python/cases/real_models.py on the lazy
device (forward, backward, SGD with momentum; nothing compiles), builds its graph and,
for each segment size limit (LAZYMLIR_SEGMENT_NODES), prints the cut points
(execution/partition.py's `cut_points`), each segment's nodes, inputs and outputs, and
the values crossing each cut. Then it inserts one node (a negation of the first input,
made a graph output) early, midway and late in the graph and counts the segments whose
structural hash is unchanged.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

# The model definitions live with the tests that train them.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "python" / "cases"))


def _shift(value, at: int):
    """`value` with every reference to node `at` or later moved one node on."""
    if isinstance(value, dict) and "ref" in value:
        kind, index, out = value["ref"]
        return {"ref": [kind, index + 1 if kind == "node" and index >= at else index, out]}
    if isinstance(value, list):
        return [_shift(item, at) for item in value]
    return value


def _with_node_inserted(graph: dict, at: int) -> dict:
    grown = copy.deepcopy(graph)
    nodes = [{**n, "args": _shift(n["args"], at),
              "kwargs": {k: _shift(v, at) for k, v in n["kwargs"].items()}}
             for n in grown["nodes"]]
    nodes.insert(at, {"op": "aten.neg.default", "args": [{"ref": ["input", 0, 0]}],
                      "kwargs": {}, "outputs": [dict(grown["inputs"][0])]})
    grown["nodes"] = nodes
    grown["outputs"] = _shift(grown["outputs"], at) + [{"ref": ["node", at, 0]}]
    return grown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="densenet121")
    parser.add_argument("--limits", default="6000,3000,2000")
    args = parser.parse_args()

    import torch
    from real_models import MODELS

    from lazymlir.execution import partition
    from lazymlir.lowering.front import fx_graph
    from lazymlir.tracing import values
    from lazymlir.tracing.graph import build_graph

    torch.manual_seed(0)
    model, x, y, loss_fn = MODELS[args.model]()
    model = model.to("lazy_mlir")
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss = loss_fn(model(x.to("lazy_mlir")), y.to("lazy_mlir"))
    loss.backward()
    opt.step()
    graph = build_graph(values.live_pending_values())[0]
    count = len(graph["nodes"])
    print(f"{args.model}: one training step's graph: {count} nodes, {len(graph['inputs'])} "
          f"inputs, {len(graph['scalars'])} scalars, {len(graph['outputs'])} outputs")

    def segment_hashes(g: dict, limit: int) -> list[str]:
        split = partition.Partitioned(g, {}, None, partition.cut_points(g, limit))
        return [fx_graph.structural_hash(s, "cpu") for s in split.segments()]

    for limit in (int(v) for v in args.limits.split(",")):
        began = time.perf_counter()
        cuts = partition.cut_points(graph, limit)
        split = partition.Partitioned(graph, {}, None, cuts)
        elapsed = time.perf_counter() - began
        segments = split.segments()
        crossing = [sum(1 for r in reads if r[0] == "node") for _, _, reads, _ in
                    (s for s in split.steps if s[0] == "compiled")][1:]
        print(f"\nLAZYMLIR_SEGMENT_NODES={limit}: cuts {cuts} ({1e3 * elapsed:.0f} ms to cut "
              f"and extract); values read from earlier segments by segments 2..: {crossing}")
        for k, sub in enumerate(segments):
            print(f"  segment {k + 1}: {len(sub['nodes'])} nodes, {len(sub['inputs'])} inputs, "
                  f"{len(sub['scalars'])} scalars, {len(sub['outputs'])} outputs")
        base = segment_hashes(graph, limit)
        for at in (5, count // 3, 2 * count // 3):
            same = [a == b for a, b in
                    zip(base, segment_hashes(_with_node_inserted(graph, at), limit))]
            print(f"  a node inserted at {at}: {sum(same)} of {len(base)} segments unchanged "
                  f"({' '.join('same' if s else 'changed' for s in same)})")


if __name__ == "__main__":
    main()
