"""Stage 1, the op graph: what both frontends build and every later stage reads.

The dtypes and their promotion rules; the op table (``ops``: each row's numpy evaluation
in ``semantics``, gradient rule in ``grads``, decomposition in ``elementary`` on top of
the exact-arithmetic kit in ``exact``); strided views; the Node DAG itself; the
compositions that spell everything else (``compose``, and ``functions``, the math both
frontends call, one composite node each); and the pass that decomposes composites for a
device that does not render them (``decompose``). Nothing here knows about kernels or
devices.
"""
