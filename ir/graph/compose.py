"""The composition layer: every op that is not a primitive, spelled in primitives.

Both frontends call these functions, so an op is computed one way everywhere and every
device gets it by implementing the op table alone. A function here works on any object
that speaks the primitive protocol below (``limn.Tensor`` does, and so does the Array API
array); the frontend has already applied its own promotion and broadcasting rules, so the
operands of a binary function arrive with one shape and one dtype.

The primitive protocol (methods of an operand ``x``):

    x.shape, x.dtype
    x.p_neg() p_exp() p_log() p_sqrt() p_recip() p_cast(dtype) p_contiguous()
    x.p_detach()                         the same value, no gradient through it
    x.p_add(y) p_mul(y) p_cmplt(y)       x.p_where(a, b)  (x is the bool condition)
    x.p_sum(axes) p_max(axes)            reduced dims kept as size 1
    x.p_reshape(shape) p_permute(order) p_expand(shape) p_pad(pads) p_shrink(bounds)
    x.p_flip(axes) p_step(steps)
    x.p_gather(idx, axis) p_scatter(idx, src, axis)
    x.p_const(value, shape=None, dtype=None)   a constant on x's device
    x.p_op(op, *others)                  a composite row of the op table (SIN, DIV, ...)

``ir/graph/build.py`` implements it once, for ``limn.Tensor`` and for bare nodes.

Numerical soundness is part of the spelling: softmax and logsumexp subtract the max,
and variance is the mean of squared deviations (two passes). Elementwise math (division,
pow, sin, ...) is not spelled here: each is one composite node (``ir/graph/functions.py``).
"""

from __future__ import annotations

import math
import operator

from ir.graph import dtypes
from ir.graph.dtypes import DType
from ir.graph.opcodes import Op

# ---- shapes and axes (the one owner of broadcasting) --------------------------------


def broadcast_shapes(*shapes: tuple[int, ...], op: str = "broadcast") -> tuple[int, ...]:
    """numpy's rule: align trailing dims; each pair must match or one must be 1."""
    if shapes and all(s == shapes[0] for s in shapes):  # every elementwise op on equals
        return tuple(shapes[0])
    nd = max((len(s) for s in shapes), default=0)
    out = [1] * nd
    for s in shapes:  # right-aligned: dim j of s is dim nd - len(s) + j of the result
        at = nd - len(s)
        for j, size in enumerate(s):
            if size != 1:
                have = out[at + j]
                if have != 1 and have != size:
                    _not_broadcast(shapes, nd, op)
                out[at + j] = size
    return tuple(out)


def _not_broadcast(shapes, nd: int, op: str):
    """Raise for the leftmost dim whose sizes (other than 1) differ."""
    for i in range(nd):
        sizes = {s[len(s) - nd + i] for s in shapes if len(s) - nd + i >= 0} - {1}
        if len(sizes) > 1:
            shown = " and ".join(str(tuple(s)) for s in shapes)
            raise ValueError(
                f"{op}: shapes {shown} do not broadcast: dim {i - nd} has sizes "
                f"{sorted(sizes)}; each dim must match or be 1"
            )


def resolve_shape(shape: tuple[int, ...], old: tuple[int, ...]) -> tuple[int, ...]:
    """A reshape target with its one -1 filled in; raises unless it holds ``old``'s elements."""
    size = math.prod(old)
    if shape.count(-1) > 1:
        raise ValueError(f"reshape: only one -1 is allowed, got {shape}")
    if -1 in shape:
        known = math.prod(s for s in shape if s != -1)
        if known == 0 or size % known:
            raise ValueError(f"reshape: cannot view {old} as {shape}")
        shape = tuple(size // known if s == -1 else s for s in shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"reshape: sizes must be non-negative, with at most one -1, got {shape}")
    if math.prod(shape) != size:
        raise ValueError(
            f"reshape: cannot view {old} ({size} elements) as {shape} ({math.prod(shape)} elements)"
        )
    return shape


def as_int(value, what: str, op: str) -> int:
    """``value`` as a Python int, for every integer parameter of both frontends.

    The one rule: anything with ``__index__`` is an integer (Python and numpy ints, 0-d
    integer arrays), as in numpy and the Array API standard; a bool is not (it would
    pass ``__index__`` as 0 or 1 and hide a mistake), nor is a float, even an integral one.
    """
    if not isinstance(value, bool):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise TypeError(
        f"{op}: {what} must be an integer (an int or anything with __index__, such as "
        f"numpy.int64), got {type(value).__name__} {value!r}"
    )


def as_ints(values, what: str, op: str) -> tuple[int, ...]:
    """A sequence of integers (each by ``as_int``) as a tuple."""
    try:
        items = tuple(values)
    except TypeError:
        raise TypeError(
            f"{op}: {what} must be a tuple of integers, got {type(values).__name__} {values!r}"
        ) from None
    return tuple(as_int(v, what, op) for v in items)


def int_or_ints(values, what: str, op: str) -> tuple[int, ...]:
    """One integer or a tuple (or list) of them, as a tuple: ``axis=1``, ``axis=(0, 2)``."""
    if isinstance(values, tuple | list):
        return as_ints(values, what, op)
    return (as_int(values, what, op),)


def normalize_axis(axis: int, ndim: int, op: str = "op") -> int:
    axis = as_int(axis, "axis", op)
    if not -ndim <= axis < max(ndim, 1) or (ndim == 0 and axis not in (0, -1)):
        raise ValueError(
            f"{op}: axis {axis} is out of range for a {ndim}-d tensor; "
            f"accepted: {-ndim}..{ndim - 1}"
        )
    return axis % ndim if ndim else 0


def normalize_axes(axis, ndim: int, op: str = "op") -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axes = int_or_ints(axis, "axis", op)
    out = tuple(sorted(normalize_axis(a, ndim, op) for a in axes))
    if len(set(out)) != len(out):
        raise ValueError(f"{op}: repeated axis in {axis}")
    return out


def expand_to(x, shape: tuple[int, ...]):
    """Broadcast ``x`` to ``shape`` (x's dims align to the right): a reshape that adds the
    leading 1s, then the expand, composed in one step (``_moved``)."""
    moves = _expand_moves(tuple(x.shape), tuple(shape))
    return x._moved(moves) if moves else x


def _expand_moves(shape: tuple[int, ...], to: tuple[int, ...]) -> tuple:
    """The moves ``expand_to`` makes from ``shape`` to ``to``, for ``_moved``."""
    if shape == to:
        return ()
    lead = len(to) - len(shape)
    return ((("reshape", (1,) * lead + shape),) if lead else ()) + (("expand", to),)


def squeeze_axes(x, axes: tuple[int, ...]):
    return x.p_reshape(tuple(s for i, s in enumerate(x.shape) if i not in axes))


# ---- arithmetic ---------------------------------------------------------------------


def sub(a, b):
    return a.p_add(b.p_neg())


def square(x):
    return x.p_mul(x)


def pow_int(x, n: int):
    """x**n for an integer tensor and a known n >= 0, by repeated squaring: exact."""
    result, base = None, x
    while n:
        if n & 1:
            result = base if result is None else result.p_mul(base)
        n >>= 1
        if n:
            base = base.p_mul(base)
    return result if result is not None else x.p_const(1)


def abs_(x):
    if x.dtype == dtypes.bool_ or x.dtype.kind == "u":
        return x
    # a float adds +0.0: that turns -0.0 into +0.0 and leaves nan a nan
    pos = x.p_add(x.p_const(0.0)) if x.dtype.is_float else x
    return x.p_cmplt(x.p_const(0)).p_where(x.p_neg(), pos)


def sign(x):
    """-1, 0 or 1; a nan stays nan (as the standard and numpy say)."""
    zero, one = x.p_const(0), x.p_const(1)
    pos = zero.p_cmplt(x).p_where(one, zero)
    if x.dtype.kind == "u":
        return pos
    s = x.p_cmplt(zero).p_where(one.p_neg(), pos)
    return isnan(x).p_where(x, s) if x.dtype.is_float else s


def maximum(a, b):
    """Elementwise max; nan wins, as in torch and numpy."""
    return logical_or(b.p_cmplt(a), isnan(a)).p_where(a, b)


def minimum(a, b):
    return logical_or(a.p_cmplt(b), isnan(a)).p_where(a, b)


def clamp(x, lo=None, hi=None):
    if lo is not None:
        x = maximum(x, lo)
    if hi is not None:
        x = minimum(x, hi)
    return x


# ---- logic and comparison -----------------------------------------------------------


def logical_not(x):
    return x.p_xor(x.p_const(True, dtype=dtypes.bool_))


def logical_and(a, b):
    return a.p_and(b)


def logical_or(a, b):
    return a.p_or(b)


def logical_xor(a, b):
    return a.p_xor(b)


def isnan(x):
    """nan is the one value that is neither below +inf nor above -inf."""
    if not x.dtype.is_float:
        return x.p_const(False, dtype=dtypes.bool_)
    below = x.p_cmplt(x.p_const(math.inf))
    above = x.p_const(-math.inf).p_cmplt(x)
    return logical_not(logical_or(below, above))


def isinf(x):
    if not x.dtype.is_float:
        return x.p_const(False, dtype=dtypes.bool_)
    return logical_or(eq(x, x.p_const(math.inf)), eq(x, x.p_const(-math.inf)))


def isfinite(x):
    if not x.dtype.is_float:
        return x.p_const(True, dtype=dtypes.bool_)
    return logical_and(x.p_const(-math.inf).p_cmplt(x), x.p_cmplt(x.p_const(math.inf)))


def lt(a, b):
    return a.p_cmplt(b)


def gt(a, b):
    return b.p_cmplt(a)


def le(a, b):
    """a <= b: b is not below a, and neither is nan."""
    return logical_and(logical_not(b.p_cmplt(a)), logical_not(logical_or(isnan(a), isnan(b))))


def ge(a, b):
    return le(b, a)


def eq(a, b):
    """Neither below the other, and not nan (nan equals nothing, itself included)."""
    if a.dtype == dtypes.bool_:
        return a.p_where(b, logical_not(b))
    same = logical_not(logical_or(a.p_cmplt(b), b.p_cmplt(a)))
    if a.dtype.is_float:
        same = logical_and(same, logical_not(logical_or(isnan(a), isnan(b))))
    return same


def ne(a, b):
    return logical_not(eq(a, b))


# ---- transcendental -----------------------------------------------------------------


def sigmoid(x):
    """1 / (1 + e^-x); e^-x overflowing to inf gives exactly 0."""
    one = x.p_const(1)
    return one.p_add(x.p_neg().p_exp()).p_recip()


def relu(x):
    """0 below zero, x elsewhere: a nan stays nan and -0.0 stays -0.0, as in torch."""
    return x.p_cmplt(x.p_const(0)).p_where(x.p_const(0), x)


def softplus(x):
    """log(1 + e^x) = max(x, 0) + log(1 + e^-|x|), stable at both ends."""
    return relu(x).p_add(x.p_const(1).p_add(abs_(x).p_neg().p_exp()).p_log())


# erf's Maclaurin series: 2/sqrt(pi) * (-1)**n / (n! (2n+1)), the coefficient of x**(2n+1)
_ERF_SERIES = [
    2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(12)
]
# the same with no cancellation: erf(x) = 2/sqrt(pi) x e**(-x*x) sum (2 x*x)**n / (2n+1)!!
_ERF_POSITIVE = [1 / math.prod(range(1, 2 * n + 2, 2)) for n in range(39, -1, -1)]


def horner(x, coeffs):
    """coeffs[0] * x**n + ... + coeffs[-1], highest power first."""
    r = x.p_const(coeffs[0])
    for c in coeffs[1:]:
        r = r.p_mul(x).p_add(x.p_const(c))
    return r


def erf(x):
    """Odd by construction, relatively accurate near 0, and erf(-0.0) = -0.0.

    |x| < 0.5: the Maclaurin series (twelve terms, relative error < 1e-15). Beyond it, in
    float32, Abramowitz & Stegun 7.1.26 refined (|error| < 1.5e-7, so relative < 3e-7
    there). In float64, within 4 ulp: the series of positive terms below 2.5, and past it
    1 - erfc(|x|) with erfc's continued fraction e**(-x*x) / sqrt(pi) / (x + (1/2) / (x +
    (2/2) / (x + (3/2) / ...))), cut at depth 30 (where it has converged for x >= 2.5).
    """
    a = abs_(x)
    a2 = a.p_mul(a)
    if x.dtype == dtypes.float64:
        below = a.p_cmplt(x.p_const(2.5))
        e = a2.p_neg().p_exp().p_mul(x.p_const(1 / math.sqrt(math.pi)))  # e**(-x*x) / sqrt(pi)
        m = below.p_where(a2.p_add(a2), x.p_const(0))  # (unused past 2.5: must not overflow)
        mid = horner(m, _ERF_POSITIVE).p_mul(a.p_add(a)).p_mul(e)
        cf = a
        for k in range(30, 0, -1):
            cf = a.p_add(x.p_const(k / 2).p_mul(cf.p_recip()))
        far = below.p_where(mid, sub(x.p_const(1), e.p_mul(cf.p_recip())))
    else:
        t = x.p_const(1).p_add(a.p_mul(a.p_const(0.3275911))).p_recip()
        erfc = horner(t, (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592))
        far = sub(x.p_const(1), erfc.p_mul(t).p_mul(a2.p_neg().p_exp()))
    near = horner(a2, _ERF_SERIES[::-1])
    far = x.p_cmplt(x.p_const(0)).p_where(far.p_neg(), far)
    return a.p_cmplt(x.p_const(0.5)).p_where(near.p_mul(x), far)  # near * x keeps -0.0


def gelu(x, approximate: str = "none"):
    half = x.p_const(0.5)
    if approximate == "tanh":
        inner = x.p_add(x.p_mul(x).p_mul(x).p_mul(x.p_const(0.044715)))
        inner = inner.p_mul(x.p_const(math.sqrt(2 / math.pi)))
        return half.p_mul(x).p_mul(x.p_const(1).p_add(inner.p_op(Op.TANH)))
    if approximate != "none":
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return half.p_mul(x).p_mul(x.p_const(1).p_add(erf(x.p_mul(x.p_const(1 / math.sqrt(2))))))


# ---- reductions ---------------------------------------------------------------------


def _count(x, axes) -> int:
    return math.prod(x.shape[a] for a in axes)


def sum_(x, axes, keepdim=False):
    r = x.p_sum(axes)
    return r if keepdim else squeeze_axes(r, axes)


def max_(x, axes, keepdim=False):
    r = x.p_max(axes)
    return r if keepdim else squeeze_axes(r, axes)


def _order_flip(x):
    """An order-reversing map with no overflow: -x for floats, ~x for integers."""
    if x.dtype.is_float:
        return x.p_neg()
    if x.dtype == dtypes.bool_:
        return logical_not(x)
    c = -1 if x.dtype.kind == "i" else dtypes.max_value(x.dtype)
    return x.p_const(c).p_add(x.p_neg())


def min_(x, axes, keepdim=False):
    return _order_flip(max_(_order_flip(x), axes, keepdim))


def mean(x, axes, keepdim=False):
    """The total over n, one correctly rounded DIV (as torch and limn_array divide)."""
    n = _count(x, axes)
    s = sum_(x, axes, keepdim)
    return s.p_op(Op.DIV, s.p_const(n if n else math.nan))


def var(x, axes, keepdim=False, correction: float = 1):
    """Mean of squared deviations from the mean, over n - correction (one DIV; none left
    gives 0/0 = nan or s/0 = inf)."""
    m = expand_to(mean(x, axes, keepdim=True), x.shape)
    d = sub(x, m)
    n = _count(x, axes) - correction
    s = sum_(d.p_mul(d), axes, keepdim)
    return s.p_op(Op.DIV, s.p_const(n if n > 0 else 0))


def std(x, axes, keepdim=False, correction: float = 1):
    return var(x, axes, keepdim, correction).p_sqrt()


def logsumexp(x, axes, keepdim=False):
    # the shift cancels: its gradient is zero in exact arithmetic, so none flows through it
    # (as in torch); differentiating it would cost a kernel per row and add only rounding
    m = x.p_max(axes).p_detach()
    # an all -inf slice would give -inf - -inf = nan; shift by 0 there instead
    m = isinf(m).p_where(m.p_const(0), m)
    s = sub(x, expand_to(m, x.shape)).p_exp().p_sum(axes).p_log().p_add(m)
    return s if keepdim else squeeze_axes(s, axes)


def softmax(x, axis: int):
    m = expand_to(x.p_max((axis,)).p_detach(), x.shape)  # the shift cancels (logsumexp)
    e = sub(x, m).p_exp()
    return e.p_mul(expand_to(e.p_sum((axis,)).p_recip(), x.shape))


def log_softmax(x, axis: int):
    """(x - max) - log(sum(exp(x - max))): a row holding +inf or only -inf is nan, as in torch."""
    d = sub(x, expand_to(x.p_max((axis,)).p_detach(), x.shape))  # the shift cancels
    return sub(d, expand_to(d.p_exp().p_sum((axis,)).p_log(), x.shape))


def _index_along(x, axis: int, dtype: DType, reverse: bool = False):
    """A tensor of x's shape whose value is the index along ``axis`` (or n - index)."""
    n = x.shape[axis]
    idx = arange(x, n, dtype)
    if reverse:
        idx = idx.p_const(n, dtype=dtype).p_add(idx.p_neg())
    shape = tuple(n if d == axis else 1 for d in range(len(x.shape)))
    return idx.p_reshape(shape).p_expand(tuple(x.shape))


def argmax(x, axis: int, keepdim=False):
    """The first index of the max along ``axis`` (a nan counts as the max)."""
    m = expand_to(x.p_max((axis,)), x.shape)
    hit = logical_or(eq(x, m), isnan(x))
    rev = _index_along(x, axis, dtypes.int64, reverse=True)  # n - i: larger for earlier i
    first = hit.p_where(rev, rev.p_const(0)).p_max((axis,))
    out = first.p_const(x.shape[axis]).p_add(first.p_neg())
    return out if keepdim else squeeze_axes(out, (axis,))


def argmin(x, axis: int, keepdim=False):
    return argmax(_order_flip(x), axis, keepdim)


def scan(x, axis: int, combine: str = "add"):
    """Inclusive prefix sums ("add"), products ("mul") or maxima ("max") along ``axis``:
    one SCAN, folded left to right, O(n) work and memory.

    A half width folds in float32 and rounds each output once, as its SUM keeps a float32
    total (and torch's cumsum and cumprod do); a max is exact in any width.
    """
    wide = dtypes.acc_dtype(x.dtype)
    if wide == x.dtype or combine == "max":
        return x.p_scan(axis, combine)
    return x.p_cast(wide).p_scan(axis, combine).p_cast(x.dtype)


def cumsum(x, axis: int):
    """out[i] = x[0] + ... + x[i] along ``axis`` (``scan``)."""
    return scan(x, axis, "add")


# ---- creation -----------------------------------------------------------------------


def arange(like, n: int, dtype: DType):
    """0, 1, ..., n-1 from constants, pads and adds: one bit of the index per axis.

    Each axis k of a (2, 2, ..., 2) tensor holds [0, 2**k]; their sum, read row-major,
    counts 0 .. 2**bits - 1. No buffer is read, so the whole thing fuses into its user.
    """
    if n <= 1:
        return like.p_const(0, shape=(n,), dtype=dtype)
    bits = (n - 1).bit_length()
    full = (2,) * bits
    total = None
    for k in range(bits):
        weight = 2 ** (bits - 1 - k)
        pair = like.p_const(weight, shape=(1,), dtype=dtype).p_pad(((1, 0),))
        term = pair.p_reshape((1,) * k + (2,) + (1,) * (bits - 1 - k)).p_expand(full)
        total = term if total is None else total.p_add(term)
    return total.p_reshape((2**bits,)).p_shrink(((0, n),))


def one_hot(idx, n: int, dtype: DType):
    shape = tuple(idx.shape) + (n,)
    col = expand_to(arange(idx, n, idx.dtype), shape)
    hit = eq(idx.p_reshape(tuple(idx.shape) + (1,)).p_expand(shape), col)
    one, zero = (idx.p_const(v, shape=shape, dtype=dtype) for v in (1, 0))
    return hit.p_where(one, zero)


# ---- movement -----------------------------------------------------------------------


def movedim(x, src: int, dst: int):
    nd = len(x.shape)
    src, dst = src % nd, dst % nd
    order = [i for i in range(nd) if i != src]
    order.insert(dst, src)
    return x.p_permute(tuple(order))


def cat(xs, axis: int):
    """Pad each piece to the full length along ``axis`` and select: one fused kernel.

    Selecting (not adding the zero pads) keeps every bit: -0.0 + 0.0 would be +0.0.
    """
    total = sum(x.shape[axis] for x in xs)
    out, start = None, 0
    for x in xs:
        pads = [(0, 0)] * len(x.shape)
        pads[axis] = (start, total - start - x.shape[axis])
        piece = x.p_pad(tuple(pads))
        if out is None:
            out = piece
        else:
            inside = x.p_const(True, dtype=dtypes.bool_).p_pad(tuple(pads))
            out = inside.p_where(piece, out)
        start += x.shape[axis]
    return out


def split(x, sizes: list[int], axis: int):
    out, start = [], 0
    for s in sizes:
        bounds = [(0, d) for d in x.shape]
        bounds[axis] = (start, start + s)
        out.append(x.p_shrink(tuple(bounds)))
        start += s
    return out


# ---- linear algebra -----------------------------------------------------------------


def matmul(a, b):
    """(..., n, k) @ (..., k, m): broadcast to (..., n, m, k), multiply, sum over k.

    1-d operands follow numpy: a vector on the left is a row, on the right a column, and
    the added dim is dropped from the result.
    """
    a_shape, b_shape = tuple(a.shape), tuple(b.shape)  # as the caller gave them
    if len(a_shape) == 1:
        a = a.p_reshape((1, a_shape[0]))
    if len(b_shape) == 1:
        b = b.p_reshape((b_shape[0], 1))
    n, k = a.shape[-2:]
    k2, m = b.shape[-2:]
    if k != k2:
        raise ValueError(f"matmul: shapes {a_shape} and {b_shape} do not align: {k} != {k2}")
    a_batch, b_batch = tuple(a.shape[:-2]), tuple(b.shape[:-2])
    batch = a_batch
    if a_batch != b_batch:
        op = f"matmul: batch dims of shapes {a_shape} and {b_shape}"
        batch = broadcast_shapes(a_batch, b_batch, op=op)
    # each operand seen as (..., n, m, k), its moves composed in one step: (permute,)
    # reshape to broadcastable, then expand_to's (leading 1s and) expand
    full = batch + (n, m, k)
    a = a._moved((("reshape", a_batch + (n, 1, k)),) + _expand_moves(a_batch + (n, 1, k), full))
    nb = len(b_batch)
    b = b._moved(
        (("permute", tuple(range(nb)) + (nb + 1, nb)), ("reshape", b_batch + (1, m, k)))
        + _expand_moves(b_batch + (1, m, k), full)
    )
    out = a.p_mul(b).p_sum((len(batch) + 2,))
    # a vector operand's added dim is dropped again
    shape = batch + ((n,) if len(a_shape) > 1 else ()) + ((m,) if len(b_shape) > 1 else ())
    return out.p_reshape(shape)
