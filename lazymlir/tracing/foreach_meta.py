"""Fast Meta kernels for in-place `_foreach_` ops: the shape check functionalization runs.

Before PyTorch's functionalization turns an in-place op into its functional form,
it runs the in-place op on meta copies of the arguments, to raise the errors the
in-place form has and the functional one has not (an `out` shape that broadcasting
would grow, a result dtype that cannot be cast back). In-place `_foreach_` ops have
no Meta kernel of their own: their composite kernel runs the in-place op once per
element, and each element's meta kernel is a Python reference implementation
(`torch._meta_registrations`: type promotion, broadcasting, stride computation),
~100-150 us per element. An AdamW step on a small GPT runs ~10 such ops over ~30
parameters each: the check was the largest single cost of tracing the step.

The kernels (C++: native_entry.cpp's `foreach_meta`) answer the common case at once and
leave every other case to the composite kernel unchanged: when every tensor argument of
an element has its `self`'s shape and (real floating) dtype, all scalars are real
numbers and no size is symbolic, the in-place op cannot fail any of those checks (no
broadcast, no promotion beyond `self`'s dtype), so there is nothing to run on meta
tensors. A single tensor argument (the `.Tensor` overloads' scalar tensor) always takes
the composite path. (They were Python kernels until 2026-11-28: ~1 us an element.)
"""

from __future__ import annotations

from . import native

# The in-place foreach overloads given the fast kernel: those optimizers use (any
# overload name listed here that this PyTorch lacks is skipped).
OPS = (
    "_foreach_add_.List", "_foreach_add_.Scalar", "_foreach_add_.ScalarList",
    "_foreach_sub_.List", "_foreach_sub_.Scalar", "_foreach_sub_.ScalarList",
    "_foreach_mul_.List", "_foreach_mul_.Scalar", "_foreach_mul_.ScalarList",
    "_foreach_div_.List", "_foreach_div_.Scalar", "_foreach_div_.ScalarList",
    "_foreach_addcmul_.Scalar", "_foreach_addcmul_.ScalarList",
    "_foreach_addcdiv_.Scalar", "_foreach_addcdiv_.ScalarList",
    "_foreach_lerp_.List", "_foreach_lerp_.Scalar", "_foreach_lerp_.ScalarList",
    "_foreach_maximum_.List", "_foreach_maximum_.Scalar", "_foreach_maximum_.ScalarList",
    "_foreach_minimum_.List", "_foreach_minimum_.Scalar", "_foreach_minimum_.ScalarList",
    "_foreach_clamp_max_.List", "_foreach_clamp_max_.Scalar", "_foreach_clamp_max_.ScalarList",
    "_foreach_clamp_min_.List", "_foreach_clamp_min_.Scalar", "_foreach_clamp_min_.ScalarList",
    "_foreach_pow_.List", "_foreach_pow_.Scalar", "_foreach_pow_.ScalarList",
    "_foreach_copy_.default", "_foreach_zero_.default", "_foreach_sqrt_.default",
    "_foreach_neg_.default", "_foreach_reciprocal_.default", "_foreach_sign_.default",
    "_foreach_exp_.default", "_foreach_log_.default", "_foreach_abs_.default",
)

_installed = False


def install() -> None:
    """Register the Meta kernels (once per process). An op that already has a Meta
    kernel of its own (a later PyTorch) keeps it."""
    global _installed
    if not _installed:
        native.load().install_foreach_meta([f"aten::{name}" for name in OPS])
        _installed = True


def uninstall() -> None:
    """Unregister the kernels (benchmarks compare with PyTorch's own path)."""
    global _installed
    native.load().uninstall_foreach_meta()
    _installed = False


def counts() -> tuple[int, int]:
    """(calls the kernels found trivially valid, calls they gave the composite kernel)."""
    return native.load().foreach_meta_stats()
