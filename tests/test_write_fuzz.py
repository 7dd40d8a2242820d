"""A differential fuzzer of writes against torch: random programs, run in both, compared.

A program is a list of steps over a few tensors (one of them ``from_numpy`` memory): the
in-place ops of ``INPLACE`` (every ``inplace_variant`` of torch's OpInfo database that
limn has, and the spellings Python and ``torch.nn`` give writes: augmented assignments,
index and mask writes, ``inplace=True``), the views of ``TORCH_VIEWS`` (the ops of torch's
"Tensor Views" page, ``TENSOR_VIEWS_PAGE``), ``clone``, ``detach``, a hop to the other
host device and back, the reads of ``READS`` (every way a value leaves limn: ``.numpy()``,
``np.asarray``, ``.item()``, ``float()``, ``.tolist()``, ``repr``, the shared array's
memory, ``.grad`` and a gradient tensor held across backwards), a loss built from a
parameter, ``no_grad`` writes, ``backward``, and optimizer steps (SGD or AdamW, two
parameter groups). ``interpret`` runs it with torch and with limn; every read must agree,
and every step torch refuses must be refused by limn (and the other way round). An op
torch lists joins the fuzzed set when limn has it: a unary or binary in-place op by
itself, any other by its arguments in ``_ARGS`` (or a reason in ``_NOT_FUZZED``), which
``test_the_fuzzed_sets_are_torchs_lists`` holds.

300 programs run in the default suite on its device (``LIMN_DEVICE``: numpy, and c in
the suite's second pass). The slow run goes on after a failure and reports every one,
grouped by kind (``run``): ``pytest -m slow tests/test_write_fuzz.py`` (``LIMN_FUZZ``
programs, 20,000 unless set), or ``python tests/test_write_fuzz.py --programs N
--device c``. A failure found becomes a named test below.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import sys
import time

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.opinfo.core import BinaryUfuncInfo, UnaryUfuncInfo

import limn
from limn import optim
from limn.runtime import get_device

SHAPE = (4, 6)


def _devices():
    names = ["numpy"]
    try:
        get_device("c")
        names.append("c")
    except RuntimeError:
        pass
    return names


@pytest.fixture
def device():
    """The suite's device (``LIMN_DEVICE``): the default pass runs the numpy device's
    programs, the c pass the c device's; a hop goes to the other one."""
    return limn.current_device()


# ---- programs ---------------------------------------------------------------------------

# torch's "Tensor Views" page (docs/source/tensor_view.rst), in its order: every op it
# lists returns a view, as each one's ATen schema says (an aliased result), which
# ``test_the_fuzzed_sets_are_torchs_lists`` checks against torch.
TENSOR_VIEWS_PAGE = (
    "slicing", "adjoint", "as_strided", "detach", "diagonal", "expand", "expand_as",
    "movedim", "narrow", "permute", "select", "squeeze", "transpose", "t", "T", "H", "mT",
    "mH", "real", "imag", "view_as_real", "unflatten", "unfold", "unsqueeze", "view",
    "view_as", "unbind", "split", "hsplit", "vsplit", "tensor_split", "split_with_sizes",
    "swapaxes", "swapdims", "chunk", "indices", "values",
)  # fmt: skip

# the page's views the programs do not take, and why
_VIEWS_NOT_FUZZED = {
    # torch's clone or elementwise result of a transposed tensor keeps its strides, and
    # limn's is row-major (torch.md): what reads the strides (as_strided) differs
    "as_strided": "depends on the memory layout",
    "detach": "a step of its own (OTHER)",
    "real": "complex dtypes: limn has none",
    "imag": "complex dtypes: limn has none",
    "view_as_real": "complex dtypes: limn has none",
    "indices": "sparse tensors: limn has none",
    "values": "sparse tensors: limn has none",
}


def _dims(t, k: int) -> bool:
    return t.ndim >= k and all(t.shape[:k])


# torch's views: "page name" or "page name:variant" -> the view a program takes of t
# (``a``, ``b`` its draws), or None where it does not apply to t's shape.
TORCH_VIEWS = {
    "slicing:rows": lambda t, a, b: t[a % t.shape[0] :: 1 + b % 3] if _dims(t, 1) else None,
    "slicing:cols": lambda t, a, b: (
        t[:, a % t.shape[1] : None : 1 + b % 2] if _dims(t, 2) else None
    ),
    "select:index": lambda t, a, b: t[a % t.shape[0]] if _dims(t, 1) else None,
    "select": lambda t, a, b: t.select(1, a % t.shape[1]) if _dims(t, 2) else None,
    "narrow": lambda t, a, b: t.narrow(0, a % t.shape[0], 1) if _dims(t, 1) else None,
    "transpose": lambda t, a, b: t.transpose(0, 1) if t.ndim >= 2 else None,
    "swapaxes": lambda t, a, b: t.swapaxes(0, -1) if t.ndim >= 2 else None,
    "swapdims": lambda t, a, b: t.swapdims(-1, 0) if t.ndim >= 2 else None,
    "t": lambda t, a, b: t.t() if t.ndim <= 2 else None,
    "T": lambda t, a, b: t.T if t.ndim == 2 else None,
    "H": lambda t, a, b: t.H if t.ndim == 2 else None,
    "mT": lambda t, a, b: t.mT if t.ndim >= 2 else None,
    "mH": lambda t, a, b: t.mH if t.ndim >= 2 else None,
    "adjoint": lambda t, a, b: t.adjoint() if t.ndim >= 2 else None,
    "permute": lambda t, a, b: t.permute(*reversed(range(t.ndim))),
    "movedim": lambda t, a, b: t.movedim(0, -1) if t.ndim >= 1 else None,
    "unflatten": lambda t, a, b: t.unflatten(0, (1, t.shape[0])) if t.ndim >= 1 else None,
    "unsqueeze": lambda t, a, b: t.unsqueeze(0) if t.ndim < 3 else None,
    "squeeze": lambda t, a, b: t.squeeze(0) if t.ndim and t.shape[0] == 1 else None,
    "view": lambda t, a, b: t.view(1, *t.shape) if t.ndim < 3 else None,
    "view_as": lambda t, a, b: t.view_as(t),
    "expand": lambda t, a, b: t.unsqueeze(0).expand(2, *t.shape) if t.ndim < 3 else None,
    "expand_as": lambda t, a, b: t[:1].expand_as(t) if _dims(t, 1) else None,
    "diagonal": lambda t, a, b: t.diagonal(a % 3 - 1) if t.ndim == 2 else None,
    "unfold": lambda t, a, b: t.unfold(0, 2, 2) if _dims(t, 1) and t.shape[0] >= 2 else None,
    "unbind": lambda t, a, b: t.unbind(0)[a % t.shape[0]] if _dims(t, 1) else None,
    "split": lambda t, a, b: t.split(2)[a % 2] if _dims(t, 1) and t.shape[0] >= 4 else None,
    "split_with_sizes": lambda t, a, b: (
        t.split_with_sizes([1, t.shape[0] - 1])[a % 2] if _dims(t, 1) and t.shape[0] >= 2 else None
    ),
    "hsplit": lambda t, a, b: (
        t.hsplit(2)[a % 2] if t.ndim >= 1 and t.shape[min(1, t.ndim - 1)] % 2 == 0 else None
    ),
    "vsplit": lambda t, a, b: t.vsplit(2)[a % 2] if t.ndim >= 2 and t.shape[0] % 2 == 0 else None,
    "chunk": lambda t, a, b: t.chunk(2)[-1] if _dims(t, 1) and t.shape[0] >= 2 else None,
    "tensor_split": lambda t, a, b: t.tensor_split(3)[a % 3] if _dims(t, 1) else None,
    # Not the page's: reshape and flatten are a view or a copy by the layout (torch's
    # docs: "user code shouldn't rely on whether it's view or not"); this reshape is a
    # view in both, whatever the layout (it splits the first dim)
    "reshape:split": lambda t, a, b: (
        t.reshape(2, -1, *t.shape[1:]) if _dims(t, 1) and t.shape[0] % 2 == 0 else None
    ),
}
# the views that read an element of their base more than once
_SPREAD = {"expand", "expand_as"}

# The writes Python and torch.nn spell (augmented assignments, item assignment,
# ``inplace=True``), not in OpInfo's list: name -> the write on t (``o`` another tensor of
# its shape, ``v`` a number).
SPELLINGS = {
    "relu(inplace)": lambda lib, t, o, v: lib.nn.functional.relu(t, inplace=True),
    "hardtanh(inplace)": lambda lib, t, o, v: lib.nn.functional.hardtanh(t, inplace=True),
    "setitem": lambda lib, t, o, v: t.fill_(v) if t.ndim == 0 else t.__setitem__(0, v),
    "mask_set": lambda lib, t, o, v: t.__setitem__(t > 0, v),
    "mask_values": lambda lib, t, o, v: t.__setitem__(t < 0, o[t < 0]),
    "index_set": lambda lib, t, o, v: t.__setitem__(lib.tensor([0]), v) if t.ndim else t,
    "clip_": lambda lib, t, o, v: t.clip_(min=-v),  # (clamp_'s alias)
    "iadd": lambda lib, t, o, v: t.__iadd__(v),
    "ipow": lambda lib, t, o, v: t.__ipow__(2),
    "isub": lambda lib, t, o, v: t.__isub__(o),
    "itruediv": lambda lib, t, o, v: t.__itruediv__(v),
    # (//= and %= of the integer dtypes: tests/test_writes_torch.py; of floats, they turn
    # the last-bit differences of a value grown large into whole units)
}


def _index(lib, t):
    return lib.tensor([0, t.shape[0] - 1]) if t.ndim else None


def _normal(o):  # o's subnormal elements 1
    return o.masked_fill((o.abs() < 1.1754944e-38) & (o != 0), 1.0)


def _reversed(lib, t):  # each row's positions reversed: an index with no repeats
    return lib.arange(t.shape[-1] - 1, -1, -1).expand(t.shape)


# the in-place ops of OpInfo that are neither unary nor binary: name -> the write (a
# matrix or index op given a copy of part of ``o``: torch's overlap checks differ by
# kernel, and an elementwise op's full overlap is what the programs test)
_ARGS = {
    "add_": lambda lib, t, o, v: t.add_(o, alpha=v),
    "fill_": lambda lib, t, o, v: t.fill_(v),
    "round_": lambda lib, t, o, v: t.round_(decimals=1),
    "mvlgamma_": lambda lib, t, o, v: t.abs_().add_(2).mvlgamma_(p=1),
    "clamp_": lambda lib, t, o, v: t.clamp_(-1.0, v),
    "addcdiv_": lambda lib, t, o, v: t.addcdiv_(o, o.abs() + 1, value=v),
    "addcmul_": lambda lib, t, o, v: t.addcmul_(o, o, value=v),
    "lerp_": lambda lib, t, o, v: t.lerp_(o, 0.25),
    "masked_fill_": lambda lib, t, o, v: t.masked_fill_(t > 0, v),
    "masked_scatter_": lambda lib, t, o, v: t.masked_scatter_(t > 0, o.clone()),
    "zero_": lambda lib, t, o, v: t.zero_(),
    "cumsum_": lambda lib, t, o, v: t.cumsum_(0) if t.ndim else t,
    "cumprod_": lambda lib, t, o, v: t.cumprod_(-1) if t.ndim else t,
    "tril_": lambda lib, t, o, v: t.tril_() if t.ndim == 2 else t,
    "triu_": lambda lib, t, o, v: t.triu_(1) if t.ndim == 2 else t,
    "renorm_": lambda lib, t, o, v: t.renorm_(2, 0, 1.0) if t.ndim >= 2 else t,
    "index_fill_": lambda lib, t, o, v: t.index_fill_(0, _index(lib, t), v) if t.ndim else t,
    "index_add_": lambda lib, t, o, v: (
        t.index_add_(0, _index(lib, t), o[:2].clone()) if t.ndim else t
    ),
    "index_copy_": lambda lib, t, o, v: (
        t.index_copy_(0, _index(lib, t)[:1], o[:1].clone()) if t.ndim else t
    ),
    "index_put_": lambda lib, t, o, v: (
        t.index_put_((_index(lib, t),), o[:2].clone(), accumulate=True) if t.ndim else t
    ),
    "scatter_": lambda lib, t, o, v: (
        t.scatter_(-1, _reversed(lib, t), o.clone()) if _dims(t, 1) else t
    ),
    "scatter_add_": lambda lib, t, o, v: (
        t.scatter_add_(-1, (o.abs() * 2).long() % t.shape[-1], o.clone()) if _dims(t, 1) else t
    ),
    "addmm_": lambda lib, t, o, v: (
        t.addmm_(o[:, :1].clone(), o[:1].clone(), alpha=0.5) if _dims(t, 2) else t
    ),
    "addmv_": lambda lib, t, o, v: (
        t.addmv_(o.unsqueeze(1).clone(), o[:1].clone(), beta=v)
        if t.ndim == 1 and _dims(t, 1)
        else t
    ),
    "addr_": lambda lib, t, o, v: t.addr_(o[:, 0].clone(), o[0].clone()) if _dims(t, 2) else t,
    # torch's vectorized float32 fmod and remainder are nan for a subnormal divisor (its
    # 0-d path and limn's give the exact remainder, docs/torch.md): divisors made normal
    "fmod_": lambda lib, t, o, v: t.fmod_(_normal(o)),
    "remainder_": lambda lib, t, o, v: t.remainder_(_normal(o)),
    # the metadata writes: t takes another shape (an identity view's base keeps its own)
    "t_": lambda lib, t, o, v: t.t_() if t.ndim <= 2 else t,
    "transpose_": lambda lib, t, o, v: t.transpose_(0, -1) if t.ndim else t,
    "squeeze_": lambda lib, t, o, v: t.squeeze_(),
    "unsqueeze_": lambda lib, t, o, v: t.unsqueeze_(0) if t.ndim < 3 else t,
}
# OpInfo's in-place ops limn has that the programs do not call, and why
_NOT_FUZZED = {
    "addbmm_": "a 3-d batch of matrices the programs' 2-d tensors are not",
    "baddbmm_": "a 3-d batch of matrices the programs' 2-d tensors are not",
    "float_power_": "float64 results: the programs' tensors are float32 (refused alike)",
    # (OpInfo holds it to torch within its tolerance)
    "polygamma_": "at a pole torch's float32 is finite (1.29e15 at 0), limn's inf",
    "floor_divide_": "-1 // inf: torch's -1 (Python's), limn's -0 (ir/graph/functions)",
    "copysign_": "reads a nan's sign, which torch's pow (x86's nan) and limn's differ on",
    "erfc_": "flushes to 0 from 9 up (torch's 4.1e-37 at 9): a later x > 0 flips",
    "i0_": "torch's float32 i0 is nan at inf and 1 - 6e-8 at 0 (limn's inf and 1)",
}
for _name in ("cauchy_", "exponential_", "geometric_", "log_normal_", "normal_", "uniform_"):
    _NOT_FUZZED[_name] = "draws random numbers: torch's generator is not limn's"


def _opinfo_inplace() -> dict[str, str]:
    """Each ``inplace_variant`` of OpInfo's database, by its method's name: "unary",
    "binary" or "other"."""
    kinds = {}
    for op in op_db:
        name = getattr(op.inplace_variant, "__name__", "")
        if name.endswith("_"):
            kind = {UnaryUfuncInfo: "unary", BinaryUfuncInfo: "binary"}.get(type(op), "other")
            kinds[name] = kind if isinstance(op, (UnaryUfuncInfo, BinaryUfuncInfo)) else "other"
    return kinds


def _write(name: str, kind: str):
    if name in _ARGS:
        return _ARGS[name]
    if kind == "unary":
        return lambda lib, t, o, v: getattr(t, name)()
    return lambda lib, t, o, v: getattr(t, name)(o)


OPINFO_INPLACE = _opinfo_inplace()
INPLACE = dict(SPELLINGS)
for _name, _kind in sorted(OPINFO_INPLACE.items()):
    if hasattr(limn.Tensor, _name) and _name not in _NOT_FUZZED:
        if _kind != "other" or _name in _ARGS:
            INPLACE[_name] = _write(_name, _kind)

# writes torch makes through an expand (of one value, index_put_'s, deprecated, a triangle's,
# a real conj's, which writes nothing) and limn refuses (docs/torch.md)
_ONE_VALUE = {"masked_fill_", "fill_", "zero_", "mask_set", "mask_values", "index_fill_",
              "index_set", "index_put_", "tril_", "triu_", "conj_physical_"}  # fmt: skip


# every way a value leaves limn: name -> what a program reads of t
READS = {
    "numpy": lambda t: np.array(t.detach().numpy()),
    "asarray": lambda t: np.array(np.asarray(t.detach())),
    "item": lambda t: t.sum().item(),
    "float": lambda t: float(t.detach().reshape(-1)[0]) if t.numel() else 0.0,
    "tolist": lambda t: t.tolist(),
    "repr": lambda t: len(repr(t)) * 0,
}

VIEWS, WRITES = list(TORCH_VIEWS), list(INPLACE)
OTHER = ["clone", "detach", "math", "hop", "loss", "nograd_write", "backward", "opt_step",
         "array_write", "array_read", *READS]  # fmt: skip
KINDS = VIEWS + WRITES + OTHER
NUMBERS = (-1.5, 0.5, 2.0, 3.0)
# a read agrees to this relative tolerance: a chain of in-place math (erfc_ then rsqrt_)
# carries each op's last-bit differences from torch's up to about 3e-5; a missed or
# stale write differs by far more
RTOL = 1e-4


@st.composite
def programs(draw, max_steps: int = 12):
    n = draw(st.integers(1, max_steps))
    steps = []
    for _ in range(n):
        kind = draw(st.sampled_from(KINDS))
        steps.append((kind, draw(st.integers(0, 7)), draw(st.integers(0, 7)),
                      draw(st.sampled_from(NUMBERS))))  # fmt: skip
    opt = draw(st.sampled_from(["sgd", "adamw"]))
    return opt, steps


def draw_program(rng: random.Random, max_steps: int = 20):
    """A program as ``programs`` draws one, from ``rng`` (the slow run's)."""
    n = rng.randint(1, max_steps)
    steps = [(rng.choice(KINDS), rng.randint(0, 7), rng.randint(0, 7), rng.choice(NUMBERS))
             for _ in range(n)]  # fmt: skip
    return rng.choice(["sgd", "adamw"]), steps


class _Lib:
    """One side of the comparison: torch, or limn on a device."""

    def __init__(self, lib, device=None, other=None, dtype=np.float32):
        self.lib, self.device, self.other, self.dtype = lib, device, other, dtype
        self.torch = lib is torch

    def tensor(self, a, requires_grad=False):
        if self.torch:
            return torch.tensor(a, requires_grad=requires_grad)
        return limn.tensor(a, requires_grad=requires_grad, device=self.device)

    def from_numpy(self, a):
        return torch.from_numpy(a) if self.torch else limn.from_numpy(a)

    def hop(self, t):
        if self.torch:
            return t.detach().clone()
        return t.detach().to(self.other).to(self.device)

    def optimizer(self, kind, groups):
        mod = torch.optim if self.torch else optim
        if kind == "sgd":
            return mod.SGD(groups, lr=0.1, momentum=0.9)
        return mod.AdamW(groups, lr=0.05, weight_decay=0.1)


def interpret(side: _Lib, program, seed: int) -> list[tuple[str, object]]:
    """Run ``program``: (the step's kind, what it read) for each step (None where it
    reads nothing, ("error", its type, its message) where it raised), then the values
    every tensor ends with."""
    lib = side.lib
    rng = np.random.default_rng(seed)
    x0, x1, w0, u0, a0 = (
        rng.standard_normal(SHAPE).astype(np.float32).astype(side.dtype) for _ in range(5)
    )
    ts = [side.tensor(x0), side.tensor(x1), side.from_numpy(a0)]  # a0: memory shared
    w, u = side.tensor(w0, requires_grad=True), side.tensor(u0, requires_grad=True)
    opt_kind, steps = program
    opt = side.optimizer(opt_kind, [{"params": [w]}, {"params": [u], "lr": 0.02}])
    loss, out = None, []
    spread = [False, False, False]  # an expand, or an alias of one: reads an element twice
    memory = [0, 1, 2]  # the memory each tensor reads (a view's is its base's)

    def keep(r, spreads: bool = False, mem: int | None = None) -> None:
        ts.append(r)
        spread.append(spreads)
        memory.append(len(memory) if mem is None else mem)

    for kind, a, b, v in steps:
        t = ts[a % len(ts)]
        o = ts[b % len(ts)]
        # o reads an element of t's memory twice: where torch's loop reads what it wrote
        # (told by position, not by identity)
        expanded_alias = spread[b % len(ts)] and memory[b % len(ts)] == memory[a % len(ts)]
        expanded_alias = expanded_alias and o.shape == t.shape
        read = None
        try:
            if kind in TORCH_VIEWS:
                r = TORCH_VIEWS[kind](t, a, b)
                if r is not None:
                    keep(r, kind in _SPREAD or spread[a % len(ts)], memory[a % len(ts)])
            elif kind in _ONE_VALUE and spread[a % len(spread)]:
                pass  # torch writes one value through an expand; limn refuses (docs/torch.md)
            elif kind in INPLACE and a % len(ts) != b % len(ts) and expanded_alias:
                pass  # torch's overlap check gives up on this input (torch.md): not compared
            elif kind in INPLACE:
                other = o if o.shape == t.shape else t.clone()
                INPLACE[kind](lib, t, other, v)
            elif kind in READS:
                read = READS[kind](t)
            elif kind == "clone":
                keep(t.clone())
            elif kind == "detach":
                keep(t.detach(), spread[a % len(ts)], memory[a % len(ts)])
            elif kind == "math":
                keep(t * v + (o if o.shape == t.shape else 1.0))
            elif kind == "array_read":  # the shared array's memory
                read = a0.copy()
            elif kind == "array_write":
                if not side.torch:  # a lazy value reads the array when computed (torch.md)
                    limn.realize(*ts, *(p.grad for p in (w, u) if p.grad is not None))
                a0[a % SHAPE[0], b % SHAPE[1]] = v
            elif kind == "hop":
                keep(side.hop(t))
            elif kind == "loss":
                x = t if t.shape == SHAPE else ts[0]
                loss = (w * w * x).sum() + (u * x).sum()
            elif kind == "nograd_write":
                with lib.no_grad():
                    (w if a % 2 else u).mul_(v)
            elif kind == "backward" and loss is not None:
                try:
                    loss.backward()
                finally:
                    loss = None
                read = [np.array(w.grad.numpy()), np.array(u.grad.numpy())]
                if b % 2:  # held, and written in place by a later backward or zero_grad
                    keep(w.grad)
                opt.zero_grad(set_to_none=a % 2 == 0)
            elif kind == "opt_step":
                loss = ((w * ts[0]).sum() + (u * u).sum()) * 0.5
                loss.backward()
                loss = None
                opt.step()
                opt.zero_grad()
                read = [np.array(w.detach().numpy()), np.array(u.detach().numpy())]
        except Exception as e:  # noqa: BLE001 (any refusal, compared with torch's)
            read = ("error", type(e).__name__, str(e)[:160])
        out.append((kind, read))
    out += [("end: w", np.array(w.detach().numpy())), ("end: array", a0.copy())]
    out += [("end: tensor", np.array(t.detach().numpy())) for t in ts]
    return out


def compare(program, seed: int, device: str) -> tuple[str, str] | None:
    """Where limn's run of ``program`` parts from torch's: (the kind of the failure, what
    it read), or None where every read agrees."""
    other = "numpy" if device == "c" else ("c" if "c" in _devices() else "numpy")
    want = interpret(_Lib(torch), program, seed)
    try:
        got = interpret(_Lib(limn, device, other), program, seed)
    except Exception as e:  # noqa: BLE001 (an error no step caught: a crash)
        return f"crash: {type(e).__name__}", str(e)[:200]
    wide = None  # torch's float64 run of the program, read where a value differs
    for i, ((kind, g), (_, w)) in enumerate(zip(got, want)):
        if g is None and w is None:
            continue
        if isinstance(w, tuple) and w[:1] == ("error",):
            if not (isinstance(g, tuple) and g[:1] == ("error",)):
                return f"accepted what torch refuses: {kind}", f"torch: {w[1]}: {w[2]}"
        elif isinstance(g, tuple) and g[:1] == ("error",):
            return f"refused what torch accepts: {kind} ({g[1]})", g[2]
        else:
            try:
                np.testing.assert_allclose(g, w, rtol=RTOL, atol=2e-5)
            except (AssertionError, ValueError) as e:
                if wide is None:
                    wide = _wide_reads(program, seed)
                if not _rounding(g, w, wide[i][1] if i < len(wide) else None):
                    return f"wrong value: {kind}", str(e).strip().splitlines()[-1][:200]
                ROUNDING[0] += 1
    if len(got) != len(want):
        return "reads of another count", f"{len(got)} != {len(want)}"
    return None


# reads excused by ``_rounding`` (the slow run reports how many)
ROUNDING = [0]


def _wide_reads(program, seed: int) -> list:
    try:
        return interpret(_Lib(torch, dtype=np.float64), program, seed)
    except Exception:  # noqa: BLE001 (no float64 run: nothing excused)
        return []


def _rounding(g, w, wide) -> bool:
    """Whether limn's read ``g`` is as near torch's float64 run of the program (``wide``)
    as torch's float32 read ``w`` is, within twice its distance, in every element: a
    last-bit difference that an ill-conditioned op grew (``tan_`` near a pole, ``log_``
    of ``digamma_`` near its root), not a missed or stale write, which is far from both;
    or is the float64 run's read, where a jump made torch's float32 one far from both
    (torch's float32 ``atan2(a, a)`` is 1 ulp below pi/4, limn's the nearest float: a sum
    with -pi/4 a zero of the other sign, rounded, then ``digamma_``: inf or -inf)."""
    try:
        g, w, wide = (np.asarray(a, np.float64) for a in (g, w, wide))
    except (TypeError, ValueError):  # an error, or reads of another structure
        return False
    if not g.shape == w.shape == wide.shape:
        return False
    with np.errstate(invalid="ignore"):  # (inf - inf)
        near = np.abs(g - wide) <= 2 * np.abs(w - wide) + 2e-5
    near |= np.isclose(g, wide, rtol=RTOL, atol=2e-5)  # (past a jump: a zero's sign, a round)
    return bool(np.all(near | np.isclose(g, w, rtol=RTOL, atol=2e-5, equal_nan=True)))


def check(program, seed: int, device: str) -> None:
    failure = compare(program, seed, device)
    assert failure is None, (failure, program, seed)


def run(n: int, device: str, start: int = 0, max_steps: int = 20, out=sys.stdout) -> dict:
    """Run programs ``start`` .. ``start + n - 1`` (each drawn from its own number) on
    ``device``, going on after a failure: every failure, grouped by its kind (kind ->
    [(program number, what it read, the program)], shortest program first), and a summary
    printed to ``out``."""
    groups: dict[str, list] = collections.defaultdict(list)
    t0 = time.time()
    for i in range(start, start + n):
        rng = random.Random(i)
        program, seed = draw_program(rng, max_steps), rng.randrange(2**16)
        failure = compare(program, seed, device)
        if failure is not None:
            groups[failure[0]].append((i, failure[1], program, seed))
        if out is not None and (i - start + 1) % 500 == 0:
            print(f"{i - start + 1} programs, {sum(map(len, groups.values()))} failures, "
                  f"{time.time() - t0:.0f} s", file=out, flush=True)  # fmt: skip
    for found in groups.values():
        found.sort(key=lambda f: len(f[2][1]))
    if out is not None:
        failed = sum(map(len, groups.values()))
        print(f"{device}: {n} programs, {failed} failed, in {len(groups)} kinds; {ROUNDING[0]} "
              "reads differed by rounding alone (``_rounding``)", file=out)  # fmt: skip
        for kind, found in sorted(groups.items(), key=lambda g: -len(g[1])):
            i, what, program, seed = found[0]
            print(f"  {len(found):5d}  {kind}\n         e.g. program {i} (seed {seed}): "
                  f"{program}\n         {what}", file=out)  # fmt: skip
    return dict(groups)


_SETTINGS = dict(
    deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@settings(max_examples=300, **_SETTINGS)
@given(program=programs(), seed=st.integers(0, 2**16))
def test_random_programs_of_writes_and_views_read_what_torch_reads(device, program, seed):
    check(program, seed, device)


@pytest.mark.slow
def test_random_programs_of_writes_and_views_read_what_torch_reads_long(device):
    """The slow run: every failure of ``LIMN_FUZZ`` programs (20,000 unless set), grouped."""
    assert run(int(os.environ.get("LIMN_FUZZ", 20_000)), device) == {}


def test_the_fuzzed_sets_are_torchs_lists():
    """The views are the ops of torch's "Tensor Views" page, each a view by its ATen
    schema, every one taken or left out with a reason; the in-place ops are OpInfo's,
    every one limn has called or left out with a reason."""
    for name in TENSOR_VIEWS_PAGE:
        aten = {"T": "numpy_T", "H": "matrix_H", "slicing": "slice"}.get(name, name)
        overloads = getattr(torch.ops.aten, aten)
        schemas = [getattr(overloads, o)._schema for o in overloads.overloads()]
        assert any(r.alias_info is not None for s in schemas for r in s.returns), name
    taken = {k.split(":")[0] for k in TORCH_VIEWS} - {"reshape"}
    assert taken.isdisjoint(_VIEWS_NOT_FUZZED)
    assert taken | set(_VIEWS_NOT_FUZZED) == set(TENSOR_VIEWS_PAGE)
    has = {n for n in OPINFO_INPLACE if hasattr(limn.Tensor, n)}
    assert len(has) > 100
    assert has == (set(INPLACE) - set(SPELLINGS)) | set(_NOT_FUZZED)
    assert set(_ARGS) <= has


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="the slow run: every failure, grouped")
    parser.add_argument("--programs", type=int, default=20_000)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--device", default="numpy")
    parser.add_argument("--max-steps", type=int, default=20)
    opts = parser.parse_args()
    limn.set_device(opts.device)
    sys.exit(1 if run(opts.programs, opts.device, opts.start, opts.max_steps) else 0)


# ---- shrunk failures ----------------------------------------------------------------------


def test_a_pad_of_a_view_is_a_copy_and_a_flip_of_an_alias_is_a_copy(device):
    """Found while fuzzing: torch's F.pad and flip() copy; a write to one leaves the base."""
    check(
        ("sgd", [("slicing:rows", 0, 0, 2.0), ("clone", 2, 0, 2.0), ("add_", 2, 0, 2.0)]), 3, device
    )


def test_zero_through_an_expand_is_refused_not_miswritten(device):
    """Found while fuzzing: torch writes one value through an expand (``zero_``, ``fill_``,
    ``masked_fill_``); limn refuses any write through a view that reads an element twice,
    rather than writing it wrong (a listed deviation)."""
    x = limn.tensor(np.ones((2, 3), np.float32))
    with pytest.raises(RuntimeError, match="more than once"):
        x[0].unsqueeze(0).expand(2, 3).zero_()
    np.testing.assert_array_equal(x.numpy(), np.ones((2, 3)))


def test_an_in_place_op_reading_its_targets_memory_in_another_layout_is_refused(device):
    """Found while fuzzing: lerp_ of an unfold by its own permute (torch: partial overlap);
    and two size-1 row slices of one array, whose strides differ only on the size-1 dim."""
    check(("sgd", [("unfold", 0, 0, 2.0), ("permute", 3, 0, 2.0), ("lerp_", 3, 4, 2.0)]), 0, device)
    rows = [("slicing:rows", 2, 1, 2.0), ("slicing:rows", 2, 2, 2.0), ("lerp_", 3, 4, 2.0)]
    check(("sgd", rows), 0, device)


def test_a_0d_tensor_takes_a_mask_write_and_copy_into_itself_through_an_expand(device):
    """Found while fuzzing: x[x > 0] = v on a 0-d tensor (numpy's new dim of 1), and
    x.copy_(x) of an expand (torch's: nothing to do)."""
    check(
        (
            "sgd",
            [("select:index", 0, 0, 2.0), ("select:index", 3, 0, 2.0), ("mask_set", 4, 0, 2.0)],
        ),
        1,
        device,
    )
    check(("sgd", [("expand", 0, 0, 2.0), ("copy_", 3, 3, 2.0)]), 2, device)


def test_a_view_read_alone_is_then_viewed_in_its_storages_layout(device):
    """Found while fuzzing: the diagonal of a transpose read (tolist) before, written."""
    prog = [("transpose", 0, 0, 2.0), ("tolist", 3, 0, 2.0), ("diagonal", 3, 0, 2.0)]
    check(("sgd", [*prog, ("add_", 4, 0, 2.0)]), 3, device)


def test_two_views_of_one_element_that_torch_strides_alike_copy_into_each_other(device):
    """Found by the slow fuzz: copy_ between a narrow and a slice of one column's element
    (torch: the same strides, a full overlap, accepted); one row as two slices of steps
    2 and 3 differs on the size-1 dim's stride (a partial overlap): refused."""
    steps = [("select", 0, 0, 2.0), ("slicing:rows", 3, 0, 0.5), ("narrow", 3, 0, 2.0)]
    check(("sgd", [*steps, ("copy_", 5, 4, 2.0)]), 0, device)
    for lib in (torch, limn):
        t = lib.tensor(np.arange(24, dtype=np.float32).reshape(4, 6))
        with pytest.raises(RuntimeError, match="single memory location"):
            t[2::2].copy_(t[2::3])


def test_a_diagonal_of_a_transposes_chunk_after_an_index_write_is_a_view(device):
    """Found by the slow fuzz: after ``t[idx] = v`` the storage's value is itself a VIEW
    node; the chunk's layout was judged against that node's view, not the storage's, and
    the diagonal became a copy that a later square_ of the transpose did not reach."""
    prog = [("T", 1, 1, 3.0), ("chunk", 3, 2, 3.0), ("index_set", 6, 6, -1.5)]
    check(("sgd", [*prog, ("diagonal", 4, 3, 2.0), ("square_", 3, 6, 0.5)]), 7251, device)
    for lib in (torch, limn):
        x = lib.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
        x[lib.tensor([0])] = -1.0
        assert x.contiguous() is x  # (the storage's own layout: torch's contiguous() is x)


def test_an_in_place_op_whose_input_overlaps_its_strided_target_reads_the_values_before(device):
    """Found by the slow fuzz (torch.md): torch's overlap check gives up on a target that
    is not dense and its loop reads an element it already wrote; limn reads the inputs as
    they were, torch's answer given a clone of the input."""
    got = limn.tensor(np.arange(8, dtype=np.float32).reshape(4, 2))
    want = torch.tensor(np.arange(8, dtype=np.float32).reshape(4, 2))
    o, c = got[0:2], want[0:2].clone()
    got[1::2].addcdiv_(o, o.abs() + 1, value=0.5)
    want[1::2].addcdiv_(c, c.abs() + 1, value=0.5)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_sign_of_a_nan_is_zero_and_a_scatter_keeps_a_negative_zero(device):
    """Found by the slow fuzz: torch's sign (and sgn) of a nan is 0; scatter_ placed
    each value onto +0.0, so a -0.0 scattered became +0.0 (and atan2 of it pi, not -pi)."""
    nan = np.array([np.nan, -0.0, -2.0, 3.0], np.float32)
    for lib in (torch, limn):
        np.testing.assert_array_equal(lib.tensor(nan).sign().numpy(), [0, 0, -1, 1])
        np.testing.assert_array_equal(lib.tensor(nan).sgn_().numpy(), [0, 0, -1, 1])
        x = lib.zeros(1, 3).scatter_(1, lib.tensor([[2, 1, 0]]), lib.tensor([[-0.0, 1.0, -0.0]]))
        np.testing.assert_array_equal(np.signbit(x.numpy()), [[True, False, True]])


def test_mvlgamma_below_its_domain_and_adjoint_are_torchs(device):
    """Found by the fuzz: torch's mvlgamma checks no domain (a nan, or a value at or below
    (p - 1) / 2, gives lgamma's sum, inf at its poles); adjoint() is mT, a view."""
    x = np.array([np.nan, 0.5, -1.0, -0.5, 2.0], np.float32)
    for p in (1, 3):
        want = torch.tensor(x).mvlgamma(p=p).numpy()
        np.testing.assert_allclose(limn.tensor(x).mvlgamma(p=p).numpy(), want, 1e-6, 1e-6)
    m = limn.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    m.adjoint().mul_(2)
    np.testing.assert_array_equal(m.numpy(), np.arange(6).reshape(2, 3) * 2)
    with pytest.raises(ValueError, match="adjoint"):
        limn.ones(3).adjoint()


def test_lgamma_is_zero_at_one_and_two_and_its_gradient_finite_at_the_integers(device):
    """Found by the slow fuzz: lgamma(2) was 1.8e-15 (mvlgamma_ then x / x: 1, torch's
    nan); and its gradient at 1, 2, 3, ... was nan (the reflection's pole, not taken, was
    differentiated)."""
    x = np.array([1.0, 2.0, 3.0, 0.5, -0.5, 2.5, 100.0, -2.5, 1e-3], np.float32)
    got, want = limn.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    for t in (got, want):
        t.lgamma().sum().backward()
    np.testing.assert_array_equal(got.lgamma().detach().numpy()[:2], [0, 0])
    np.testing.assert_allclose(got.lgamma().detach().numpy(), want.lgamma().detach(), 1e-6)
    np.testing.assert_allclose(got.grad.numpy(), want.grad.numpy(), 1e-5)


def test_a_view_to_its_own_shape_computes_a_size_1_dims_stride_as_torchs(device):
    """Found while fuzzing: torch's view and reshape to a tensor's own shape compute a
    size-1 dim's stride afresh (``a[2::2]``'s (12, 1) becomes (6, 1)), so an in-place op
    reading one overlaps its target partially (refused); a permute that moves nothing keeps
    the stride (accepted)."""
    rows = [("slicing:rows", 2, 1, 0.5), ("view_as", 3, 0, 0.5), ("div_", 3, 4, 0.5)]
    check(("adamw", rows), 6336, device)
    rows[1] = ("permute", 3, 0, 0.5)
    check(("adamw", rows), 6336, device)


def test_a_difference_an_ill_conditioned_op_grew_is_told_from_a_wrong_write(device):
    """Found while fuzzing: ``log_`` of ``digamma_`` near digamma's root (1.4616) reads
    5.6e-4 from torch's float32: both sides' digamma are ~1e-7 from the true value, which
    the log grows. The read is as near torch's float64 run as torch's float32 one is, so
    it passes; a stale value, far from both, does not."""
    steps = [("select", 1, 0, 3.0), ("view", 6, 6, -1.5), ("swapdims", 1, 4, -1.5),
             ("scatter_add_", 1, 4, 0.5), ("add_", 7, 4, -1.5), ("digamma_", 1, 5, 3.0),
             ("log_", 5, 4, -1.5)]  # fmt: skip
    check(("adamw", steps), 64657, device)
    w, wide = np.array([1.0, 2.0]), np.array([1.0001, 2.0])
    assert _rounding(np.array([1.0002, 2.0]), w, wide)
    assert not _rounding(np.array([1.5, 2.0]), w, wide)
    assert not _rounding(np.array([np.nan, 2.0]), w, wide)
    steps = [("expand_as", 7, 2, 2.0), ("atan2_", 2, 2, -1.5), ("swapaxes", 2, 7, 0.5),
             ("cumsum_", 4, 2, -1.5), ("round_", 4, 5, 3.0), ("digamma_", 2, 2, 3.0)]  # fmt: skip
    check(("adamw", steps), 33272, device)
