"""A seeded autograd fuzzer: random op DAGs, forward and backward, limn against torch.

Each case is a small program, a list of instructions drawn from one seed. The generator
runs torch (in float64) while it draws, so it can keep every op inside its domain: log
and sqrt only see positive values, nothing sits near a relu, abs or where kink, and a max
never meets a near-tie (exact ties are fine: torch's amax splits the gradient evenly among
them, and so does limn). The same program is then replayed in limn (float32) from the same
input arrays; every sink's value and every leaf's gradient must agree.

A failure prints the seed and the program as readable lines; ``python
tests/test_autograd_fuzz.py SEED`` replays one case and prints it.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import limn
from limn import Tensor

N_CASES = 300
RTOL = 1e-4
ATOL = 1e-4
MAX_ELEMS = 48  # keeps every case (and a matmul's (n, m, k) intermediate) tiny
KINK = 1e-3  # how far a value must stay from a kink or a tie


# ---- the instruction set: one limn spelling and one torch spelling per op -----------


def _torch_index(t, key):
    """torch has no negative slice steps: those dims go through index_select first."""
    real = sum(1 for k in key if k is not None and k is not Ellipsis)
    full = []
    for k in key:
        full += [slice(None)] * (t.ndim - real) if k is Ellipsis else [k]
    if not any(k is Ellipsis for k in key):
        full += [slice(None)] * (t.ndim - real)
    dim = 0
    for i, k in enumerate(full):
        if k is None:
            continue
        if isinstance(k, slice) and k.step is not None and k.step < 0:
            idx = torch.tensor(list(range(*k.indices(t.shape[dim]))), dtype=torch.long)
            t = t.index_select(dim, idx)
            full[i] = slice(None)
        dim += 1
    return t[tuple(full)]


def _torch_pad(t, pads, value=0.0):
    flat = [p for pair in reversed(pads) for p in pair]
    return F.pad(t, flat, value=value)


def _torch_amax(t, axis, keepdim):
    dims = tuple(range(t.ndim)) if axis is None else axis
    return torch.amax(t, dim=dims, keepdim=keepdim)


def _torch_reduce(fn, t, axis, keepdim, **kw):
    dims = tuple(range(t.ndim)) if axis is None else axis
    return fn(t, dim=dims, keepdim=keepdim, **kw)


OPS = {
    # movement
    "reshape": (lambda x, shape: x.reshape(shape), lambda x, shape: x.reshape(shape)),
    "permute": (lambda x, order: x.permute(order), lambda x, order: x.permute(order)),
    "expand": (lambda x, shape: x.expand(*shape), lambda x, shape: x.expand(*shape)),
    "pad": (lambda x, pads: x.pad(pads), _torch_pad),
    "shrink": (
        lambda x, bounds: x.shrink(bounds),
        lambda x, bounds: x[tuple(slice(b, e) for b, e in bounds)],
    ),
    "flip": (lambda x, axes: x.flip(axes), lambda x, axes: torch.flip(x, axes)),
    "pad_value": (lambda x, pads, value: x.pad(pads, value), _torch_pad),
    "index": (lambda x, key: x[key], _torch_index),
    "transpose": (lambda x: x.T, lambda x: x.permute(tuple(reversed(range(x.ndim))))),
    # reduces
    "sum": (
        lambda x, axis, keepdim: x.sum(axis, keepdim),
        lambda x, axis, keepdim: _torch_reduce(torch.sum, x, axis, keepdim),
    ),
    "mean": (
        lambda x, axis, keepdim: x.mean(axis, keepdim),
        lambda x, axis, keepdim: _torch_reduce(torch.mean, x, axis, keepdim),
    ),
    "max": (lambda x, axis, keepdim: x.amax(axis, keepdim), _torch_amax),
    "min": (
        lambda x, axis, keepdim: x.amin(axis, keepdim),
        lambda x, axis, keepdim: -_torch_amax(-x, axis, keepdim),
    ),
    "var": (
        lambda x, axis, keepdim: x.var(axis, keepdim),
        lambda x, axis, keepdim: _torch_reduce(torch.var, x, axis, keepdim),
    ),
    "std": (
        lambda x, axis, keepdim: x.std(axis, keepdim),
        lambda x, axis, keepdim: _torch_reduce(torch.std, x, axis, keepdim),
    ),
    "logsumexp": (
        lambda x, axis, keepdim: x.logsumexp(axis, keepdim),
        lambda x, axis, keepdim: _torch_reduce(torch.logsumexp, x, axis, keepdim),
    ),
    "softmax": (lambda x, axis: x.softmax(axis), lambda x, axis: torch.softmax(x, axis)),
    "log_softmax": (
        lambda x, axis: x.log_softmax(axis),
        lambda x, axis: torch.log_softmax(x, axis),
    ),
    "cumsum": (lambda x, axis: x.cumsum(axis), lambda x, axis: torch.cumsum(x, axis)),
    # binary, broadcasting
    "add": (lambda a, b: a + b, lambda a, b: a + b),
    "sub": (lambda a, b: a - b, lambda a, b: a - b),
    "mul": (lambda a, b: a * b, lambda a, b: a * b),
    "div": (lambda a, b: a / b, lambda a, b: a / b),
    "maximum": (lambda a, b: a.maximum(b), torch.maximum),
    "where_pos": (
        lambda c, a, b: limn.where(c > 0, a, b),
        lambda c, a, b: torch.where(c > 0, a, b),
    ),
    "matmul": (lambda a, b: a @ b, lambda a, b: a @ b),
    "gather": (
        lambda x, axis, index: x.gather(axis, Tensor(np.array(index))),
        lambda x, axis, index: torch.gather(x, axis, torch.tensor(index)),
    ),
    "cat": (lambda a, b, axis: limn.cat([a, b], axis), lambda a, b, axis: torch.cat([a, b], axis)),
    "stack": (
        lambda a, b, axis: limn.stack([a, b], axis),
        lambda a, b, axis: torch.stack([a, b], axis),
    ),
    # unary
    "neg": (lambda x: -x, lambda x: -x),
    "exp": (lambda x: x.exp(), torch.exp),
    "log": (lambda x: x.log(), torch.log),
    "sqrt": (lambda x: x.sqrt(), torch.sqrt),
    "recip": (lambda x: x.reciprocal(), torch.reciprocal),
    "relu": (lambda x: x.relu(), torch.relu),
    "abs": (lambda x: x.abs(), torch.abs),
    "tanh": (lambda x: x.tanh(), torch.tanh),
    "sigmoid": (lambda x: x.sigmoid(), torch.sigmoid),
    "gelu": (lambda x: x.gelu(), F.gelu),
    "silu": (lambda x: x.silu(), F.silu),
    "softplus": (lambda x: x.softplus(), F.softplus),
    "square": (lambda x: x.square(), torch.square),
    "cube": (lambda x: x**3, lambda x: x**3),
    "pow_half": (lambda x: x**1.5, lambda x: x**1.5),
    "scale": (lambda x, c: x * c, lambda x, c: x * c),
    "rsub": (lambda x, c: c - x, lambda x, c: c - x),
    "rdiv": (lambda x, c: c / x, lambda x, c: c / x),
    "shift": (lambda x, c: x + c, lambda x, c: x + c),
    "clamp": (lambda x, lo, hi: x.clamp(lo, hi), lambda x, lo, hi: torch.clamp(x, lo, hi)),
    "double": (lambda x: x.double(), lambda x: x),  # torch already computes in float64
    "float": (lambda x: x.float(), lambda x: x),
}

UNARY_FREE = ("neg", "tanh", "sigmoid", "gelu", "silu", "softplus", "square", "cube")
UNARY_POSITIVE = ("log", "sqrt", "pow_half")


# ---- programs -----------------------------------------------------------------------


@dataclass
class Instr:
    out: str
    op: str
    args: tuple[str, ...]
    params: dict


def _fmt(v) -> str:
    if isinstance(v, slice):
        parts = ["" if p is None else str(p) for p in (v.start, v.stop, v.step)]
        return ":".join(parts[:2]) if v.step is None else ":".join(parts)
    if v is Ellipsis:
        return "..."
    if isinstance(v, tuple):
        return "(" + ", ".join(_fmt(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    return repr(v)


@dataclass
class Program:
    seed: int
    leaves: dict[str, np.ndarray] = field(default_factory=dict)
    instrs: list[Instr] = field(default_factory=list)
    sinks: list[tuple[str, np.ndarray]] = field(default_factory=list)  # (value, its weight)
    seed_gradient: bool = False  # one sink: out.backward(weight) instead of a scalar loss

    def __str__(self) -> str:
        lines = [f"seed {self.seed}"]
        lines += [f"{n} = leaf{tuple(a.shape)}" for n, a in self.leaves.items()]
        for ins in self.instrs:
            params = ", ".join(f"{k}={_fmt(v)}" for k, v in ins.params.items())
            lines.append(
                f"{ins.out} = {ins.op}({', '.join(ins.args + ((params,) if params else ()))})"
            )
        if self.seed_gradient:
            ((name, w),) = self.sinks
            lines.append(f"{name}.backward(weight{tuple(w.shape)})")
        else:
            terms = " + ".join(f"({n} * weight{tuple(w.shape)}).sum()" for n, w in self.sinks)
            lines.append(f"loss = {terms}; loss.backward()")
        return "\n".join(lines)


# ---- the generator ------------------------------------------------------------------


class Generator:
    """Draws a program, running torch alongside to keep each op inside its domain."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.prog = Program(seed)
        self.vals: dict[str, torch.Tensor] = {}
        self.uses: dict[str, int] = {}
        self.wide: dict[str, bool] = {}  # whether limn holds this value in float64

    # -- helpers --

    def choice(self, xs):
        return xs[int(self.rng.integers(len(xs)))]

    def shape(self, ndim=None) -> tuple[int, ...]:
        ndim = int(self.rng.integers(1, 4)) if ndim is None else ndim
        while True:
            s = tuple(int(v) for v in self.rng.integers(1, 5, ndim))
            if math.prod(s) <= MAX_ELEMS:
                return s

    def leaf(self, shape) -> str:
        name = f"x{len(self.prog.leaves)}"
        arr = self.rng.standard_normal(shape).astype(np.float32)
        self.prog.leaves[name] = arr
        self.vals[name] = torch.tensor(arr, dtype=torch.float64, requires_grad=True)
        self.uses[name] = 0
        self.wide[name] = False
        return name

    def pick(self) -> str:
        """An existing value, recent ones more likely, so chains grow deep."""
        names = list(self.vals)
        if self.rng.random() < 0.5:
            return names[-1]
        w = np.arange(1, len(names) + 1, dtype=float) ** 2
        return names[int(self.rng.choice(len(names), p=w / w.sum()))]

    def emit(self, op: str, args, **params) -> str | None:
        out = OPS[op][1](*(self.vals[a] for a in args), **params)
        v = out.detach()
        if v.numel() == 0 or v.numel() > MAX_ELEMS * 4 or not torch.isfinite(v).all():
            return None
        if v.abs().max() > 50:
            return None
        name = f"v{len(self.prog.instrs)}"
        self.prog.instrs.append(Instr(name, op, tuple(args), params))
        self.vals[name] = out
        self.uses[name] = 0
        self.wide[name] = op == "double" or op != "float" and any(self.wide[a] for a in args)
        for a in args:
            self.uses[a] += 1
        return name

    def val(self, name) -> torch.Tensor:
        return self.vals[name].detach()

    def axes(self, ndim: int):
        """None (all), one axis (maybe negative), or a tuple of axes."""
        r = self.rng.random()
        if r < 0.2:
            return None
        if r < 0.6:
            a = int(self.rng.integers(ndim))
            return a - ndim if self.rng.random() < 0.3 else a
        k = int(self.rng.integers(1, ndim + 1))
        return tuple(sorted(int(a) for a in self.rng.choice(ndim, k, replace=False)))

    def positive(self, name) -> str | None:
        """name itself if safely positive, else x*x + 0.5 built from it."""
        if self.val(name).min() > 0.05:
            return name
        sq = self.emit("square", (name,))
        return sq and self.emit("shift", (sq,), c=0.5)

    def away_from_zero(self, name) -> bool:
        return bool(self.val(name).abs().min() > KINK)

    def partner(self, shape: tuple[int, ...], exclude=()) -> str:
        """A value whose shape broadcasts with ``shape``: an existing one, or a new leaf."""
        fits = [
            n
            for n in self.vals
            if n not in exclude and _broadcasts(tuple(self.val(n).shape), shape)
        ]
        if fits and self.rng.random() < 0.5:
            return self.choice(fits)
        new = [1 if self.rng.random() < 0.3 else s for s in shape]
        drop = int(self.rng.integers(0, len(new) + 1)) if self.rng.random() < 0.3 else 0
        new = new[drop:]
        if self.rng.random() < 0.15 and len(shape) < 4 and math.prod(shape) * 2 <= MAX_ELEMS:
            new = [2, *([1] * (len(shape) - len(new))), *new]
        return self.leaf(tuple(new))

    # -- one draw per op family; each returns the new value's name or None --

    def d_reshape(self, x):
        n = self.val(x).numel()
        shape = []
        while n > 1 and len(shape) < 3:
            divs = [d for d in range(2, n + 1) if n % d == 0]
            d = self.choice(divs)
            shape.append(d)
            n //= d
        if n > 1:
            shape.append(n)
        for _ in range(int(self.rng.integers(0, 2))):
            shape.insert(int(self.rng.integers(len(shape) + 1)), 1)
        shape = [int(s) for s in self.rng.permutation(shape)] if shape else [1]
        if self.rng.random() < 0.2:
            shape[int(self.rng.integers(len(shape)))] = -1
        return self.emit("reshape", (x,), shape=tuple(shape))

    def d_permute(self, x):
        nd = self.val(x).ndim
        if nd < 2:
            return None
        if self.rng.random() < 0.2:
            return self.emit("transpose", (x,))
        return self.emit("permute", (x,), order=tuple(int(a) for a in self.rng.permutation(nd)))

    def d_expand(self, x):
        shape = list(self.val(x).shape)
        new = [int(self.rng.integers(2, 4)) if s == 1 else s for s in shape]
        if self.rng.random() < 0.4 or new == shape:
            new = [int(self.rng.integers(2, 4)), *new]
        if math.prod(new) > MAX_ELEMS * 2:
            return None
        return self.emit("expand", (x,), shape=tuple(new))

    def d_pad(self, x):
        nd = self.val(x).ndim
        pads = tuple(
            (int(self.rng.integers(0, 3)), int(self.rng.integers(0, 3))) for _ in range(nd)
        )
        if self.rng.random() < 0.3:
            value = round(float(self.rng.uniform(-2, 2)), 2)
            return self.emit("pad_value", (x,), pads=pads, value=value)
        return self.emit("pad", (x,), pads=pads)

    def d_gather(self, x):
        shape = tuple(self.val(x).shape)
        if not shape:
            return None
        axis = int(self.rng.integers(len(shape)))
        ishape = list(shape)
        ishape[axis] = int(self.rng.integers(1, 5))
        index = self.rng.integers(0, shape[axis], ishape).tolist()
        return self.emit("gather", (x,), axis=axis, index=index)

    def d_shrink(self, x):
        bounds = []
        for s in self.val(x).shape:
            b = int(self.rng.integers(0, s))
            bounds.append((b, int(self.rng.integers(b + 1, s + 1))))
        return self.emit("shrink", (x,), bounds=tuple(bounds))

    def d_flip(self, x):
        nd = self.val(x).ndim
        if nd == 0:
            return None
        k = int(self.rng.integers(1, nd + 1))
        return self.emit("flip", (x,), axes=tuple(int(a) for a in self.rng.choice(nd, k, False)))

    def d_index(self, x):
        key = []
        for s in self.val(x).shape:
            r = self.rng.random()
            if r < 0.2 and s > 1:
                i = int(self.rng.integers(-s, s))
                key.append(i)
                continue
            step = int(self.choice([1, 2, 3, -1, -2]))
            start = self.choice([None, int(self.rng.integers(-s, s))])
            stop = self.choice([None, int(self.rng.integers(-s, s + 1))])
            if len(range(*slice(start, stop, step).indices(s))) == 0:
                start, stop = None, None
            key.append(slice(start, stop, None if step == 1 else step))
        if self.rng.random() < 0.3:
            key.insert(int(self.rng.integers(len(key) + 1)), None)
        if self.rng.random() < 0.3:  # a run of trailing full slices becomes ...
            while key and key[-1] == slice(None):
                key.pop()
            key.append(Ellipsis)
        return self.emit("index", (x,), key=tuple(key))

    def d_reduce(self, x):
        nd = self.val(x).ndim
        if nd == 0:
            return None
        op = self.choice(("sum", "sum", "mean", "max", "max", "min", "var", "std", "logsumexp"))
        axis, keepdim = self.axes(nd), bool(self.rng.random() < 0.5)
        dims = tuple(range(nd)) if axis is None else (axis,) if isinstance(axis, int) else axis
        count = math.prod(self.val(x).shape[d] for d in dims)
        if op in ("var", "std") and count < 2:
            return None
        if op == "max" and not _no_near_ties(self.val(x), dims):
            return None
        if op == "min" and not _no_near_ties(-self.val(x), dims):
            return None
        if op == "std" and torch.var(self.val(x), dims).min() < 0.05**2:
            return None  # sqrt's gradient near zero variance is not worth comparing
        return self.emit(op, (x,), axis=axis, keepdim=keepdim)

    def d_softmax(self, x):
        nd = self.val(x).ndim
        if nd == 0:
            return None
        op = self.choice(("softmax", "log_softmax", "cumsum"))
        return self.emit(op, (x,), axis=int(self.rng.integers(-nd, nd)))

    def d_binary(self, x):
        op = self.choice(("add", "sub", "mul", "mul", "div", "maximum", "where_pos"))
        y = self.partner(tuple(self.val(x).shape), exclude=(x,))
        a, b = (x, y) if self.rng.random() < 0.5 else (y, x)
        if op == "div":
            b = self.positive(b) if self.rng.random() < 0.5 or not self.away(b, 0.2) else b
            return b and self.emit("div", (a, b))
        if op == "maximum":
            gap = (self.val(a) - self.val(b)).abs()
            return self.emit(op, (a, b)) if gap.min() > KINK else None
        if op == "where_pos":
            c = self.partner(tuple(torch.broadcast_shapes(self.val(a).shape, self.val(b).shape)))
            return self.emit(op, (c, a, b)) if self.away_from_zero(c) else None
        return self.emit(op, (a, b))

    def away(self, name, eps) -> bool:
        return bool(self.val(name).abs().min() > eps)

    def d_matmul(self, x):
        shape = tuple(self.val(x).shape)
        if not 1 <= len(shape) <= 3:
            return None
        k = shape[-1]
        m = int(self.rng.integers(1, 4))
        r = self.rng.random()
        if r < 0.2:
            other = (k,)
        elif r < 0.4 and len(shape) == 2:
            other = (2, k, m)
        else:
            other = (k, m)
        fits = [n for n in self.vals if tuple(self.val(n).shape) == other]
        y = self.choice(fits) if fits and self.rng.random() < 0.3 else self.leaf(other)
        if len(shape) == 1 and self.rng.random() < 0.3:  # vector on the right
            w = self.leaf((int(self.rng.integers(1, 4)), k))
            return self.emit("matmul", (w, x))
        return self.emit("matmul", (x, y))

    def d_join(self, x):
        shape = tuple(self.val(x).shape)
        if not shape:
            return None
        if self.rng.random() < 0.5:
            axis = int(self.rng.integers(len(shape)))
            fits = [
                n
                for n in self.vals
                if self.val(n).ndim == len(shape)
                and all(
                    a == b for i, (a, b) in enumerate(zip(self.val(n).shape, shape)) if i != axis
                )
            ]
            y = self.choice(fits)  # x itself always fits
            if self.rng.random() < 0.4:
                other = list(shape)
                other[axis] = int(self.rng.integers(1, 4))
                y = self.leaf(tuple(other))
            return self.emit("cat", (x, y), axis=axis)
        fits = [n for n in self.vals if tuple(self.val(n).shape) == shape]
        return self.emit(
            "stack", (x, self.choice(fits)), axis=int(self.rng.integers(len(shape) + 1))
        )

    def d_unary(self, x):
        r = self.rng.random()
        if r < 0.45:
            return self.emit(self.choice(UNARY_FREE), (x,))
        if r < 0.6:
            p = self.positive(x)
            return p and self.emit(self.choice(UNARY_POSITIVE), (p,))
        if r < 0.7:
            if self.val(x).max() > 3:
                return None
            return self.emit("exp", (x,))
        if r < 0.75:
            op = self.choice(("relu", "abs"))
            return self.emit(op, (x,)) if self.away_from_zero(x) else None
        if r < 0.8:
            lo, hi = sorted(round(float(v), 2) for v in self.rng.uniform(-1.5, 1.5, 2))
            v = self.val(x)
            if ((v - lo).abs().min() < KINK) or ((v - hi).abs().min() < KINK):
                return None
            return self.emit("clamp", (x,), lo=lo, hi=hi)
        if r < 0.85:
            p = x if self.away(x, 0.2) else self.positive(x)
            if self.rng.random() < 0.5:
                return p and self.emit("recip", (p,))
            return p and self.emit("rdiv", (p,), c=round(float(self.rng.uniform(-2, 2)), 2))
        if r < 0.95:
            op = self.choice(("scale", "rsub", "shift"))
            return self.emit(op, (x,), c=round(float(self.rng.uniform(-2, 2)), 2))
        return self.emit("float" if self.wide[x] else "double", (x,))

    FAMILIES = (
        ("d_reshape", 3),
        ("d_permute", 2),
        ("d_expand", 2),
        ("d_pad", 2),
        ("d_shrink", 2),
        ("d_flip", 1),
        ("d_index", 3),
        ("d_reduce", 4),
        ("d_softmax", 2),
        ("d_binary", 6),
        ("d_matmul", 2),
        ("d_join", 1),
        ("d_gather", 1),
        ("d_unary", 6),
    )

    def draw(self) -> Program:
        self.leaf(self.shape())
        names = [f for f, _ in self.FAMILIES]
        w = np.array([w for _, w in self.FAMILIES], dtype=float)
        n_ops = int(self.rng.integers(4, 13))
        made = 0
        for _ in range(n_ops * 6):
            if made == n_ops:
                break
            family = names[int(self.rng.choice(len(names), p=w / w.sum()))]
            made += getattr(self, family)(self.pick()) is not None
        sinks = [n for n in self.vals if self.uses[n] == 0 and n.startswith("v")]
        if not sinks:
            sinks = [self.pick()]
        for n in sinks:
            weight = self.rng.standard_normal(tuple(self.val(n).shape)).astype(np.float32)
            self.prog.sinks.append((n, weight))
        self.prog.seed_gradient = len(sinks) == 1 and self.rng.random() < 0.5
        return self.prog


def _broadcasts(a, b) -> bool:
    return all(x == y or x == 1 or y == 1 for x, y in zip(reversed(a), reversed(b)))


def _no_near_ties(v: torch.Tensor, dims) -> bool:
    """Along the reduced dims, every value is the max exactly or stays KINK below it."""
    if not dims:
        return True
    m = torch.amax(v, dim=dims, keepdim=True)
    gap = m - v
    return bool(((gap == 0) | (gap > KINK * (1 + m.abs()))).all())


# ---- running a program in both frameworks -------------------------------------------


def run_torch(prog: Program):
    vals = {
        n: torch.tensor(a, dtype=torch.float64, requires_grad=True) for n, a in prog.leaves.items()
    }
    for ins in prog.instrs:
        vals[ins.out] = OPS[ins.op][1](*(vals[a] for a in ins.args), **ins.params)
    loss = sum((vals[n] * torch.tensor(w, dtype=torch.float64)).sum() for n, w in prog.sinks)
    loss.backward()
    outs = {n: vals[n].detach().numpy() for n, _ in prog.sinks}
    grads = {n: (None if vals[n].grad is None else vals[n].grad.numpy()) for n in prog.leaves}
    return outs, grads


def run_limn(prog: Program):
    leaves = {n: Tensor(a, requires_grad=True) for n, a in prog.leaves.items()}
    vals = dict(leaves)
    for ins in prog.instrs:
        vals[ins.out] = OPS[ins.op][0](*(vals[a] for a in ins.args), **ins.params)
    if prog.seed_gradient:
        ((n, w),) = prog.sinks
        vals[n].backward(Tensor(w, dtype=vals[n].dtype))
    else:
        loss = None
        for n, w in prog.sinks:
            term = (vals[n] * Tensor(w)).sum()
            loss = term if loss is None else loss + term
        loss.backward()
    sinks = [vals[n] for n, _ in prog.sinks]
    grads = [t.grad for t in leaves.values() if t.grad is not None]
    limn.realize(*sinks, *grads)
    outs = {n: vals[n].numpy() for n, _ in prog.sinks}
    return outs, {n: (None if t.grad is None else t.grad.numpy()) for n, t in leaves.items()}


def _close(got, want) -> str | None:
    """None if got matches want to RTOL plus ATOL scaled by want's magnitude, else why."""
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    scale = max(1.0, float(np.abs(want).max(initial=0)))
    err = np.abs(got.astype(np.float64) - want)
    bad = err > ATOL * scale + RTOL * np.abs(want)
    if bad.any():
        i = np.unravel_index(int(np.argmax(err)), err.shape)
        return f"max error {err.max():.3g} at {tuple(int(j) for j in i)}: {got[i]} vs {want[i]}"
    return None


def check(seed: int) -> None:
    prog = Generator(seed).draw()
    want_out, want_grad = run_torch(prog)
    got_out, got_grad = run_limn(prog)
    problems = []
    for n, w in want_out.items():
        why = _close(got_out[n], w)
        if why:
            problems.append(f"value {n}: {why}")
    for n, w in want_grad.items():
        g = got_grad[n]
        if (g is None) != (w is None):
            problems.append(
                f"grad {n}: limn {'None' if g is None else 'set'}, torch "
                f"{'None' if w is None else 'set'}"
            )
        elif g is not None:
            why = _close(g, w)
            if why:
                problems.append(f"grad {n}: {why}")
    assert not problems, (
        "limn and torch disagree:\n  " + "\n  ".join(problems) + f"\nreproducer:\n{prog}"
    )


@pytest.mark.parametrize("seed", range(N_CASES))
def test_random_graph_matches_torch_forward_and_backward(seed):
    check(seed)


def test_programs_cover_every_op_family():
    """The fuzzer must actually draw what it claims to test."""
    seen = set()
    for seed in range(N_CASES):
        seen |= {ins.op for ins in Generator(seed).draw().instrs}
    must = {"reshape", "permute", "expand", "pad", "shrink", "flip", "index", "sum", "mean"}
    must |= {"max", "matmul", "add", "mul", "div", "exp", "log", "sqrt", "relu", "tanh"}
    must |= {"sigmoid", "softmax", "log_softmax"}
    assert must <= seen, f"never drawn: {sorted(must - seen)}"


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(Generator(int(arg)).draw())
        check(int(arg))
        print("ok")
