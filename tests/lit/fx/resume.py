# RUN: %PYTHON %s > %t.fx.json
# RUN: lazymlir-opt %t.fx.json --to torch | FileCheck %s
# The fx stage is the tracer's graph JSON (as LAZYMLIR_DUMP_DIR writes 00-fx.fx.json):
# lazymlir-opt detects it without a marker and resumes at the torch import.
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "torch"))
from fx_graphs import graph, inp, node  # noqa: E402

print(graph([[4, 8]], [("aten.relu.default", [inp(0)], [4, 8])], [node(0)]))
# CHECK: // lazymlir-stage: torch
# CHECK: func.func @main(%[[X:.*]]: !torch.vtensor<[4,8],f32>) -> !torch.vtensor<[4,8],f32>
# CHECK: %[[R:.*]] = torch.aten.relu %[[X]] : !torch.vtensor<[4,8],f32> -> !torch.vtensor<[4,8],f32>
# CHECK: return %[[R]]
