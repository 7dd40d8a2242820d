"""What the C passes may assume of the CPU: one small value, given to every pass and renderer.

Register tiles, vector lanes and cache blocks (``ir/c/tile.py``) are sized from it, so one
set of passes fits an AVX2 laptop, an AVX-512 server, an ARM core with NEON, or a CPU the
C compiler knows nothing special about. ``ir/`` never probes the machine it runs on: the
runtime detects the target beside the compiler it runs (``limn/runtime/target.py``) and
passes it in; a test or a cross build names one. Its ``key`` (the ISA and a digest of the compiler's
macros) is part of every compile-cache and plan-cache key, so a cache shared by two CPUs
never loads code the other cannot run, and ``str()`` of it heads every translation unit.

Only speed depends on it. What a number is does not: the reduce lanes and every fold
order are logical (``FOLD_BYTES``), held in as many physical vectors as the target has.
"""

from __future__ import annotations

from dataclasses import dataclass

from ir.graph.semantics import LANE_BYTES

# The width of the reduce lanes and of fused attention's vectors is the sum order's rule
# (16 float32 or 8 float64 lanes on every target, so a sum folds alike on every CPU); its
# one owner is ir/graph/semantics.py, which the numpy reference folds by too.
FOLD_BYTES = LANE_BYTES

# ISA: (vector bytes, vector registers, FMA chains that hide the FMA's latency, the flags
# that name it where it is asked for rather than detected)
ISAS = {
    "avx512": (64, 32, 8, ("-march=skylake-avx512",)),
    "avx2": (32, 16, 10, ("-march=haswell",)),
    "neon": (16, 32, 8, ()),
    "generic": (16, 16, 4, ()),
}
WIDE = "-mprefer-vector-width=512"  # gcc otherwise keeps AVX-512 code to 256-bit vectors


@dataclass(frozen=True)
class Target:
    isa: str
    vector_bytes: int
    registers: int
    fma_chains: int
    l1: int  # data cache bytes per core
    l2: int
    l3: int
    cores: int
    flags: tuple[str, ...]  # what cc is given for this target
    macros: str = ""  # a digest of the compiler's predefined macros under ``flags``
    gcc: bool = True  # the compiler is gcc (its builtins spell the vector FMA)

    def lanes(self, itemsize: int) -> int:
        """The lanes of one vector register of ``itemsize``-byte elements."""
        return self.vector_bytes // itemsize

    @property
    def key(self) -> str:
        return f"{self.isa}:{self.macros}"

    def __str__(self) -> str:
        kib = [f"{n >> 10} KiB" for n in (self.l1, self.l2, self.l3)]
        return (
            f"/* target {self.isa}: {self.vector_bytes}-byte vectors x {self.registers} "
            f"registers, {self.fma_chains} FMA chains, L1/L2/L3 {' / '.join(kib)}, "
            f"{self.cores} cores; cc {' '.join(self.flags) or '(no -march)'} */"
        )
