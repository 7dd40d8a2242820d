"""Writes are values: a Tensor's storage, its versions, and when a write may reuse memory.

torch's in-place ops change bytes that other tensors share. A limn Tensor is lazy, so
changing bytes that a value not yet computed still reads would change that value too.
Here no write changes bytes that anything can still read:

* A Tensor's value lives in a ``Storage``, shared by the tensors that alias it as torch's
  do (its views, ``detach()``, ``.data``). A write replaces the storage's node with a new
  one computed from the old (``x.add_(1)``: the storage's node becomes ``old + 1``); what
  was built before keeps the node it read, so it keeps the old value, by construction.
* A view holds the storage and the movements it was taken by (``moves``). Its node is
  those movements replayed on the storage's current node, derived again after each write
  (``Storage.gen`` says when); a write through a view is the base's next value with the
  view's elements replaced (``ir/graph/write.place``), which every alias then reads.
  torch's functionalization does the same: views replayed from their base after a
  mutation.
* Reusing the old bytes is the planner's choice (``_rebuild``): when a storage's write
  is realized and its previous buffer can no longer be read by anything but the values
  computed in this batch, the batch writes the new value into it (an ASSIGN), as JAX
  does with donated buffers; otherwise the new value gets bytes of its own. Who can
  still read the old value is recorded by the graphs as they are built: a reader holds
  the old node through its sources, so the old node outlives the batch's own use of it
  exactly when a reader remains (a weak reference says so). No reference is counted.
* A write that must land in bytes a reader still reads (memory a numpy array shares, a
  buffer a captured step writes again each replay) leaves the reader its value without
  changing any node: the readers keep the Buffer they read, and the write goes through
  another (``move``): a copy where the bytes are limn's, or, where the memory is shared,
  a new Buffer over it while the readers' Buffer takes a copy of the bytes before.
* Each tensor has torch's version counter (``vc``, shared by views and ``detach()``, not
  by ``.data``): autograd records the versions it saw and ``backward`` refuses, as torch
  does, a value written since.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import operator
import weakref

from ir.graph import dtypes, write
from ir.graph.node import Node
from ir.graph.ops import Op
from ir.graph.view import View
from limn.runtime import profile
from limn.runtime.device import Buffer, get_device, observers, recall, remember

# Set to a list by a caller that must know whether code it runs writes a tensor (an export
# of a function, which must be pure): each write appends its op's name.
watch: list | None = None

# A write chain longer than this is realized when it grows: a loop that writes a tensor
# every step and reads it only through other values would otherwise grow one graph.
MAX_PENDING = 8


class Storage:
    """The current value (``node``) of a base tensor and every alias of it.

    ``gen`` counts writes (a view's cached node is current while it saw the same gen);
    ``donor`` is the buffer node the pending writes started from, whose bytes the next
    realize may reuse; ``pending`` the length of that chain of writes; ``shared`` marks a
    buffer a numpy array shares (``from_numpy``): its writes happen in it, at once;
    ``pinned`` one whose writes land in its bytes when realized (a gradient bucket's slot,
    ``limn/distributed.py``), whoever reads them (they get a copy); ``views`` the view
    tensors taken of it (weakly), whose cached nodes a new value makes stale.
    """

    __slots__ = ("node", "gen", "donor", "pending", "shared", "pinned", "views")

    def __init__(self, node: Node, shared: bool = False):
        self.node, self.gen, self.donor, self.pending, self.shared = node, 0, None, 0, shared
        self.pinned = shared  # its bytes are memory others see: writes land in them
        self.views: weakref.WeakSet = weakref.WeakSet()

    def write(self, node: Node) -> None:
        """The storage's next value is ``node``."""
        if self.node.op is Op.BUFFER:
            self.donor, self.pending = self.node, 0
        self.node = node
        self.renew()
        self.pending += 1

    def renew(self) -> None:
        """A new value: each view derives its node again when next read, and lets go of
        the one it cached, which read the old value as no reader does (``_rebuild``)."""
        self.gen += 1
        for t in self.views:
            if t._st is self and t._moves:  # (still a view of this storage)
                t._node = None


def _move(v: View, kind: str, arg) -> View | None:
    return v.window(*arg) if kind == "window" else getattr(v, kind)(arg)


@contextlib.contextmanager
def storage_layout(t):
    """While a view of t is taken: t's node as its storage's buffer moved. A view
    realized alone caches a row-major copy of its value, and a view composed on that copy
    could be a copy where torch's is a view. (Not where the storage is lazy: composing on
    it would compute it again.)"""
    st, node = t._st, t._node
    swap = bool(t._moves) and node is not None and node.op is Op.BUFFER
    swap = swap and st.node.op is Op.BUFFER and t._seen == st.gen
    if swap:
        t._node = layout_node(t)
    try:
        yield
    finally:
        if swap:
            t._node = node


def layout_node(t) -> Node:
    """Tensor t's value as its storage's value moved (a VIEW of the storage's node, or
    that node), whatever t caches: what t's layout is judged by (``contiguous()``, a
    diagonal's view, an overlap), as a view realized alone caches a row-major copy."""
    st = t._st
    if st is None or not t._moves:
        return t.node
    return view_node(st.node, t._moves)


def layout_view(t) -> View | None:
    """The View by which tensor t reads its storage's value: its moves replayed on the
    storage's row-major layout, whatever node holds that value now (a write's result may
    itself be a VIEW node, which ``layout_node`` would compose into), or None where a move
    is no View (t reads a copy). A tensor with no storage: its node's own View."""
    st = t._st
    if st is None:
        node = t.node
        return node.arg if node.op is Op.VIEW else View.contiguous(node.shape)
    v = View.contiguous(st.node.shape)
    for kind, arg in t._moves:
        v = _move(v, kind, arg)
        if v is None:
            return None
    return v


def view_node(node: Node, moves) -> Node:
    """The node a view taken by ``moves`` (``(kind, arg)`` pairs) of ``node`` is: the
    movements composed into one VIEW of the node's source, as ``Primitives._view``
    builds them (a movement no View can express reads a copy)."""
    for kind, arg in moves:
        base, v = (node.srcs[0], node.arg) if node.op is Op.VIEW else (node, None)
        w = _move(v if v is not None else View.contiguous(base.shape), kind, arg)
        if w is None:
            base = Node(Op.CONTIGUOUS, node.dtype, node.shape, (node,))
            w = _move(View.contiguous(node.shape), kind, arg)
        if w.is_contiguous and w.shape == base.shape:
            node = base
        else:
            node = Node(Op.VIEW, node.dtype, w.shape, (base,), w)
    return node


# movements whose inverse is a movement: a write through them is one select (``place``)
_INVERTIBLE = ("shrink", "reshape", "permute", "flip")


def place(base, moves, value):
    """``base`` with the elements of its view ``moves`` replaced by ``value`` (a Tensor of
    the view's shape): the write through a view as the base's next value.

    Where every move has an inverse movement (slices of step 1, ``select``, transposes,
    reshapes, flips), the value and a mask of True are moved back to the base's shape
    (a shrink undone by a pad of zeros and False) and one ``where(mask, value, base)``
    selects: one kernel, fused into what reads it, as torch's functionalization inverts
    each view op. Other views (a step, a window) take ``ir.graph.write.place``'s scatter.
    """
    if not all(kind in _INVERTIBLE for kind, _ in moves):
        return write.place(base, moves, value)
    shapes = [tuple(base.shape)]
    for kind, arg in moves:
        s = shapes[-1]
        if kind == "shrink":
            s = tuple(e - b for b, e in arg)
        elif kind == "reshape":
            s = tuple(arg)
        elif kind == "permute":
            s = tuple(s[i] for i in arg)
        shapes.append(s)
    v, m = value, value.p_const(True, dtype=dtypes.bool_)
    for (kind, arg), s in zip(reversed(moves), reversed(shapes[:-1])):
        if kind == "shrink":
            pads = tuple((b, n - e) for (b, e), n in zip(arg, s))
            v, m = v.p_pad(pads), m.p_pad(pads)
        elif kind == "reshape":
            v, m = v.p_reshape(s), m.p_reshape(s)
        elif kind == "permute":
            back = tuple(sorted(range(len(arg)), key=arg.__getitem__))
            v, m = v.p_permute(back), m.p_permute(back)
        else:
            v, m = v.p_flip(arg), m.p_flip(arg)
    return m.p_where(v, base)


# Buffers whose bytes only limn knows: made by a Tensor from host data, or computed by a
# realize. Each maps to a weak reference to the node whose value it holds (None for host
# data): through that node the device's record (``recall``) finds the same bytes, so while
# it lives the buffer is not its storage's alone. Bytes handed out (``exposed``) leave.
_private: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def private(buf: Buffer, named: Node | None = None) -> Buffer:
    """``buf`` holds bytes no one else has (the value of ``named``, if given)."""
    _private[buf] = None if named is None else weakref.ref(named)
    return buf


def exposed(buf: Buffer) -> None:
    """``buf``'s bytes were handed out (a numpy array over them): never overwritten."""
    _private.pop(buf, None)


def _only_ours(buf: Buffer) -> bool:
    if buf not in _private:
        return False
    named = _private[buf]
    return named is None or named() is None


def _mirror(
    roots: list[Node], donors: list[Node], bufs: dict | None = None
) -> tuple[list[Node], dict[int, Node]]:
    """The batch's graph built again, with a fresh node over each donor's buffer (or over
    ``bufs[id(donor)]``) in place of the donor: (the new roots, donor id -> its fresh node).
    A node that reads no donor, and an input (a buffer, a value the device holds), is
    itself. The copies are charged, in a profile, to the lines and modules that made the
    nodes they copy."""
    bufs = bufs or {}
    fresh = {id(d): Node(Op.BUFFER, d.dtype, d.shape, (), bufs.get(id(d), d.arg)) for d in donors}
    new: dict[int, Node] = dict(fresh)  # id -> the node that replaces it
    done: set[int] = set(fresh)
    prof, stack = profile.active(), [(r, False) for r in roots]
    collecting = gc.isenabled()
    gc.disable()  # (what it makes is acyclic: a collection meanwhile would walk it for nothing)
    try:
        while stack:  # sources first: a node is rebuilt when one of its sources was
            n, ready = stack.pop()
            if id(n) in done:
                continue
            srcs = n.srcs
            if not ready:
                if not srcs or n.op is Op.BUFFER or recall(n) is not None:  # an input
                    done.add(id(n))
                else:
                    stack.append((n, True))
                    stack += [(s, False) for s in srcs if id(s) not in done]
                continue
            done.add(id(n))
            moved = [new.get(id(s), s) for s in srcs]
            if any(map(operator.is_not, moved, srcs)):
                new[id(n)] = copy = Node(n.op, n.dtype, n.shape, tuple(moved), n.arg)
                if prof is not None:
                    _blame(prof, n, copy)
    finally:
        if collecting:
            gc.enable()
    # (a root that is a buffer is a value held, not computed: it stays the node it is)
    return [r if r.op is Op.BUFFER else new.get(id(r), r) for r in roots], fresh


def _blame(prof, n: Node, copy: Node) -> None:
    """The profiler charges ``copy`` to the line and module that made ``n``."""
    for where in (prof.sites, prof.modules):
        if n in where:
            where[copy] = where[n]


def _rebuild(items: list, roots: list[Node], donors: list[Node]) -> tuple[dict, dict]:
    """Whether the batch may overwrite each donor's bytes, decided by who still reads it.

    Every value that can still read a donor's bytes holds the donor's node, through the
    sources of the nodes it was built from: readers are recorded by the graphs themselves,
    as they are built. So the batch's storages and tensors are pointed at the batch built
    again over fresh nodes (``_mirror``) and the graph they held is let go (``roots`` and
    ``donors`` are emptied): a donor whose node then lives on has a reader outside the
    batch (a lazy value built before the write, an autograd record, another tensor), and
    its bytes stay as they are. A donor is overwritten only when, besides, its buffer is
    limn's alone (``_private``) and no other storage of the batch starts from it.

    Answers (fresh donor id -> (a weak reference to the donor it replaced, whether it may
    be overwritten)), and (new root id -> a weak reference to the root it replaced)."""
    new_roots, fresh = _mirror(roots, donors)
    names = {id(n): weakref.ref(r) for n, r in zip(new_roots, roots)}
    starts = collections.Counter(map(id, donors))
    olds = {id(fresh[id(d)]): (weakref.ref(d), d.arg, starts[id(d)] == 1) for d in donors}
    for st in {id(st): st for st, _ in items if st is not None}.values():
        st.renew()
    it, seen = iter(new_roots), set()
    for st, t in items:
        if st is None:
            t._node = next(it)
            if t._st is not None:  # (a view realized alone)
                t._seen = t._st.gen
        elif id(st) not in seen:
            seen.add(id(st))
            st.node = next(it)
            if st.donor is not None:
                st.donor = fresh[id(st.donor)]
    roots.clear(), donors.clear(), new_roots.clear()
    free = {}
    for i, (ref, buf, once) in olds.items():
        free[i] = (ref, once and ref() is None and _only_ours(buf))
    return free, names


# A capture that records a step sets these: each write realized meanwhile is done in place
# (a replay writes the same buffer again) and its storage and buffer node are noted in
# ``recording``; a buffer a write left to its readers (``move``) is noted in ``relocated``
# (its id -> (it, the buffer the write went to, how many plans were recorded before)):
# a plan recorded before read the step's value there, which a replay finds in the other.
recording: list | None = None
relocated: dict | None = None


def move(buf: Buffer, shared: bool) -> Buffer:
    """The Buffer a write goes through when values it does not see still read ``buf``'s
    bytes, which they keep: a copy of the bytes, limn's alone (``buf`` stays with its
    readers as it is); or, where the memory is shared (``Storage.pinned``) and the write
    must land in it, a new Buffer over that memory, ``buf`` taking a copy of the bytes
    before. No node changes: the readers' nodes name ``buf`` still, and read the value
    they were built on."""
    if not shared:
        return private(Buffer(buf.dtype, buf.shape, buf.data.copy()))
    new = Buffer(buf.dtype, buf.shape, buf.data)
    buf.data = buf.data.copy()
    return new


def realize_on(name: str, items: list) -> None:
    """Realize on device ``name`` the ``items``, each (storage, None) for a storage's
    value or (None, tensor) for a tensor with none, in one batch (``tensor._realize``).
    The caller holds no node of the batch (only tensors and storages): a node held
    elsewhere is a reader (``_rebuild``)."""
    seen, roots, donors = set(), [], []
    for st, t in items:
        if st is None:
            roots.append(t.node)
        elif id(st) not in seen:
            seen.add(id(st))
            roots.append(st.node)
            if st.donor is not None:
                donors.append(st.donor)
    if donors:
        free, names = _rebuild(items, roots, donors)
    else:
        free, names = {}, {id(r): weakref.ref(r) for r in roots}
    del roots, donors
    jobs, written, moved = [], [], {}
    for st, t in items:
        if st is None:
            jobs.append((None, t, t.node))
        elif id(st) in seen:
            seen.discard(id(st))
            d = st.donor
            old, ok = free.get(id(d), (None, False))
            if d is not None and (ok or st.pinned or recording is not None):
                # a shared array, or a buffer a recorded step writes (its replays write it
                # again), is written whoever reads it: a reader keeps its bytes (``move``)
                if old is not None and old() is not None:
                    moved[id(d)] = (d.arg, move(d.arg, st.pinned))
                jobs.append((st, None, Node(Op.ASSIGN, d.dtype, d.shape, (d, st.node))))
                written.append(st)
            elif st.node.op is Op.BUFFER:  # a whole other buffer written: it is the value
                st.donor, st.pending = None, 0
            else:
                jobs.append((st, None, st.node))
    del items, free
    roots = [j[2] for j in jobs]
    if moved:  # the batch over the buffers the writes go through
        donors = [j[0].donor for j in jobs if j[0] is not None and id(j[0].donor) in moved]
        new, _ = _mirror(roots, donors, {i: pair[1] for i, pair in moved.items()})
        for r, n in zip(roots, new):
            if id(r) in names:
                names[id(n)] = names[id(r)]
        jobs = [(st, t, n) for (st, t, _), n in zip(jobs, new)]
        roots, donors, new = [j[2] for j in jobs], None, None
        if recording is not None:  # (the plans recorded so far read b as the step's value)
            made = len(getattr(get_device(name), "recorder", None) or ())
            relocated.update((id(b), (b, to, made)) for b, to in moved.values())
        moved = None
    for see in observers:
        see(name, roots)
    bufs = get_device(name).realize(roots)
    del roots
    # the values given the same bytes (by their address), where there are two values
    given = collections.Counter(b.data.ctypes.data for b in bufs) if len(bufs) > 1 else {}
    for (st, t, root), buf in zip(jobs, bufs):
        node = Node(Op.BUFFER, buf.dtype, buf.shape, (), buf)
        if root.op is not Op.ASSIGN:  # (an ASSIGN's buffer stays as private as it was)
            before = names[id(root)]()
            if before is not None and before is not root:
                remember(before, buf)  # what held the graph it replaced reads the value
            private(buf, before if before is not None else root)
        if given and given[buf.data.ctypes.data] > 1:  # given to two values: kept as is
            exposed(buf)
        if st is None:
            t._node = node
        else:
            st.node, st.donor, st.pending = node, None, 0
    if recording is not None:
        recording.extend((st, st.node) for st in written)
