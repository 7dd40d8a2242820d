"""C spellings of the composite math rows: the inline functions the c device emits.

A composite row (``sin``, ``tanh``, ``divide``, ...) stays one op-graph node down to the
loop nest, and the c device renders it as a call to ``limn_<name>_<ctype>``, defined here:

* float64 calls the C library (glibc: within one ulp, measured in the precision table of
  ``docs/array_api.md``); logaddexp, which C lacks, is max + log1p(exp(-|a - b|));
* float32 calls the same double function on the widened argument and rounds once, so a
  result is the float nearest a double within an ulp: correctly rounded but in the rare
  case of a double landing within an ulp of a float halfway point. On the machine this was
  measured on that costs nothing against hand-written float32 code (a sin, tanh, log1p,
  atan or pow of 4M float32 values: 22-33 ms either way, ``docs/runtime.md``);
* division, absolute value and rounding are C's own operators and builtins (IEEE, exact
  or correctly rounded, and vectorized).

``definitions(names)`` returns the source of the named functions and of every helper
they use, helpers first, so a kernel carries only what it calls.
"""

from __future__ import annotations

# name: (helpers it uses, C source)
_SNIPPETS: dict[str, tuple[tuple[str, ...], str]] = {}


def _def(name: str, t: str, args: str, body: str, deps: tuple[str, ...] = ()) -> None:
    """``limn_<name>_<t>(args)`` returning ``body``, an expression of the arguments."""
    _SNIPPETS[f"{name}_{t}"] = (deps, f"static inline {t} limn_{name}_{t}({args}) {{ {body} }}")


for _fn in """sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh exp2 expm1 log1p log2
log10""".split():
    _def(_fn, "double", "double x", f"return {_fn}(x);")
    _def(_fn, "float", "float x", f"return (float){_fn}((double)x);")
for _fn in ("pow", "hypot", "atan2", "fmod"):
    _def(_fn, "double", "double a, double b", f"return {_fn}(a, b);")
    _def(_fn, "float", "float a, float b", f"return (float){_fn}((double)a, (double)b);")
_def(
    "logaddexp",
    "double",
    "double a, double b",
    "double m = a > b ? a : b, r = m + log1p(exp(LIMN_NEG(fabs(a - b))));\n"
    "  r = (a == b && fabs(a) == INFINITY) ? a : r;  /* equal infinities give themselves */\n"
    "  return (a != a || b != b) ? a + b : r;",
)
_def("logaddexp", "float", "float a, float b", "return (float)limn_logaddexp_double(a, b);",
     ("logaddexp_double",))  # fmt: skip
for _t, _s in (("float", "f"), ("double", "")):
    _def("abs", _t, f"{_t} x", f"return fabs{_s}(x);")
    _def("div", _t, f"{_t} a, {_t} b", "return a / b;")
    for _name, _fn in {"floor": "floor", "ceil": "ceil", "trunc": "trunc", "round": "rint"}.items():
        _def(_name, _t, f"{_t} x", f"return __builtin_{_fn}{_s}(x);")


def available() -> frozenset[str]:
    """The ``<name>_<ctype>`` pairs this file defines as functions."""
    return frozenset(_SNIPPETS)


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
