"""ARGSORT in C: a stable merge sort of positions, one row per call. Pure text.

The c device renders an ARGSORT kernel (``ir/loop/lower.py``: a loop over rows, each row
one SORT) as a call per row of ``limn_argsort_<sig>``, defined here once per program for
each combination of key dtypes and direction. The routine sorts the positions 0..n-1 of
the row: insertion sort on runs of RUN elements, then bottom-up merges of runs, taking
from the left run unless the right element sorts strictly before, so equal keys keep
their order (stable) in both directions. With one key the elements are (key, position)
pairs, the nans set aside at the end first (in their order), so compares read the pairs
sequentially; with several, positions compared through the keys they name. O(n log n)
compares, scratch from the heap per call; the rows of a kernel run on the OpenMP team
where there are enough of them (``ir/c/passes.parallelize``).

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
    """The C of the routine that ``signature`` named."""
    names, direction = sig.split(":")
    keys = tuple(dtypes.as_dtype(n) for n in names.split(","))
    if len(keys) == 1:
        return _by_pairs(keys[0], direction == "d")
    return _by_positions(keys, direction == "d")


def _merge_sort(elem: str, before: str, a: str, tmp: str, n: str) -> list[str]:
    """C lines sorting the ``n`` ``elem``s of ``a`` (scratch ``tmp``), stably, leaving the
    result in ``a``: ``before`` (a format of x and y) says whether x sorts strictly before y."""
    x_before = before.format(x="v", y=f"{a}[j - 1]")
    right_first = before.format(x="src[j]", y="src[i]")
    return [
        f"  for (int64_t lo = 0; lo < {n}; lo += {RUN}) {{",
        f"    const int64_t hi = lo + {RUN} < {n} ? lo + {RUN} : {n};",
        "    for (int64_t i = lo + 1; i < hi; i++) {",
        f"      const {elem} v = {a}[i]; int64_t j = i;",
        f"      while (j > lo && {x_before}) {{ {a}[j] = {a}[j - 1]; j--; }}",
        f"      {a}[j] = v;",
        "    }",
        "  }",
        f"  {elem} *src = {a}, *dst = {tmp};",
        f"  for (int64_t w = {RUN}; w < {n}; w *= 2) {{",
        f"    for (int64_t lo = 0; lo < {n}; lo += 2 * w) {{",
        f"      const int64_t mid = lo + w < {n} ? lo + w : {n};",
        f"      const int64_t hi = lo + 2 * w < {n} ? lo + 2 * w : {n};",
        "      int64_t i = lo, j = mid, k = lo;",
        f"      while (i < mid && j < hi) dst[k++] = {right_first} ? src[j++] : src[i++];",
        "      while (i < mid) dst[k++] = src[i++];",
        "      while (j < hi) dst[k++] = src[j++];",
        "    }",
        f"    {elem} *t = src; src = dst; dst = t;",
        "  }",
        f"  if (src != {a}) memcpy({a}, src, sizeof({elem}) * (size_t){n});",
    ]


def _by_pairs(d: DType, descending: bool) -> str:
    """One key: (key, position) pairs sorted by the key alone, after the nans (moved to the
    end in their order, as every comparison with them is false); reading keys from the pairs
    keeps the merges sequential in memory."""
    fn = name((d,), descending)
    t = ctype(d)
    kt = "float" if d == dtypes.bfloat16 else t
    load = "limn_bf2f(k0[i])" if d == dtypes.bfloat16 else "k0[i]"
    pair = f"{fn}_pair"
    before = "{y}.k < {x}.k" if descending else "{x}.k < {y}.k"
    nan = d.is_float
    lines = [
        f"typedef struct {{ {kt} k; int64_t i; }} {pair};",
        f"static void {fn}(const {t} *restrict k0, int64_t n, int64_t *restrict out,",
        "                  int64_t *err) {",
        "  if (n <= 0) return;",
        f"  const size_t bytes = sizeof({pair}) * 2 * (size_t)n;",
        f"  {pair} *a = ({pair} *)malloc(bytes);",
        "  if (!a) { err[0] = 2; err[3] = (int64_t)bytes; return; }",
        f"  {pair} *b = a + n;",
        "  int64_t m = 0;",
        "  for (int64_t i = 0; i < n; i++) {",
        f"    const {kt} x = {load};",
        f"    if ({'x == x' if nan else '1'}) {{ a[m].k = x; a[m].i = i; m++; }}",
        "  }",
    ]
    if nan:
        lines += [
            "  for (int64_t i = 0, j = m; i < n; i++) {",
            f"    const {kt} x = {load};",
            "    if (x != x) out[j++] = i;",
            "  }",
        ]
    lines += _merge_sort(pair, before, "a", "b", "m")
    lines += ["  for (int64_t i = 0; i < m; i++) out[i] = a[i].i;", "  free(a);", "}"]
    return "\n".join(lines)


def _by_positions(keys: tuple[DType, ...], descending: bool) -> str:
    """Several keys: positions 0..n-1 sorted through a comparison of the keys they name."""
    fn = name(keys, descending)
    params = ", ".join(f"const {ctype(d)} *restrict k{j}" for j, d in enumerate(keys))
    args = ", ".join(f"k{j}" for j in range(len(keys)))

    def at(j: int, d: DType, i: str) -> str:
        return f"limn_bf2f(k{j}[{i}])" if d == dtypes.bfloat16 else f"k{j}[{i}]"

    floats = [(j, d) for j, d in enumerate(keys) if d.is_float]
    lines = [f"static inline int {fn}_before({params}, int64_t a, int64_t b) {{"]
    if floats:
        na = " | ".join(f"({at(j, d, 'a')} != {at(j, d, 'a')})" for j, d in floats)
        nb = " | ".join(f"({at(j, d, 'b')} != {at(j, d, 'b')})" for j, d in floats)
        lines += [f"  const int na = {na}, nb = {nb};", "  if (na | nb) return (!na) & nb;"]
    for j, d in enumerate(keys):
        x, y = at(j, d, "a"), at(j, d, "b")
        first, then = (f"{y} < {x}", f"{x} < {y}") if descending else (f"{x} < {y}", f"{y} < {x}")
        lines += [f"  if ({first}) return 1;", f"  if ({then}) return 0;"]
    lines += ["  return 0;", "}"]
    lines += [
        f"static void {fn}({params}, int64_t n, int64_t *restrict out, int64_t *err) {{",
        "  if (n <= 0) return;",
        "  const size_t bytes = sizeof(int64_t) * (size_t)n;",
        "  int64_t *tmp = (int64_t *)malloc(bytes);",
        "  if (!tmp) { err[0] = 2; err[3] = (int64_t)bytes; return; }",
        "  for (int64_t i = 0; i < n; i++) out[i] = i;",
        *_merge_sort("int64_t", f"{fn}_before({args}, {{x}}, {{y}})", "out", "tmp", "n"),
        "  free(tmp);",
        "}",
    ]
    return "\n".join(lines)
