"""Writing through a view: both frontends' one mechanism for an assignment into a view.

``limn.Tensor.assign`` on a view and limn_array's in-place writes (``x[i] = v``) both
record the movements from a base to the view, check that a write can reach the base
through them (``check_writable``), and give the base its next value as a whole
(``place``): nodes are immutable, so a write is a new value of the base, never a mutation.
"""

from __future__ import annotations

import math

from ir.graph import dtypes
from ir.graph.build import apply_moves
from ir.graph.compose import arange, ne
from ir.graph.view import View


def check_writable(shape: tuple[int, ...], moves, op: str) -> None:
    """Raise unless the view ``moves`` make of a ``shape`` tensor can be written through.

    It can when it is one View with no pad cells (a pad has no bytes to receive a value)
    whose elements all live at distinct places (a broadcast or an overlapping window
    would send two values to one place; numpy and torch refuse those writes too).
    """
    v: View | None = View.contiguous(tuple(shape))
    for kind, arg in moves:
        v = v.window(*arg) if kind == "window" else getattr(v, kind)(arg)
        if v is None:
            raise ValueError(
                f"{op}: the target is a copy, not a view: its {kind} of shape {tuple(shape)} "
                "cannot be one view of the base, so a write could not reach the base; "
                "write into the base directly"
            )
    if v.mask is not None:
        raise ValueError(
            f"{op}: the target is a padded view of shape {v.shape}; its pad cells have no "
            "bytes in the base to write; write into the base's own region instead"
        )
    if not v.is_injective:
        raise ValueError(
            f"{op}: the target view of shape {v.shape} (strides {v.strides}) reads some "
            "element of its base more than once (a broadcast or an overlapping window), so "
            "a write would be ambiguous; write into a copy (or the base) instead"
        )


def place(base, moves, value):
    """``base`` with the elements ``apply_moves(base, moves)`` reads replaced by ``value``.

    The write of an assignment into a view, as the next value of its whole base (the
    caller has run ``check_writable``). Each view element's flat position in the base is
    the same view of an arange; SCATTERing the values into a -0.0 base (the additive
    identity that keeps every bit, -0.0 included) and ones into a zero base marks what
    is written, and a select keeps the base everywhere else.
    """
    n, m = math.prod(base.shape), math.prod(value.shape)
    if n == 0 or m == 0:
        return base
    idx = dtypes.int64
    pos = apply_moves(arange(base, n, idx).p_reshape(tuple(base.shape)), moves).p_reshape((m,))
    hit = pos.p_const(0, shape=(n,)).p_scatter(pos, pos.p_const(1), 0)
    hit = ne(hit, hit.p_const(0)).p_reshape(tuple(base.shape))
    vals = value.p_reshape((m,))
    if base.dtype == dtypes.bool_:
        got = pos.p_const(0, shape=(n,)).p_scatter(pos, vals.p_cast(idx), 0)
        got = ne(got, got.p_const(0))
    else:
        zero = -0.0 if base.dtype.is_float else 0
        got = base.p_const(zero, shape=(n,)).p_scatter(pos, vals, 0)
    return hit.p_where(got.p_reshape(tuple(base.shape)), base)
