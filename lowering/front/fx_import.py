"""The `torch` stage: an fx graph (JSON, fx_graph.py) -> torch dialect, through torch-mlir's
FxImporter, after the graph rewrites that make eager's semantics importable.

The one front stage that needs torch: the stage registry imports this module on the first
FX import, so `lazymlir-opt` on MLIR text never pays torch's import (~2 s per process).
"""

from __future__ import annotations

import torch

from . import (as_strided, complex_ops, empty_results, fx_graph, late_decompositions,
               negative_dims, number_operands, numerics, symbolic)
from ..bufferize import graph_inputs
from ..mlir_runner import TORCH_MLIR, print_module, run_pipeline


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
    # Ops the lazy device records whole, decomposed as its tracer would have
    # (late_decompositions.py), before any rewrite looks at their pieces.
    gm = late_decompositions.apply(gm)
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
