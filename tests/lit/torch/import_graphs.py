# RUN: %PYTHON %s | FileCheck %s
# fx graph JSON -> torch dialect: views/copies and a multi-op graph.
from fx_graphs import graph, inp, node, run

run("view$transpose", graph([[4, 8]], [("aten.t.default", [inp(0)], [8, 4]),
                                        ("aten.clone.default", [node(0)], [8, 4])], [node(1)]))
# CHECK-LABEL: TEST: view$transpose
# CHECK: func.func @main(%[[X:.*]]: !torch.vtensor<[4,8],f32>) -> !torch.vtensor<[8,4],f32>
# CHECK: %[[T:.*]] = torch.aten.t %[[X]] : !torch.vtensor<[4,8],f32> -> !torch.vtensor<[8,4],f32>
# CHECK: torch.aten.clone %[[T]], %{{.*}} : !torch.vtensor<[8,4],f32>

run("view$reshape", graph([[4, 8]], [("aten.view.default", [inp(0), [32]], [32])], [node(0)]))
# CHECK-LABEL: TEST: view$reshape
# CHECK: %[[SHAPE:.*]] = torch.prim.ListConstruct
# CHECK: torch.aten.view %{{.*}}, %[[SHAPE]] : !torch.vtensor<[4,8],f32>, !torch.list<int> -> !torch.vtensor<[32],f32>

run("mlp$multi", graph([[4, 8], [8, 16], [16]], [
    ("aten.mm.default", [inp(0), inp(1)], [4, 16]),
    ("aten.add.Tensor", [node(0), inp(2)], [4, 16]),
    ("aten.relu.default", [node(1)], [4, 16]),
    ("aten.sum.dim_IntList", [node(2), [1], False], [4])], [node(3)]))
# CHECK-LABEL: TEST: mlp$multi
# CHECK: %[[MM:.*]] = torch.aten.mm
# CHECK: %[[ADD:.*]] = torch.aten.add.Tensor %[[MM]]
# CHECK: %[[RELU:.*]] = torch.aten.relu %[[ADD]]
# CHECK: %[[SUM:.*]] = torch.aten.sum.dim_IntList %[[RELU]]
# CHECK: return %[[SUM]] : !torch.vtensor<[4],f32>
