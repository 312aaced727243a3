"""Every exception lazymlir raises to users, in one place.

All derive from `LazyMlirError` (a RuntimeError, so code that catches
PyTorch's RuntimeErrors keeps working). Each class takes its message as the
only positional argument, so an error can be pickled across the compile
worker's pipe and re-raised from a failed tensor unchanged.
"""

from __future__ import annotations


class LazyMlirError(RuntimeError):
    """Base class of lazymlir's user-facing errors."""


class CompileError(LazyMlirError):
    """A graph failed to lower or compile. Names the stage, the op and a reproducer."""

    def __init__(self, message: str, *, stage: str | None = None, target: str | None = None,
                 op: str | None = None, reproducer: str | None = None):
        super().__init__(message)
        self.stage = stage
        self.target = target
        self.op = op
        self.reproducer = reproducer

    @property
    def aten_op(self) -> str | None:
        """The op it failed at as an ATen schema name, without overload
        ("torch.aten._fft_c2c" or "torch.aten.add.Tensor" -> "aten::_fft_c2c", "aten::add")."""
        if not self.op:
            return None
        return self.op.removeprefix("torch.").replace(".", "::", 1).split(".")[0]

    def __reduce__(self):
        return (_rebuild, (type(self), str(self), self.__dict__))


class CompilerCrashError(CompileError):
    """The native compiler (torch-mlir / MLIR / LLVM) crashed on a graph.

    The crash happened in the compile worker process; the user's process is
    unaffected and the worker is restarted for the next compile. `timed_out`: the
    compile was abandoned at LAZYMLIR_COMPILE_TIMEOUT rather than crashing.
    """

    timed_out: bool = False


class ExecutionError(LazyMlirError):
    """A compiled graph failed while running (runtime or driver error)."""


class UnsupportedOperationError(LazyMlirError):
    """An operation lazy_mlir tensors cannot support (resize_, set_: a lazy value has
    no storage to resize or rebind)."""


def _rebuild(cls, message, state):
    error = cls.__new__(cls)
    LazyMlirError.__init__(error, message)
    error.__dict__.update(state)
    return error
