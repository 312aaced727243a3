"""Stages run with torch-mlir: `torch` (FX import), `torch-backend`, `linalg`.

These stages use torch-mlir's own MLIR build (`torch_mlir.ir`), which has the
torch dialect but no NVPTX target; the handoff to the upstream bindings is
textual, which was verified to round-trip.
"""

from __future__ import annotations

import torch

from . import (as_strided, complex_ops, empty_results, fx_graph, negative_dims,
               number_operands, numerics, symbolic, tmtensor, unused_results)
from ..bufferize import graph_inputs
from ..mlir_runner import TORCH_MLIR, print_module, run_pipeline

TORCH_BACKEND_PIPELINE = (
    "builtin.module("
    # Quantized custom ops are matched first, as torch-mlir's own FX path does
    # (a no-op without them).
    "func.func(torch-match-quantized-custom-ops),"
    # torch-mlir's pipeline for FX-imported programs: reach the backend
    # contract (value semantics, known dtypes/shapes, complex ops decomposed).
    "torchdynamo-export-to-torch-backend-pipeline{ extra-library=})"
)

LINALG_PIPELINE = (
    "builtin.module("
    # Backend contract -> linalg-on-tensors with arith/math/tensor. Non-finite
    # constants (-inf seeds of max reductions, masks) are legal in our graphs.
    "torch-backend-to-linalg-on-tensors-backend-pipeline{allow-non-finites=true})"
)


def import_fx(fx_text: str):
    """fx stage (JSON) -> torch dialect module, through torch-mlir's FxImporter."""
    from torch_mlir.extras import fx_importer
    from torch_mlir.extras.fx_importer import FxImporter

    # torch-mlir's dtype-literal table has no complex128 (`.cdouble()`, `.to(complex128)`
    # raised KeyError); 10 is c10's ComplexDouble.
    fx_importer.TORCH_DTYPE_TO_INT.setdefault(torch.complex128, 10)

    # Eager's numerics (accumulation types, NaN rules, blocked sums): numerics.py.
    graph = fx_graph.loads(fx_text)
    gm = fx_graph.to_graph_module(graph)
    if symbolic.is_dynamic(graph):  # views between symbolic shapes (symbolic.py)
        gm = symbolic.reshape_through_flat(gm)
    gm = numerics.apply(gm)
    negative_dims.normalize(gm)  # scatter(-1, ...) crashed torch-mlir (negative_dims.py)
    number_operands.rewrite(gm)  # sub(2, t) does not import (number_operands.py)
    # Complex arithmetic torch-mlir cannot lower, on real pairs (complex_ops.py).
    gm = complex_ops.apply(gm)
    # as_strided as a gather by computed indices, not constant ones (as_strided.py).
    gm = as_strided.as_gathers(gm)
    empty_results.replace_empty_results(gm)  # zero-element results: no computation
    importer = FxImporter(context=TORCH_MLIR.context())
    importer.import_stateless_graph(gm.graph, func_name="main")
    pairs = fx_graph.in_place_pairs(graph)
    if pairs:  # for bufferization (lowering/bufferize/graph_inputs.py)
        _mark_in_place(importer.module, pairs)
    # Re-parse so the caller gets a module with the usual text form.
    return run_pipeline(TORCH_MLIR, print_module(importer.module), None)


def _mark_in_place(module, pairs: list[tuple[int, int]]) -> None:
    ir = TORCH_MLIR.ir
    with module.context:
        i64 = ir.IntegerType.get_signless(64)
        value = ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(i64, i) for i in pair])
                                  for pair in pairs])
        for func in module.body.operations:
            if func.operation.name == "func.func" and \
                    ir.StringAttr(func.operation.attributes["sym_name"]).value == "main":
                func.operation.attributes[graph_inputs.IN_PLACE] = value


def to_torch_backend(text: str):
    return run_pipeline(TORCH_MLIR, text, TORCH_BACKEND_PIPELINE)


def to_linalg(text: str):
    module = run_pipeline(TORCH_MLIR, text, LINALG_PIPELINE)
    # The argmax half of every decomposed amax (softmax): unused, and it kept the
    # reduction a scalar loop on one thread (unused_results.py).
    with module.context:
        unused_results.drop_unused_results(module, TORCH_MLIR.ir)
    # TMTensor ops (scatter, scan, sort...) that only this build knows become
    # scf loops over buffers before the handoff (tmtensor.py).
    return tmtensor.to_loops(module)
