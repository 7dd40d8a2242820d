"""The device protocol: where graphs run and where their bytes live.

A Device turns a list of op-graph roots into Buffers. Every device honours the same
contract:

* an ASSIGN root is a transaction: every root of one ``realize`` is computed before any
  ASSIGN writes into its target, so an optimizer step reads pre-step values;
* a node the runtime has already realized is read from its buffer, not recomputed
  (``remember`` / ``recall``: nodes are immutable, so the runtime keeps the map);
* a CUSTOM node is run by a kernel the device registered under its name, and a device
  that has none never sees the node (``has_kernel`` lets the frontend compose instead).

Host devices (numpy, c) keep Buffers as numpy arrays, so tensors move freely between them.

Graphs may be built and realized from several threads at once: the shared maps here (the
realized buffers, the devices) are written under locks (a read is one atomic dict lookup),
and each device guards its own caches.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref

import numpy as np

from ir.graph.dtypes import DType
from ir.graph.node import Node
from ir.graph.ops import Op


def env_number(name: str, default: float, what: str, kind=int) -> float:
    """The environment variable ``name`` read as a ``kind`` at least 0, else ``default``;
    a value that is not one raises an error saying what the variable accepts."""
    value = os.environ.get(name, "").strip()
    try:
        number = kind(value) if value else default
    except ValueError:
        number = -1
    if number < 0:
        raise ValueError(f"{name}={value!r}: expected {what}")
    return number


class Buffer:
    """Bytes of one dtype and shape; on host devices, a C-contiguous numpy array."""

    __slots__ = ("dtype", "shape", "data", "__weakref__")

    def __init__(self, dtype: DType, shape: tuple[int, ...], data: np.ndarray | None = None):
        self.dtype = dtype
        self.shape = shape = tuple(shape)
        if data is None:
            data = np.empty(shape, dtype.np)
        assert data.dtype.type is dtype.np and data.shape == shape, (data.dtype, dtype)
        if not data.flags.c_contiguous:
            data = np.asarray(data, order="C")  # ascontiguousarray would make 0-d 1-d
        self.data = data

    def numpy(self) -> np.ndarray:
        return self.data

    def __repr__(self) -> str:
        return f"Buffer({self.dtype}{list(self.shape)})"


# id(node) -> (a weak reference to the node, its Buffer). Keyed by id, not by the node
# through a WeakKeyDictionary: every realize asks this of each node of its graph, and a
# plain dict read by an int is several times cheaper than one that makes a weak reference
# per lookup. The entry goes when the node dies (its weakref's callback, which runs before
# the id can be reused); ``recall`` also checks the reference, so a stale entry never
# answers for a new node that got the same id.
_realized: dict[int, tuple[weakref.ref, Buffer]] = {}
_realized_lock = threading.Lock()


def _forget(ref: _Ref) -> None:
    # no lock: a callback may run inside a locked region of this thread (a collection
    # that frees a node), and one dict read and one removal are each atomic
    entry = _realized.get(ref.key)
    if entry is not None and entry[0] is ref:
        _realized.pop(ref.key, None)


class _Ref(weakref.ref):
    """A weak reference to a realized node that knows its key, for ``_forget``."""

    __slots__ = ("key",)


# A device may also keep the value of any node it computed on the way to what it was
# asked for, of at most this many bytes, while the node lives (both host devices do):
# client code reads a result (a float, a bool, a shape) and goes on with graphs that share
# most of what it read, and without this each read computes that history again
# (scikit-learn's lbfgs fit evaluated each node 2.4 times on the numpy device; the c device
# walked and ran 4x the nodes of a GaussianMixture fit). Larger values go after their last
# reader, which is what bounds a chain of big ones. A kept value stays right: an ASSIGN
# writes only bytes that no live node reads (``limn/versions.py`` hands a reader a copy),
# so a kept value is never forgotten early: it is held as a result is, in one table.
KEEP_BYTES = 1 << 20


def remember(node: Node, buf: Buffer) -> None:
    """``buf`` holds ``node``'s value: its result, or a value a device kept on the way."""
    ref = _Ref(node, _forget)
    ref.key = key = id(node)
    with _realized_lock:
        _realized[key] = (ref, buf)


def recall(node: Node) -> Buffer | None:
    # one atomic read each: no lock (writers take it)
    entry = _realized.get(id(node))
    if entry is None or entry[0]() is not node:
        return None
    return entry[1]


def held(node: Node) -> bool:
    """Whether the runtime holds ``node``'s value (realized, or kept on the way): a plan
    reads it, not computes it. Devices, ``limn.ir`` and the viewer ask this one question,
    so what prints is what runs. An ASSIGN is never held: each realize writes again."""
    return node.op is not Op.ASSIGN and recall(node) is not None


class Device:
    """Base class: a name, a kernel registry for CUSTOM ops, and ``realize``."""

    name = "device"
    host = True  # buffers are numpy arrays in host memory

    def __init__(self):
        self.kernels: dict[str, object] = {}

    def has_kernel(self, name: str) -> bool:
        return name in self.kernels

    def register_kernel(self, name: str, fn) -> None:
        self.kernels[name] = fn

    def realize(self, roots: list[Node]) -> list[Buffer]:
        raise NotImplementedError


_devices: dict[str, object] = {}
_factories: dict[str, object] = {}
observers: list = []
"""Callables ``see(device_name, roots)`` told of every batch the frontend asks a device to
realize, before it runs: the stage viewer records programs through this (LIMN_VIZ)."""

# The default device, resolved when first asked: LIMN_DEVICE, else "cpu" (compiled where a
# C compiler works: a torch program ported by its imports should not run 100x slower than
# it did, with nothing saying why).
_current = [os.environ.get("LIMN_DEVICE") or "cpu"]
_devices_lock = threading.Lock()  # two threads asking for a new device build it once


def register_device(name: str, factory) -> None:
    """``factory()`` builds the device, raising RuntimeError with the reason if it can't."""
    _factories[name] = factory


def resolve(name: str) -> str:
    """A device name as given to the registry: ``"cpu"`` (torch's name for the host) is the
    c device where a C compiler works here, else the numpy reference."""
    if name != "cpu":
        return name
    try:
        get_device("c")
        return "c"
    except (RuntimeError, OSError):
        return "numpy"


def get_device(name: str | None = None) -> Device:
    name = resolve(name or current_device())
    dev = _devices.get(name)
    if dev is not None:
        return dev
    with _devices_lock:
        if name not in _devices:
            if name not in _factories:
                raise ValueError(
                    f"unknown device {name!r}; known: {sorted(_factories)} and 'cpu' (c where a "
                    "C compiler works, else numpy)"
                )
            _devices[name] = _factories[name]()
        return _devices[name]


def device_names() -> tuple[str, ...]:
    """Every registered device name (whether or not its toolchain is present here)."""
    return tuple(sorted(_factories))


def installed(name: str) -> bool:
    """Whether a configured instance was installed under ``name`` (``install``)."""
    return name in _devices


def install(name: str, device: Device) -> Device | None:
    """Put ``device`` behind ``name`` (a configured instance); returns the one it replaces."""
    old = _devices.get(name)
    _devices[name] = device
    return old


def set_device(name: str) -> Device:
    """Make ``name`` the default device; fails here, with the reason, if it cannot run."""
    dev = get_device(name)
    _current[0] = resolve(name)
    return dev


def current_device() -> str:
    if _current[0] == "cpu":
        _current[0] = resolve("cpu")
        if _current[0] == "numpy":  # a program that did not ask for the slow one hears why
            sys.stderr.write("limn: no working C compiler, so the default device is numpy\n")
    return _current[0]
