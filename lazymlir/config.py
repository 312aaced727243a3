"""Public view of the settings: `lazymlir.config.settings()` and `reload()`.

Every LAZYMLIR_* variable is declared once, typed, in support/settings.py.
"""

from __future__ import annotations

from . import session
from .support.settings import Settings, from_env


def settings() -> Settings:
    """The current session's settings (fields may be changed at run time)."""
    return session.current().settings


def reload() -> Settings:
    """Re-read the environment into the current session."""
    session.current().settings = from_env()
    return session.current().settings


__all__ = ["Settings", "settings", "reload"]
