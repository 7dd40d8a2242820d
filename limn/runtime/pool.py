"""The buffer pool: a compiled device's intermediates, kept for the next plan that needs them.

A plan's intermediates live only inside one run: each is made just before the kernel that
writes it and dies after the last kernel that reads it. A training step runs the same plan
every time, and a fresh ``np.empty`` of a large buffer is a fresh mapping from the kernel
whose pages fault in (and are zeroed) on first touch, every step. The pool keeps the
arrays that died inside a run, by shape and dtype, and hands them to the next kernel that
wants one: later in the same run, in the next run of the plan, or in another plan of the
same device.

What may enter is only an array no one else can reach: an intermediate at its death,
which no Tensor holds (the sinks that become Tensors never die inside a run) and which
the plan gave to no one but its kernels. An array taken out is the taker's alone until it
is given back, so a buffer a user holds is never handed out again. Every kernel writes all
of its output, so an array's old contents never show: results are the same bits as with
fresh memory.

The pool is bounded: at most ``limit`` bytes are held; giving past it drops the arrays
that were given back longest ago (their memory goes back to the allocator). Arrays
smaller than ``smallest`` bytes are not pooled: the allocator serves those from memory
it already holds, faster than a lookup here. ``LIMN_POOL_MB`` sets the limit (0 turns
the pool off). ``stats()`` says what it holds and how often it served. A pool made with
``poison=True`` fills every array given back with 0xFF bytes (NaN, or -1), so a test can
show that no kernel reads what it did not write.
"""

from __future__ import annotations

import threading

import numpy as np

from limn.runtime.device import env_number

DEFAULT_LIMIT_MB = 512
SMALLEST = 1 << 14  # bytes: below this the allocator is faster than the pool


def limit_from_env() -> int:
    mib = env_number("LIMN_POOL_MB", DEFAULT_LIMIT_MB, "MiB the pool may hold (0: off)", float)
    return int(mib * (1 << 20))


class BufferPool:
    """Free arrays by (shape, dtype), at most ``limit`` bytes of them (module docstring)."""

    def __init__(self, limit: int | None = None, smallest: int = SMALLEST, poison: bool = False):
        self.limit = limit_from_env() if limit is None else limit
        self.smallest = smallest
        self.poison = poison
        # (shape, dtype) -> free arrays; dict order is the order keys were last given to,
        # so the front holds what has waited longest
        self._free: dict[tuple, list[np.ndarray]] = {}
        self._lock = threading.Lock()  # plans may run on several threads at once
        self.held = 0  # bytes in the pool now
        self.hits = 0  # arrays handed out again
        self.misses = 0  # pooled-size arrays that had to be made
        self.dropped = 0  # arrays let go to stay within the limit

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """An array of ``shape`` and ``dtype`` with unspecified contents: a pooled one if
        there is one, else a new one."""
        key = (shape, dtype)
        with self._lock:
            free = self._free.get(key)
            if free:
                a = free.pop()
                if not free:  # no empty list stays behind for ``give`` to evict from
                    del self._free[key]
                self.held -= a.nbytes
                self.hits += 1
                return a
        a = np.empty(shape, dtype)
        if a.nbytes >= self.smallest:
            self.misses += 1
        return a

    def give(self, a: np.ndarray) -> None:
        """Take back ``a``, which no one else references any more (a dead intermediate)."""
        n = a.nbytes
        if n < self.smallest or n > self.limit:
            return
        key = (a.shape, a.dtype)
        if self.poison:
            a.reshape(-1).view(np.uint8).fill(0xFF)
        with self._lock:
            free = self._free.pop(key, None) or []
            free.append(a)
            self._free[key] = free  # re-inserted: now the most recently given key
            self.held += n
            while self.held > self.limit:
                oldest = next(iter(self._free))
                stale = self._free[oldest]
                self.held -= stale.pop(0).nbytes
                self.dropped += 1
                if not stale:
                    del self._free[oldest]

    def clear(self) -> None:
        """Let every pooled array go."""
        with self._lock:
            self._free.clear()
            self.held = 0

    def stats(self) -> dict:
        """``held`` bytes (in ``arrays``), ``limit``, and counts of ``hits`` (arrays served
        again), ``misses`` (made new) and ``dropped`` (let go over the limit)."""
        with self._lock:
            arrays = sum(len(v) for v in self._free.values())
            return {
                "held": self.held,
                "arrays": arrays,
                "limit": self.limit,
                "hits": self.hits,
                "misses": self.misses,
                "dropped": self.dropped,
            }
