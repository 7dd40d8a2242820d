"""ARGSORT in C: a stable merge sort of positions, one row per call. Pure text.

The c device renders an ARGSORT kernel (``ir/loop/lower.py``: a loop over rows, each row
one SORT) as a call per row of ``limn_argsort_<sig>``, defined here once per program for
each combination of key dtypes and direction. The routine sorts the positions 0..n-1 of
the row: insertion sort on runs of RUN positions, then bottom-up merges of runs, taking
from the left run unless the right element sorts strictly before, so equal keys keep
their order (stable) in both directions. O(n log n) compares, one n-element scratch
array from the heap per call; the rows of a kernel run on the OpenMP team where there are
enough of them (``ir/c/passes.parallelize``).

"Sorts strictly before" is the order of ``ir/graph/semantics.argsort``: an element with a
nan in any key after every element without one (nan elements keep their order among
themselves), then the keys lexicographically, compared with C's ``<`` (so -0.0 equals
0.0), descending reversing each key's comparison. bfloat16 keys compare as floats.
"""

from __future__ import annotations

from ir.c.spell import ctype
from ir.graph import dtypes
from ir.graph.dtypes import DType

RUN = 16  # positions sorted by insertion before the first merge


def name(keys: tuple[DType, ...], descending: bool) -> str:
    """The routine's C name for these key dtypes and this direction."""
    return "limn_argsort_" + "_".join(d.name for d in keys) + ("_d" if descending else "_a")


def signature(keys: tuple[DType, ...], descending: bool) -> str:
    """A hashable spelling of (keys, descending) for a program's set of helpers."""
    return ",".join(d.name for d in keys) + (":d" if descending else ":a")


def definition(sig: str) -> str:
    """The C of the routine that ``signature`` named: a comparison, then the sort."""
    names, direction = sig.split(":")
    keys = tuple(dtypes.as_dtype(n) for n in names.split(","))
    fn = name(keys, direction == "d")
    params = ", ".join(f"const {ctype(d)} *restrict k{j}" for j, d in enumerate(keys))
    args = ", ".join(f"k{j}" for j in range(len(keys)))

    def at(j: int, d: DType, i: str) -> str:
        return f"limn_bf2f(k{j}[{i}])" if d == dtypes.bfloat16 else f"k{j}[{i}]"

    floats = [(j, d) for j, d in enumerate(keys) if d.is_float]
    lines = [f"static inline int {fn}_before({params}, int64_t a, int64_t b) {{"]
    if floats:
        na = " | ".join(f"({at(j, d, 'a')} != {at(j, d, 'a')})" for j, d in floats)
        nb = " | ".join(f"({at(j, d, 'b')} != {at(j, d, 'b')})" for j, d in floats)
        lines += [f"  const int na = {na}, nb = {nb};", "  if (na | nb) return !na & nb;"]
    for j, d in enumerate(keys):
        x, y = at(j, d, "a"), at(j, d, "b")
        first, then = (
            (f"{y} < {x}", f"{x} < {y}") if direction == "d" else (f"{x} < {y}", f"{y} < {x}")
        )
        lines += [f"  if ({first}) return 1;", f"  if ({then}) return 0;"]
    lines += ["  return 0;", "}"]
    before = f"{fn}_before({args}, "
    lines += [
        f"static void {fn}({params}, int64_t n, int64_t *restrict out, int64_t *err) {{",
        "  if (n <= 0) return;",
        "  int64_t *tmp = (int64_t *)malloc(sizeof(int64_t) * (size_t)n);",
        "  if (!tmp) { err[0] = 2; err[3] = n * (int64_t)sizeof(int64_t); return; }",
        "  for (int64_t i = 0; i < n; i++) out[i] = i;",
        f"  for (int64_t lo = 0; lo < n; lo += {RUN}) {{",
        f"    const int64_t hi = lo + {RUN} < n ? lo + {RUN} : n;",
        "    for (int64_t i = lo + 1; i < hi; i++) {",
        "      const int64_t v = out[i]; int64_t j = i;",
        f"      while (j > lo && {before}v, out[j - 1])) {{ out[j] = out[j - 1]; j--; }}",
        "      out[j] = v;",
        "    }",
        "  }",
        "  int64_t *src = out, *dst = tmp;",
        f"  for (int64_t w = {RUN}; w < n; w *= 2) {{",
        "    for (int64_t lo = 0; lo < n; lo += 2 * w) {",
        "      const int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;",
        "      int64_t i = lo, j = mid, k = lo;",
        "      while (i < mid && j < hi)",
        f"        dst[k++] = {before}src[j], src[i]) ? src[j++] : src[i++];",
        "      while (i < mid) dst[k++] = src[i++];",
        "      while (j < hi) dst[k++] = src[j++];",
        "    }",
        "    int64_t *t = src; src = dst; dst = t;",
        "  }",
        "  if (src != out) memcpy(out, src, sizeof(int64_t) * (size_t)n);",
        "  free(tmp);",
        "}",
    ]
    return "\n".join(lines)
