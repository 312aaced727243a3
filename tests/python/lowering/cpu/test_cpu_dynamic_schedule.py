"""The cpu schedule of ops with `?` sizes (lowering/cpu/dynamic.py), at the level of the
transform script: which ops it plans, the run-time parallel test, and the retry without it."""

from __future__ import annotations

from mlir import ir

from lazymlir.lowering.cpu import dynamic, schedule
from lazymlir.lowering.mlir_runner import UPSTREAM, walk

_MODULE = """
module {
  func.func @main(%a: memref<?x64xf32>, %b: memref<64x128xf32>, %c: memref<?x128xf32>,
                  %d: memref<32x64xf32>, %e: memref<32x128xf32>) {
    linalg.matmul ins(%a, %b : memref<?x64xf32>, memref<64x128xf32>) outs(%c : memref<?x128xf32>)
    linalg.matmul ins(%d, %b : memref<32x64xf32>, memref<64x128xf32>) outs(%e : memref<32x128xf32>)
    return
  }
}
"""


def _planned(dynamic_sizes: bool) -> tuple[str | None, list]:
    context = UPSTREAM.context()
    with context:
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(_MODULE)
        scripts = schedule.build_script(module, dynamic_sizes=dynamic_sizes)
        script = None if scripts is None else "\n".join(scripts)
        tagged = [op for op in walk(module.operation) if schedule.TAG in op.attributes]
        # (op, the op holding it, whether it is a copy under a parallel test)
        return script, [(op.name, op.parent.name, dynamic.PARALLEL_CHOICE in op.attributes)
                        for op in tagged]


def test_a_dynamic_matmul_is_planned_twice_under_a_run_time_test_of_its_work():
    script, tagged = _planned(dynamic_sizes=True)
    # the dynamic one: a parallel copy and an in-order copy in the two branches of an
    # scf.if; the static one as before (no test)
    assert tagged == [("linalg.matmul", "scf.if", True), ("linalg.matmul", "scf.if", True),
                      ("linalg.matmul", "func.func", False)]
    assert script.count("transform.loop.peel") == 2  # M's loop of full tiles, per copy
    assert "tile_using_forall" in script


def test_without_the_dynamic_schedule_only_static_ops_are_planned():
    """What the loops stage retries with when the schedule fails on a graph."""
    script, tagged = _planned(dynamic_sizes=False)
    assert tagged == [("linalg.matmul", "func.func", False)]
    assert "transform.loop.peel" not in script
