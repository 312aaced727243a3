# RUN: %PYTHON %s | FileCheck %s
# fx graph JSON -> torch dialect with lowering/front/numerics.py's rewrites, one graph per rule.
import json

from lazymlir.lowering.mlir_runner import print_module
from lazymlir.lowering.front.fx_import import import_fx

from fx_graphs import inp


def run(name, inputs, op, args, out, kwargs=None):
    """One node `op(*args)`; inputs and out are (shape, dtype) pairs (out: or a list
    of them, for an op with several results)."""
    outs = out if isinstance(out, list) else [out]
    text = json.dumps({
        "format": "lazymlir-fx", "version": 2,
        "inputs": [{"shape": s, "dtype": d} for s, d in inputs], "scalars": [],
        "nodes": [{"op": op, "args": args, "kwargs": kwargs or {},
                   "outputs": [{"shape": s, "dtype": d} for s, d in outs]}],
        "outputs": [{"ref": ["node", 0, i]} for i in range(len(outs))]})
    print(f"TEST: {name}")
    print(print_module(import_fx(text)))


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

run("logcumsumexp$triangle", [([2, 3], "float32")], "aten.logcumsumexp.default", [inp(0), 1],
    ([2, 3], "float32"))
# CHECK-LABEL: TEST: logcumsumexp$triangle
# CHECK: %[[R:.*]] = torch.aten.expand {{.*}} -> !torch.vtensor<[2,3,3],f32>
# CHECK: %[[A:.*]] = torch.aten.arange
# CHECK: %[[L:.*]] = torch.aten.gt.Tensor {{.*}} -> !torch.vtensor<[3,3],i1>
# CHECK: %[[M:.*]] = torch.aten.masked_fill.Scalar %[[R]], %[[L]]
# CHECK: %[[H:.*]] = torch.aten.amax %[[M]]
# CHECK: torch.aten.isinf %[[H]]
# CHECK: torch.aten.exp
# CHECK: torch.aten.sum.dim_IntList {{.*}} -> !torch.vtensor<[2,3],f32>
# CHECK: torch.aten.log
# CHECK-NOT: torch.aten.logcumsumexp
# CHECK: return

run("logcumsumexp$blocks", [([300], "float16")], "aten.logcumsumexp.default", [inp(0), 0],
    ([300], "float16"))
# CHECK-LABEL: TEST: logcumsumexp$blocks
# CHECK: torch.aten._to_copy %arg0, {{.*}} -> !torch.vtensor<[300],f32>
# CHECK: torch.aten.constant_pad_nd {{.*}} -> !torch.vtensor<[384],f32>
# CHECK: torch.aten.view {{.*}} -> !torch.vtensor<[3,128],f32>
# CHECK: torch.aten.expand {{.*}} -> !torch.vtensor<[3,128,128],f32>
# CHECK: torch.aten.select.int {{.*}} -> !torch.vtensor<[3],f32>
# CHECK: torch.aten.expand {{.*}} -> !torch.vtensor<[3,3],f32>
# CHECK: torch.aten.log1p
# CHECK: torch.aten.slice.Tensor {{.*}} -> !torch.vtensor<[300],f32>
# CHECK-NOT: torch.aten.logcumsumexp
# CHECK: torch.aten._to_copy {{.*}} -> !torch.vtensor<[300],f16>
# CHECK: return

run("layer_norm$float16", [([2, 5], "float16"), ([5], "float16"), ([5], "float16")],
    "aten.native_layer_norm.default", [inp(0), [5], inp(1), inp(2), 1e-5],
    [([2, 5], "float16"), ([2, 1], "float16"), ([2, 1], "float16")])
# CHECK-LABEL: TEST: layer_norm$float16
# CHECK-DAG: %[[X:.*]] = torch.aten._to_copy %arg0, {{.*}} -> !torch.vtensor<[2,5],f32>
# CHECK-DAG: %[[W:.*]] = torch.aten._to_copy %arg1, {{.*}} -> !torch.vtensor<[5],f32>
# CHECK-DAG: %[[B:.*]] = torch.aten._to_copy %arg2, {{.*}} -> !torch.vtensor<[5],f32>
# CHECK: %[[N0:[^,]*]], %[[N1:[^,]*]], %[[N2:[^,]*]] = torch.aten.native_layer_norm %[[X]],
# CHECK-SAME: %[[W]], %[[B]], {{.*}} -> !torch.vtensor<[2,5],f32>, {{.*}}<[2,1],f32>
# CHECK-DAG: torch.aten._to_copy %[[N0]], {{.*}} -> !torch.vtensor<[2,5],f16>
# CHECK-DAG: torch.aten._to_copy %[[N1]], {{.*}} -> !torch.vtensor<[2,1],f16>
# CHECK-DAG: torch.aten._to_copy %[[N2]], {{.*}} -> !torch.vtensor<[2,1],f16>
# CHECK: return

run("scatter_reduce$int_mean", [([4], "int64"), ([3], "int64"), ([3], "int64")],
    "aten.scatter_reduce.two", [inp(0), 0, inp(1), inp(2), "mean"], ([4], "int64"))
# CHECK-LABEL: TEST: scatter_reduce$int_mean
# CHECK: %[[S:.*]] = torch.aten.scatter_reduce.two %arg0, {{.*}}, %arg1, %arg2, %str
# CHECK: %[[C:.*]] = torch.aten.scatter_reduce.two
# CHECK: %[[Z:.*]] = torch.aten.eq.Scalar %[[C]]
# CHECK: %[[C1:.*]] = torch.aten.masked_fill.Scalar %[[C]], %[[Z]]
# CHECK: torch.aten.div.Tensor_mode %[[S]], %[[C1]], %{{.*}} : {{.*}} -> !torch.vtensor<[4],si64>
# CHECK: return

run("var_mean$bfloat16", [([4, 6], "bfloat16")], "aten.var_mean.correction", [inp(0), [1]],
    [([4], "bfloat16"), ([4], "bfloat16")])
# CHECK-LABEL: TEST: var_mean$bfloat16
# CHECK: %[[X:.*]] = torch.aten._to_copy %arg0, {{.*}} -> !torch.vtensor<[4,6],f32>
# CHECK: %[[V:[^,]*]], %[[M:[^,]*]] = torch.aten.var_mean.correction %[[X]]
# CHECK-DAG: torch.aten._to_copy %[[V]], {{.*}} -> !torch.vtensor<[4],bf16>
# CHECK-DAG: torch.aten._to_copy %[[M]], {{.*}} -> !torch.vtensor<[4],bf16>
# CHECK: return

run("reciprocal$int64", [([4], "int64")], "aten.reciprocal.default", [inp(0)], ([4], "float32"))
# CHECK-LABEL: TEST: reciprocal$int64
# CHECK: %[[X:.*]] = torch.aten._to_copy %arg0, {{.*}} -> !torch.vtensor<[4],f32>
# CHECK: %[[ONE:.*]] = torch.aten.full_like %[[X]]
# CHECK: %[[R:.*]] = torch.aten.div.Tensor %[[ONE]], %[[X]]
# CHECK-NOT: torch.aten.reciprocal
# CHECK: return %[[R]]

# numerics_opmath.py: a half tensor times a number is float32 times float(number), rounded
# once (eager's `original_scalar_value`); torch-mlir rounded 1e-3 to bfloat16 first.
run("mul$bfloat16_number", [([8], "bfloat16")], "aten.mul.Tensor", [inp(0), {"float": "0.001"}],
    ([8], "bfloat16"))
# CHECK-LABEL: TEST: mul$bfloat16_number
# CHECK: %[[W:.*]] = torch.aten._to_copy %arg0, {{.*}} -> !torch.vtensor<[8],f32>
# CHECK: %[[M:.*]] = torch.aten.mul.Scalar %[[W]], %{{.*}} : !torch.vtensor<[8],f32>, !torch.float -> !torch.vtensor<[8],f32>
# CHECK: %[[R:.*]] = torch.aten._to_copy %[[M]], {{.*}} -> !torch.vtensor<[8],bf16>
# CHECK: return %[[R]]

# add with alpha: alpha rounded to the dtype (0.3 -> 0.30004883), one rounding of the sum.
run("add$float16_alpha", [([8], "float16"), ([8], "float16")], "aten.add.Tensor",
    [inp(0), inp(1)], ([8], "float16"), {"alpha": {"float": "0.3"}})
# CHECK-LABEL: TEST: add$float16_alpha
# CHECK: %[[X:.*]] = torch.aten._to_copy %arg0, {{.*}} -> !torch.vtensor<[8],f32>
# CHECK: %[[Y:.*]] = torch.aten._to_copy %arg1, {{.*}} -> !torch.vtensor<[8],f32>
# CHECK: %[[P:.*]] = torch.aten.mul.Scalar %[[Y]], %float3.000490e-01
# CHECK: %[[S:.*]] = torch.aten.add.Tensor %[[X]], %[[P]], {{.*}} -> !torch.vtensor<[8],f32>
# CHECK: torch.aten._to_copy %[[S]], {{.*}} -> !torch.vtensor<[8],f16>

# gelu of a half tensor: the whole formula in float32, rounded once.
run("gelu$bfloat16", [([8], "bfloat16")], "aten.gelu.default", [inp(0)], ([8], "bfloat16"))
# CHECK-LABEL: TEST: gelu$bfloat16
# CHECK: %[[W:.*]] = torch.aten._to_copy %arg0, {{.*}} -> !torch.vtensor<[8],f32>
# CHECK: %[[G:.*]] = torch.aten.gelu %[[W]], {{.*}} -> !torch.vtensor<[8],f32>
# CHECK: torch.aten._to_copy %[[G]], {{.*}} -> !torch.vtensor<[8],bf16>

# log_softmax of a half tensor over its last dim: eager keeps the row's sum and its log
# in the half type.
run("log_softmax$bfloat16", [([2, 8], "bfloat16")], "aten._log_softmax.default",
    [inp(0), 1, False], ([2, 8], "bfloat16"))
# CHECK-LABEL: TEST: log_softmax$bfloat16
# CHECK: %[[SUM:.*]] = torch.aten.sum.dim_IntList {{.*}} -> !torch.vtensor<[2,1],f32>
# CHECK: %[[S16:.*]] = torch.aten._to_copy %[[SUM]], {{.*}} -> !torch.vtensor<[2,1],bf16>
# CHECK: %[[S32:.*]] = torch.aten._to_copy %[[S16]], {{.*}} -> !torch.vtensor<[2,1],f32>
# CHECK: %[[LOG:.*]] = torch.aten.log %[[S32]]
# CHECK: torch.aten._to_copy %[[LOG]], {{.*}} -> !torch.vtensor<[2,1],bf16>
# CHECK-NOT: torch.aten._log_softmax

# elu as eager's expm1 formula (torch-mlir's: exp(x) - 1).
run("elu$float32", [([8], "float32")], "aten.elu.default", [inp(0), {"float": "0.5"}],
    ([8], "float32"))
# CHECK-LABEL: TEST: elu$float32
# CHECK: %[[E:.*]] = torch.aten.expm1 %arg0
# CHECK: %[[N:.*]] = torch.aten.mul.Scalar %[[E]], %{{.*}}
# CHECK: %[[C:.*]] = torch.aten.ge.Scalar %arg0
# CHECK: torch.aten.where.self %[[C]], %arg0, %[[N]]
# CHECK-NOT: torch.aten.elu
