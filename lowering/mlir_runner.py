"""Parse MLIR text and run a pass pipeline in either MLIR build, keeping diagnostics.

Two MLIR Python bindings live in one process: torch-mlir's (`torch_mlir.ir`,
torch dialect, no NVPTX) and upstream's (`mlir.ir`, NVPTX). Their APIs are the
same, so one helper serves both; stages hand modules over as text.
"""

from __future__ import annotations

import importlib
import io
import os
import sys
from collections.abc import Callable


class PipelineFailure(RuntimeError):
    """The compiler cannot handle this input: a parse or pass failure (with the
    collected diagnostics), or a lowering limitation a stage reports itself.
    Stages turn these (and only these) into LoweringErrors; any other exception
    from lowering code is a bug and propagates as is."""


class Bindings:
    """One of the two MLIR Python packages, imported on first use."""

    def __init__(self, package: str, dialect_setup: Callable | None = None):
        self.package = package
        self.dialect_setup = dialect_setup

    @property
    def ir(self):
        return importlib.import_module(f"{self.package}.ir")

    @property
    def passmanager(self):
        return importlib.import_module(f"{self.package}.passmanager")

    def context(self):
        context = self.ir.Context()
        if self.dialect_setup is not None:
            self.dialect_setup(context)
        return context


def _register_torch_dialect(context) -> None:
    from torch_mlir.dialects import torch as torch_d

    torch_d.register_dialect(context)


TORCH_MLIR = Bindings("torch_mlir", _register_torch_dialect)
UPSTREAM = Bindings("mlir")


def _format_diagnostic(diagnostic) -> str:
    lines = [f"{diagnostic.location}: {diagnostic.message}"]
    lines += [f"  note: {note.location}: {note.message}" for note in diagnostic.notes]
    return "\n".join(lines)


# Verifying after every pass (MLIR's default) names the pass that made invalid IR, and
# costs a walk of the whole module per pass: on a DenseNet-121 training step's `llvm`
# stage (~20 module-wide passes) 5.4 of 14.9 s of CPU, on its `linalg` stage 3.3 of
# 7.5 s. The result is verified either way; a pass that crashes on an earlier pass's
# invalid IR crashes the compile worker, which reports it (docs/architecture.md).
# LAZYMLIR_VERIFY_EACH_PASS=1 turns it back on, to find such a pass.
VERIFY_EACH_PASS = os.environ.get("LAZYMLIR_VERIFY_EACH_PASS", "") == "1"


def run_pipeline(bindings: Bindings, text: str | None, pipeline: str | None,
                 before: Callable | None = None, context=None, module=None,
                 verify_each: bool | None = None):
    """Parse `text` in a fresh context, optionally call `before(module)`, run `pipeline`.
    With `module` (then `text` is None): that module, changed in place, in its context.
    The module is verified once, after the pipeline; `verify_each` (default:
    VERIFY_EACH_PASS): after every pass, MLIR's default.

    Returns the module (its context stays alive through the module). Raises
    PipelineFailure with every diagnostic the parser or the passes emitted.
    """
    context = module.context if module is not None else context or bindings.context()
    diagnostics: list[str] = []

    def on_diagnostic(diagnostic):
        diagnostics.append(_format_diagnostic(diagnostic))
        return True

    handler = context.attach_diagnostic_handler(on_diagnostic)
    # Some passes print to stderr directly; keep it out of the user's terminal.
    saved_stderr, sys.stderr = sys.stderr, io.StringIO()
    try:
        with context:
            if module is None:
                module = bindings.ir.Module.parse(text)
            if before is not None:
                before(module)
            if pipeline:
                manager = bindings.passmanager.PassManager.parse(pipeline)
                each = VERIFY_EACH_PASS if verify_each is None else verify_each
                manager.enable_verifier(each)
                manager.run(module.operation)
                if not each:
                    module.operation.verify()
    except (bindings.ir.MLIRError, ValueError) as error:
        # MLIRError: parse/verify/pass failures; ValueError: a malformed pipeline
        # string. Python bugs in `before` rewrites are not caught here.
        detail = "\n".join(diagnostics)
        raise PipelineFailure(f"{detail}\n{error}".strip()) from None
    finally:
        sys.stderr = saved_stderr
        handler.detach()
    return module


def print_module(module) -> str:
    return module.operation.get_asm(enable_debug_info=False)


def map_results(amap) -> list[str]:
    """The result expressions of an affine map, as text: `(d0, d1) -> (d1, 0)` gives
    ["d1", "0"]; `() -> ()` gives []."""
    return [r.strip() for r in str(amap).split("->")[1].strip(" ()>").split(",") if r.strip()]


def walk(op, skip: Callable | None = None, post_order: bool = False) -> list:
    """`op` and every op nested in it, in pre-order (either binding's Operation), as a
    list: callers may change the IR while they go through it. Ops nested in an op for
    which `skip(op)` is true are left out (that op is in). `post_order`: nested ops
    before the op holding them (MLIR's default order; no `skip` then).

    MLIR's own walk: the same recursion through the bindings' region, block and
    operation views took 40-180 ms on a GPT backward graph's 4315 ops, this 5 ms, and
    the stages walk their modules a dozen times."""
    op = getattr(op, "operation", op)
    binding = sys.modules[type(op).__module__]  # the enums of op's own binding
    advance, skip_children = binding.WalkResult.ADVANCE, binding.WalkResult.SKIP
    found = []

    def visit(nested):
        found.append(nested)
        return skip_children if skip is not None and skip(nested) else advance

    order = binding.WalkOrder.POST_ORDER if post_order else binding.WalkOrder.PRE_ORDER
    op.walk(visit, order)
    return found
