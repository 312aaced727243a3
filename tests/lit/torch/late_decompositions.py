# RUN: %PYTHON %s | FileCheck %s
# fx graph JSON -> torch dialect: ops the lazy device records whole (AdamW's element ops),
# decomposed by the torch stage as the tracer's decompositions would have
# (lowering/front/late_decompositions.py). A lifted float (a scalar input) stays one.
import json

from lazymlir.lowering.mlir_runner import print_module
from lazymlir.lowering.front.fx_import import import_fx

from fx_graphs import inp


def run(name, dtype, op, args, kwargs=None, tensors=3, scalars=0):
    text = json.dumps({
        "format": "lazymlir-fx", "version": 2,
        "inputs": [{"shape": [4, 3], "dtype": dtype}] * tensors,
        "scalars": [{"dtype": "float64"}] * scalars,
        "nodes": [{"op": op, "args": args, "kwargs": kwargs or {},
                   "outputs": [{"shape": [4, 3], "dtype": dtype}]}],
        "outputs": [{"ref": ["node", 0, 0]}]})
    print(f"TEST: {name}")
    print(print_module(import_fx(text)))


SCALAR = {"ref": ["scalar", 0, 0]}

run("addcmul$lifted_value", "float32", "aten.addcmul.default", [inp(0), inp(1), inp(2)],
    {"value": SCALAR}, scalars=1)
# CHECK-LABEL: TEST: addcmul$lifted_value
# CHECK-NOT: torch.aten.addcmul
# CHECK: %[[V:.*]] = torch.aten.item %arg3
# CHECK: %[[A:.*]] = torch.aten.mul.Scalar %arg1, %[[V]]
# CHECK: %[[B:.*]] = torch.aten.mul.Tensor %[[A]], %arg2
# CHECK: %[[R:.*]] = torch.aten.add.Tensor %arg0, %[[B]]
# CHECK: return %[[R]]

run("addcdiv$float16", "float16", "aten.addcdiv.default", [inp(0), inp(1), inp(2)],
    {"value": SCALAR}, scalars=1)
# CHECK-LABEL: TEST: addcdiv$float16
# CHECK-NOT: torch.aten.addcdiv
# CHECK: torch.aten._to_copy %arg0, {{.*}} -> !torch.vtensor<[4,3],f32>
# CHECK: torch.aten.div.Tensor {{.*}} -> !torch.vtensor<[4,3],f32>
# CHECK: %[[R:.*]] = torch.aten._to_copy {{.*}} -> !torch.vtensor<[4,3],f16>
# CHECK: return %[[R]]

run("lerp$lifted_weight", "float32", "aten.lerp.Scalar", [inp(0), inp(1), SCALAR],
    tensors=2, scalars=1)
# CHECK-LABEL: TEST: lerp$lifted_weight
# CHECK-NOT: torch.aten.lerp
# CHECK: %[[V:.*]] = torch.aten.item %arg2
# CHECK: %[[W:.*]] = torch.aten.full {{.*}}, %[[V]], {{.*}} -> !torch.vtensor<[],f32>
# CHECK: torch.aten.abs %[[W]]
# CHECK: torch.aten.ge.Scalar
# CHECK: torch.aten.where.self
# CHECK: return

run("lerp$tensor_weight", "float64", "aten.lerp.Tensor", [inp(0), inp(1), inp(2)])
# CHECK-LABEL: TEST: lerp$tensor_weight
# CHECK-NOT: torch.aten.lerp
# CHECK: torch.aten.abs %arg2
# CHECK: torch.aten.where.self
# CHECK: return
