"""The target this process compiles for: the C compiler asked what it emits here.

``ir/c/target.py`` holds what a target is (``Target``, ``ISAS``); this is the probe, run
once per process by the c device's toolchain: the compiler's predefined macros under
``-march=native`` say what it will emit for this machine, and the OS gives the cache sizes
and the cores. ``LIMN_TARGET=avx2|avx512|neon|generic`` names one instead (tests, cross
builds).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from functools import cache
from pathlib import Path

from ir.c.target import ISAS, WIDE, Target


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
    digest = hashlib.sha256((text or "").encode()).hexdigest()[:16]
    gcc = "__GNUC__" in (text or "") and "__clang__" not in (text or "")
    return Target(
        isa, vector_bytes, registers, chains, *caches, physical_cores(), flags, digest, gcc
    )


def physical_cores() -> int:
    """One thread per physical core: count distinct (package, core) pairs we may run on."""
    seen = set()
    for cpu in os.sched_getaffinity(0):
        base = f"/sys/devices/system/cpu/cpu{cpu}/topology"
        try:
            with open(f"{base}/physical_package_id") as f:
                pkg = f.read().strip()
            with open(f"{base}/core_id") as f:
                core = f.read().strip()
        except OSError:
            return len(os.sched_getaffinity(0))
        seen.add((pkg, core))
    return max(1, len(seen))
