"""Graphs built and realized from many threads at once give each thread its serial answer.

Sixteen threads start together (a barrier) and each builds and realizes its own graphs:
an ``xp.fft.fft`` of its own array, and a few SGD steps of its own small MLP. Every
result must equal, bit for bit, the same work run on one thread. This holds the shared
state a graph touches on its way to bytes: node ids, the grad mode, the plan cache, the
compile cache and the map of realized buffers.
"""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

import limn
import limn_array as xp
from limn import Tensor, nn, optim
from limn.runtime import get_device
from limn.runtime.c import CDevice

THREADS = 16


def _devices():
    names = ["numpy"]
    try:
        get_device("c")
        names.append("c")
    except RuntimeError:
        pass
    return names


def run_threads(fn, n=THREADS) -> list:
    """``fn(i)`` on n threads released together; their results, or the first error."""
    barrier = threading.Barrier(n)
    out: list = [None] * n
    errors: list[BaseException] = []

    def work(i):
        try:
            barrier.wait()
            out[i] = fn(i)
        except BaseException as e:  # noqa: BLE001  (re-raised below, on the test's thread)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often, so a race shows on every run
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    if errors:
        raise errors[0]
    return out


def fft_work(device: str):
    """One length for every thread, so the c device builds one plan (a power of two: its
    plan is the quickest to build)."""

    def work(i):
        x = np.random.default_rng(i).standard_normal(16)
        return np.asarray(xp.fft.fft(xp.asarray(x, device=device)))

    return work


class MLP(nn.Module):
    def __init__(self):
        self.fc1 = nn.Linear(4, 6)
        self.fc2 = nn.Linear(6, 2)

    def forward(self, x):
        return self.fc2(self.fc1(x).tanh())


def training_work(device: str, models: list):
    def work(i):
        model = models[i]
        opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        rng = np.random.default_rng(100 + i)
        losses = []
        for _ in range(3):
            x = Tensor(rng.standard_normal((8, 4)).astype(np.float32), device=device)
            y = Tensor(rng.standard_normal((8, 2)).astype(np.float32), device=device)
            loss = nn.mse_loss(model(x), y)
            loss.backward()
            opt.step(loss)
            opt.zero_grad()
            losses.append(loss.item())
        return losses, [p.numpy() for p in model.parameters()]

    return work


def fresh_models(device: str) -> list:
    """THREADS models with the same starting weights each time (the init draws from the
    shared generator, so it runs on one thread, before the threads start)."""
    prev = limn.current_device()
    limn.set_device(device)
    try:
        limn.set_seed(7)
        return [MLP() for _ in range(THREADS)]
    finally:
        limn.set_device(prev)


def assert_same(threaded, serial):
    for a, b in zip(threaded, serial):
        if isinstance(a, tuple | list):
            assert_same(a, b)
        else:
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.fixture(params=_devices())
def device(request):
    """A device name; for c, a fresh instance, so the threads all miss its plan cache at
    the same moment (compiled libraries still come from the disk cache when there)."""
    if request.param == "numpy":
        yield "numpy"
        return
    limn.runtime.device.install("c-threads", CDevice())
    yield "c-threads"
    limn.runtime.device._devices.pop("c-threads", None)


def test_sixteen_threads_calling_fft_get_their_serial_results(device):
    work = fft_work(device)
    threaded = run_threads(work)
    assert_same(threaded, [work(i) for i in range(THREADS)])


def test_sixteen_threads_training_get_their_serial_results(device):
    threaded = run_threads(training_work(device, fresh_models(device)))
    assert_same(threaded, [training_work(device, fresh_models(device))(i) for i in range(THREADS)])


def test_grad_mode_is_per_thread():
    """One thread inside no_grad does not switch recording off for another."""
    inside, done = threading.Event(), threading.Event()

    def quiet():
        with limn.no_grad():
            inside.set()
            done.wait(10)

    t = threading.Thread(target=quiet)
    t.start()
    inside.wait(10)
    try:
        w = Tensor([1.0, 2.0], requires_grad=True)
        assert (w * 2).requires_grad
    finally:
        done.set()
        t.join()
