"""View algebra against numpy's own striding and padding.

A View claims to be the whole layout story: element ``i`` lives at ``offset + i . strides``
when ``i`` is inside the mask, and is zero outside it. These tests read a View's elements
by that definition alone (``read`` below) and compare them with what numpy's reshape,
transpose, broadcast_to, pad, slicing, flip and sliding_window_view produce for the same
chain of movements. Random chains come from hypothesis; a reshape that cannot stay one View
must say so (return None) exactly when numpy could not reshape the same strided array
without a copy either, and windows decline exactly over a padded dim.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ir.graph.node import toposort
from ir.graph.ops import Op
from ir.graph.view import View
from limn import Tensor
from limn.runtime.numpy_ref import apply_view

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def read(base: np.ndarray, v: View) -> np.ndarray:
    """The View's elements by its definition; every unmasked address must be in bounds."""
    flat = base.reshape(-1)
    out = np.zeros(v.shape, base.dtype)
    for idx in np.ndindex(*v.shape):
        if v.mask is not None and not all(lo <= i < hi for i, (lo, hi) in zip(idx, v.mask)):
            continue
        addr = v.offset + sum(i * s for i, s in zip(idx, v.strides))
        assert 0 <= addr < flat.size, f"{v} reads address {addr} of {flat.size} at {idx}"
        out[idx] = flat[addr]
    return out


def strided(base: np.ndarray, v: View) -> np.ndarray:
    """An unmasked View as a numpy array sharing base's memory."""
    flat = base.reshape(-1)
    item = flat.itemsize
    return np.lib.stride_tricks.as_strided(
        flat[v.offset :], v.shape, tuple(s * item for s in v.strides), writeable=False
    )


# ---- movements: the View method, the numpy spelling, and the limn Tensor spelling ---


def np_move(a: np.ndarray, kind: str, arg) -> np.ndarray:
    if kind == "reshape":
        return a.reshape(arg)
    if kind == "permute":
        return a.transpose(arg)
    if kind == "expand":
        return np.broadcast_to(a, arg)
    if kind == "pad":
        return np.pad(a, arg)
    if kind == "shrink":
        return a[tuple(slice(b, e) for b, e in arg)]
    if kind == "flip":
        return np.flip(a, arg)
    if kind == "step":
        return a[tuple(slice(None, None, k) for k in arg)]
    if kind == "window":
        return np_window(a, *arg)
    raise AssertionError(kind)


def np_window(a: np.ndarray, axis: int, k: int, stride: int, dilation: int) -> np.ndarray:
    """Windows of k elements dilation apart, every stride-th, the window dim after axis."""
    w = np.lib.stride_tricks.sliding_window_view(a, dilation * (k - 1) + 1, axis=axis)
    w = np.moveaxis(w, -1, axis + 1)
    key = [slice(None)] * w.ndim
    key[axis], key[axis + 1] = slice(None, None, stride), slice(None, None, dilation)
    return w[tuple(key)]


def move(v: View, kind: str, arg) -> View | None:
    return v.window(*arg) if kind == "window" else getattr(v, kind)(arg)


def tensor_move(t: Tensor, kind: str, arg) -> Tensor:
    if kind == "reshape":
        return t.reshape(arg)
    if kind == "permute":
        return t.permute(arg)
    if kind == "expand":
        return t.expand(*arg)
    if kind == "pad":
        return t.pad(arg)
    if kind == "shrink":
        return t.shrink(arg)
    if kind == "flip":
        return t.flip(arg)
    if kind == "step":
        return t[tuple(slice(None, None, k) for k in arg)]
    if kind == "window":
        return t.p_window(*arg)
    raise AssertionError(kind)


@st.composite
def factorization(draw, n: int):
    """A random shape of n elements, with size-1 dims sprinkled in."""
    if n == 0:
        return tuple(draw(st.permutations([0, draw(st.integers(1, 3))])))
    dims = []
    while n > 1 and len(dims) < 4:
        d = draw(st.sampled_from([d for d in range(2, n + 1) if n % d == 0]))
        dims.append(d)
        n //= d
    if n > 1:
        dims.append(n)
    for _ in range(draw(st.integers(0, 2))):
        dims.insert(draw(st.integers(0, len(dims))), 1)
    return tuple(draw(st.permutations(dims))) if dims else ()


@st.composite
def movement(draw, shape: tuple[int, ...], pad: bool = True):
    nd = len(shape)
    kinds = ["reshape", "expand"]
    if nd and math.prod(shape):
        kinds += ["window"]
    if nd:
        kinds += ["permute", "shrink", "flip", "step"] + (["pad"] if pad else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "window":
        axis = draw(st.integers(0, nd - 1))
        dilation = draw(st.integers(1, max(1, shape[axis] - 1)))
        k = draw(st.integers(1, (shape[axis] - 1) // dilation + 1))
        return kind, (axis, k, draw(st.integers(1, 3)), dilation)
    if kind == "reshape":
        return kind, draw(factorization(math.prod(shape)))
    if kind == "permute":
        return kind, tuple(draw(st.permutations(range(nd))))
    if kind == "expand":
        return kind, tuple(draw(st.integers(1, 3)) if s == 1 else s for s in shape)
    if kind == "pad":
        return kind, tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape)
    if kind == "shrink":
        bounds = []
        for s in shape:
            b = draw(st.integers(0, s))
            bounds.append((b, draw(st.integers(b, s))))
        return kind, tuple(bounds)
    if kind == "flip":
        return kind, tuple(sorted(draw(st.sets(st.integers(0, nd - 1), min_size=1))))
    return kind, tuple(draw(st.integers(1, 3)) for _ in shape)


def _shape_after(shape, kind, arg):
    return np_move(np.zeros(shape), kind, arg).shape


@st.composite
def chains(draw, pad: bool = True):
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=0, max_size=3)))
    moves = []
    cur = shape
    for _ in range(draw(st.integers(1, 6))):
        kind, arg = draw(movement(cur, pad))
        nxt = _shape_after(cur, kind, arg)
        if math.prod(nxt) > 400:
            break
        moves.append((kind, arg))
        cur = nxt
    return shape, moves


# ---- random chains ------------------------------------------------------------------


@SETTINGS
@given(chains())
def test_movement_chains_compose_into_one_view_matching_numpy(chain):
    shape, moves = chain
    base = np.arange(1, math.prod(shape) + 1, dtype=np.int64).reshape(shape)
    ref = base
    v = View.contiguous(shape)
    for kind, arg in moves:
        ref = np_move(ref, kind, arg)
        nv = move(v, kind, arg)
        if nv is None:  # what the frontend does: copy, then move the copy
            padded = (
                kind == "window" and v.mask is not None and v.mask[arg[0]] != (0, v.shape[arg[0]])
            )
            assert kind == "reshape" or padded, f"{kind}{arg} of {v} declined"
            base, v = read(base, v), move(View.contiguous(v.shape), kind, arg)
        else:
            v = nv
        assert v.shape == ref.shape, f"after {kind}{arg}: {v.shape} != {ref.shape}"
        np.testing.assert_array_equal(read(base, v), ref, err_msg=f"after {kind}{arg}: {v}")
    np.testing.assert_array_equal(apply_view(base, v), ref)


@SETTINGS
@given(chains(pad=False))
def test_reshape_declines_exactly_when_numpy_needs_a_copy(chain):
    """For unmasked Views, numpy's no-copy reshape is the oracle for what one View can do."""
    shape, moves = chain
    base = np.arange(1, math.prod(shape) + 1, dtype=np.int64).reshape(shape)
    v = View.contiguous(shape)
    for kind, arg in moves:
        if kind == "reshape":
            arr = strided(base, v)
            try:
                np.reshape(arr, arg, copy=False)
                numpy_can = True
            except ValueError:
                numpy_can = False
            nv = v.reshape(arg)
            if nv is None:
                assert not numpy_can, f"{v}.reshape({arg}) gave None but numpy needs no copy"
                base, v = read(base, v), View.contiguous(arg)
                continue
            np.testing.assert_array_equal(read(base, nv), arr.reshape(arg))
            v = nv
        else:
            v = move(v, kind, arg)


@settings(max_examples=40, deadline=None)
@given(chains())
def test_tensor_movements_build_one_view_node_and_match_numpy(chain):
    shape, moves = chain
    base = np.arange(1, math.prod(shape) + 1, dtype=np.float32).reshape(shape)
    t, ref = Tensor(base), base
    for kind, arg in moves:
        t, ref = tensor_move(t, kind, arg), np_move(ref, kind, arg)
    nodes = toposort([t.node])
    views = sum(n.op == Op.VIEW for n in nodes)
    copies = sum(n.op == Op.CONTIGUOUS for n in nodes)
    assert views <= copies + 1, "consecutive movements must compose into one VIEW"
    assert t.shape == ref.shape
    np.testing.assert_array_equal(t.numpy(), ref)


# ---- windows: overlapping reads as two strides over one dim -------------------------

WINDOWS = [
    ((7,), 0, 3, 1, 1),
    ((7,), 0, 3, 2, 1),
    ((9,), 0, 3, 1, 3),
    ((9,), 0, 2, 4, 2),
    ((2, 6, 3), 1, 2, 1, 2),
    ((2, 6, 3), 2, 3, 1, 1),
    ((4, 5), 0, 4, 1, 1),
    ((4, 5), 1, 1, 3, 1),
    ((3, 1), 1, 1, 1, 1),
]


@pytest.mark.parametrize("shape, axis, k, stride, dilation", WINDOWS)
def test_windows_are_one_unmasked_view_matching_sliding_window_view(
    shape, axis, k, stride, dilation
):
    base = np.arange(1, math.prod(shape) + 1, dtype=np.int64).reshape(shape)
    want = np_window(base, axis, k, stride, dilation)
    v = View.contiguous(shape).window(axis, k, stride, dilation)
    assert v.shape == want.shape and v.mask is None
    np.testing.assert_array_equal(read(base, v), want)
    np.testing.assert_array_equal(strided(base, v), want)  # as_strided reads the same bytes
    np.testing.assert_array_equal(apply_view(base, v), want)
    # over a flipped, stepped and transposed view: the window scales whatever stride is there
    moved = (
        View.contiguous(shape)
        .flip((axis,))
        .step((1,) * len(shape))
        .permute(tuple(reversed(range(len(shape)))))
    )
    ax = len(shape) - 1 - axis
    ref = np_window(np.flip(base, axis).transpose(), ax, k, stride, dilation)
    np.testing.assert_array_equal(read(base, moved.window(ax, k, stride, dilation)), ref)


def test_windows_decline_over_a_padded_dim_and_keep_masks_elsewhere():
    padded = View.contiguous((3, 4)).pad(((1, 1), (0, 0)))
    assert padded.window(0, 2) is None
    w = padded.window(1, 2, 2)
    assert w.shape == (5, 2, 2) and w.mask == ((1, 4), (0, 2), (0, 2))
    base = np.arange(1, 13).reshape(3, 4)
    np.testing.assert_array_equal(
        read(base, w), np_window(np.pad(base, ((1, 1), (0, 0))), 1, 2, 2, 1)
    )


def test_tensor_windows_over_a_pad_copy_the_padded_input_once():
    base = np.arange(1, 25, dtype=np.float32).reshape(2, 3, 4)
    t = Tensor(base).pad(((0, 0), (1, 1), (2, 0))).p_window(1, 3, 2).p_window(3, 2, 1, 2)
    ref = np_window(np_window(np.pad(base, ((0, 0), (1, 1), (2, 0))), 1, 3, 2, 1), 3, 2, 1, 2)
    ops = [n.op for n in toposort([t.node])]
    assert ops == [Op.BUFFER, Op.VIEW, Op.CONTIGUOUS, Op.VIEW]
    np.testing.assert_array_equal(t.numpy(), ref)
    unpadded = Tensor(base).p_window(2, 2).p_window(0, 1)
    assert [n.op for n in toposort([unpadded.node])] == [Op.BUFFER, Op.VIEW]


def test_windows_that_do_not_fit_are_refused():
    with pytest.raises(ValueError, match=r"window: k=3, stride=1, dilation=2 do not fit dim 0"):
        View.contiguous((4,)).window(0, 3, 1, 2)
    with pytest.raises(ValueError, match=r"window: .*accepted: all >= 1"):
        View.contiguous((4,)).window(0, 2, 0)


# ---- reshape: when a View can and cannot hold it ------------------------------------


@SETTINGS
@given(chains(), st.data())
def test_reshape_that_only_adds_or_drops_size_1_dims_keeps_each_dims_stride_and_mask(chain, data):
    """The short path (no grouping of dims) gives the View the grouping gives, and reads
    what numpy reads; matmul takes it for (n, k) -> (n, 1, k) of a transposed operand."""
    shape, moves = chain
    base = np.arange(1, math.prod(shape) + 1, dtype=np.int64).reshape(shape)
    ref, v = base, View.contiguous(shape)
    for kind, arg in moves:
        nv = move(v, kind, arg)
        if nv is None:
            base, nv = read(base, v), move(View.contiguous(v.shape), kind, arg)
        ref, v = np_move(ref, kind, arg), nv
    dims = [s for s in v.shape if s != 1]
    new = []
    for s in dims + [None]:
        new += [1] * data.draw(st.integers(0, 2))
        if s is not None:
            new.append(s)
    new = tuple(new)
    r = v.reshape(new)
    if v.is_empty_mask and not new:  # no dim of a 0-d View carries the empty mask: a copy
        assert r is None
        return
    assert r is not None, f"{v}.reshape({new}) declined a size-1 change"
    np.testing.assert_array_equal(read(base, r), ref.reshape(new), err_msg=f"{v} -> {r}")
    if new != v.shape and math.prod(new) and not v.is_contiguous and not v.is_empty_mask:
        stride = {}
        it = iter(d for d, s in enumerate(v.shape) if s != 1)
        for i, s in enumerate(new):
            if s != 1:
                d = next(it)
                stride[i] = v.strides[d]
                assert r.mask is None or r.mask[i] == (v.mask[d] if v.mask else (0, s))
        assert all(r.strides[i] == st_ for i, st_ in stride.items())


def test_a_size_1_reshape_of_a_transposed_view_does_not_group_dims(monkeypatch):
    import ir.graph.view as view

    v = View.contiguous((4, 6)).permute((1, 0)).shrink(((1, 5), (0, 4)))
    want = v.reshape((4, 1, 4))
    monkeypatch.setattr(view, "_merge", lambda dims: pytest.fail("grouped the dims"))
    r = v.reshape((4, 1, 4))
    assert r == want and r.strides == (1, 0, 6) and r.offset == 1


def test_reshape_after_transpose_cannot_merge_the_swapped_dims():
    v = View.contiguous((2, 3)).permute((1, 0))
    assert v.reshape((6,)) is None
    assert v.reshape((3, 2, 1)) is not None  # adding a size-1 dim needs no copy


def test_reshape_splits_and_merges_dims_of_a_sliced_view():
    base = np.arange(1, 61).reshape(5, 12)
    v = View.contiguous((5, 12)).shrink(((1, 4), (0, 12)))  # rows 1..3, whole rows
    r = v.reshape((3, 3, 4))
    assert r is not None
    np.testing.assert_array_equal(read(base, r), base[1:4].reshape(3, 3, 4))
    assert v.reshape((36,)) is not None
    # cutting columns breaks the row-major run, so rows can no longer merge
    assert View.contiguous((5, 12)).shrink(((0, 5), (0, 6))).reshape((30,)) is None


def test_reshape_keeps_a_pad_on_the_outer_dim_of_a_split():
    base = np.arange(1, 9).reshape(2, 4)
    v = View.contiguous((2, 4)).pad(((1, 1), (0, 0)))  # (4, 4), rows 0 and 3 padded
    r = v.reshape((16,))
    assert r is not None and r.mask == ((4, 12),)
    np.testing.assert_array_equal(read(base, r), np.pad(base, ((1, 1), (0, 0))).reshape(16))
    back = r.reshape((4, 2, 2))
    assert back is not None and back.mask == ((1, 3), (0, 2), (0, 2))
    np.testing.assert_array_equal(read(base, back), np.pad(base, ((1, 1), (0, 0))).reshape(4, 2, 2))
    assert r.reshape((2, 8)) is None  # valid cells 4..11 are no box in (2, 8)


def test_reshape_declines_when_a_pad_would_land_inside_a_merged_dim():
    v = View.contiguous((2, 4)).pad(((0, 0), (1, 0)))  # the pad is on the inner dim
    assert v.reshape((10,)) is None
    v = View.contiguous((4,)).pad(((1, 1),))  # 6 elements, valid 1..5
    assert v.reshape((2, 3)) is None  # the valid run 1..5 is not a box in (2, 3)


def test_reshape_of_an_empty_mask_to_0d_declines():
    """A 0-d View has no dim to carry a mask on: the pad's zero would read real bytes."""
    v = View.contiguous((3,)).pad(((2, 0),)).shrink(((0, 1),))
    assert v.is_empty_mask
    assert v.reshape(()) is None
    assert v.reshape((1, 1)).is_empty_mask


def test_reshape_to_zero_size_is_contiguous():
    v = View.contiguous((2, 3)).permute((1, 0)).shrink(((0, 0), (0, 2)))
    assert v.reshape((0, 5)) == View.contiguous((0, 5))


# ---- the other movements ------------------------------------------------------------


def test_negative_steps_are_a_flip_then_a_step():
    base = np.arange(1, 8)
    for start, stop, step in [(None, None, -1), (None, None, -3), (5, 1, -2), (6, None, -4)]:
        want = base[start:stop:step]
        s, e, k = slice(start, stop, step).indices(7)
        lo, hi = e + 1, s + 1
        v = View.contiguous((7,)).shrink(((lo, hi),)).flip((0,)).step((-k,))
        assert v.strides[0] < 0 or len(want) == 1
        np.testing.assert_array_equal(read(base, v), want)


def test_flip_of_a_padded_view_mirrors_its_mask():
    base = np.arange(1, 4)
    v = View.contiguous((3,)).pad(((2, 1),)).flip((0,))
    assert v.mask == ((1, 4),)
    np.testing.assert_array_equal(read(base, v), np.pad(base, (2, 1))[::-1])


def test_expanding_a_padded_size_1_dim_keeps_it_padded():
    v = View.contiguous((1,)).pad(((0, 1),)).shrink(((1, 2),))  # one element, all pad
    e = v.expand((4,))
    assert e.is_empty_mask
    np.testing.assert_array_equal(read(np.array([7]), e), np.zeros(4))
    inside = View.contiguous((1, 3)).pad(((0, 0), (1, 0))).expand((5, 4))
    assert inside.strides[0] == 0
    np.testing.assert_array_equal(
        read(np.array([[1, 2, 3]]), inside), np.broadcast_to([[0, 1, 2, 3]], (5, 4))
    )


def test_pad_then_shrink_back_is_the_contiguous_view():
    v = View.contiguous((3, 4)).pad(((1, 2), (0, 3))).shrink(((1, 4), (0, 4)))
    assert v == View.contiguous((3, 4)) and v.is_contiguous


def test_permutes_compose():
    v = View.contiguous((2, 3, 4))
    p, q = (2, 0, 1), (1, 2, 0)
    assert v.permute(p).permute(q) == v.permute(tuple(p[i] for i in q))
    assert v.permute(p).permute((1, 2, 0)).is_contiguous


def test_addresses_inside_and_outside_the_mask():
    v = View.contiguous((2, 3)).pad(((0, 0), (1, 1)))
    assert v.address((0, 0)) is None and v.address((1, 4)) is None
    assert v.address((1, 1)) == 3 and v.address((0, 3)) == 2


def test_size_1_dims_have_stride_0_and_contiguity_is_exact():
    assert View.contiguous((3, 1, 2)).strides == (2, 0, 1)
    assert View.contiguous((4, 5)).is_contiguous
    assert not View.contiguous((4, 5)).permute((1, 0)).is_contiguous
    assert not View.contiguous((4, 5)).shrink(((1, 4), (0, 5))).is_contiguous
    assert not View.contiguous((4,)).pad(((0, 1),)).is_contiguous


@pytest.mark.parametrize(
    "key",
    [
        (slice(None, None, 2),),
        (slice(None, None, -1), 1),
        (Ellipsis, slice(3, 0, -2)),
        (None, 0, Ellipsis, None),
        (-1, slice(-3, None), slice(None, None, 3)),
        (slice(1, 2), slice(4, 0, -1), -2),
    ],
)
def test_indexing_is_a_view_over_the_buffer(key):
    base = np.arange(1, 61, dtype=np.float32).reshape(3, 4, 5)
    t = Tensor(base)[key]
    assert [n.op for n in toposort([t.node])] == [Op.BUFFER, Op.VIEW]
    np.testing.assert_array_equal(t.numpy(), base[key])


# ---- composed moves: matmul's operands --------------------------------------------------


def _operand(rng, shape, how):
    """A float32 tensor of ``shape`` that is a plain buffer, a transpose, a slice or a pad."""
    if how == "plain":
        return Tensor(rng.standard_normal(shape).astype(np.float32))
    if how == "T":
        return Tensor(rng.standard_normal(shape[::-1]).astype(np.float32)).T
    if how == "slice":
        big = Tensor(rng.standard_normal(tuple(s + 2 for s in shape)).astype(np.float32))
        return big[tuple(slice(1, 1 + s) for s in shape)]
    x = Tensor(rng.standard_normal(shape).astype(np.float32))  # "pad": masked, then cut
    return x.pad(tuple((1, 1) for _ in shape))[tuple(slice(1, 1 + s) for s in shape)]


@pytest.mark.parametrize(
    "a_shape,b_shape",
    [((5, 3), (3, 4)), ((3,), (3, 4)), ((5, 3), (3,)), ((2, 5, 3), (3, 4)), ((5, 3), (2, 3, 4))]
    + [((2, 1, 5, 3), (3, 3, 4)), ((1, 3), (3, 1)), ((4, 1), (1, 4))],
)
@pytest.mark.parametrize("how", ["plain", "T", "slice", "pad"])
def test_matmul_operands_moved_in_one_step_are_the_graph_the_moves_one_by_one_make(
    a_shape, b_shape, how, monkeypatch
):
    """``_moved`` composes the operands' Views without the nodes between: the graph (every
    node, its View, which nodes are shared) and the values are those the calls make."""
    from ir.graph.build import Primitives, apply_moves

    rng = np.random.default_rng(len(a_shape) * 10 + len(b_shape))
    a, b = _operand(rng, a_shape, how), _operand(rng, b_shape, "plain" if how == "T" else how)
    one = (a @ b).graph()
    moved = []
    real = Primitives._moved
    monkeypatch.setattr(Primitives, "_moved", lambda x, m: moved.append(m) or real(x, m))
    assert (a @ b).graph() == one
    assert moved, "matmul composed no operand"
    monkeypatch.setattr(Primitives, "_moved", apply_moves)
    assert (a @ b).graph() == one  # the same text as the moves one by one, node for node
    want = np.matmul(a.numpy(), b.numpy())
    np.testing.assert_allclose((a @ b).numpy(), want, rtol=1e-5, atol=1e-6)


def test_a_matmul_operand_that_takes_gradients_records_each_move():
    w = Tensor(np.ones((3, 4), np.float32), requires_grad=True)
    x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    y = x @ w
    kinds = []
    t = y
    while t._ctx is not None:  # down the w side: each movement has its own record
        kinds.append(t._ctx.rule)
        t = next((p for p in t._ctx.parents if p.requires_grad), None)
        if t is None:
            break
    assert [k for k in kinds if isinstance(k, tuple)] == [
        ("VIEW", "reshape"),
        ("VIEW", "expand"),
        ("VIEW", "reshape"),
        ("VIEW", "permute"),
    ]
    y.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), np.repeat(x.numpy().sum(0)[:, None], 4, 1))


def test_moves_that_leave_the_shape_are_no_moves_and_a_bad_reshape_is_refused():
    x = Tensor(np.ones((2, 3), np.float32))
    assert x._moved((("reshape", (2, 3)), ("permute", (0, 1)), ("expand", (2, 3)))) is x
    with pytest.raises(ValueError, match=r"reshape: cannot view \(2, 3\) as \(4, 2\)"):
        x._moved((("reshape", (4, 2)),))
    # a reshape no View can express: the calls one by one, with their CONTIGUOUS copy
    t = x.T._moved((("reshape", (6,)), ("expand", (6,))))
    assert t.graph() == x.T.p_reshape((6,)).graph()
    assert Op.CONTIGUOUS in [n.op for n in toposort([t.node])]
