"""The shared graph corpus: small graphs every compiled path is diffed against the numpy device.

Each Case builds fresh limn Tensors (from its own seeded generator, so a case means the
same numbers every time) and returns the output tensors. A device test realizes the
outputs its own way and compares with ``reference(outputs)`` by ``assert_matches``:
floats at 1e-5 (half widths at one unit in their last place, float64 at 1e-12), integers and bools
exactly. ``tags`` let a device skip what it declines (``half``, ``custom``, ...).

Cases build graphs only; nothing here realizes anything, so a device sees the graph the
frontend made. Inputs of ASSIGN cases are written by realizing them: run the device under
test before the reference, on copies of the inputs (``ir.loop.interp.run`` copies).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ir.graph import dtypes
from limn import Tensor, cat, stack, where
from limn.runtime import get_device


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[], list[Tensor]]
    tags: frozenset[str] = field(default_factory=frozenset)


CASES: list[Case] = []


def case(*tags: str):
    def register(fn):
        CASES.append(Case(fn.__name__, fn, frozenset(tags)))
        return fn

    return register


def reference(outs: list[Tensor]) -> list[np.ndarray]:
    """The numpy device's answer for each output, without touching the tensors."""
    bufs = get_device("numpy").realize([t.node for t in outs])
    return [np.array(b.data, copy=True) for b in bufs]


def tolerance(d: dtypes.DType) -> float | None:
    """Relative and absolute tolerance for ``d``; None means exact."""
    # a half width: one unit in its last place (each node rounds to it on every device,
    # so only a float32 total or a math function's last float32 bit can tip a rounding)
    half = {"float16": 2.0**-10, "bfloat16": 2.0**-7}
    return {**half, "float32": 1e-5, "float64": 1e-12}.get(d.name)


def assert_matches(got: np.ndarray, want: np.ndarray, what: str = "") -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    tol = tolerance(dtypes.as_dtype(want.dtype))
    if tol is None:
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        np.testing.assert_allclose(
            got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol, err_msg=what
        )


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _randn(rng, *shape, dtype=dtypes.float32) -> Tensor:
    return Tensor(rng.standard_normal(shape), dtype=dtype)


def _ints(rng, lo, hi, *shape, dtype=dtypes.int64) -> Tensor:
    return Tensor(rng.integers(lo, hi, shape), dtype=dtype)


# ---- elementwise and broadcasting ---------------------------------------------------


@case()
def elementwise_chain():
    r = _rng(1)
    x, y = _randn(r, 3, 4), _randn(r, 3, 4)
    return [(x * 2 + 1).exp() * y - x / (y.abs() + 1)]


@case()
def unary_ops():
    r = _rng(2)
    x = _randn(r, 2, 5)
    return [-x, x.abs().sqrt(), (x.abs() + 1).log(), x.sigmoid(), x.tanh(), (x + 3).reciprocal()]


@case()
def compare_and_where():
    r = _rng(3)
    x, y = _randn(r, 3, 4), _randn(r, 3, 4)
    return [where(x < y, x, y * 2), x == y, x >= 0.5, x.maximum(y), x.clamp(-0.5, 0.5)]


@case()
def rounding_and_pow():
    r = _rng(4)
    x = _randn(r, 2, 6) * 3
    return [x.floor(), x.ceil(), x.round(), x**3, x.abs() ** 0.5, x.gelu(), x.erf()]


@case()
def broadcasting():
    r = _rng(5)
    a, b, c = _randn(r, 3, 1), _randn(r, 1, 4), _randn(r, 4)
    return [a + b, a * b + c, c - 2.5, 1.0 / (a * a + 1)]


@case()
def shared_subexpression_many_users():
    r = _rng(6)
    x = _randn(r, 4, 3)
    e = (x * 0.5).exp()
    return [e.sum(0), e * 2, e.T, e]


# ---- movement -----------------------------------------------------------------------


@case()
def permute_and_transpose():
    r = _rng(7)
    x = _randn(r, 2, 3, 4)
    return [x.permute(2, 0, 1), x.transpose(0, 1) + 1, x.T.exp()]


@case()
def reshape_split_and_merge():
    r = _rng(8)
    x = _randn(r, 2, 3, 4)
    return [x.reshape(6, 4) * 2, x.reshape(2, 12).exp(), x.reshape(4, 3, 2) + 1]


@case()
def reshape_needing_a_copy():
    r = _rng(9)
    x = _randn(r, 3, 4)
    return [x.T.reshape(12), x.T.reshape(2, 6) * 3, (x + 1).T.reshape(-1)]


@case()
def reshape_merging_a_fused_value():
    r = _rng(10)
    x = _randn(r, 3, 4)
    return [(x * 2).reshape(12)[1:10], (x.T + 1).reshape(2, 6)]


@case()
def expand_and_repeat():
    r = _rng(11)
    x = _randn(r, 3, 1)
    return [x.expand(3, 4) * 1, x.repeat(2, 3), (x + 1).expand(2, 3, 5)]


@case()
def pad_and_shrink():
    r = _rng(12)
    x = _randn(r, 3, 4)
    return [x.pad(((1, 2), (0, 3))), x[1:3, 2:] * 2, x.pad(((2, 1), (1, 1)), value=7.0)]


@case()
def pad_over_a_fused_value():
    r = _rng(13)
    x = _randn(r, 3, 4)
    return [x.exp().pad(((1, 1), (2, 0))), (x + 1).pad(((0, 1),)).sum(1)]


@case()
def padded_long_sum():
    # the pad splits the reduce loop in pieces; the lane pass once left the last piece
    # folding into a total its FOLD had already declared (C that did not compile)
    r = _rng(19)
    x = _randn(r, 16)
    return [x.pad(((100, 0),)).sum(), x.pad(((40, 50),)).sum(), x.pad(((0, 70),)).max()]


@case()
def reduces_over_a_concatenation():
    # the pieces of a reduce loop a concatenation cuts fold into the whole array's lanes
    r = _rng(20)
    a, b = _randn(r, 3, 21), _randn(r, 3, 30)
    return [cat([a, b], 1).sum(1), cat([b, a, b], 1).amax(1), cat([a[0], b[1]], 0).sum()]


@case()
def flip_and_step():
    r = _rng(14)
    x = _randn(r, 4, 6)
    return [x.flip(0), x[::-1, ::2], x[1::2, ::-3] * 2, (x * 2).flip(1)]


@case()
def flipped_value_padded_matmul():
    # gcc 12 -O3 once vectorized this pad's reversed read in the wrong order
    r = _rng(15)
    a, b = _randn(r, 2, 2, 2), _randn(r, 2, 3)
    return [(a @ b)[:, :, ::-2].pad(((1, 2), (2, 0), (2, 0)), 1.53)]


@case()
def movement_compositions():
    r = _rng(15)
    x = _randn(r, 4, 6)
    y = x.permute(1, 0)[1:, ::2].pad(((1, 0), (0, 2))).reshape(6, 2, 2)
    z = (x.exp()[::2] + 1).T.flip(0)[1:4]
    return [y, z, y.sum(1)]


@case()
def cat_stack_split():
    r = _rng(16)
    a, b = _randn(r, 2, 3), _randn(r, 2, 3)
    p, q = cat([a, b], 1).split(2, 1)[:2]
    return [cat([a, b * 2], 0), stack([a, b], 1), p + q]


@case()
def contiguous_copy():
    r = _rng(17)
    x = _randn(r, 3, 4)
    return [x.T.contiguous(), x.T.contiguous() + x.T]


@case()
def scalars_and_empty():
    r = _rng(18)
    x = _randn(r, 3, 4)
    e = Tensor(np.zeros((0, 3), np.float32))
    return [x.sum() * 2, x.sum(), x[1, 2], e.sum(0), e * 2]


# ---- reduces ------------------------------------------------------------------------


@case()
def sum_over_each_axis():
    r = _rng(20)
    x = _randn(r, 2, 3, 4)
    return [x.sum(0), x.sum(1), x.sum(2), x.sum(), x.sum((0, 2)), x.sum(1, keepdim=True)]


@case()
def max_over_each_axis():
    r = _rng(21)
    x = _randn(r, 2, 3, 4)
    return [x.amax(0), x.amax(1, keepdim=True), x.amax(2), x.max(), x.min((0, 1))]


@case()
def reduce_of_views():
    r = _rng(22)
    x = _randn(r, 4, 5)
    return [x.T.sum(0), x[::2, 1:].amax(1), x.pad(((1, 1), (0, 0))).sum(0), x.flip(1).sum(1)]


@case()
def statistics():
    r = _rng(23)
    x = _randn(r, 3, 5)
    return [x.mean(1), x.var(0), x.std(), x.logsumexp(1), x.softmax(1), x.log_softmax(0)]


@case()
def argmax_and_cumsum():
    r = _rng(24)
    x = _randn(r, 3, 5)
    return [x.argmax(1), x.argmin(0), x.cumsum(1), Tensor.arange(7) * 2, Tensor.eye(3, 4)]


@case()
def scans():
    r = _rng(41)
    x = _randn(r, 3, 4, 5)
    i = _ints(r, -(2**40), 2**40, 4, 6)
    small = _ints(r, -100, 100, 3, 7, dtype=dtypes.int8)  # wraps, exactly as numpy's
    return [
        (x * 2 + 1).p_scan(0, "add"),  # the scan reads a fused elementwise source
        x.p_scan(1, "mul").p_scan(2, "max"),  # one scan's buffer feeds the next
        x.p_scan(2, "add").flip(2)[:, 1:, :3] * 3,  # views of a scan fuse into its user
        i.p_scan(1, "add"),
        i.p_scan(0, "max"),
        small.p_scan(1, "add"),
        small.p_scan(0, "mul"),
        Tensor(np.zeros((0, 3), np.float32)).p_scan(0, "add"),
    ]


@case("half")
def scans_half():
    r = _rng(42)
    x = _randn(r, 4, 33, dtype=dtypes.float16)
    b = _randn(r, 2, 40, dtype=dtypes.bfloat16)
    return [x.p_scan(1, "add"), (x * 0.5).p_scan(0, "mul"), b.p_scan(1, "add"), b.p_scan(1, "max")]


# ---- matmul and convolution ---------------------------------------------------------


@case()
def matmul_2d():
    r = _rng(30)
    return [_randn(r, 4, 5) @ _randn(r, 5, 3)]


@case()
def matmul_batched_and_vectors():
    r = _rng(31)
    a, b, w = _randn(r, 2, 3, 4), _randn(r, 2, 4, 5), _randn(r, 4, 5)
    v = _randn(r, 4)
    return [a @ b, a @ w, w.T @ v, v @ w]


@case()
def tiled_matmul_with_row_and_column_tails():
    # past one register tile in both directions, with a partial tile left in each
    r = _rng(33)
    return [_randn(r, 9, 11) @ _randn(r, 11, 40), _randn(r, 2, 6, 5) @ _randn(r, 5, 35)]


@case()
def tiled_matmul_float64():
    r = _rng(34)
    a, b = _randn(r, 9, 7, dtype=dtypes.float64), _randn(r, 7, 21, dtype=dtypes.float64)
    return [a @ b, (a @ b).relu() @ _randn(r, 21, 17, dtype=dtypes.float64)]


@case()
def tiled_max_contraction():
    # a (max, +) product: the tile folds with MAX instead of ADD
    r = _rng(35)
    a, b = _randn(r, 9, 7), _randn(r, 7, 40)
    return [(a.reshape(9, 7, 1) + b.reshape(1, 7, 40)).amax(1)]


@case()
def mlp_forward():
    r = _rng(32)
    x, w1, b1, w2 = _randn(r, 3, 4), _randn(r, 5, 4), _randn(r, 5), _randn(r, 2, 5)
    h = x.linear(w1, b1).relu()
    return [h.linear(w2), h]


def conv2d(x: Tensor, w: Tensor, stride: int = 1, padding: int = 1) -> Tensor:
    """A 2-D convolution spelled in views: pad, one strided window per tap, stack, mul, sum."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = x.pad(((0, 0), (0, 0), (padding, padding), (padding, padding)))
    oh = (h + 2 * padding - kh) // stride + 1
    ow = (wd + 2 * padding - kw) // stride + 1
    taps = [
        xp[:, :, i : i + stride * (oh - 1) + 1 : stride, j : j + stride * (ow - 1) + 1 : stride]
        for i in range(kh)
        for j in range(kw)
    ]
    patches = stack(taps, -1).reshape(n, 1, c, oh, ow, kh * kw)
    return (patches * w.reshape(1, o, c, 1, 1, kh * kw)).sum((2, 5))


@case()
def conv2d_padded():
    r = _rng(33)
    return [conv2d(_randn(r, 1, 2, 5, 5), _randn(r, 3, 2, 3, 3))]


@case()
def conv2d_strided_with_bias_relu():
    r = _rng(34)
    x, w, b = _randn(r, 2, 1, 6, 6), _randn(r, 2, 1, 3, 3), _randn(r, 2)
    return [(conv2d(x, w, stride=2) + b.reshape(1, 2, 1, 1)).relu()]


# ---- gather, scatter, assign --------------------------------------------------------


@case()
def gather_along_axes():
    r = _rng(40)
    x = _randn(r, 4, 5)
    i0, i1 = _ints(r, 0, 4, 3, 5), _ints(r, 0, 5, 4, 2)
    padded = x.exp().pad(((0, 0), (1, 1)))  # the gather reads a masked, fused source
    outs = [x.gather(0, i0), x.gather(1, i1), (x * 2).exp().gather(1, i1), padded.gather(1, i1)]
    return outs + [x.gather(1, i1).exp().pad(((1, 0), (0, 1)))]  # a CHECK under a pad


@case()
def embedding_lookup():
    r = _rng(41)
    table = _randn(r, 10, 4)
    ids = _ints(r, 0, 10, 6, dtype=dtypes.int32)
    rows = table.gather(0, ids.reshape(6, 1).expand(6, 4))
    return [rows, rows.sum(1)]


@case()
def scatter_with_collisions():
    r = _rng(42)
    base = _randn(r, 5, 3)
    idx = Tensor(np.array([[0, 1, 0], [0, 4, 2], [0, 1, 2], [3, 3, 0]]), dtype=dtypes.int64)
    src = _randn(r, 4, 3)
    onto = Tensor(np.zeros((5, 3), np.int32), dtype=dtypes.int32)
    ones = Tensor(np.ones((4, 3), np.int32), dtype=dtypes.int32)
    return [
        base.scatter_add(0, idx, src),
        onto.scatter_add(0, idx, ones),
        (base * 2).scatter_add(1, idx.T[:3].p_mod(idx.p_const(3, shape=(3, 4))), src.T[:3]),
    ]


@case("assign")
def assign_update():
    r = _rng(43)
    w = Tensor(r.standard_normal((3, 4)), dtype=dtypes.float32)
    g = _randn(r, 3, 4)
    m = Tensor(np.zeros((3, 4), np.float32))
    m2 = m * 0.9 + g * 0.1
    return [w.assign(w - m2 * 0.5), m.assign(m2), (w * w).sum(), w]


# ---- dtypes -------------------------------------------------------------------------


_BITCAST_PARTNER = {
    "int8": dtypes.uint8,
    "int16": dtypes.float16,
    "int32": dtypes.float32,
    "int64": dtypes.float64,
    "uint8": dtypes.int8,
    "uint16": dtypes.int16,
    "uint32": dtypes.int32,
    "uint64": dtypes.int64,
}


def _int_case(d: dtypes.DType):
    def build():
        r = _rng(50 + d.itemsize + (d.kind == "u"))
        lo = 0 if d.kind == "u" else -20
        a = _ints(r, lo, 20, 3, 4, dtype=d)
        b = _ints(r, 1, 9, 3, 4, dtype=d)
        cnt = _ints(r, 0, d.bits + 2, 3, 4, dtype=d)
        outs = [a * b + a, a - b * 3, a.p_idiv(b), a.p_mod(b - 4), a.p_and(b), a.p_or(b)]
        outs += [a.p_xor(b), a.p_shl(cnt), a.p_shr(cnt), a < b, where(a < b, a, b)]
        outs += [
            a.sum(1),
            a.amax(0),
            a @ b.T,
            a.gather(1, b.p_mod(b.p_const(4)).long()),
            a.T.flip(0),
        ]
        outs.append(a.p_bitcast(_BITCAST_PARTNER[d.name]))
        return outs

    build.__name__ = f"integer_ops_{d.name}"
    return build


for _d in (*dtypes.SIGNED, *dtypes.UNSIGNED):
    CASES.append(Case(f"integer_ops_{_d.name}", _int_case(_d), frozenset({"int"})))


@case()
def bool_logic():
    r = _rng(60)
    a, b = Tensor(r.random((3, 4)) < 0.5), Tensor(r.random((3, 4)) < 0.5)
    return [(a & b) | ~a, a ^ b, a.any(1), a.all(0), where(a, b, ~b), a.cast(dtypes.int8).sum()]


@case()
def casts_between_dtypes():
    r = _rng(61)
    x = _randn(r, 3, 4) * 50
    outs = [
        x.cast(d)
        for d in (dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.float16, dtypes.bfloat16)
    ]
    outs += [x.double().half(), x.bfloat16().half(), (x > 0).cast(dtypes.float64)]
    outs += [x.cast(dtypes.int16).cast(dtypes.float32) / 3, x.p_bitcast(dtypes.int32)]
    return outs


def _float_case(d: dtypes.DType):
    def build():
        r = _rng(70 + d.itemsize)
        x, y = _randn(r, 3, 5, dtype=d), _randn(r, 5, 4, dtype=d)
        outs = [x * 2 + 1, (x.abs() + 1).sqrt(), x.sum(1), x.amax(0), x @ y, x.softmax(1)]
        outs += [x.sum(), x.T.sum(1, keepdim=True), x.pad(((1, 0), (0, 1))).exp()]
        idx = Tensor(np.array([[0, 2, 0, 1, 0], [2, 2, 1, 0, 0]]))
        outs.append(x.scatter_add(0, idx, x[:2] * 3))  # colliding adds in x's own dtype
        if d.bits == 16:
            outs.append(x.p_bitcast(dtypes.int16))
        return outs

    build.__name__ = f"float_ops_{d.name}"
    return build


for _d in dtypes.FLOATS:
    CASES.append(
        Case(
            f"float_ops_{_d.name}",
            _float_case(_d),
            frozenset({"half"} if _d in dtypes.HALF else ()),
        )
    )
