"""limn/versions.py's memory: a write reuses its tensor's bytes only when nothing reads them.

Each test builds a reader of a tensor's bytes that a later in-place write would like to
reuse (a lazy value, a value holding the graph the write computes, an autograd record, a
numpy array, another storage given the same bytes, a value the device keeps), realizes the
write, and reads the reader: it must read the value from before the write. Where nothing
reads the old bytes any more, the write lands in them (the buffer is the same object).
The decision comes from the graphs themselves (a reader holds the old node), never from
reference counts.
"""

from __future__ import annotations

import pathlib
import weakref

import numpy as np
import pytest

import limn
from limn import nn, optim


def _x():
    return limn.tensor(np.arange(6, dtype=np.float32)).realize()


def _buffer(t):
    return weakref.ref(t.node.arg)


X = np.arange(6, dtype=np.float32)


def test_a_write_nothing_reads_lands_in_its_own_bytes(device):
    x = _x()
    mine = _buffer(x)
    x.add_(1).realize()
    x.mul_(2).realize()
    assert x.node.arg is mine()
    np.testing.assert_array_equal(x.numpy(), (X + 1) * 2)


def test_a_lazy_value_built_before_the_write_keeps_the_old_bytes(device):
    x = _x()
    mine = _buffer(x)
    kept = x * 2
    x.add_(1).realize()
    assert x.node.arg is not mine()
    np.testing.assert_array_equal(kept.numpy(), X * 2)
    del kept
    now = _buffer(x)
    x.add_(1).realize()  # the reader is gone: the next write reuses the bytes
    assert x.node.arg is now()


def test_the_written_value_held_by_another_tensor_reads_the_old_bytes(device):
    x = _x()
    v = x * 2  # the graph the write computes, held by v as well
    x.copy_(v)
    x.realize()
    x.add_(100).realize()
    np.testing.assert_array_equal(v.numpy(), X * 2)
    np.testing.assert_array_equal(x.numpy(), X * 2 + 100)


def test_a_value_inside_the_writes_graph_held_by_a_tensor_reads_the_old_bytes(device):
    x = _x()
    m = x * 3  # inside the write's graph (x + m), and held
    x.add_(m).realize()
    np.testing.assert_array_equal(m.numpy(), X * 3)
    np.testing.assert_array_equal(x.numpy(), X * 4)


def test_a_view_of_the_old_value_and_a_chain_of_writes_read_their_versions(device):
    x = _x()
    snap = x[1:4] * 1
    for _ in range(12):  # past versions.MAX_PENDING: realized on the way
        x.add_(1)
    mid = x.exp()
    for _ in range(12):
        x.add_(1)
    x.realize()
    np.testing.assert_allclose(snap.numpy(), X[1:4])
    np.testing.assert_allclose(mid.numpy(), np.exp(X + 12), rtol=1e-6)
    np.testing.assert_array_equal(x.numpy(), X + 24)


def test_a_numpy_array_of_the_bytes_keeps_them_even_through_its_own_view(device):
    x = _x()
    a = x.numpy()[2:]  # a view of the array numpy() gave, which is let go
    x.mul_(10).realize()
    np.testing.assert_array_equal(a, X[2:])
    x.mul_(10).realize()  # the new bytes were never handed out: they may be reused
    np.testing.assert_array_equal(a, X[2:])
    np.testing.assert_array_equal(x.numpy(), X * 100)


def test_a_read_by_item_or_tolist_hands_out_no_bytes(device):
    x = _x()
    assert x.sum().item() == 15.0 and x.tolist() == X.tolist()
    mine = _buffer(x)
    x.add_(1).realize()
    assert x.node.arg is mine()


def test_a_value_realized_while_another_value_reads_its_graph_is_not_overwritten(device):
    a = _x()
    t = a * 2
    z = t + 1  # reads t's graph: once t is computed, z reads t's bytes
    t.realize()
    t.add_(100).realize()
    np.testing.assert_array_equal(z.numpy(), X * 2 + 1)
    np.testing.assert_array_equal(t.numpy(), X * 2 + 100)


def test_two_storages_given_one_value_write_apart(device):
    v = _x() * 2
    x, y = limn.zeros(6), limn.zeros(6)
    x.copy_(v)
    y.copy_(v)
    del v
    limn.realize(x, y)
    x.add_(1).realize()
    y.mul_(3).realize()
    np.testing.assert_array_equal(x.numpy(), X * 2 + 1)
    np.testing.assert_array_equal(y.numpy(), X * 6)


def test_a_storage_that_took_another_tensors_bytes_writes_apart_from_it(device):
    x, y = limn.zeros(6).realize(), _x()
    x.copy_(y)
    x.realize()
    x.add_(5).realize()
    np.testing.assert_array_equal(y.numpy(), X)
    np.testing.assert_array_equal(x.numpy(), X + 5)


def test_an_autograd_record_keeps_what_it_read(device):
    w = limn.tensor(np.ones(6, np.float32), requires_grad=True)
    x = _x()
    loss = (w * x.exp()).sum()  # the exp's input is x's bytes, read by the backward
    with limn.no_grad():
        x.add_(1).realize()
    loss.backward()
    np.testing.assert_allclose(w.grad.numpy(), np.exp(X), rtol=1e-6)
    np.testing.assert_allclose(loss.item(), np.exp(X).sum(), rtol=1e-6)


def test_a_shared_numpy_arrays_reader_keeps_the_bytes_before_the_write(device):
    a = X.copy()
    t = limn.from_numpy(a)
    lazy = t * 2
    t.add_(1)  # lands in a at once
    np.testing.assert_array_equal(a, X + 1)
    np.testing.assert_array_equal(lazy.numpy(), X * 2)


def test_a_batch_that_writes_two_tensors_reading_each_other_reads_the_old_values(device):
    x, y = _x(), _x() * 10
    y.realize()
    y.add_(x)
    x.mul_(2)  # y's new value reads x's old bytes, in the same batch
    limn.realize(x, y)
    np.testing.assert_array_equal(y.numpy(), X * 11)
    np.testing.assert_array_equal(x.numpy(), X * 2)


def test_an_optimizer_step_reuses_the_parameters_bytes_and_a_held_forward_keeps_them(device):
    model = nn.Linear(6, 3)
    opt = optim.SGD(model.parameters(), lr=0.5)
    x = limn.tensor(np.ones((2, 6), np.float32))
    for held in (False, True):
        ref = np.array(model(x).detach().numpy())
        (model(x) ** 2).sum().backward()
        bufs = [_buffer(p) for p in model.parameters()]
        kept = model(x) if held else None  # a lazy forward over the parameters' bytes
        opt.step()
        opt.zero_grad()
        after = model(x).detach().numpy()
        assert not np.allclose(after, ref)
        reused = [p.node.arg is b() for p, b in zip(model.parameters(), bufs)]
        assert reused == [not held] * 2
        if held:
            np.testing.assert_allclose(kept.detach().numpy(), ref, rtol=1e-6)


def test_a_capture_replay_gives_a_value_built_between_calls_the_bytes_before(device):
    if device != "c":
        pytest.skip("capture replays on compiled devices")
    w = limn.tensor(np.ones(4, np.float32))

    @limn.capture
    def step():
        w.mul_(2)
        return w.sum()

    step(), step()
    seen = w * 1  # a lazy value over w's bytes now
    step()
    np.testing.assert_array_equal(seen.numpy(), np.full(4, 4, np.float32))
    np.testing.assert_array_equal(w.numpy(), np.full(4, 8, np.float32))


def test_no_reference_count_decides_anything_in_limn():
    root = pathlib.Path(limn.__file__).parent
    found = [p.name for p in root.rglob("*.py") if "getrefcount" in p.read_text()]
    assert found == []


def test_a_write_through_a_held_slice_is_one_kernel_and_reuses_the_bases_bytes(device):
    x = _x()
    mine = _buffer(x)
    y = x[1:3]
    y.mul_(2)
    if device == "c":
        import re

        assert re.findall(r"^k\d+", limn.ir(x.sum(), stage="kernel"), re.M) == ["k0"]
        assert x.sum().item() == 18.0  # (a sum held would read x's old bytes: not reused)
    x.realize()  # the view y cached no reader of the old bytes: they take the write
    assert x.node.arg is mine()
    np.testing.assert_array_equal(y.numpy(), [2, 4])
    np.testing.assert_array_equal(x.numpy(), [0, 2, 4, 3, 4, 5])


def test_a_storage_given_another_storages_bytes_keeps_them_when_that_one_is_written(device):
    x, y = limn.zeros(6).realize(), _x()
    x.copy_(y)  # x's value is y's buffer itself
    y.add_(1)
    limn.realize(x, y)
    np.testing.assert_array_equal(x.numpy(), X)
    np.testing.assert_array_equal(y.numpy(), X + 1)
    a = X.copy()
    t, z = limn.from_numpy(a), limn.zeros(6).realize()
    z.copy_(t)
    z.copy_(t)  # (the buffer it holds is also where its writes start from)
    repr(z)
    t.mul_(-2)  # lands in a at once
    np.testing.assert_array_equal(z.numpy(), X)
    np.testing.assert_array_equal(a, X * -2)


def _fields(t) -> list[tuple]:
    """Every node under t's value with its fields, to see that none changes."""
    seen, stack, out = set(), [t.node], []
    while stack:
        n = stack.pop()
        if id(n) not in seen:
            seen.add(id(n))
            out.append((n, n.op, n.srcs, n.arg))
            stack += n.srcs
    return out


def _unchanged(fields: list[tuple]) -> bool:
    return all((n.op, n.srcs) == (op, srcs) and n.arg is arg for n, op, srcs, arg in fields)


def test_a_write_into_shared_memory_changes_no_node_its_readers_hold(device):
    a = X.copy()
    t = limn.from_numpy(a)
    lazy, row = t * 2, t[1:3] + 0
    before = _fields(lazy) + _fields(row)
    t[1:4] = 7.0  # lands in a at once
    np.testing.assert_array_equal(a, [0, 7, 7, 7, 4, 5])
    assert _unchanged(before)
    np.testing.assert_array_equal(lazy.numpy(), X * 2)
    np.testing.assert_array_equal(row.numpy(), X[1:3])
    assert t.numpy() is a
    t.add_(1)  # (no reader now: in a as well)
    np.testing.assert_array_equal(a, [1, 8, 8, 8, 5, 6])


def test_a_recording_that_writes_bytes_a_value_built_before_reads_leaves_it_its_value(device):
    if device != "c":
        pytest.skip("capture records on compiled devices")
    w = limn.tensor(np.ones(4, np.float32))
    seen = w * 3  # built before the call that records, read after it
    before = _fields(seen)

    @limn.capture
    def step():
        y = (w * 1).realize()  # a plan of the recording reads w's bytes, which the write
        w.mul_(2)  # then leaves to seen: a replay's y reads w's value where it is now
        return y.sum() + w.sum()

    got = [step().item() for _ in range(4)]
    assert _unchanged(before)
    np.testing.assert_array_equal(seen.numpy(), np.full(4, 3, np.float32))
    assert got == [4.0 * (2**i) + 8.0 * (2**i) for i in range(4)]
    np.testing.assert_array_equal(w.numpy(), np.full(4, 16, np.float32))
    assert step.records == 1


def test_a_replay_that_writes_bytes_read_between_calls_keeps_one_recording(device):
    if device != "c":
        pytest.skip("capture replays on compiled devices")
    w = limn.tensor(np.ones(4, np.float32))
    a = np.ones(3, np.float32)
    s = limn.from_numpy(a)

    @limn.capture
    def step():
        w.mul_(2)
        s.add_(1)
        return w.sum()

    step()
    held = []
    for k in range(2, 6):  # a reader of w's and s's bytes built before each call
        held.append((w * 1, s * 1, _fields(w * 1)))
        assert step().item() == 4 * 2**k
        np.testing.assert_array_equal(a, np.full(3, 1 + k, np.float32))  # s is still a
    for k, (wv, sv, fields) in enumerate(held, start=1):
        assert _unchanged(fields)
        np.testing.assert_array_equal(wv.numpy(), np.full(4, 2**k, np.float32))
        np.testing.assert_array_equal(sv.numpy(), np.full(3, 1 + k, np.float32))
    assert s.numpy() is a
    assert step.records == 1
