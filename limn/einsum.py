"""torch.einsum: a product summed over the letters the output lacks.

Each operand is permuted to one order of all the letters (the output's first, the summed
ones last), with size-1 dims for the letters it lacks; the broadcast product is summed
over the letters not in the output, as ``matmul`` is composed, so it fuses and takes
gradients like any product. ``...`` is spelled as fresh letters and a repeated letter
within a term is that term's diagonal, before the product.
"""

from __future__ import annotations


def einsum(equation: str, *operands):
    """torch.einsum: each operand is permuted to one order of all the letters, the output's
    first and the summed ones last, with size-1 dims for the letters it lacks; the
    broadcast product is summed over the letters not in the output, as ``matmul`` is
    composed. ``...`` stands for the broadcast dims (fresh letters, right-aligned across
    the operands) and a letter repeated within a term takes that term's diagonal."""
    if len(operands) == 1 and isinstance(operands[0], list | tuple):
        operands = tuple(operands[0])
    inputs, arrow, out = equation.replace(" ", "").partition("->")
    terms = inputs.split(",")
    refused = ValueError(
        f"einsum: {equation!r} does not fit operands of shapes "
        f"{[tuple(x.shape) for x in operands]}; accepted: one term of letters per operand, "
        "one letter (or '...') per dim, output letters among the inputs'"
    )
    if len(terms) != len(operands):
        raise refused
    terms, out, operands = _einsum_ellipsis(terms, out if arrow else None, operands, refused)
    operands = list(operands)
    for k, (term, x) in enumerate(zip(terms, operands)):
        while len(set(term)) != len(term):  # a repeated letter: the diagonal over its two dims
            c = next(c for c in term if term.count(c) > 1)
            i, j = term.index(c), term.index(c, term.index(c) + 1)
            if x.shape[i] != x.shape[j]:
                raise refused
            x = x.diagonal(0, i, j)
            term = term[:i] + term[i + 1 : j] + term[j + 1 :] + c
        terms[k], operands[k] = term, x
    used = [c for t in terms for c in t]
    if out is None:  # numpy's implicit form: the letters seen once, in order
        out = "".join(sorted(c for c in set(used) if used.count(c) == 1))
    if set(out) - set(used) or len(set(out)) != len(out):
        raise refused
    letters = out + "".join(dict.fromkeys(c for c in used if c not in out))
    product = None
    for term, x in zip(terms, operands):
        if len(term) != x.ndim:
            raise refused
        order = sorted(range(len(term)), key=lambda i: letters.index(term[i]))
        shape = [x.shape[term.index(c)] if c in term else 1 for c in letters]
        y = x.permute(*order).reshape(*shape)
        product = y if product is None else product * y
    summed = tuple(range(len(out), len(letters)))
    return product.sum(summed) if summed else product


def _einsum_ellipsis(terms: list[str], out, operands, refused):
    """Each ``...`` spelled as fresh letters for the dims it stands for, the last of them
    shared by every operand (numpy's right-aligned broadcasting); the output's ``...``
    (first, in the implicit form) is all of them."""
    if not any("..." in t for t in terms) and (out is None or "..." not in out):
        return terms, out, operands
    if any(t.count("...") > 1 or "." in t.replace("...", "") for t in terms):
        raise refused
    ranks = [x.ndim - (len(t) - 3) if "..." in t else 0 for t, x in zip(terms, operands)]
    if min(ranks) < 0:
        raise refused
    taken = set("".join(terms) + (out or ""))
    fresh = "".join(c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                    if c not in taken)[: max(ranks)]  # fmt: skip
    terms = [t.replace("...", fresh[len(fresh) - r :] if r else "") for t, r in zip(terms, ranks)]
    if out is None:
        used = [c for t in terms for c in t if c not in fresh]
        out = fresh + "".join(sorted(c for c in set(used) if used.count(c) == 1))
    else:
        out = out.replace("...", fresh)
    return terms, out, operands
