"""The bottom layer: typed settings, the metrics store and user-facing errors.

Nothing here imports another lazymlir module, so every layer may use it.
"""
