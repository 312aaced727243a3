"""Errors raised by lowering stages.

A failing stage never surfaces as a bare MLIR dump: it becomes a
`LoweringError` naming the stage and, where the diagnostics say so, the op
that failed; the input of the failing stage is written to a file and the
message ends with the one-line `lazymlir-opt` command that reproduces it.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from pathlib import Path

# Diagnostics name ops as 'torch.aten.foo' or "failed to legalize operation 'x.y'".
_OP_PATTERNS = (
    # An op torch-mlir does not know is imported as torch.operator "name".
    re.compile(r'"torch\.operator"\([^)]*\) <\{name = "([\w.$]+)"'),
    re.compile(r"failed to legalize operation '([\w.$]+)'"),
    re.compile(r"op '([\w.$]+)' is not allowed after stage"),
    re.compile(r"unsupported by backend contract: module initializers"),
    re.compile(r"'([a-z_]+\.[\w.]+)' op"),
)


class LoweringError(RuntimeError):
    """A stage failed. Carries the stage, the failing op (if known) and a reproducer."""

    def __init__(self, stage: str, target: str, detail: str, repro_file: str | None,
                 op: str | None = None):
        self.stage = stage
        self.target = target
        self.detail = detail.strip()
        self.repro_file = repro_file
        self.op = op if op is not None else failing_op(detail)
        self.reproducer = (
            f"lazymlir-opt --target={target} --stage={stage} {repro_file}" if repro_file else None
        )
        where = f" at op '{self.op}'" if self.op else ""
        lines = [f"lowering stage '{stage}' failed{where} (target {target}):", self.detail]
        if self.reproducer:
            lines.append(f"reproduce with: {self.reproducer}")
        super().__init__("\n".join(lines))


def failing_op(diagnostics: str) -> str | None:
    """The op a diagnostic blames, e.g. 'torch.aten.nonzero', or None."""
    for pattern in _OP_PATTERNS:
        match = pattern.search(diagnostics)
        if match and match.groups():
            return match.group(1)
    return None


MAX_REPROS = 100  # reproducers kept in the default folder (the oldest go first)


def default_repro_dir() -> Path:
    """Where reproducers go without LAZYMLIR_REPRO_DIR: one folder per user in TMPDIR."""
    return Path(tempfile.gettempdir()) / f"lazymlir-repros-{os.getuid()}"


def _keep_newest(folder: Path, count: int) -> None:
    """Remove all but the `count` newest reproducers: failing compiles that fallback
    absorbs write one each, and nothing else would ever clean them up."""
    try:
        files = [(entry.stat().st_mtime_ns, entry.path) for entry in os.scandir(folder)
                 if entry.name.startswith("lazymlir-repro-")]
    except OSError:
        return
    for _, path in sorted(files)[:-count]:
        try:
            os.unlink(path)
        except OSError:
            pass  # another process removed it first


def save_repro(stage: str, text: str, ext: str, directory: str | None = None) -> str:
    """Write the input of a failing stage into `directory` (default: default_repro_dir(),
    which keeps the newest MAX_REPROS files); returns the path.

    An unwritable `directory` falls back to the default folder, then TMPDIR itself:
    the reproducer must not replace the error it belongs to.
    """
    name = f"lazymlir-repro-{stage}-{os.getpid()}-{time.time_ns()}.{ext}"
    default = default_repro_dir()
    for base in ([Path(directory)] if directory else []) + [default,
                                                            Path(tempfile.gettempdir())]:
        try:
            base.mkdir(mode=0o700, parents=True, exist_ok=True)
            if base == default and base.stat().st_uid != os.getuid():
                continue  # someone else's folder: not a place for this user's programs
            (base / name).write_text(text)
            if base == default:
                _keep_newest(base, MAX_REPROS)
            return str(base / name)
        except OSError:
            continue
    return "<could not save the reproducer: no writable folder>"
