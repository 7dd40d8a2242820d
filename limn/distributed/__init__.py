"""limn.distributed: data-parallel training over MPI.

Each MPI process (a rank) holds a whole copy of the model and trains on its own slice of
every batch; after the backward pass the ranks average their gradients, so every rank takes
the same optimizer step and the copies never drift apart. limn moves no bytes itself:
mpi4py and an MPI library (the ``mpi`` extra, ``uv sync --extra mpi``: mpi4py and the mpich
wheel, whose ``mpiexec`` lands in ``.venv/bin``) move them, straight out of the numpy arrays
the host devices (numpy, c) keep their buffers in::

    world = distributed.init()                 # rank and world size from the MPI launch
    ddp = distributed.DataParallel(model)      # rank 0's parameters, broadcast to all
    for x, y in batches:
        loss = loss_fn(model(Tensor(world.shard(x))), Tensor(world.shard(y)))
        loss.backward()
        (mean_loss,) = ddp.sync_gradients(loss)  # one realize, then the all-reduce
        opt.step()                               # the optimizer's own single realize
        opt.zero_grad()
        world.print(mean_loss.item())            # rank 0 alone prints

Gradients travel in buckets. ``DataParallel`` keeps one flat host array per bucket (float64
for float64 parameters, float32 for every narrower width: MPI has no bfloat16, and summing
half widths in float32 is the more accurate order anyway), and each parameter's gradient
slot is a Tensor over its own slice of that array. ``sync_gradients`` writes every gradient,
already divided by the world size, into its slot in one realize (the realize's ASSIGN is the
only copy), all-reduces each bucket in place (``MPI_IN_PLACE`` over the array's own memory,
through the buffer protocol), and makes the slot ``p.grad``. The all-reduce is a
``limn.capture.host_call``, so a captured training step replays it between its kernels.

A failing rank must not leave the others waiting in a collective forever. Every collective
here is non-blocking and polled: a rank whose exception escapes (through the
``sys.excepthook`` that ``init`` installs, or out of ``world.guard()``), or whose program
ends (``sys.exit``, or its last line, while others still wait for it), tells every other
rank, which raises ``RankFailed`` naming it; a collective not finished after ``timeout``
seconds raises ``DistributedTimeout`` (a rank stuck outside the collective; one that is
killed ends the launch through mpiexec).

Ranks that disagree are refused on every rank, never reduced: a collective whose arrays
differ in dtype or shape between ranks (MPI would sum the common prefix and leave the rest
of the longer ones alone), a broadcast whose ranks name another root, a model whose names,
dtypes or shapes differ. A parameter that gets a gradient on some ranks only (a
data-dependent branch) gets the mean of the gradients that arrived, zeros counted, on every
rank, so every rank steps it; one that gets none anywhere keeps ``p.grad = None`` everywhere.

``import limn.distributed`` works without mpi4py; ``init`` then says how to install it.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import math
import os
import pickle
import sys
import time
from collections.abc import Sequence

import numpy as np

from ir.graph import dtypes
from ir.graph.node import Node
from ir.graph.ops import Op
from limn import serialize, versions
from limn.capture import host_call
from limn.runtime.device import Buffer
from limn.tensor import Tensor, realize

DEFAULT_TIMEOUT = float(os.environ.get("LIMN_DIST_TIMEOUT", "300"))
BUCKET_BYTES = 25 * 2**20
_FAILED = 77  # the tag of a failure notice, on the control communicator
_ENDED = "ended its program while the others still needed it"  # the notice of a rank's exit


class DistributedError(RuntimeError):
    """A collective could not complete on this rank."""


class RankFailed(DistributedError):
    """Another rank raised; this rank stops too rather than wait for it."""


class DistributedTimeout(DistributedError):
    """A collective did not finish in time: a rank is dead, or stuck outside it."""


def _mpi():
    try:
        from mpi4py import MPI
    except (ImportError, RuntimeError, OSError) as e:
        raise RuntimeError(
            "limn.distributed needs mpi4py and an MPI library, which the optional `mpi` "
            "extra installs: `uv sync --extra mpi` (mpi4py and the mpich wheel, whose mpiexec "
            f"lands in .venv/bin); importing mpi4py failed with: {e}"
        ) from e
    return MPI


_world: list[World | None] = [None]


def init(timeout: float = DEFAULT_TIMEOUT) -> World:
    """The World of this MPI launch (a 1-rank World when not launched by mpiexec).

    Also installs a ``sys.excepthook`` that tells the other ranks when an exception ends
    this one, so they raise ``RankFailed`` instead of waiting for it.
    """
    if _world[0] is None:
        MPI = _mpi()
        _world[0] = World(MPI.COMM_WORLD, timeout)
        previous = sys.excepthook

        def hook(kind, value, tb):
            _world[0].fail(value)
            previous(kind, value, tb)
            sys.stderr.flush()
            _world[0].abandon()

        sys.excepthook = hook
        atexit.register(lambda: _world[0].fail(None))  # a rank that ends: its peers hear of it
    _world[0].timeout = timeout
    return _world[0]


def current() -> World:
    """The World ``init`` made."""
    if _world[0] is None:
        raise RuntimeError("limn.distributed: call distributed.init() before using the world")
    return _world[0]


def _named(target) -> list[tuple[str, Tensor]]:
    """Name the Tensors of a Module, optimizer, dict, or list of Tensors (or pairs)."""
    if isinstance(target, list | tuple):
        target = {n: t for n, t in (it if isinstance(it, tuple) else (str(i), it)
                                    for i, it in enumerate(target))}  # fmt: skip
    named = list(serialize.flatten(target).items())
    for name, t in named:
        if not isinstance(t, Tensor):
            raise TypeError(f"distributed: {name!r} is a {type(t).__name__}, not a Tensor")
    return named


def _host_array(t: Tensor) -> np.ndarray:
    """The realized Tensor's own bytes (a host buffer), not a copy."""
    if t.node.op != Op.BUFFER:
        t.realize()
    versions.exposed(t.node.arg)  # (a reader limn cannot see: never overwritten)
    return t.node.arg.data


class World:
    """This process's place in the launch: rank, size, and the polled collectives."""

    def __init__(self, comm, timeout: float = DEFAULT_TIMEOUT):
        self.MPI = _mpi()
        self.comm = comm
        self.control = comm.Dup()  # failure notices travel apart from the collectives
        self.rank: int = comm.Get_rank()
        self.size: int = comm.Get_size()
        self.timeout = timeout
        self._failed = False  # this rank has failed (or heard of a failure): no more notices
        self._pending = False  # a collective was left unfinished
        self._gone: tuple | None = None  # (rank, notice, when) of a peer that failed or ended

    def __repr__(self) -> str:
        return f"<World rank {self.rank} of {self.size}>"

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    # ---- waiting, failing ---------------------------------------------------------

    def wait(self, requests: Sequence, what: str) -> None:
        """Poll ``requests`` to completion; raise if a peer failed or ``timeout`` passes.

        Testing drives MPI's progress as a blocking call would. After the first
        millisecond each test yields the core (a peer rank may be waiting for it on a
        machine with more processes than cores), and after 50 ms the poll sleeps between
        tests, so a rank waiting for a slow peer leaves the cores to it.
        """
        MPI = self.MPI
        start = time.monotonic()
        self._pending = True
        while not MPI.Request.Testall(requests):
            if self._gone is None and self.control.Iprobe(source=MPI.ANY_SOURCE, tag=_FAILED):
                status = MPI.Status()
                msg = self.control.recv(source=MPI.ANY_SOURCE, tag=_FAILED, status=status)
                self._gone = (status.Get_source(), msg, time.monotonic())
            # a rank that ended may have finished this collective first: its last messages
            # get a second to land before the collective is called lost
            source, msg, when = self._gone or (0, None, math.inf)
            if msg is not None and (msg != _ENDED or time.monotonic() - when > 1.0):
                self._failed = True
                said = msg if msg == _ENDED else f"failed ({msg})"
                raise RankFailed(f"{what}: rank {source} of {self.size} {said}; rank "
                                 f"{self.rank} stops too")  # fmt: skip
            elapsed = time.monotonic() - start
            if elapsed > self.timeout:
                raise DistributedTimeout(
                    f"{what}: not finished after {self.timeout:g} s on rank {self.rank} of "
                    f"{self.size}; a rank is dead or stuck outside the collective "
                    "(init(timeout=...) or LIMN_DIST_TIMEOUT sets the limit)"
                )
            if elapsed > 0.05:
                time.sleep(min(0.01, elapsed / 100))
            elif elapsed > 0.001:
                os.sched_yield()
        self._pending = False

    def fail(self, exc: BaseException | None) -> None:
        """Tell every other rank that this one failed with ``exc``, or (None) that its
        program ended (once)."""
        if self._failed or self.size == 1 or self.MPI.Is_finalized():
            return
        self._failed = True
        msg = _ENDED if exc is None else f"{type(exc).__name__}: {exc}"[:1000]
        reqs = [
            self.control.isend(msg, dest=r, tag=_FAILED) for r in range(self.size) if r != self.rank
        ]
        deadline = time.monotonic() + 5.0
        while not self.MPI.Request.Testall(reqs) and time.monotonic() < deadline:
            time.sleep(0.001)

    def abandon(self) -> None:
        """End the launch if a collective was left unfinished: MPI_Finalize would wait for
        it forever. Called by the excepthook after the traceback is printed."""
        if self._pending and self.size > 1:
            time.sleep(0.5)  # let the other ranks print their own tracebacks first
            self.comm.Abort(1)

    @contextlib.contextmanager
    def guard(self):
        """Tell the other ranks if the body raises (then re-raise here)."""
        try:
            yield self
        except BaseException as e:
            self.fail(e)
            raise

    # ---- collectives ----------------------------------------------------------------

    def barrier(self) -> None:
        if self.size > 1:
            self._agree([], "barrier")
            self.wait([self.comm.Ibarrier()], "barrier")

    def all_reduce(
        self, arrays: Sequence[np.ndarray], average: bool = True, flags: np.ndarray | None = None
    ) -> None:
        """Sum (or average) each contiguous numpy array over the ranks, in place; ``flags``
        (int64) become their maximum over the ranks."""
        if self.size > 1:
            for a in arrays:
                if not a.flags.c_contiguous:
                    raise ValueError(
                        f"all_reduce: needs C-contiguous arrays, got strides {a.strides} for "
                        f"shape {a.shape}"
                    )
            spec = [(a.dtype.str, a.shape) for a in arrays]
            most = self._agree(spec, "all_reduce", () if flags is None else flags)
            if flags is not None:
                flags[:] = most
            reqs = [self.comm.Iallreduce(self.MPI.IN_PLACE, a, op=self.MPI.SUM) for a in arrays]
            self.wait(reqs, f"all_reduce of {len(arrays)} arrays")
        if average:
            for a in arrays:
                np.divide(a, self.size, out=a)

    def broadcast(self, target, root: int = 0) -> None:
        """Overwrite ``target``'s Tensors (a Module, an optimizer, a dict or a list of
        Tensors) with rank ``root``'s, in place, bit for bit."""
        named = _named(target)
        realize(*(t for _, t in named))
        self._agree([root, *((n, t.dtype.name, t.shape) for n, t in named)], "broadcast")
        if self.size == 1:
            return
        arrays = [_host_array(t).reshape(-1).view(np.uint8) for _, t in named]
        reqs = [self.comm.Ibcast([a, self.MPI.BYTE], root=root) for a in arrays if a.size]
        self.wait(reqs, f"broadcast of {len(arrays)} tensors from rank {root}")

    def broadcast_object(self, obj=None, root: int = 0):
        """A small picklable value from rank ``root`` (``obj`` elsewhere is ignored)."""
        if self.size == 1:
            return obj
        data = pickle.dumps(obj) if self.rank == root else b""
        (n,) = self._agree([root], "broadcast_object", [len(data)])  # the length, root's
        buf = np.frombuffer(data, np.uint8).copy() if self.rank == root else np.empty(n, np.uint8)
        self.wait([self.comm.Ibcast(buf, root=root)], "broadcast_object")
        return pickle.loads(buf.tobytes())

    def _agree(self, description: list, what: str, flags: Sequence[int] = ()) -> np.ndarray:
        """Refuse, on every rank, a collective the ranks describe differently (another one,
        other names, dtypes, shapes or root): MPI would mix their bytes, or sum the common
        prefix of arrays of two lengths. One small all-reduce, which also takes ``flags`` to
        their maximum over the ranks (returned)."""
        if self.size == 1:
            return np.asarray(flags, np.int64)
        text = repr((what, len(flags), description)).encode()
        d = int.from_bytes(hashlib.sha256(text).digest()[:7], "little")
        head = np.array([d, -d, *flags], np.int64)
        self.wait([self.comm.Iallreduce(self.MPI.IN_PLACE, head, op=self.MPI.MAX)], what)
        if head[0] != -head[1]:  # the largest digest is not the smallest: name who differs
            every = np.empty(self.size, np.int64)
            self.wait([self.comm.Iallgather(np.array([d], np.int64), every)], what)
            raise ValueError(
                f"{what}: ranks {[r for r in range(self.size) if every[r] != every[0]]} call "
                "another collective or hold other tensors (names, dtypes, shapes, root) than "
                f"rank 0; every rank must build the same model and make the same calls. Rank "
                f"{self.rank} holds: {description[:8]}{' ...' if len(description) > 8 else ''}"
            )
        return head[2:]

    # ---- data, checkpoints, logging -------------------------------------------------

    def shard(self, batch, axis: int = 0):
        """This rank's contiguous slice of ``batch`` (numpy array or Tensor) along ``axis``:
        rank r of n gets items [r*b, (r+1)*b) of a batch of n*b."""
        shape = tuple(batch.shape)
        if not -len(shape) <= axis < len(shape):
            raise ValueError(f"shard: axis {axis} is out of range for shape {shape}")
        axis %= len(shape)
        if shape[axis] % self.size:
            raise ValueError(
                f"shard: a batch of shape {shape} does not split evenly along axis {axis} "
                f"over {self.size} ranks; accepted: a size that is a multiple of {self.size}"
            )
        b = shape[axis] // self.size
        index = [slice(None)] * len(shape)
        index[axis] = slice(self.rank * b, (self.rank + 1) * b)
        return batch[tuple(index)]

    def save(self, target, path, metadata: dict[str, str] | None = None) -> None:
        """Rank 0 writes the checkpoint (``limn.serialize.save``); every rank returns once
        the file is complete."""
        what = f"save: rank 0 could not write {path}"
        self._on_main(lambda: serialize.save(target, path, metadata), what)

    def load_into(self, target, path, strict: bool = True) -> dict[str, str]:
        """Rank 0 reads the checkpoint into ``target`` (``limn.serialize.load_into``), then
        broadcasts ``target`` to every rank; returns the file's metadata everywhere."""
        what = f"load_into: rank 0 could not load {path}"
        metadata = self._on_main(lambda: serialize.load_into(target, path, strict), what)
        self.broadcast(target)
        return metadata

    def _on_main(self, fn, what: str):
        """``fn()`` on rank 0, its result on every rank; if it raises there, rank 0 raises
        that and every other rank a CheckpointError saying ``what`` and why."""
        result, error = None, None
        if self.is_main:
            try:
                result = ("ok", fn())
            except Exception as e:  # every rank must hear of it, not wait in the broadcast
                error, result = e, ("error", f"{type(e).__name__}: {e}")
        status, value = self.broadcast_object(result)
        if error is not None:
            raise error
        if status == "error":
            raise serialize.CheckpointError(f"{what}: {value}")
        return value

    def print(self, *args, **kwargs) -> None:
        """``print`` on rank 0 alone (flushed, so lines from a launch arrive in order)."""
        if self.is_main:
            print(*args, **kwargs, flush=True)


def _bucket_dtype(d: dtypes.DType) -> dtypes.DType:
    return dtypes.float64 if d == dtypes.float64 else dtypes.float32


def _slot(flat: np.ndarray, start: int, shape: tuple, d: dtypes.DType, device: str) -> Tensor:
    """A Tensor whose buffer is ``flat[start : start + prod(shape)]`` itself."""
    view = flat[start : start + math.prod(shape)].reshape(shape)
    node = Node(Op.BUFFER, d, tuple(shape), (), Buffer(d, shape, view))
    t = Tensor._make(node, device)
    t._storage().pinned = True  # a write lands in the bucket (``limn/versions.py``)
    return t


class DataParallel:
    """Averaged gradients over the ranks, in buckets, for any training loop.

    Construction broadcasts rank 0's parameters (``broadcast=False`` skips it, e.g. after
    ``world.load_into``). ``bucket_bytes`` bounds one bucket; a larger parameter gets a
    bucket of its own.
    """

    def __init__(self, params, world: World | None = None, bucket_bytes: int = BUCKET_BYTES,
                 broadcast: bool = True):  # fmt: skip
        self.world = world or current()
        self.named = _named(params.named_parameters() if hasattr(params, "named_parameters")
                            else params)  # fmt: skip
        for name, p in self.named:
            if not p.dtype.is_float:
                raise TypeError(f"DataParallel: parameter {name!r} is {p.dtype}; needs a float")
        if broadcast:
            self.world.broadcast([p for _, p in self.named])
        else:
            self.world._agree([(n, p.dtype.name, p.shape) for n, p in self.named], "DataParallel")
        self.buckets, self.slots = self._layout(
            [(p.shape, p.dtype, p.device) for _, p in self.named], bucket_bytes
        )
        self._extra: dict[tuple, tuple[list[np.ndarray], list[Tensor]]] = {}
        self.bucket_bytes = bucket_bytes

    @staticmethod
    def _layout(specs, bucket_bytes: int) -> tuple[list[np.ndarray], list[Tensor]]:
        """Flat arrays, one per bucket, and a slot Tensor over each spec's slice of one."""
        plan: list[tuple[dtypes.DType, list[int]]] = []  # (bucket dtype, spec indices)
        open_bucket: dict[dtypes.DType, tuple[int, int]] = {}  # dtype -> (plan index, bytes)
        for i, (shape, d, _) in enumerate(specs):
            bd = _bucket_dtype(d)
            nbytes = math.prod(shape) * bd.itemsize
            at = open_bucket.get(bd)
            if at is None or at[1] + nbytes > bucket_bytes:
                plan.append((bd, []))
                at = (len(plan) - 1, 0)
            plan[at[0]][1].append(i)
            open_bucket[bd] = (at[0], at[1] + nbytes)
        buckets, slots = [], [None] * len(specs)
        for bd, members in plan:
            flat = np.zeros(sum(math.prod(specs[i][0]) for i in members), dtypes.to_numpy(bd))
            start = 0
            for i in members:
                shape, _, device = specs[i]
                slots[i] = _slot(flat, start, shape, bd, device)
                start += math.prod(shape)
            buckets.append(flat)
        return buckets, slots

    def sync_gradients(self, *extra: Tensor) -> list[Tensor]:
        """Average every parameter's gradient over the ranks (``p.grad`` becomes the slot
        holding the mean, on every rank, wherever a gradient arrived on any rank), and
        return the rank mean of each ``extra`` (a logged loss).

        One realize computes the gradients, the ``extra`` tensors and their shares; then
        the buckets are all-reduced in place. What it returns, like ``p.grad``, lives in
        the buckets: read it before the next call.
        """
        key = tuple((t.shape, t.dtype, t.device) for t in extra)
        if key not in self._extra:
            self._extra[key] = self._layout(key, BUCKET_BYTES)
        extra_buckets, extra_slots = self._extra[key]
        n = self.world.size

        def share(t, slot):  # this rank's part of the mean; no gradient here gives zero
            return slot.assign(0.0 if t is None else t.detach().cast(slot.dtype) / n)

        writes = [share(p.grad, slot) for (_, p), slot in zip(self.named, self.slots)]
        writes += [share(t, slot) for t, slot in zip(extra, extra_slots)]
        realize(*writes, *extra)
        buckets = self.buckets + extra_buckets
        here = [p.grad is not None for _, p in self.named]
        anywhere = np.zeros(len(here), np.int64)

        def reduce():  # a captured step replays it: this rank's gradients arrive as recorded
            anywhere[:] = here
            self.world.all_reduce(buckets, average=False, flags=anywhere)

        host_call(reduce, self.named[0][1].device)
        for (_, p), slot, arrived in zip(self.named, self.slots, anywhere):
            if arrived:  # on some rank: every rank steps it, by the same mean
                p.grad = slot
        return list(extra_slots)


# torch.distributed's names over this world (``process_group.py``); ``optim`` holds
# ZeroRedundancyOptimizer's stand-in
from limn.distributed import optim  # noqa: E402, F401
from limn.distributed.process_group import (  # noqa: E402, F401
    ReduceOp,
    all_reduce,
    barrier,
    destroy_process_group,
    get_rank,
    get_world_size,
    init_process_group,
    is_available,
    is_initialized,
)
