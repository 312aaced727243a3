# RUN: %PYTHON %s | FileCheck %s
# fx graph JSON -> torch dialect (torch-mlir's FxImporter), one graph per op kind.
import json

from lazymlir.lowering.front.stages import import_fx
from lazymlir.lowering.mlir_runner import print_module


def graph(inputs, nodes, outputs):
    return json.dumps({
        "format": "lazymlir-fx", "version": 1,
        "inputs": [{"shape": s, "dtype": "float32"} for s in inputs],
        "nodes": [{"op": op, "args": args, "kwargs": {}, "outputs": [{"shape": o, "dtype": "float32"}]}
                  for op, args, o in nodes],
        "outputs": outputs})


def inp(i):
    return {"ref": ["input", i, 0]}


def node(i):
    return {"ref": ["node", i, 0]}


def run(name, text):
    print(f"TEST: {name}")
    print(print_module(import_fx(text)))


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
