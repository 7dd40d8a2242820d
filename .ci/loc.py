"""Count the core's lines the way tinygrad's CI does, and fail above the budget.

A Python line counts when it holds a code token (a name, an operator, a number or a
string that is not a docstring); blank lines, comments and docstrings do not. C, CUDA
and JS sources count by non-blank lines. ``python .ci/loc.py`` prints the count per file
(largest last) and per package, and exits 1 when the total is over ``BUDGET``.
"""

from __future__ import annotations

import io
import sys
import token
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ir", "limn", "limn_array")
BUDGET = 16_500  # counted lines in PACKAGES together
MAX_FILE = 600  # physical lines in any one file of them
CODE = {token.NAME, token.OP, token.NUMBER, token.STRING}
QUIET = {token.NL, token.COMMENT}
OTHER = (".c", ".h", ".cu", ".cuh", ".js")


def python_lines(src: str) -> int:
    toks = list(tokenize.generate_tokens(io.StringIO(src).readline))
    lines: set[int] = set()
    for i, t in enumerate(toks):
        if t.type not in CODE:
            continue
        if t.type == token.STRING and _alone(toks, i):
            continue  # a docstring (or any string standing as a statement of its own)
        lines.update(range(t.start[0], t.end[0] + 1))
    return len(lines)


def _alone(toks, i: int) -> bool:
    j, k = i - 1, i + 1
    while j >= 0 and toks[j].type in QUIET:
        j -= 1
    while k < len(toks) and toks[k].type in QUIET:
        k += 1
    before = j < 0 or toks[j].type in (token.NEWLINE, token.INDENT, token.DEDENT, token.ENCODING)
    return before and toks[k].type in (token.NEWLINE, token.ENDMARKER)


def count(path: Path) -> int:
    text = path.read_text()
    if path.suffix == ".py":
        return python_lines(text)
    return sum(1 for line in text.splitlines() if line.strip())


def main() -> int:
    rows, per_pkg, long_files = [], {}, []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*")):
            if path.suffix != ".py" and path.suffix not in OTHER or "__pycache__" in path.parts:
                continue
            n = count(path)
            rows.append((n, path.relative_to(ROOT).as_posix()))
            per_pkg[pkg] = per_pkg.get(pkg, 0) + n
            if len(path.read_text().splitlines()) > MAX_FILE:
                long_files.append(path.relative_to(ROOT).as_posix())
    verbose = "-q" not in sys.argv
    if verbose:
        for n, name in sorted(rows):
            print(f"{n:6d}  {name}")
    total = sum(per_pkg.values())
    print("  ".join(f"{pkg} {n}" for pkg, n in per_pkg.items()), f"total {total} / {BUDGET}")
    ok = total <= BUDGET and not long_files
    if total > BUDGET:
        print(f"over the line budget by {total - BUDGET}")
    for name in long_files:
        print(f"{name}: over {MAX_FILE} lines")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
