"""The quick tier: units of small kernels built by the Tiny C Compiler instead of gcc.

A unit of small kernels (``quick``, says ``ir/c/units.py``'s record) costs its compile, not its
run, and most of gcc's ~40 ms CPU on one is starting the compiler. Where tcc is installed
(``LIMN_TCC=0`` turns it off) and passes a self-check (compile, load, call), those units
are built by ``tcc -shared`` in a few milliseconds: measured, a scikit-learn client suite
on an empty cache spends 1.3 s in the c device with it and 2.9 s without (docs/runtime.md).

tcc computes gcc's bits: no flag the c device passes gcc lets it change what a float
operation computes, tcc evaluates float and double in SSE registers at their own precision
and never contracts a*b+c, and the GCC builtins the renderer emits are mapped (``PRELUDE``)
to the C library functions with the same results (``rint`` is round-to-nearest-even in the
default mode, as ``__builtin_rint`` is; ``fma`` is exactly fused). A unit tcc cannot take
stays on gcc by rule (``builds``), read from what its record says it needs: ``_Float16``
(tcc has no half type), OpenMP teams, or the vector extension (whose ISA builtins the
prelude does not map).
``tests/test_tcc.py`` compares the two compilers' bits op by op on special values.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ir.c.units import Unit

# What tcc needs to compute gcc's bits, put before a unit it builds. tcc has none of GCC's
# math builtins: each one the renderer emits becomes the C library function with the same
# results (these round exactly; rint in the default mode). tcc negates a float as -0.0 - x,
# which keeps a nan's sign where gcc (and IEEE negate) flips it: the renderer's LIMN_NEG
# flips the bit here. glibc's NAN without GCC is 0.0f / 0.0f, which x86 makes -nan: here
# it is the bits of gcc's quiet nan, 0x7fc00000. tcc folds an expression of float literals
# in long double, which can round a double result 1 ulp off gcc's (about 1 in 3000 double
# divisions; float results are safe): rendered kernels keep every value in a variable of
# its own, which tcc never folds, so a new double constant is best one literal.
BUILTINS = ("rint", "floor", "ceil", "trunc")
PRELUDE = "".join(f"#define __builtin_{fn}{s} {fn}{s}\n" for fn in BUILTINS for s in ("f", "")) + (
    "#include <stdint.h>\n#include <string.h>\n#include <math.h>\n"
    "static inline float limn_tcc_negf(float x) { uint32_t u; memcpy(&u, &x, 4);\n"
    "  u ^= 0x80000000u; memcpy(&x, &u, 4); return x; }\n"
    "static inline double limn_tcc_neg(double x) { uint64_t u; memcpy(&u, &x, 8);\n"
    "  u ^= 0x8000000000000000ull; memcpy(&x, &u, 8); return x; }\n"
    "#define LIMN_NEG(x) _Generic((x), float: limn_tcc_negf(x), double: limn_tcc_neg(x), "
    "default: -(x))\n"
    "static const union { uint32_t u; float f; } limn_tcc_nan = {0x7fc00000u};\n"
    "#undef NAN\n#define NAN (limn_tcc_nan.f)\n"
)
FLAGS = ("-shared",)


def builds(unit: Unit) -> bool:
    """Whether tcc builds ``unit``: a quick one that needs nothing beyond C11 and libm (an
    ``omp simd`` pragma, which marks independent lanes, tcc ignores: its one clause the
    renderer writes, an or-reduction of a flag, is exact in any order)."""
    return unit.quick and not unit.needs


_CHECK = """
#include <math.h>
#include <stdint.h>
double limn_fused(double x) { return fma(x, x, -(x * x)); }
float limn_round(float x) { return __builtin_rintf(x) * (float)(int64_t)x; }
uint32_t limn_nan(float x) { float y = LIMN_NEG(x * NAN); uint32_t u; memcpy(&u, &y, 4);
  return u; }
"""


def find(tcc: bool | None = None) -> tuple[str | None, str]:
    """The Tiny C Compiler on PATH and its version, if it builds, loads and runs a library
    with the prelude's builtins (fma fused, rint to even, NAN and LIMN_NEG as gcc's);
    ``(None, "")`` without it, or when ``tcc`` is False (``None``: unless ``LIMN_TCC=0``)."""
    if tcc is None:
        tcc = os.environ.get("LIMN_TCC", "1") != "0"
    path = shutil.which("tcc") if tcc else None
    if path is None:
        return None, ""
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "check.c", Path(tmp) / "check.so"
        src.write_text(PRELUDE + _CHECK)
        try:
            cmd = [path, *FLAGS, "-o", str(out), str(src), "-lm"]
            if subprocess.run(cmd, capture_output=True, timeout=30).returncode != 0:
                return None, ""
            lib = ctypes.CDLL(str(out))
            lib.limn_fused.restype, lib.limn_fused.argtypes = ctypes.c_double, [ctypes.c_double]
            lib.limn_round.restype, lib.limn_round.argtypes = ctypes.c_float, [ctypes.c_float]
            lib.limn_nan.restype, lib.limn_nan.argtypes = ctypes.c_uint32, [ctypes.c_float]
            # (1 + 2**-30)**2 = 1 + 2**-29 + 2**-60: only a fused multiply-add keeps the 2**-60
            if lib.limn_fused(1.0 + 2.0**-30) != 2.0**-60 or lib.limn_round(-3.5) != 12.0:
                return None, ""
            if lib.limn_nan(2.0) != 0xFFC00000:  # NAN is +nan, LIMN_NEG flips its sign
                return None, ""
            version = subprocess.run([path, "-v"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError, AttributeError):
            return None, ""
    return path, (version.stdout.strip().splitlines() or ["tcc"])[0]
