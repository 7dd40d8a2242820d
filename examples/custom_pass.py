"""Write your own loop-nest pass: unroll the outermost loop of each nest by 2.

A pass is a plain function from a LoopNest to a LoopNest. This one takes each top-level
loop and runs it two iterations at a time: its whole body, inner loops included, is
copied once more with the loop variable read as ``var + 1`` and every value the copy
defines named anew (``Fresh.copy``), and a one-iteration remainder loop is left where the
count is odd. Every iteration still runs, in its order, so the answer is the same bits.
A loop with a role (a scheduled contraction's), a team, bounds or a run-time stop is
left as it is. It prints the matmul nest before and after, runs the unrolled nest through
the loop-nest interpreter and checks the answer against the numpy device. A second pass,
``interchange``, is written as a rule that ``tree_map`` applies at every loop: each output
loop swapped with the output loop it holds alone (``Kind`` says that is legal).

    uv run python examples/custom_pass.py
"""

from dataclasses import replace

import numpy as np

from ir.loop.interp import run
from ir.loop.nest import Index, Kind, Loop, LoopNest
from ir.loop.passes import DEFAULT_PASSES
from ir.loop.rewrite import Fresh, tree_map
from limn import Tensor, ir


def unroll_by_2(nest: LoopNest) -> LoopNest:
    """Each top-level loop two iterations at a time, everything inside it copied."""
    fresh = Fresh(nest.body)  # names no instruction of the nest uses yet

    def unroll(loop: Loop) -> tuple:
        plain = loop.role is None and not (loop.parallel or loop.lo or loop.hi)
        if not plain or not isinstance(loop.stop, int) or loop.step != 1:
            return (loop,)
        count = loop.stop - loop.start
        even = loop.start + count // 2 * 2
        if count < 2:
            return (loop,)
        second = fresh.copy(loop.body, {loop.var: Index.var(loop.var) + 1})
        out = (replace(loop, stop=even, step=2, body=loop.body + second),)
        if even < loop.stop:  # the odd iteration left over, as a loop of its own
            out += (replace(loop, start=even, body=fresh.copy(loop.body)),)
        return out

    body = [x for item in nest.body for x in (unroll(item) if isinstance(item, Loop) else (item,))]
    return replace(nest, body=tuple(body))


def interchange(nest: LoopNest) -> LoopNest:
    """Each output loop swapped with the output loop it holds alone, at every depth."""

    def rule(x):
        inner = x.body[0] if isinstance(x, Loop) and len(x.body) == 1 else None
        if not isinstance(inner, Loop) or {x.kind, inner.kind} != {Kind.OUTPUT}:
            return x
        return replace(inner, body=(replace(x, body=inner.body),))

    return replace(nest, body=tree_map(nest.body, rule))


def main() -> None:
    y = Tensor.randn((4, 5)) @ Tensor.randn((5, 3))
    passes = [*DEFAULT_PASSES, unroll_by_2]

    print("---- the default passes ----")
    print(ir(y))
    print("\n---- with unroll_by_2 appended ----")
    print(ir(y, passes=passes))

    swapped = [*DEFAULT_PASSES, interchange]
    print("\n---- with interchange appended (a pass written as a rule) ----")
    print(ir(y, passes=swapped))
    plain = run([y.node])[0]
    np.testing.assert_array_equal(run([y.node], passes=swapped)[0], plain)  # the same bits

    got = run([y.node], passes=passes)[0]  # interpret the unrolled nest
    np.testing.assert_array_equal(got, plain)  # the same bits as not unrolled
    want = y.numpy()  # the numpy device, the reference
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    print("\nthe interchanged and the unrolled nests compute the same bits as the plain one")
    print(f"the unrolled nest matches the numpy device (max diff {np.abs(got - want).max():.2e})")


if __name__ == "__main__":
    main()
