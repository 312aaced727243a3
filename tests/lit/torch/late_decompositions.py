# RUN: %PYTHON %s | FileCheck %s
# fx graph JSON -> torch dialect: ops the lazy device records whole (AdamW's element ops,
# a transformer's backward ops and loss, ones_like/zeros_like), decomposed by the torch stage as the tracer's
# decompositions would have (lowering/front/late_decompositions.py). A lifted float (a
# scalar input) stays one.
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


# A transformer's backward ops and loss: static lists (normalized_shape, output_mask)
# keyed by value, several results read by index, a masked-off result asked for anyway.
def run_graph(name, inputs, nodes, outputs, scalars=0):
    """`inputs`: (shape, dtype) pairs; `nodes`: (op, args, kwargs, outputs as (shape,
    dtype) pairs or None); `outputs`: refs."""
    text = json.dumps({
        "format": "lazymlir-fx", "version": 2,
        "inputs": [{"shape": s, "dtype": d} for s, d in inputs],
        "scalars": [{"dtype": "float64"}] * scalars,
        "nodes": [{"op": op, "args": args, "kwargs": kwargs,
                   "outputs": [o and {"shape": o[0], "dtype": o[1]} for o in outs]}
                  for op, args, kwargs, outs in nodes],
        "outputs": outputs})
    print(f"TEST: {name}")
    print(print_module(import_fx(text)))


def out(node, k=0):
    return {"ref": ["node", node, k]}


F32, F16, I64 = "float32", "float16", "int64"
X = ([2, 3, 8], F32)
STATS = ([2, 3, 1], F32)

run_graph("layer_norm_backward$all", [X, X, STATS, STATS, ([8], F32), ([8], F32)],
          [("aten.native_layer_norm_backward.default",
            [inp(0), inp(1), [8], inp(2), inp(3), inp(4), inp(5), [True, True, True]], {},
            [X, ([8], F32), ([8], F32)])],
          [out(0, 0), out(0, 1), out(0, 2)])
# CHECK-LABEL: TEST: layer_norm_backward$all
# CHECK-NOT: native_layer_norm_backward
# CHECK: torch.aten.mul.Scalar {{.*}}, %int8
# CHECK: torch.aten.sum.dim_IntList
# CHECK: return {{.*}} : !torch.vtensor<[2,3,8],f32>, !torch.vtensor<[8],f32>, !torch.vtensor<[8],f32>

run_graph("layer_norm_backward$input_only", [X, X, STATS, STATS],
          [("aten.native_layer_norm_backward.default",
            [inp(0), inp(1), [8], inp(2), inp(3), None, None, [True, False, False]], {},
            [X, None, None])],
          [out(0, 0)])
# CHECK-LABEL: TEST: layer_norm_backward$input_only
# CHECK-NOT: native_layer_norm_backward
# CHECK: return {{.*}} : !torch.vtensor<[2,3,8],f32>

run_graph("gelu_backward$tanh", [X, X],
          [("aten.gelu_backward.default", [inp(0), inp(1)], {"approximate": "tanh"}, [X])],
          [out(0)])
# CHECK-LABEL: TEST: gelu_backward$tanh
# CHECK-NOT: gelu_backward
# CHECK: torch.aten.tanh
# CHECK: return

run_graph("softmax_backward$float16", [([6, 9], F16), ([6, 9], F16)],
          [("aten._softmax_backward_data.default", [inp(0), inp(1), -1, {"dtype": F16}], {},
            [([6, 9], F16)])],
          [out(0)])
# CHECK-LABEL: TEST: softmax_backward$float16
# CHECK-NOT: _softmax_backward_data
# CHECK: torch.aten.sum.dim_IntList
# CHECK: return {{.*}} : !torch.vtensor<[6,9],f16>

run_graph("embedding_dense_backward$padding_idx", [([2, 4, 8], F32), ([2, 4], I64)],
          [("aten.embedding_dense_backward.default", [inp(0), inp(1), 9, 2, False], {},
            [([9, 8], F32)])],
          [out(0)])
# CHECK-LABEL: TEST: embedding_dense_backward$padding_idx
# CHECK-NOT: embedding_dense_backward
# CHECK: torch.aten.ne.Scalar %arg1, %int2
# CHECK: torch.aten.index_put {{.*}}, %true
# CHECK: return {{.*}} : !torch.vtensor<[9,8],f32>

run_graph("masked_fill$lifted_value", [X, ([3, 8], "bool")],
          [("aten.masked_fill.Scalar", [inp(0), inp(1), SCALAR], {}, [X])], [out(0)],
          scalars=1)
# CHECK-LABEL: TEST: masked_fill$lifted_value
# CHECK-NOT: torch.aten.masked_fill
# CHECK: %[[V:.*]] = torch.aten.item %arg2
# CHECK: %[[S:.*]] = torch.aten.scalar_tensor %[[V]]{{.*}} -> !torch.vtensor<[],f32>
# CHECK: torch.aten.where.self %{{.*}}, %[[S]], %arg0
# CHECK: return

run_graph("masked_fill$int_tensor", [([3, 8], "int32"), ([3, 8], "bool")],
          [("aten.masked_fill.Scalar", [inp(0), inp(1), SCALAR], {}, [([3, 8], "int32")])],
          [out(0)], scalars=1)
# CHECK-LABEL: TEST: masked_fill$int_tensor
# CHECK-NOT: torch.aten.masked_fill
# CHECK: %[[V:.*]] = torch.aten.item %arg2
# CHECK: %[[S:.*]] = torch.aten.scalar_tensor %[[V]]{{.*}} -> !torch.vtensor<[],f64>
# CHECK: %[[I:.*]] = torch.aten._to_copy %[[S]]{{.*}} -> !torch.vtensor<[],si32>
# CHECK: torch.aten.where.self %{{.*}}, %[[I]], %arg0
# CHECK: return

run_graph("nll_loss$mean", [([6, 9], F32), ([6], I64)],
          [("aten.nll_loss_forward.default", [inp(0), inp(1), None, 1, -100], {},
            [([], F32), ([], F32)]),
           ("aten.nll_loss_backward.default",
            [out(0, 0), inp(0), inp(1), None, 1, -100, out(0, 1)], {}, [([6, 9], F32)])],
          [out(0, 0), out(1)])
# CHECK-LABEL: TEST: nll_loss$mean
# CHECK-NOT: nll_loss
# CHECK: torch.aten.gather
# CHECK: torch.aten.div.Tensor
# CHECK: torch.aten.scatter
# CHECK: return {{.*}} : !torch.vtensor<[],f32>, !torch.vtensor<[6,9],f32>

run("ones_like$contiguous", "float32", "aten.ones_like.default", [inp(0)],
    {"memory_format": {"memory_format": "contiguous_format"}}, tensors=1)
# CHECK-LABEL: TEST: ones_like$contiguous
# CHECK-NOT: torch.aten.ones_like
# CHECK: torch.aten.full_like %arg0
# CHECK: return

run("zeros_like", "bfloat16", "aten.zeros_like.default", [inp(0)], {"pin_memory": False},
    tensors=1)
# CHECK-LABEL: TEST: zeros_like
# CHECK-NOT: torch.aten.zeros_like
# CHECK: torch.aten.full_like %arg0
# CHECK: return

run_graph("stack", [([], F32), ([], F32)],
          [("aten.stack.default", [[inp(0), inp(1), inp(0)]], {}, [([3], F32)])], [out(0)])
# CHECK-LABEL: TEST: stack
# CHECK-NOT: torch.aten.stack
# CHECK: torch.prim.ListConstruct %{{.*}}, %{{.*}}, %{{.*}}
# CHECK: torch.aten.cat
# CHECK: return {{.*}} : !torch.vtensor<[3],f32>
