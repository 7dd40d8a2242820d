"""Stage 1, the op graph: what both frontends build and every later stage reads.

The dtypes and their promotion rules, the closed table of primitive ops and what each
computes (``semantics``), strided views, the Node DAG itself, and the compositions that
spell everything else in primitives (``compose``; libm in ``elementary`` on top of the
exact-arithmetic kit in ``exact``). Nothing here knows about kernels or devices.
"""
