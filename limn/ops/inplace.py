"""Every in-place spelling of torch: ``x.op_(...)``, ``x op= y``, and ``inplace=True``.

An in-place op is its out-of-place op whose result becomes the tensor's next value
(``Tensor.assign``: a new version of its storage, seen by every alias). Each spelling
torch has for an op limn has is made here from that op, so a new op gets its in-place
form by being named in ``_SAME_NAME``.

Under autograd, torch records an in-place op on a tensor that is not a leaf (a ResNet
block's ``out += identity``, ``nn.ReLU(inplace=True)``): the tensor's ``grad_fn`` becomes
the op's, whose input is the tensor as it was. limn records it the same way
(``write_result``): a snapshot of the tensor before the write (its value, its record,
its version counter) is the op's input, and the tensor remembers the snapshot by the
version it replaced (``Tensor._past``), so that a record made earlier, which names the
tensor at that version, sends its gradient to the snapshot (``autograd.resolved``).
The op's own input is torch's clone of ``self``: its version is not checked (-1 in the
record). A write through a view gives the view's base its next value as
``versions.place(base, moves, value)`` recorded the same way, torch's ``CopySlices``.

Also here: torch's writes by index tensor and mask (``index_put``, which ``x[idx] = v``
and ``x[mask] = v`` call), and torch's refusal of an in-place op whose input partly
shares its target's memory (``_check_overlap``): in limn the op would read the values
before the write, in torch some of them after, so torch refuses it and so does limn.
"""

from __future__ import annotations

import functools
import inspect
import math

import numpy as np

from ir.graph import dtypes, write
from ir.graph.view import View
from limn import autograd, versions

# torch's in-place methods whose out-of-place op limn has under the same name
_SAME_NAME = (
    "add sub mul div pow neg clamp masked_fill lerp exp log sqrt abs relu sigmoid tanh tril "
    "triu acos acosh asin asinh atan atanh atan2 arctan2 cos cosh sin sinh tan sinc erf erfc "
    "exp2 expm1 log10 log1p log2 logit rsqrt reciprocal square sign sgn ceil floor round trunc "
    "frac fix clamp_min clamp_max clip copysign deg2rad rad2deg divide multiply subtract "
    "true_divide float_power floor_divide fmod remainder heaviside hypot ldexp nextafter xlogy "
    "nan_to_num bitwise_and bitwise_or bitwise_xor bitwise_not bitwise_left_shift "
    "bitwise_right_shift logical_and logical_or logical_xor logical_not eq ne lt le gt ge "
    "greater greater_equal less less_equal not_equal negative absolute arccos arccosh arcsin "
    "arcsinh arctan arctanh cumsum cumprod addcmul addcdiv addmm addmv addr addbmm baddbmm "
    "index_add index_fill index_copy scatter scatter_add masked_scatter conj_physical "
    "digamma lgamma erfinv i0 gcd lcm mvlgamma polygamma renorm"
).split()

# torch's aliases of ops limn has, as out-of-place methods (``x.greater(y)``)
_ALIASES = {
    "greater": "gt", "greater_equal": "ge", "less": "lt", "less_equal": "le",
    "not_equal": "ne", "negative": "neg", "absolute": "abs", "arccos": "acos",
    "arccosh": "acosh", "arcsin": "asin", "arcsinh": "asinh", "arctan": "atan",
    "arctanh": "atanh", "fix": "trunc", "multiply": "mul", "subtract": "sub", "divide": "div",
}  # fmt: skip

# torch's names of dtypes, for its in-place refusal
_TORCH_NAME = {
    "float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16",
    "int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte",
    "bool": "Bool",
}  # fmt: skip


def _castable(got, want) -> bool:
    """torch's ``can_cast`` for an in-place result: never float to integer, nor anything
    but bool to bool."""
    if got.is_float and not want.is_float:
        return False
    return want != dtypes.bool_ or got == dtypes.bool_


def _checked(x, name: str, out, cast: bool = True):
    """``out`` cast to x's dtype and shape for the in-place ``name``, or torch's error."""
    if cast and not _castable(out.dtype, x.dtype):
        got, want = (_TORCH_NAME.get(str(d), str(d)) for d in (out.dtype, x.dtype))
        raise RuntimeError(
            f"{name}: result type {got} can't be cast to the desired output type {want}"
        )
    if out.shape != x.shape:
        try:
            out = out.expand(*x.shape)
        except ValueError:
            raise RuntimeError(
                f"{name}: the result's shape {out.shape} doesn't match the target's {x.shape}; "
                "an in-place op keeps its target's shape (broadcast the other operand to it)"
            ) from None
    return out.cast(x.dtype)


def _assign(x, name: str, value):
    """x.assign(value) for the in-place ``name``, which a refusal names."""
    try:
        return x.assign(value, name)
    except (ValueError, TypeError) as e:
        msg = str(e).replace("assign:", f"{name}:", 1)
        # an overlapping target: torch's "unsupported operation" is a RuntimeError
        raise (RuntimeError if "more than once" in msg else type(e))(msg) from None


def storage_view(x):
    """The View x reads its storage's value by (one with no pad or flip), or None where
    x is no such view (a copy, or a padded or flipped one)."""
    x._storage()
    v = versions.layout_view(x)
    return v if v is not None and v.mask is None and min(v.strides, default=0) >= 0 else None


def _span(v: View) -> tuple[int, int] | None:
    """The addresses [start, end) a View reads, where it reads each once and densely
    (torch's "non-overlapping and dense"), else None."""
    expected = 1
    for st, s in sorted((st, s) for s, st in zip(v.shape, v.strides) if s > 1):
        if st != expected:
            return None
        expected *= s
    return v.offset, v.offset + v.size


def _view_strides(shape, strides, new) -> tuple | None:
    """The strides torch's ``view`` gives ``new`` from (shape, strides) (its
    ``computeStride``, size-1 dims included), or None where it would copy."""
    out, d = [0] * len(new), len(new) - 1
    base, numel, vnumel = (strides[-1] if strides else 1), 1, 1
    for i in range(len(shape) - 1, -1, -1):
        numel *= shape[i]
        if i == 0 or shape[i - 1] != 1 and strides[i - 1] != numel * base:
            while d >= 0 and (vnumel < numel or new[d] == 1):
                out[d], vnumel, d = vnumel * base, vnumel * new[d], d - 1
            if vnumel != numel:
                return None
            if i > 0:
                base, numel, vnumel = strides[i - 1], 1, 1
    return tuple(out) if d == -1 else None


def _reshape_strides(shape, strides, new) -> tuple | None:
    """A reshape's strides as torch's view ops give them: where it only drops or adds
    size-1 dims (a select, squeeze, unsqueeze), each other dim keeps its stride and an
    added dim takes unsqueeze's (the next dim's extent, or 1 last); else ``view``'s."""
    new = tuple(new)
    if [s for s in shape if s != 1] != [s for s in new if s != 1]:
        return _view_strides(shape, strides, new) if shape and new else None
    out, i = [], 0
    for n in new:
        while i < len(shape) and shape[i] == 1 and n != 1:  # a size-1 dim dropped
            i += 1
        if i < len(shape) and (shape[i] == n):
            out.append(strides[i])
            i += 1
        else:  # a size-1 dim added before old dim i
            out.append(shape[i] * strides[i] if i < len(shape) else 1)
    return tuple(out)


def torch_strides(x) -> tuple | None:
    """The strides torch gives the view x, its size-1 dims' too (which a View leaves 0
    as they move no address): its storage's row-major strides through x's moves. None
    where a move is none of those torch strides this way."""
    shape = x._st.node.shape
    strides = tuple(math.prod(shape[i + 1 :]) for i in range(len(shape)))
    for kind, arg in x._moves:
        if kind == "shrink":
            shape = tuple(e - b for b, e in arg)
        elif kind == "step":
            shape = tuple(-(-s // k) for s, k in zip(shape, arg))
            strides = tuple(st * k for st, k in zip(strides, arg))
        elif kind == "permute":
            shape, strides = tuple(shape[i] for i in arg), tuple(strides[i] for i in arg)
        elif kind == "expand":
            lead = len(arg) - len(shape)
            kept = (st if s == n else 0 for s, n, st in zip(shape, arg[lead:], strides))
            shape, strides = tuple(arg), (0,) * lead + tuple(kept)
        elif kind == "reshape":  # (to its own shape: a view's, whose strides are computed)
            f = _view_strides if tuple(arg) == shape else _reshape_strides
            strides = f(shape, strides, arg)
            if strides is None:
                return None
            shape = tuple(arg)
        else:
            return None
    return strides


def _check_overlap(x, name: str, args, any_overlap: bool) -> None:
    """torch's refusal of an in-place op whose input shares memory with its target: a
    partial overlap (the same bytes, not in the same layout), or, for an index write, any."""
    st = x._st
    if st is None:
        return
    for a in args:
        if a is x or getattr(a, "_st", None) is not st or a.numel() == 0 or x.numel() == 0:
            continue
        va, vx = storage_view(a), storage_view(x)
        if va is None or vx is None:
            continue
        # the same memory in the same layout is torch's full overlap, accepted; torch
        # compares strides, a size-1 dim's too, which the moves that made them stand for
        same = va == vx and (a._moves == x._moves or 1 not in va.shape)
        same = same or va == vx and torch_strides(a) == torch_strides(x) is not None
        if same and not any_overlap:
            continue
        sa, sx = _span(va), _span(vx)
        if sa is not None and sx is not None and sa[0] < sx[1] and sx[0] < sa[1]:
            raise RuntimeError(
                f"{name}: unsupported operation: some elements of the input tensor and the "
                "written-to tensor refer to a single memory location. Please clone() the "
                "tensor before performing the operation."
            )


def _tracks(x, args) -> bool:
    if not autograd.grad_enabled():
        return False
    if x.requires_grad:
        return True
    return any(getattr(a, "requires_grad", False) for a in args)


def _leaf_refused(x, name: str):
    """torch's refusal of an in-place op on a leaf that requires grad, or on a view of
    one, under autograd; else x's view root and the moves from it to x."""
    root, moves = x._view_root() if x._moves else (x, ())
    if x.requires_grad and x.is_leaf or root.requires_grad and root.is_leaf:
        what = "a view of a leaf Variable" if moves else "a leaf Variable"
        raise RuntimeError(
            f"{name}: {what} that requires grad is being used in an in-place operation; "
            "write under limn.no_grad() (as an optimizer does), or into a clone"
        )
    return root, moves


def write_result(x, name: str, fn, args=(), cast: bool = True):
    """x's next value is ``fn(x)`` (cast back to x's dtype, as torch's in-place ops cast),
    recorded for autograd as torch records an in-place op; returns x. ``args`` are the
    op's other operands (whether one takes gradients decides if it is recorded)."""
    _check_overlap(x, name, args, name == "index_put_")
    if not _tracks(x, args):
        return _assign(x, name, _checked(x, name, fn(x), cast))
    root, moves = _leaf_refused(x, name)
    if moves and root._st is not x._st:
        raise RuntimeError(
            f"{name}: the target is a copy of its base, not a view; limn records an in-place "
            "op under autograd on a tensor or on a view of one; write into a clone"
        )
    old = _snapshot(x)
    out = _checked(x, name, fn(old), cast)
    if out is old:  # nothing computed (an identity): the value is as it was
        return x
    _clones(out, old)
    if not moves:
        _rebind(x, name, out, old)
        return x
    write.check_writable(root._st.node.shape, moves, name)
    old_root = _snapshot(root)
    new_root = versions.place(old_root, moves, out)
    _clones(new_root, old_root)
    _rebind(root, name, new_root, old_root)
    view = root
    for kind, arg in moves:  # x's record: the view of its base's new value
        view = view.p_window(*arg) if kind == "window" else getattr(view, f"p_{kind}")(arg)
    x._past = {**(x._past or {}), old._version_was: old}
    x._ctx, x.requires_grad = (root._same() if view is root else view)._ctx, True
    return x


def _snapshot(x):
    """x as it is now, as a tensor of its own: its value, its record, its version counter
    (shared, as torch's saved tensor is the same tensor)."""
    x._storage()
    old = type(x)._make(x.node, x.device)
    old._ctx, old.requires_grad, old._vc, old._version_was = (
        x._ctx,
        x.requires_grad,
        x._vc,
        x._version,
    )
    return old


def _clones(out, old) -> None:
    """Mark ``old`` in the records the op that made ``out`` built as torch's clone of the
    target: an input the version check does not look at (-1)."""
    stack, seen = [out], set()
    while stack:
        t = stack.pop()
        ctx = t._ctx
        if t is old or ctx is None or id(t) in seen or not isinstance(ctx.parents, tuple):
            continue
        seen.add(id(t))
        if any(p is old for p in ctx.parents):
            vs = ctx.versions or (0,) * len(ctx.parents)
            ctx.versions = tuple(-1 if p is old else v for p, v in zip(ctx.parents, vs))
        stack += [p for p in ctx.parents if p._ctx is not None and p is not old]


def _rebind(x, name: str, out, old) -> None:
    """x's value is written with ``out``'s (no grad recorded by the write itself), and its
    record becomes ``out``'s; the snapshot ``old`` answers for the version it replaced."""
    with autograd.no_grad():
        _assign(x, name, out)
    x._past = {**(x._past or {}), old._version_was: old}
    x._ctx, x.requires_grad = out._ctx, True
    if x._ctx is not None:
        x._ctx.out_version = x._version


def inplace_flag(fn):
    """``fn(x, ..., inplace=False)`` whose ``inplace=True`` writes the result into x, as
    torch's functional forms and layers do (recorded under autograd as any in-place op)."""
    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapped(x, *args, **kw):
        bound = sig.bind(x, *args, **kw)
        if not bound.arguments.pop("inplace", False):
            return fn(*bound.args, **bound.kwargs)
        rest = bound.args[1:]
        return write_result(
            x, f"{fn.__name__}(inplace=True)", lambda s: fn(s, *rest, **bound.kwargs)
        )

    return wrapped


def _in_place(name: str):
    """``x.name_(...)``: x's next value is ``x.name(...)``, cast back to x's dtype where
    torch casts it (a result type that cannot be cast raises torch's error)."""

    def method(x, *a, **kw):
        op = getattr(type(x), name)
        others = a + tuple(kw.values())
        return write_result(
            x, f"{name}_", lambda s: op(s, *(s if y is x else y for y in a), **kw), others,
            cast=name != "masked_fill",
        )  # fmt: skip

    method.__name__ = f"{name}_"
    return method


def _reshaping(name: str):
    """``x.t_()`` and its kin: x becomes the view ``x.t()`` of what it was (its shape
    changes; its storage stays). As in torch it counts as a write (its version moves on):
    a record that saved x as it was refuses a backward, and one that only named it sends
    its gradient to what x was (``Tensor._past``)."""

    def method(x, *a, **kw):
        if autograd.grad_enabled():
            _leaf_refused(x, f"{name}_")
        x._storage()
        prev = type(x).__new__(type(x))
        prev.__dict__.update(x.__dict__)
        x.__dict__.update(getattr(type(x), name)(prev, *a, **kw).__dict__)
        x._vc, x._past = prev._vc, {**(prev._past or {}), prev._version: prev}
        x._vc[0] += 1
        return x

    method.__name__ = f"{name}_"
    return method


def copy_(x, src, non_blocking: bool = False):
    """torch's ``copy_``: src (cast to x's dtype, broadcast to its shape) is x's value."""
    if src is x:  # torch's: nothing to copy (even through an expand)
        return x
    if not hasattr(src, "shape"):
        src = x._lift(src)
    src = src if src.device == x.device else src.to(x.device)
    return write_result(x, "copy_", lambda _: src.cast(x.dtype), (src,), cast=False)


def fill_(x, value):
    if hasattr(value, "shape") and value.ndim:
        raise RuntimeError(
            f"fill_: only supports a 0-d value tensor, got one of shape {value.shape}"
        )
    return write_result(x, "fill_", lambda s: s.full_like(0) + value, (value,), cast=False)


def detach_(x):
    """torch's ``detach_``: x leaves the graph (its value as it is)."""
    x._ctx, x.requires_grad = None, False
    return x


def fill_diagonal_(x, fill_value, wrap: bool = False):
    """The main diagonal (of a matrix, or of a tensor whose dims are all equal) set to
    ``fill_value``; with ``wrap`` a tall matrix's diagonal starts again every m + 1 rows."""
    shape = x.shape
    if x.ndim < 2 or x.ndim > 2 and len(set(shape)) != 1:
        raise RuntimeError(
            f"fill_diagonal_: needs a matrix or a tensor whose dims are all equal, got {shape}"
        )
    mask = np.zeros(shape, bool)
    if x.ndim == 2 and wrap:
        mask.reshape(-1)[:: shape[1] + 1] = True
    else:
        k = min(shape)
        mask[(np.arange(k),) * x.ndim] = True
    return x.masked_fill_(x._lift(mask), fill_value)


def index_put(x, indices, values, accumulate: bool = False):
    """torch's ``index_put``: x with the elements ``x[indices]`` picks replaced by
    ``values`` (broadcast to the picked shape), or ``values`` added to them with
    ``accumulate`` (a place picked twice gets both). Where ``accumulate`` is False and a
    place is picked twice, the value it gets is not defined (torch's rule)."""
    key = tuple(indices) if isinstance(indices, list | tuple) else (indices,)
    n = x.numel()
    pos = type(x).arange(n, dtype=dtypes.int64, device=x.device).reshape(x.shape)[key]
    if n == 0 and pos.numel():  # (known now; other bounds are checked as the gather runs)
        raise IndexError(f"index_put: index out of bounds for a tensor of shape {x.shape}")
    if not hasattr(values, "shape"):
        values = x._const(dtypes.python_type(x.dtype)(values), x.dtype)
    values = values.cast(x.dtype)
    try:
        values = values.expand(*pos.shape)
    except ValueError:
        raise ValueError(
            f"index_put: values of shape {tuple(values.shape)} do not broadcast to the "
            f"{tuple(pos.shape)} elements the index picks in a tensor of shape {x.shape}; "
            "accepted: values of that shape, or one that broadcasts to it"
        ) from None
    flat, vals = x.reshape(-1), values.reshape(-1)
    pos = pos.reshape(-1)
    if x.dtype == dtypes.bool_:
        got = flat.zeros_like(dtypes.int64).scatter_add(0, pos, vals.cast(dtypes.int64))
        got = got > 0
        if accumulate:
            return (flat | got).reshape(x.shape)
    elif accumulate:
        return flat.scatter_add(0, pos, vals).reshape(x.shape)
    else:
        got = flat.zeros_like().scatter_add(0, pos, vals)
    hit = flat.zeros_like(dtypes.int64).scatter_add(0, pos, pos.ones_like()) > 0
    return hit.where(got, flat).reshape(x.shape)


def index_put_(x, indices, values, accumulate: bool = False):
    return write_result(
        x, "index_put_", lambda s: index_put(s, indices, values, accumulate), (values,)
    )


def masked_scatter(x, mask, source):
    """torch's ``masked_scatter``: the elements where ``mask`` (broadcast to x's shape) is
    True take ``source``'s first elements, in row-major order."""
    if mask.dtype != dtypes.bool_:
        raise TypeError(f"masked_scatter: mask must be a bool tensor, got {mask.dtype}")
    m = mask.expand(*x.shape) if mask.shape != x.shape else mask
    count = int(m.cast(dtypes.int64).sum().item())
    if count > source.numel():
        raise RuntimeError(
            f"masked_scatter: the mask picks {count} elements but source has {source.numel()}"
        )
    return index_put(x, (m,), source.reshape(-1)[:count])


_AUGMENTED = {
    "add": "add", "sub": "sub", "mul": "mul", "truediv": "div", "pow": "pow",
    "floordiv": "floor_divide", "mod": "remainder", "and": "bitwise_and",
    "or": "bitwise_or", "xor": "bitwise_xor", "lshift": "bitwise_left_shift",
    "rshift": "bitwise_right_shift",
}  # fmt: skip


def install(cls) -> None:
    """Give ``cls`` (limn.Tensor) every in-place spelling of the ops it has. ``@=`` is
    not among them: torch's ``a @= b`` makes a new tensor and rebinds ``a``, and so does
    limn's (Python's fallback to ``a = a @ b``)."""
    for alias, name in _ALIASES.items():
        if not hasattr(cls, alias) and hasattr(cls, name):
            setattr(cls, alias, getattr(cls, name))
    cls.index_put, cls.masked_scatter = index_put, masked_scatter
    for name in _SAME_NAME:
        if hasattr(cls, name):
            setattr(cls, f"{name}_", _in_place(name))
    for name in ("squeeze", "unsqueeze", "t", "transpose", "swapaxes", "swapdims"):
        if hasattr(cls, name):
            setattr(cls, f"{name}_", _reshaping(name))
    cls.copy_, cls.fill_, cls.detach_, cls.fill_diagonal_ = copy_, fill_, detach_, fill_diagonal_
    cls.index_put_ = index_put_
    cls.zero_ = lambda x: x.fill_(0)
    cls.bernoulli_ = lambda x, p=0.5, generator=None: write_result(
        x, "bernoulli_", lambda s: s.bernoulli(p), cast=False
    )
    for spelling, name in _AUGMENTED.items():
        setattr(cls, f"__i{spelling}__", getattr(cls, f"{name}_"))
