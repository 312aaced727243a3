"""placeholder"""
FALLBACK: dict[str, set[str]] = {}
ERROR: dict[str, set[str]] = {}
CRASH: dict[str, set[str]] = {}
