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
* Reusing the old bytes is the planner's choice (``donatable``): when a storage's write
  is realized and its previous buffer can no longer be read by anything but the values
  computed in this batch, the batch writes the new value into it (an ASSIGN), as JAX
  does with donated buffers; otherwise the new value gets bytes of its own.
* Each tensor has torch's version counter (``vc``, shared by views and ``detach()``, not
  by ``.data``): autograd records the versions it saw and ``backward`` refuses, as torch
  does, a value written since.
"""

from __future__ import annotations

import contextlib
import sys

import numpy as np

from ir.graph import dtypes, write
from ir.graph.node import Node
from ir.graph.ops import Op
from ir.graph.view import View
from limn.runtime.device import Buffer, get_device, observers, recall

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
    ``limn/distributed.py``), whoever reads them (they get a copy).
    """

    __slots__ = ("node", "gen", "donor", "pending", "shared", "pinned")

    def __init__(self, node: Node, shared: bool = False):
        self.node, self.gen, self.donor, self.pending, self.shared = node, 0, None, 0, shared
        self.pinned = shared  # its bytes are memory others see: writes land in them

    def write(self, node: Node) -> None:
        """The storage's next value is ``node``."""
        if self.node.op is Op.BUFFER:
            self.donor, self.pending = self.node, 0
        self.node = node
        self.gen += 1
        self.pending += 1


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


def donatable(roots: list[Node], donors: list[Node], holders: dict[int, int]) -> tuple:
    """(the ids of the ``donors`` (buffer nodes) whose bytes a batch computing ``roots`` may
    overwrite: nothing outside the batch reads the donor, nor any node of the batch through
    which a root reaches it, and no array shares its bytes. ``holders`` counts, by id, the
    references the caller's storages hold (its ``node`` and ``donor``), which are not
    readers.

    References are counted, as numpy counts them to reuse a temporary: a node's count
    beyond its edges from this batch and its holders is a reader this batch cannot see (a
    lazy value built before the write, another tensor holding it), and then the old bytes
    stay as they are. Also answered: the ids of the batch's nodes read from outside it
    (a root among them gets a buffer other nodes may know it by: ``owning``)."""
    order, edges = _walk(roots)
    # a node with a reader outside the batch: what it reads keeps its bytes (counted
    # besides: the argument, ``order``, and ``n``)
    tainted = [
        n for n in order if sys.getrefcount(n) - 3 > edges.get(id(n), 0) + holders.get(id(n), 0)
    ]
    seen = _below(tainted)
    shared = {id(n) for n in tainted}
    del order, tainted
    ok = set()
    for d in donors:
        if id(d) not in seen and _free(d, edges, holders):
            ok.add(id(d))
    return ok, shared


def _walk(roots) -> tuple[list[Node], dict[int, int]]:
    """The batch's nodes (its inputs, which it reads and does not expand, included) and how
    many edges of the batch reach each."""
    edges: dict[int, int] = {}
    seen: set[int] = set()
    order: list[Node] = []
    stack = list(roots)
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        order.append(n)
        if n.op is Op.BUFFER or recall(n) is not None:  # an input: its sources are not read
            continue
        for s in n.srcs:
            edges[id(s)] = edges.get(id(s), 0) + 1
            stack.append(s)
    return order, edges


def _below(tops) -> set[int]:
    """The ids of the nodes the batch reads under ``tops``."""
    seen: set[int] = set()
    stack = list(tops)
    while stack:
        n = stack.pop()
        if id(n) not in seen:
            seen.add(id(n))
            if n.op is not Op.BUFFER and recall(n) is None:
                stack += n.srcs
    return seen


def _free(d: Node, edges: dict, holders: dict) -> bool:
    """Whether only the batch and its holders reference the donor ``d``, whose buffer is
    its own (``owns``), and only the buffer its array (no numpy array shares it)."""
    # counted besides: the argument, the parameter, the caller's ``d``
    if sys.getrefcount(d) - 3 > edges.get(id(d), 0) + holders.get(id(d), 0):
        return False
    return d.__dict__.get("own", False) and sys.getrefcount(d.arg.data) == 2


def sole(roots: list[Node]) -> list[bool]:
    """For each root about to be realized, whether its holder (a tensor or storage) and
    ``roots`` are all that reference it and no realize computed it before: then the
    buffer it gets is known by no other node (``owning``)."""
    out = []
    for n in roots:  # counted besides: the argument, ``roots``, ``n``, the holder
        out.append(sys.getrefcount(n) <= 4 and recall(n) is None)
    return out


def owning(node: Node, own: bool) -> Node:
    """``node`` (a BUFFER), marked as the only node its buffer's value is known by (a new
    array, or a value computed for one storage whose node nothing else held): only then
    may a write reuse its bytes. A buffer a node shares with another (two tensors that
    held one value, each given a node over its buffer) is never overwritten."""
    node.__dict__["own"] = own
    return node


# A capture that records a step sets this to a list: each write realized meanwhile is done
# in place (a replay writes the same buffer again) and its buffer node is noted here.
recording: list | None = None


def hand_over(st: Storage, old: Node, snapshot: np.ndarray) -> None:
    """``old``, a buffer node whose bytes were just overwritten in place for ``st``, was
    read by values outside the write: they get ``snapshot`` (its bytes before) in a buffer
    of their own, and ``st`` a new node over the written buffer."""
    buf = old.arg
    old.__dict__["arg"] = Buffer(buf.dtype, buf.shape, snapshot)
    st.node = owning(Node(Op.BUFFER, buf.dtype, buf.shape, (), buf), False)


def realize_on(name: str, items: list) -> None:
    """Realize on device ``name`` the ``items``, each (storage, None) for a storage's
    value or (None, tensor) for a tensor with none, in one batch (``tensor._realize``)."""
    seen, roots, donors, holders = set(), [], [], {}
    for st, t in items:
        if st is None:
            roots.append(t.node)  # (held by t as well)
        elif id(st) not in seen:
            seen.add(id(st))
            roots.append(st.node)  # (held by st as well)
            if st.donor is not None:
                donors.append(st.donor)
                holders[id(st.donor)] = holders.get(id(st.donor), 0) + 2  # st.donor, donors
    for i in map(id, roots):  # the list, and the tensor or storage that holds it
        holders[i] = holders.get(i, 0) + 2
    if donors or any(st is not None for st, _ in items):
        free, shared = donatable(roots, donors, holders)
        own = {id(r): id(r) not in shared and recall(r) is None for r in roots}
    else:
        free, own = (), dict(zip(map(id, roots), sole(roots)))
    del donors, roots
    jobs, written, copies = [], [], []
    for st, t in items:
        if st is None:
            jobs.append((None, t, t.node))
        elif id(st) in seen:
            seen.discard(id(st))
            d = st.donor
            if d is not None and (id(d) in free or st.pinned or recording is not None):
                # a shared array, or a buffer a recorded step writes (its replays write it
                # again), is written in place whoever reads it; those readers get a copy
                # of its bytes before, once the batch (which reads first) has run
                if id(d) not in free:
                    copies.append((st, d, d.arg.data.copy()))
                jobs.append((st, None, Node(Op.ASSIGN, d.dtype, d.shape, (d, st.node))))
                own[id(jobs[-1][2])] = d.__dict__.get("own", False)
                written.append(st)
            elif st.node.op is Op.BUFFER:  # a whole other buffer written: it is the value
                st.donor, st.pending = None, 0
            else:
                jobs.append((st, None, st.node))
    del items, free
    for see in observers:
        see(name, [j[2] for j in jobs])
    bufs = get_device(name).realize([j[2] for j in jobs])
    for (st, t, root), buf in zip(jobs, bufs):
        node = owning(Node(Op.BUFFER, buf.dtype, buf.shape, (), buf), own.get(id(root), False))
        if st is None:
            t._node = node
        else:
            st.node, st.donor, st.pending = node, None, 0
    for st, d, snapshot in copies:
        hand_over(st, d, snapshot)
    if recording is not None:
        recording.extend((st, st.node) for st in written)
