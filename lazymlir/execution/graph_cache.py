"""The graph cache in memory: structural hash -> plan, the last
LAZYMLIR_GRAPH_CACHE_SIZE plans (LRU). The persistent cache on disk, which
this one falls back to, is execution/disk_cache.py.
"""

from __future__ import annotations

from collections import OrderedDict


class GraphCache:
    def __init__(self, capacity: int):
        self.capacity = capacity
        self._memory: OrderedDict[str, object] = OrderedDict()

    def get(self, key: str):
        plan = self._memory.get(key)
        if plan is not None:
            self._memory.move_to_end(key)
        return plan

    def put(self, key: str, plan) -> None:
        self._memory[key] = plan
        self._memory.move_to_end(key)
        while len(self._memory) > self.capacity:
            self._memory.popitem(last=False)

    def __contains__(self, key: str) -> bool:
        return key in self._memory

    def __len__(self) -> int:
        return len(self._memory)
