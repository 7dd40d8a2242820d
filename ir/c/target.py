"""What the C passes may assume of the CPU: one small value, detected once per process.

Register tiles, vector lanes and cache blocks (``ir/c/tile.py``) are sized from it, so one
set of passes fits an AVX2 laptop, an AVX-512 server, an ARM core with NEON, or a CPU the
C compiler knows nothing special about. It is detected from the C compiler itself (its
predefined macros under ``-march=native``: the compiler says what it will emit for this
machine) and from the OS's cache sizes; ``LIMN_TARGET=avx2|avx512|neon|generic`` names
one instead (tests, cross builds). Its ``key`` (the ISA and a digest of the compiler's
macros) is part of every compile-cache and plan-cache key, so a cache shared by two CPUs
never loads code the other cannot run, and ``str()`` of it heads every translation unit.

Only speed depends on it. What a number is does not: the reduce lanes and every fold
order are logical (``FOLD_BYTES``), held in as many physical vectors as the target has.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

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


def _macros(cc: str, flags: tuple[str, ...]) -> str | None:
    """The compiler's predefined macros under ``flags``, or None where it refuses them."""
    try:
        r = subprocess.run(
            [cc, *flags, "-dM", "-E", "-x", "c", os.devnull], capture_output=True, text=True
        )
    except OSError:
        return None
    return r.stdout if r.returncode == 0 else None


def _isa(macros: str) -> str:
    has = set(macros.split())
    if "__AVX512F__" in has:
        return "avx512"
    if {"__AVX2__", "__FMA__"} <= has:
        return "avx2"
    return "neon" if "__ARM_NEON" in has and "__aarch64__" in has else "generic"


def _cache_bytes(level: int, default: int) -> int:
    """The OS's size of the level-``level`` data (or unified) cache of cpu0."""
    for d in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            if int((d / "level").read_text()) != level or "Instruction" in (d / "type").read_text():
                continue
            size = (d / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        scale = {"K": 1 << 10, "M": 1 << 20}.get(size[-1:], 1)
        return int(size.rstrip("KM")) * scale
    return default


@cache
def detect(name: str | None = None, cc: str | None = None) -> Target:
    """The target ``name`` (default: ``LIMN_TARGET``, else this machine as ``cc`` sees it).

    A named target is compiled for with its ISA's flags (``ISAS``); this machine with
    ``-march=native``, and ``-mprefer-vector-width=512`` only where it has AVX-512 and the
    compiler takes the flag. A compiler that takes neither gives the generic target."""
    cc = shutil.which(cc or os.environ.get("CC", "cc")) or "cc"
    name = name or os.environ.get("LIMN_TARGET") or None
    if name is not None and name not in ISAS:
        raise ValueError(f"LIMN_TARGET={name!r} is not a target; accepted: {', '.join(ISAS)}")
    flags = ISAS[name][3] if name else ("-march=native",)
    text = _macros(cc, flags)
    if text is None and name is None:
        flags, text = (), _macros(cc, ())
    isa = name or _isa(text or "")
    if isa == "avx512" and _macros(cc, (*flags, WIDE)) is not None:
        flags += (WIDE,)
    vector_bytes, registers, chains, _ = ISAS[isa]
    caches = [_cache_bytes(n, d) for n, d in ((1, 32 << 10), (2, 1 << 20), (3, 8 << 20))]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    digest = hashlib.sha256((text or "").encode()).hexdigest()[:16]
    gcc = "__GNUC__" in (text or "") and "__clang__" not in (text or "")
    return Target(isa, vector_bytes, registers, chains, *caches, cores or 1, flags, digest, gcc)
