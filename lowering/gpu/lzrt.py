"""Loader for the `lzrt` runtime dialect (IRDL) into an upstream `mlir.ir.Context`.

The dialect is the `plan` stage of the CUDA path (see dialects/README.md). Its IRDL
definition lives in `dialects/lzrt.irdl.mlir`, a sibling folder of `lowering/` (two levels
above this file) both in the source tree and in the installed package
(`lazymlir/lowering`, `lazymlir/dialects`), so one path expression finds it in both layouts.
"""

from __future__ import annotations

from pathlib import Path

from mlir import ir
from mlir.dialects import irdl

IRDL_FILE = Path(__file__).resolve().parents[2] / "dialects" / "lzrt.irdl.mlir"

_LOADED_ATTR = "_lazymlir_lzrt_loaded"


def load_lzrt(context: ir.Context) -> None:
    """Register `lzrt` in `context` (idempotent: IRDL refuses a second registration)."""
    if getattr(context, _LOADED_ATTR, False) or _has_lzrt(context):
        return
    if not IRDL_FILE.exists():
        raise FileNotFoundError(f"lzrt dialect definition not found at {IRDL_FILE}")
    with context:
        defs = ir.Module.parse(IRDL_FILE.read_text())
        irdl.load_dialects(defs)
    try:
        setattr(context, _LOADED_ATTR, True)
    except AttributeError:
        pass  # contexts without a __dict__: _has_lzrt covers the next call


def _has_lzrt(context: ir.Context) -> bool:
    try:
        with context:
            ir.Type.parse("!lzrt.buffer")
        return True
    except ir.MLIRError:
        return False
