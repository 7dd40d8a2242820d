"""Writing into a view reaches its base, on both frontends and every device.

One mechanism (``ir/graph/write.place``) serves ``limn.Tensor.assign`` on a view and limn_array's
in-place operators and ``__setitem__`` on a view; numpy, with its own view rules, is the
oracle: basic indexing (ints, slices of any step, ``...``, ``None``), ``permute_dims``,
``reshape`` where it stays a view, ``flip`` and ``.T`` give views; an index of only ints
and advanced indexing give copies.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import limn
import limn_array as xp
from limn import Tensor

SHAPE = (3, 4, 5)


def same(a, b):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# ---- keys -----------------------------------------------------------------------------


@st.composite
def basic_keys(draw, shape):
    """A basic index for ``shape``: an int or a slice (any step) per dim taken, Nones, at
    most one Ellipsis."""
    n = draw(st.integers(0, len(shape)))
    items = []
    for s in shape[:n]:
        if s > 0 and draw(st.booleans()):
            items.append(draw(st.integers(-s, s - 1)))
        else:
            step = draw(st.sampled_from([None, 1, 2, 3, -1, -2]))
            lo = draw(st.none() | st.integers(-s - 1, s + 1))
            hi = draw(st.none() | st.integers(-s - 1, s + 1))
            items.append(slice(lo, hi, step))
    for _ in range(draw(st.integers(0, 2))):
        items.insert(draw(st.integers(0, len(items))), None)
    if n < len(shape) and draw(st.booleans()):
        items.insert(draw(st.integers(0, len(items))), Ellipsis)
    return tuple(items)


SETTINGS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


# ---- limn_array -----------------------------------------------------------------------


@SETTINGS
@given(data=st.data())
def test_in_place_ops_on_views_of_views_reach_the_base_as_in_numpy(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    base_np = rng.standard_normal(SHAPE)
    base = xp.asarray(base_np.copy(), device="numpy")  # one device: each draw is a new graph
    k1 = data.draw(basic_keys(SHAPE), "k1")
    v, v_np = base[k1], base_np[k1]
    if np.ndim(v_np) > 0 and data.draw(st.booleans()):
        k2 = data.draw(basic_keys(v_np.shape), "k2")
        v, v_np = v[k2], v_np[k2]
    a, b = rng.standard_normal(np.shape(v_np)), rng.standard_normal(np.shape(v_np))
    v += xp.asarray(a, device="numpy")  # chained in-place ops: each sees the one before
    v_np += a
    v *= xp.asarray(b, device="numpy")
    v_np *= b
    same(v, v_np)
    same(base, base_np)
    base -= 1.0  # the base written after: the view reads its current value
    base_np -= 1.0
    same(v, v_np)


def test_oaconvolve_pattern_permuted_views_accumulate(device):
    """scipy's overlap-add: swapaxes (permute_dims), slices, then += into the slice."""
    rng = np.random.default_rng(1)
    r_np = rng.standard_normal((4, 6))
    r = xp.asarray(r_np.copy())
    over_np = rng.standard_normal((3, 2))

    def split(x, at, axis, ns):
        s = ns.permute_dims(x, (1, 0)) if axis == 1 else x
        parts = [s[:at, ...], s[at:, ...]]
        return [ns.permute_dims(p, (1, 0)) if axis == 1 else p for p in parts]

    ret, _ = split(r, 4, 1, xp)
    part = split(split(ret, 2, 1, xp)[0], 1, 0, xp)[1]
    part += xp.asarray(over_np)
    ret_np, _ = split(r_np, 4, 1, np)
    part_np = split(split(ret_np, 2, 1, np)[0], 1, 0, np)[1]
    part_np += over_np
    same(xp.reshape(ret, (-1,)), ret_np.reshape(-1))
    same(r, r_np)


def test_setitem_on_a_view_writes_the_base(device):
    x_np = np.arange(24.0).reshape(4, 6)
    x = xp.asarray(x_np.copy())
    v, v_np = x[1:, ::-2], x_np[1:, ::-2]
    v[0, 1] = -1.0
    v_np[0, 1] = -1.0
    v[1:] = xp.asarray([7.0, 8.0, 9.0])
    v_np[1:] = [7.0, 8.0, 9.0]
    xp.flip(x, axis=0)[0] += 100.0
    np.flip(x_np, axis=0)[0] += 100.0
    x.T[2] *= 3.0
    x_np.T[2] *= 3.0
    xp.reshape(x, (2, 12))[1, ::5] = 0.5
    x_np.reshape(2, 12)[1, ::5] = 0.5
    same(x, x_np)
    same(v, v_np)


def test_zero_d_views_and_element_copies_follow_numpy(device):
    x_np = np.arange(6.0)
    x = xp.asarray(x_np.copy())
    elem, elem_np = x[2], x_np[2]  # every dim an int: a copy (numpy's scalar)
    elem += 10.0
    elem_np += 10.0
    view, view_np = x[4, ...], x_np[4, ...]  # an Ellipsis keeps a 0-d view
    view += 10.0
    view_np += 10.0
    same(x, x_np)
    same(elem, elem_np)
    same(view, view_np)


def test_copies_never_see_later_writes_and_lazy_reads_keep_the_old_value(device):
    x_np = np.arange(12.0).reshape(3, 4)
    x = xp.asarray(x_np.copy())
    fancy = x[xp.asarray([0, 2])]  # advanced indexing: a copy, in numpy too
    masked = x[x > 5]
    doubled = x * 2  # lazy, never computed yet: still the value x had
    flat = xp.reshape(x[:, :3], (-1,))  # no single view: reshape copies, as numpy's does
    before = x[1]  # a view taken before the write
    x[1, 1:3] = -5.0
    after = x[1]  # and one taken after
    x_np[1, 1:3] = -5.0
    same(before, x_np[1])
    same(after, x_np[1])
    same(fancy, np.arange(12.0).reshape(3, 4)[[0, 2]])
    same(masked, np.arange(6.0, 12.0))
    same(doubled, 2 * np.arange(12.0).reshape(3, 4))
    flat += 1.0  # writes the copy only
    same(x, x_np)
    same(flat, np.arange(12.0).reshape(3, 4)[:, :3].reshape(-1) + 1.0)


def test_complex_views_write_both_parts(device):
    z_np = np.arange(6.0).reshape(2, 3) + 1j * np.arange(6.0).reshape(2, 3)
    z = xp.asarray(z_np.copy())
    z[:, ::-1][1] += xp.asarray(1 - 2j)
    z_np[:, ::-1][1] += 1 - 2j
    xp.permute_dims(z, (1, 0))[0] *= xp.asarray(1j)
    np.transpose(z_np)[0] *= 1j
    same(z, z_np)


# ---- limn.Tensor --------------------------------------------------------------------


def test_assign_into_a_tensor_view_writes_the_base_buffer(device):
    z = Tensor.zeros(3, 4)  # lazy: realized first so the write has bytes to land in
    z_np = np.zeros((3, 4), np.float32)
    z[1].assign(Tensor.ones(4)).realize()
    z_np[1] = 1
    same(z, z_np)
    v = z[:, ::-2]
    v.realize()  # a realized view still sees the write made through it
    v.assign(Tensor(np.arange(6.0, dtype=np.float32).reshape(3, 2))).realize()
    z_np[:, ::-2] = np.arange(6.0).reshape(3, 2)
    same(z, z_np)
    same(v, z_np[:, ::-2])
    w = z.permute(1, 0)[1:3][None, :, ::-1]  # views of views, with a None
    lazy = z[2]  # a lazy view of the base reads its current bytes
    w.assign(7.0).realize()
    z_np.T[1:3][None, :, ::-1] = 7
    same(z, z_np)
    same(lazy, z_np[2])


def test_a_write_is_seen_by_the_next_read_with_no_explicit_realize(device):
    # the case: the ASSIGN's return value dropped, the base read straight away
    z = Tensor.zeros(3, 4).realize()
    z[1].assign(Tensor.ones(4))
    z_np = np.zeros((3, 4), np.float32)
    z_np[1] = 1
    same(z, z_np)
    # the view itself, a view made before the write, and a whole-tensor write
    v, before = z[:, 1:3], z[0]
    v.assign(5.0)
    z_np[:, 1:3] = 5
    same(before, z_np[0])
    same(v, z_np[:, 1:3])
    z.assign(Tensor.full((3, 4), 2.0))
    assert z.tolist() == [[2.0] * 4] * 3
    # later math on a written tensor reads the written value (program order)
    b = Tensor.zeros(2).realize()
    b.assign(3.0)
    c = b + 1
    b.assign(10.0)
    same(c, np.array([4.0, 4.0], np.float32))
    same(b, np.array([10.0, 10.0], np.float32))


@SETTINGS
@given(data=st.data())
def test_assign_into_any_basic_view_matches_numpy(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    z_np = rng.standard_normal(SHAPE).astype(np.float32)
    z = Tensor(z_np.copy(), device="numpy")  # one device: each draw is a new graph
    key = data.draw(basic_keys(SHAPE))
    if all(isinstance(k, int) for k in key) and Ellipsis not in key and len(key) == 3:
        key = key + (Ellipsis,)  # numpy's all-int read is a scalar, not a view
    view_np = z_np[key]
    val = rng.standard_normal(view_np.shape).astype(np.float32)
    z[key].assign(Tensor(val, device="numpy")).realize()
    view_np[...] = val
    same(z, z_np)


def test_assign_refuses_views_it_cannot_write():
    z = Tensor.zeros(3, 4).realize()
    with pytest.raises(ValueError, match="more than once"):
        z[0:1].expand(3, 4).assign(1.0)
    padded = z.pad(((1, 0), (0, 0)))  # a copy, as torch's F.pad: its write stays in it
    padded.assign(1.0)
    same(z, np.zeros((3, 4)))
    same(padded, np.ones((4, 4)))


def test_assign_is_not_differentiable_and_says_so():
    w = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="not differentiable"):
        w[0:1].assign(5.0)
    with pytest.raises(RuntimeError, match="not differentiable"):
        Tensor.zeros(3).realize().assign(w * 2)
    with limn.no_grad():
        w[0:2].assign(Tensor([5.0, 6.0])).realize()
    same(w, [5.0, 6.0, 3.0])


def test_an_expand_composed_in_one_step_is_still_a_view_of_its_base():
    """``expand`` (a reshape adding leading 1s, then the expand) builds one View in one step
    (``_moved``); the result is a view of the tensor for writes, as each move's would be."""
    x = Tensor(np.array([1, 2, 3], np.float32))
    y = x.expand(1, 3)
    assert y._view_root() == (x, (("reshape", (1, 3)), ("expand", (1, 3))))
    y.assign(Tensor(np.array([[7, 8, 9]], np.float32)))
    np.testing.assert_array_equal(x.numpy(), [7, 8, 9])
    w = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    w.T.expand(1, 3, 2).assign(Tensor(np.full((1, 3, 2), 5, np.float32)))
    np.testing.assert_array_equal(w.numpy(), np.full((2, 3), 5))
    z = Tensor(np.array([[1, 2, 3]], np.float32))
    with pytest.raises(ValueError, match=r"reads some element of its base more than once"):
        z.expand(2, 3).assign(Tensor(np.ones((2, 3), np.float32)))
