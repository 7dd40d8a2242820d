"""A differential fuzzer of writes against torch: random programs, run in both, compared.

A program is a list of steps over a few tensors (one of them ``from_numpy`` memory): the
in-place ops of ``INPLACE`` (torch's in-place methods, augmented assignments, index and
mask writes, ``inplace=True``), the views of ``TORCH_VIEWS`` (torch's "Tensor Views"
list), ``clone``, ``detach``, a hop to the other host device and back, reads
(``.numpy()``, ``.item()``, ``.tolist()``, ``repr``, the shared array, ``.grad``, a
gradient tensor held across backwards), a loss built from a parameter, ``no_grad``
writes, ``backward``, and optimizer steps (SGD or AdamW, two parameter groups). ``interpret`` runs
it with torch and with limn; every read must agree, and every step torch refuses must be
refused by limn (and the other way round). 300 programs run in the default suite on its
device (``LIMN_DEVICE``: numpy, and c in the suite's second pass), 20,000 in the slow one
(``pytest -m slow tests/test_write_fuzz.py``, and ``LIMN_DEVICE=c``). A failure
hypothesis shrinks becomes a named test below.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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


# torch's views, by the names of its "Tensor Views" page: name -> the view a program takes
# of t (``a``, ``b`` its draws), or None where it does not apply to t's shape. A view torch
# adds joins the fuzzed set by being named here.
def _dims(t, k: int) -> bool:
    return t.ndim >= k and all(t.shape[:k])


TORCH_VIEWS = {
    "rows": lambda t, a, b: t[a % t.shape[0] :: 1 + b % 3] if _dims(t, 1) else None,
    "cols": lambda t, a, b: t[:, a % t.shape[1] : None : 1 + b % 2] if _dims(t, 2) else None,
    "select0": lambda t, a, b: t[a % t.shape[0]] if _dims(t, 1) else None,
    "select1": lambda t, a, b: t.select(1, a % t.shape[1]) if _dims(t, 2) else None,
    "narrow": lambda t, a, b: t.narrow(0, a % t.shape[0], 1) if _dims(t, 1) else None,
    "transpose": lambda t, a, b: t.transpose(0, 1) if t.ndim >= 2 else None,
    "swapaxes": lambda t, a, b: t.swapaxes(0, -1) if t.ndim >= 2 else None,
    "t": lambda t, a, b: t.t() if t.ndim <= 2 else None,
    "T": lambda t, a, b: t.T if t.ndim == 2 else None,
    "mT": lambda t, a, b: t.mT if t.ndim >= 2 else None,
    "permute": lambda t, a, b: t.permute(*reversed(range(t.ndim))),
    "movedim": lambda t, a, b: t.movedim(0, -1) if t.ndim >= 1 else None,
    "unflatten": lambda t, a, b: t.unflatten(0, (1, t.shape[0])) if t.ndim >= 1 else None,
    "unsqueeze": lambda t, a, b: t.unsqueeze(0) if t.ndim < 3 else None,
    "squeeze": lambda t, a, b: t.squeeze(0) if t.ndim and t.shape[0] == 1 else None,
    "expand": lambda t, a, b: t.unsqueeze(0).expand(2, *t.shape) if t.ndim < 3 else None,
    "diagonal": lambda t, a, b: t.diagonal(a % 3 - 1) if t.ndim == 2 else None,
    "unfold": lambda t, a, b: t.unfold(0, 2, 2) if _dims(t, 1) and t.shape[0] >= 2 else None,
    "unbind": lambda t, a, b: t.unbind(0)[a % t.shape[0]] if _dims(t, 1) else None,
    "split": lambda t, a, b: t.split(2)[a % 2] if _dims(t, 1) and t.shape[0] >= 4 else None,
    "chunk": lambda t, a, b: t.chunk(2)[-1] if _dims(t, 1) and t.shape[0] >= 2 else None,
    "tensor_split": lambda t, a, b: t.tensor_split(3)[a % 3] if _dims(t, 1) else None,
    # Not here: what depends on the memory layout, where torch's clone or elementwise
    # result of a transposed tensor keeps its strides and limn's is row-major (torch.md):
    # as_strided, and reshape, flatten and contiguous, a view or a copy by the layout
    # (torch's docs: "user code shouldn't rely on whether it's view or not").
    "reshape_split": lambda t, a, b: (
        t.reshape(2, -1, *t.shape[1:]) if _dims(t, 1) and t.shape[0] % 2 == 0 else None
    ),
}

# torch's in-place ops (OpInfo's ``inplace_variant``s of ops limn has, and the spellings
# Python and torch.nn give them): name -> the write on t (``o`` another tensor of its
# shape, ``v`` a number). An in-place op torch adds joins the fuzzed set by being named.
INPLACE = {
    "add_": lambda lib, t, o, v: t.add_(v),
    "add_t": lambda lib, t, o, v: t.add_(o, alpha=v),
    "sub_": lambda lib, t, o, v: t.sub_(o),
    "mul_": lambda lib, t, o, v: t.mul_(v),
    "div_": lambda lib, t, o, v: t.div_(v),
    "copy_": lambda lib, t, o, v: t.copy_(o),
    "zero_": lambda lib, t, o, v: t.zero_(),
    "fill_": lambda lib, t, o, v: t.fill_(v),
    "clamp_": lambda lib, t, o, v: t.clamp_(-1.0, v),
    "clip_": lambda lib, t, o, v: t.clip_(min=-v),
    "masked_fill_": lambda lib, t, o, v: t.masked_fill_(t > 0, v),
    "exp_": lambda lib, t, o, v: t.exp_(),
    "tanh_": lambda lib, t, o, v: t.tanh_(),
    "sigmoid_": lambda lib, t, o, v: t.sigmoid_(),
    "abs_": lambda lib, t, o, v: t.abs_(),
    "neg_": lambda lib, t, o, v: t.neg_(),
    "floor_": lambda lib, t, o, v: t.floor_(),
    "square_": lambda lib, t, o, v: t.square_(),
    "sign_": lambda lib, t, o, v: t.sign_(),
    "lerp_": lambda lib, t, o, v: t.lerp_(o, 0.25),
    "addcmul_": lambda lib, t, o, v: t.addcmul_(o, o, value=v),
    "addcdiv_": lambda lib, t, o, v: t.addcdiv_(o, o.abs() + 1, value=v),
    "relu_": lambda lib, t, o, v: lib.nn.functional.relu(t, inplace=True),
    "hardtanh_": lambda lib, t, o, v: lib.nn.functional.hardtanh(t, inplace=True),
    "index_fill_": lambda lib, t, o, v: t.index_fill_(0, lib.tensor([0]), v) if t.ndim else t,
    "setitem": lambda lib, t, o, v: t.fill_(v) if t.ndim == 0 else t.__setitem__(0, v),
    "mask_set": lambda lib, t, o, v: t.__setitem__(t > 0, v),
    "mask_values": lambda lib, t, o, v: t.__setitem__(t < 0, o[t < 0]),
    "index_set": lambda lib, t, o, v: t.__setitem__(lib.tensor([0]), v) if t.ndim else t,
    "iadd": lambda lib, t, o, v: t.__iadd__(v),
    "ipow": lambda lib, t, o, v: t.__ipow__(2),
    "isub": lambda lib, t, o, v: t.__isub__(o),
    "itruediv": lambda lib, t, o, v: t.__itruediv__(v),
    # (//= and %= of the integer dtypes: tests/test_writes_torch.py; of floats, they turn
    # the last-bit differences of a value grown large into whole units)
}
# writes torch makes through an expand (of one value, or index_put_'s, deprecated) and limn
# refuses (docs/torch.md)
_ONE_VALUE = {"masked_fill_", "fill_", "zero_", "mask_set", "mask_values", "index_fill_",
              "index_set"}  # fmt: skip

VIEWS, WRITES = list(TORCH_VIEWS), list(INPLACE)
OTHER = ["clone", "detach", "math", "read", "item", "tolist", "repr", "hop", "loss",
         "nograd_write", "backward", "opt_step", "array_write"]  # fmt: skip


@st.composite
def programs(draw, max_steps: int = 12):
    n = draw(st.integers(1, max_steps))
    steps = []
    for _ in range(n):
        kind = draw(st.sampled_from(VIEWS + WRITES + OTHER))
        steps.append((kind, draw(st.integers(0, 7)), draw(st.integers(0, 7)),
                      draw(st.sampled_from([-1.5, 0.5, 2.0, 3.0]))))  # fmt: skip
    opt = draw(st.sampled_from(["sgd", "adamw"]))
    return opt, steps


class _Lib:
    """One side of the comparison: torch, or limn on a device."""

    def __init__(self, lib, device=None, other=None):
        self.lib, self.device, self.other = lib, device, other
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


def interpret(side: _Lib, program, seed: int):
    """Run ``program``: a list of what each step read, or ("error",) where it raised."""
    lib = side.lib
    rng = np.random.default_rng(seed)
    x0, x1, w0, u0, a0 = (rng.standard_normal(SHAPE).astype(np.float32) for _ in range(5))
    ts = [side.tensor(x0), side.tensor(x1), side.from_numpy(a0)]  # a0: memory shared
    w, u = side.tensor(w0, requires_grad=True), side.tensor(u0, requires_grad=True)
    opt_kind, steps = program
    opt = side.optimizer(opt_kind, [{"params": [w]}, {"params": [u], "lr": 0.02}])
    loss, out = None, []
    spread = [False, False, False]  # an expand, or an alias of one: reads an element twice
    for kind, a, b, v in steps:
        t = ts[a % len(ts)]
        o = ts[b % len(ts)]
        try:
            if kind in VIEWS:
                r = TORCH_VIEWS[kind](t, a, b)
                if r is not None:
                    ts.append(r)
                    spread.append(kind == "expand" or spread[a % len(spread)])
            elif kind in _ONE_VALUE and spread[a % len(spread)]:
                pass  # torch writes one value through an expand; limn refuses (docs/torch.md)
            elif kind in WRITES:
                other = o if o.shape == t.shape else t.clone()
                INPLACE[kind](lib, t, other, v)
            elif kind == "clone":
                ts.append(t.clone())
                spread.append(False)
            elif kind == "detach":
                ts.append(t.detach())
                spread.append(spread[a % len(spread)])
            elif kind == "math":
                ts.append(t * v + (o if o.shape == t.shape else 1.0))
                spread.append(False)
            elif kind == "read":
                out.append(np.array(t.detach().numpy()))
            elif kind == "item":
                out.append(t.sum().item())
            elif kind == "tolist":
                out.append(t.tolist())
            elif kind == "repr":
                repr(t)
            elif kind == "hop":
                ts.append(side.hop(t))
                spread.append(False)
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
                out += [np.array(w.grad.numpy()), np.array(u.grad.numpy())]
                if b % 2:  # held, and written in place by a later backward or zero_grad
                    ts.append(w.grad)
                    spread.append(False)
                opt.zero_grad(set_to_none=a % 2 == 0)
            elif kind == "opt_step":
                loss = ((w * ts[0]).sum() + (u * u).sum()) * 0.5
                loss.backward()
                loss = None
                opt.step()
                opt.zero_grad()
                out.append(np.array(w.detach().numpy()))
                out.append(np.array(u.detach().numpy()))
        except Exception as e:  # noqa: BLE001 (any refusal, compared with torch's)
            out.append(("error", type(e).__name__))
    out += [np.array(w.detach().numpy()), a0.copy()]
    out += [np.array(t.detach().numpy()) for t in ts]
    return out


def check(program, seed: int, device: str) -> None:
    other = "numpy" if device == "c" else ("c" if "c" in _devices() else "numpy")
    want = interpret(_Lib(torch), program, seed)
    got = interpret(_Lib(limn, device, other), program, seed)
    assert len(got) == len(want), (got, want)
    for i, (g, w) in enumerate(zip(got, want)):
        if isinstance(w, tuple) or isinstance(g, tuple):
            assert isinstance(g, tuple) == isinstance(w, tuple), (i, g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5, err_msg=f"read {i}")


_SETTINGS = dict(
    deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@settings(max_examples=300, **_SETTINGS)
@given(program=programs(), seed=st.integers(0, 2**16))
def test_random_programs_of_writes_and_views_read_what_torch_reads(device, program, seed):
    check(program, seed, device)


@pytest.mark.slow
@settings(max_examples=20_000, **_SETTINGS)
@given(program=programs(max_steps=20), seed=st.integers(0, 2**16))
def test_random_programs_of_writes_and_views_read_what_torch_reads_long(device, program, seed):
    check(program, seed, device)


# ---- shrunk failures ----------------------------------------------------------------------


def test_a_pad_of_a_view_is_a_copy_and_a_flip_of_an_alias_is_a_copy(device):
    """Found while fuzzing: torch's F.pad and flip() copy; a write to one leaves the base."""
    check(("sgd", [("rows", 0, 0, 2.0), ("clone", 2, 0, 2.0), ("add_", 2, 0, 2.0)]), 3, device)


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
    rows = [("rows", 2, 1, 2.0), ("rows", 2, 2, 2.0), ("lerp_", 3, 4, 2.0)]
    check(("sgd", rows), 0, device)


def test_a_0d_tensor_takes_a_mask_write_and_copy_into_itself_through_an_expand(device):
    """Found while fuzzing: x[x > 0] = v on a 0-d tensor (numpy's new dim of 1), and
    x.copy_(x) of an expand (torch's: nothing to do)."""
    check(
        ("sgd", [("select0", 0, 0, 2.0), ("select0", 3, 0, 2.0), ("mask_set", 4, 0, 2.0)]),
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
    steps = [("select1", 0, 0, 2.0), ("rows", 3, 0, 0.5), ("narrow", 3, 0, 2.0)]
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
