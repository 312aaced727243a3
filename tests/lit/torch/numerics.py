# RUN: %PYTHON %s | FileCheck %s
# fx graph JSON -> torch dialect with lowering/numerics.py's rewrites, one graph per rule.
import json

from lazymlir.lowering.mlir_runner import print_module
from lazymlir.lowering.torch_stages import import_fx


def run(name, inputs, op, args, out, kwargs=None):
    """One node `op(*args)`; inputs and out are (shape, dtype) pairs."""
    text = json.dumps({
        "format": "lazymlir-fx", "version": 2,
        "inputs": [{"shape": s, "dtype": d} for s, d in inputs], "scalars": [],
        "nodes": [{"op": op, "args": args, "kwargs": kwargs or {},
                   "outputs": [{"shape": out[0], "dtype": out[1]}]}],
        "outputs": [{"ref": ["node", 0, 0]}]})
    print(f"TEST: {name}")
    print(print_module(import_fx(text)))


def inp(i):
    return {"ref": ["input", i, 0]}


run("sum$float16", [([5000], "float16")], "aten.sum.dim_IntList", [inp(0), []], ([], "float16"))
# CHECK-LABEL: TEST: sum$float16
# CHECK: %[[W:.*]] = torch.aten._to_copy %arg0, {{.*}} -> !torch.vtensor<[5000],f32>
# CHECK: %[[S:.*]] = torch.aten.sum.dim_IntList %[[W]], {{.*}} -> !torch.vtensor<[],f32>
# CHECK: %[[R:.*]] = torch.aten._to_copy %[[S]], {{.*}} -> !torch.vtensor<[],f16>
# CHECK: return %[[R]]

run("sum$uint8", [([3], "uint8")], "aten.sum.dim_IntList", [inp(0), []], ([], "int64"))
# CHECK-LABEL: TEST: sum$uint8
# CHECK: %[[W:.*]] = torch.aten._to_copy %arg0, {{.*}} -> !torch.vtensor<[3],si16>
# CHECK: torch.aten.sum.dim_IntList %[[W]], {{.*}} -> !torch.vtensor<[],si64>

run("mul$int8_number", [([3], "int8")], "aten.mul.Tensor", [inp(0), 3], ([3], "int8"))
# CHECK-LABEL: TEST: mul$int8_number
# CHECK: %[[W:.*]] = torch.aten._to_copy %arg0, {{.*}} -> !torch.vtensor<[3],si16>
# CHECK: %[[M:.*]] = torch.aten.mul.Scalar %[[W]], {{.*}} -> !torch.vtensor<[3],si16>
# CHECK: torch.aten._to_copy %[[M]], {{.*}} -> !torch.vtensor<[3],si8>

# 20483 = 20 blocks of 1024 + a tail of 3.
run("sum$blocked", [([20483], "float32")], "aten.sum.dim_IntList", [inp(0), []], ([], "float32"))
# CHECK-LABEL: TEST: sum$blocked
# CHECK: %[[MAIN:.*]] = torch.aten.slice.Tensor %arg0, {{.*}} -> !torch.vtensor<[20480],f32>
# CHECK: %[[B:.*]] = torch.aten.view %[[MAIN]], {{.*}} -> !torch.vtensor<[20,1024],f32>
# CHECK: %[[P:.*]] = torch.aten.sum.dim_IntList %[[B]], {{.*}} -> !torch.vtensor<[20],f32>
# CHECK: %[[S:.*]] = torch.aten.sum.dim_IntList %[[P]], {{.*}} -> !torch.vtensor<[],f32>
# CHECK: %[[T:.*]] = torch.aten.slice.Tensor %arg0, {{.*}} -> !torch.vtensor<[3],f32>
# CHECK: %[[TS:.*]] = torch.aten.sum.dim_IntList %[[T]], {{.*}} -> !torch.vtensor<[],f32>
# CHECK: %[[R:.*]] = torch.aten.add.Tensor %[[S]], %[[TS]]
# CHECK: return %[[R]]

run("maximum$nan", [([4], "float32"), ([4], "float32")], "aten.maximum.default",
    [inp(0), inp(1)], ([4], "float32"))
# CHECK-LABEL: TEST: maximum$nan
# CHECK: %[[M:.*]] = torch.aten.maximum %arg0, %arg1
# CHECK: %[[NA:.*]] = torch.aten.isnan %arg0
# CHECK: %[[NB:.*]] = torch.aten.isnan %arg1
# CHECK: %[[N:.*]] = torch.aten.logical_or %[[NA]], %[[NB]]
# CHECK: %[[S:.*]] = torch.aten.add.Tensor %arg0, %arg1
# CHECK: %[[R:.*]] = torch.aten.where.self %[[N]], %[[S]], %[[M]]
# CHECK: return %[[R]]

run("argmax$nan", [([2, 4], "float32")], "aten.argmax.default", [inp(0), 1], ([2], "int64"))
# CHECK-LABEL: TEST: argmax$nan
# CHECK: %[[A:.*]] = torch.aten.argmax %arg0
# CHECK: %[[N:.*]] = torch.aten.isnan %arg0
# CHECK: %[[I:.*]] = torch.aten._to_copy %[[N]], {{.*}} -> !torch.vtensor<[2,4],si32>
# CHECK: %[[F:.*]] = torch.aten.argmax %[[I]]
# CHECK: %[[H:.*]] = torch.aten.any.dim %[[N]]
# CHECK: %[[R:.*]] = torch.aten.where.self %[[H]], %[[F]], %[[A]]
# CHECK: return %[[R]]

run("sum$blocked_all_dims", [([3, 8192], "float32")], "aten.sum.dim_IntList", [inp(0), []],
    ([], "float32"))
# CHECK-LABEL: TEST: sum$blocked_all_dims
# CHECK: %[[V:.*]] = torch.aten.view %arg0, {{.*}} -> !torch.vtensor<[24576],f32>
# CHECK: %[[B:.*]] = torch.aten.view %[[V]], {{.*}} -> !torch.vtensor<[24,1024],f32>
# CHECK: %[[P:.*]] = torch.aten.sum.dim_IntList %[[B]], {{.*}} -> !torch.vtensor<[24],f32>
# CHECK: %[[R:.*]] = torch.aten.sum.dim_IntList %[[P]], {{.*}} -> !torch.vtensor<[],f32>
# CHECK: return %[[R]]
