"""C spellings of the composite math rows: branch-free inline functions the c device emits.

A composite row (``sin``, ``tanh``, ``divide``, ...) stays one op-graph node down to the
loop nest, and the c device renders it as a call to ``limn_<name>_<ctype>``, defined
here. What each definition computes, and why it looks the way it does:

* float32 functions compute in double and round once, like the decomposition rules of
  ``ir/graph/elementary.py`` they stand in for, so most results are correctly rounded. They are
  straight-line code (every ``?:`` is a select, bits move through ``memcpy``), so gcc
  vectorizes a loop that calls them (eight double lanes under AVX-512).
* float32 tanh and log1p are the exceptions: they compute in float lanes (sixteen to a
  vector, 1.8x and 2.3x faster) with fitted polynomials and error-free float steps, within
  0.95 and 0.86 ulp over every float32 (``examples/fit_float32_libm.py`` fits and measures).
* float32 arguments of sin, cos and tan are reduced by one Payne-Hanek step in integer
  arithmetic: 96 bits of 2/pi taken at the argument's exponent from a table of 32-bit
  words, times the 24-bit mantissa, give x * 2/pi mod 4 with 62 fractional bits, so
  ``sin(1e38)`` is as accurate as ``sin(1.0)``, with no second path for large arguments.
* float64 functions call the C library (glibc: within one ulp, measured in the precision
  table); they are not vectorized. Division, sqrt and rounding are C's own operators and
  builtins: IEEE, exact or correctly rounded, and vectorized.

The C lives in ``ir/c/libm.c``, cut into named pieces; the float64 library calls and
C's own operators are generated below. ``definitions(names)`` returns the source of the
named functions and of every helper they use, in dependency order, so a kernel carries
only what it calls.
"""

from __future__ import annotations

from pathlib import Path

# name: (helpers it uses, C source)
_SNIPPETS: dict[str, tuple[tuple[str, ...], str]] = {}


def _c(name: str, deps: tuple[str, ...], src: str) -> None:
    _SNIPPETS[name] = (deps, src.strip("\n"))


def _read(path: Path) -> None:
    """The pieces of a C file: each starts at a line ``// @limn <name>: <helpers>``."""
    name, deps, lines = None, (), []
    for line in path.read_text().splitlines() + ["// @limn"]:
        if line.startswith("// @limn"):
            if name:
                _c(name, deps, "\n".join(lines))
            head, _, used = line[len("// @limn") :].partition(":")
            name, deps, lines = head.strip(), tuple(used.split()), []
        elif name:
            lines.append(line)


_read(Path(__file__).with_name("libm.c"))

# ---- float64: the C library, and C's own exact operations -------------------------------

_LIBM64 = {
    "sin": "sin", "cos": "cos", "tan": "tan", "asin": "asin", "acos": "acos", "atan": "atan",
    "sinh": "sinh", "cosh": "cosh", "tanh": "tanh", "asinh": "asinh", "acosh": "acosh",
    "atanh": "atanh", "exp2": "exp2", "expm1": "expm1", "log1p": "log1p", "log2": "log2",
    "log10": "log10",
}  # fmt: skip
for _name, _fn in _LIBM64.items():
    _c(
        f"{_name}_double",
        (),
        f"static inline double limn_{_name}_double(double x) {{ return {_fn}(x); }}",
    )
for _name, _fn in {"pow": "pow", "hypot": "hypot", "atan2": "atan2", "fmod": "fmod"}.items():
    _c(
        f"{_name}_double",
        (),
        f"static inline double limn_{_name}_double(double a, double b) {{ return {_fn}(a, b); }}",
    )
for _t, _s in (("float", "f"), ("double", "")):
    _c(f"abs_{_t}", (), f"static inline {_t} limn_abs_{_t}({_t} x) {{ return fabs{_s}(x); }}")
    _c(f"div_{_t}", (), f"static inline {_t} limn_div_{_t}({_t} a, {_t} b) {{ return a / b; }}")
    for _name, _fn in {"floor": "floor", "ceil": "ceil", "trunc": "trunc", "round": "rint"}.items():
        _c(
            f"{_name}_{_t}",
            (),
            f"static inline {_t} limn_{_name}_{_t}({_t} x) {{ return __builtin_{_fn}{_s}(x); }}",
        )


def available() -> frozenset[str]:
    """The ``<name>_<ctype>`` pairs this file defines as functions."""
    return frozenset(k for k in _SNIPPETS if k.endswith(("_float", "_double")))


def definitions(names) -> str:
    """The C source of the named functions and their helpers, each once, helpers first."""
    out: list[str] = []
    done: set[str] = set()

    def visit(n: str) -> None:
        if n in done:
            return
        done.add(n)
        deps, src = _SNIPPETS[n]
        for d in deps:
            visit(d)
        out.append(src)

    for n in sorted(names):
        visit(n)
    return "\n".join(out)
