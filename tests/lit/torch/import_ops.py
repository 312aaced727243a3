# RUN: %PYTHON %s | FileCheck %s
# fx graph JSON -> torch dialect (torch-mlir's FxImporter), one graph per op kind.
from fx_graphs import graph, inp, node, run

run("relu$basic", graph([[4, 8]], [("aten.relu.default", [inp(0)], [4, 8])], [node(0)]))
# CHECK-LABEL: TEST: relu$basic
# CHECK: func.func @main(%[[X:.*]]: !torch.vtensor<[4,8],f32>) -> !torch.vtensor<[4,8],f32>
# CHECK: %[[R:.*]] = torch.aten.relu %[[X]] : !torch.vtensor<[4,8],f32> -> !torch.vtensor<[4,8],f32>
# CHECK: return %[[R]]

run("add$broadcast", graph([[4, 8], [8]], [("aten.add.Tensor", [inp(0), inp(1)], [4, 8])], [node(0)]))
# CHECK-LABEL: TEST: add$broadcast
# CHECK: func.func @main(%[[A:.*]]: !torch.vtensor<[4,8],f32>, %[[B:.*]]: !torch.vtensor<[8],f32>)
# CHECK: %[[ONE:.*]] = torch.constant.int 1
# CHECK: torch.aten.add.Tensor %[[A]], %[[B]], %[[ONE]] : {{.*}} -> !torch.vtensor<[4,8],f32>

run("sum$dim", graph([[4, 8]], [("aten.sum.dim_IntList", [inp(0), [1], False], [4])], [node(0)]))
# CHECK-LABEL: TEST: sum$dim
# CHECK: func.func @main(%[[X:.*]]: !torch.vtensor<[4,8],f32>) -> !torch.vtensor<[4],f32>
# CHECK: %[[DIMS:.*]] = torch.prim.ListConstruct
# CHECK: torch.aten.sum.dim_IntList %[[X]], %[[DIMS]], %{{.*}}, %{{.*}} : {{.*}} -> !torch.vtensor<[4],f32>

run("mm$basic", graph([[4, 8], [8, 16]], [("aten.mm.default", [inp(0), inp(1)], [4, 16])], [node(0)]))
# CHECK-LABEL: TEST: mm$basic
# CHECK: func.func @main(%[[A:.*]]: !torch.vtensor<[4,8],f32>, %[[B:.*]]: !torch.vtensor<[8,16],f32>)
# CHECK: torch.aten.mm %[[A]], %[[B]] : !torch.vtensor<[4,8],f32>, !torch.vtensor<[8,16],f32> -> !torch.vtensor<[4,16],f32>
