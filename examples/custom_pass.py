"""Write your own loop-nest pass: unroll every innermost loop by 2.

A pass is a plain function from a LoopNest to a LoopNest. This one finds each innermost
loop, runs it two iterations at a time (the second copy reads ``var + 1``), and leaves a
one-iteration remainder loop when the count is odd. It prints the matmul nest before and
after, then runs the unrolled nest through the loop-nest interpreter and checks the answer
against the numpy device.

    uv run python examples/custom_pass.py
"""

from dataclasses import replace

import numpy as np

from ir.loop.interp import run
from ir.loop.nest import Index, Loop, LoopNest
from ir.loop.passes import DEFAULT_PASSES
from ir.loop.rewrite import Block, defines, flatten, rename, substitute, to_tree
from limn import Tensor, ir


def unroll_innermost_by_2(nest: LoopNest) -> LoopNest:
    """Each innermost unit-step loop of two or more iterations, two iterations at a time."""
    taken = [int(n[1:]) for n in map(defines, nest.body) if n and n[0] == "v" and n[1:].isdigit()]
    counter = iter(range(max(taken, default=-1) + 1, 1 << 62))

    def copy_of(body, var: str, shift: int):
        """The body with ``var`` read as ``var + shift`` and every value renamed."""
        names = {d: f"v{next(counter)}" for d in map(defines, body) if d and d[0] == "v"}
        moved = {var: Index.var(var) + shift} if shift else {}
        return tuple(rename(substitute(ins, moved), names) for ins in body)

    def visit(items):
        out = []
        for item in items:
            if not isinstance(item, Block):
                out.append(item)
                continue
            loop, body = item.loop, item.body
            inner = any(isinstance(x, Block) for x in body)
            count = len(range(loop.start, loop.stop, loop.step))
            if inner or loop.step != 1 or count < 2:
                out.append(Block(loop, visit(body)))
                continue
            even_stop = loop.start + count // 2 * 2
            pair = copy_of(body, loop.var, 0) + copy_of(body, loop.var, 1)
            head = replace(loop, stop=even_stop, step=2, attrs=loop.attrs + (("unroll", 2),))
            out.append(Block(head, pair))
            if even_stop < loop.stop:  # the odd iteration left over
                tail = Loop(loop.var, loop.stop, start=even_stop, attrs=loop.attrs)
                out.append(Block(tail, copy_of(body, loop.var, 0)))
        return tuple(out)

    return replace(nest, body=flatten(visit(to_tree(nest.body))))


def main() -> None:
    y = Tensor.randn((4, 5)) @ Tensor.randn((5, 3))
    passes = [*DEFAULT_PASSES, unroll_innermost_by_2]

    print("---- the default passes ----")
    print(ir(y))
    print("\n---- with unroll_innermost_by_2 appended ----")
    print(ir(y, passes=passes))

    got = run([y.node], passes=passes)[0]  # interpret the unrolled nest
    want = y.numpy()  # the numpy device, the reference
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    print(f"\nthe unrolled nest matches the numpy device (max diff {np.abs(got - want).max():.2e})")


if __name__ == "__main__":
    main()
