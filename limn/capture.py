"""limn.capture: record one call of a step function's kernel launches, then replay them.

A training step rebuilds the same graph every time: the Python that builds it, walks it
and looks its plan up costs more than the kernels of a small model. ``capture(step)``
runs the first call normally while the device records every plan it executes and the
buffers each one read and wrote. Later calls run no Python graph code at all: each
recorded plan runs again, with three kinds of input buffer told apart:

* a buffer of a Tensor passed as an argument is replaced by the new argument's buffer;
* a buffer an earlier recorded plan produced is replaced by what that plan produces now;
* any other buffer (parameters, optimizer state, constants) is the same buffer: ASSIGNs
  write into it in place, so the next replay reads the updated values.

What the function returns is rebuilt the same way, as new Tensors over the new buffers.
They hold values, not autograd history (no Python ran to record it): a backward through a
replayed output raises, saying so; differentiate inside the captured function.
Replaying gives the same bits as calling the function again, because it runs the same
compiled kernels on the same buffers in the same order.

A replay is only right while the Python the recording ran would build the same graph, so
each call first looks at what that Python reads: the arguments (every plain value in them
by its type and bits, so ``1`` is not ``1.0`` nor ``0.0`` ``-0.0``,
and each Tensor's dtype and shape), and what the function reaches besides (its defaults,
the variables it closes over, the globals its code names, the object of a bound method),
walked through containers and objects' attributes: plain values, which Tensor each
attribute holds, each Module's ``training``, an optimizer's hyperparameters. A call that
finds something else than a recording saw records again (an ordinary call, recorded):
``f(x, k=3.0)`` after ``f(x)``, ``model.eval()``, a group's ``weight_decay``, a parameter
rebound to a new Tensor, one frozen (``requires_grad_(False)``). The last ``RECORDINGS``
recordings are kept, so alternating between train and eval replays both. Values that
live on the device are read by the kernels themselves and need no new recording:
``opt.lr = ...`` (a learning-rate schedule) writes the optimizer's lr buffer, and a
replay reads it. A write the caller made between calls (``w.mul_(2)`` under
``no_grad``) is realized before the call, never recorded as the step's own.

That walk is done when a call records or changes recording, not at every call: the walk
also notes what would have to change for its answer to change, and the next call checks
only that, in time that grows with what the step binds rather than with the objects it
reaches. It checks the arguments (walked as above, they are the call's inputs); the
objects the function reaches directly, by identity; each Tensor met, by the buffer that
holds its value (or its pending node) and its ``requires_grad``; each list, dict and
object met, its contents by identity. A Module's attributes are not checked one by one:
``Module.__setattr__`` counts every attribute set on any Module (``nn.module.edits``:
``train()``, a rebound parameter, ``m.scale = 3``), and a call that finds the count moved
walks again. So a step over a model of many layers checks a number and its parameters,
not its modules.

A step that draws from limn's host random numbers (``Tensor.rand``, ``randn``, dropout's
mask) would replay the first call's draws, so it is never replayed: every call runs it
(a ``RuntimeWarning`` says so once).

Host work between the kernels, such as the all-reduce of a data-parallel step, joins the
recording through ``host_call(fn)``: it runs ``fn`` now and a replay calls it again at the
same point. ``fn`` must act on buffers that outlive the call (the gradient buckets of
``limn.distributed``), since a replay hands it nothing.

What replay cannot see: Python control flow that depends on data, the contents of a numpy
array the step turns into a Tensor (``Tensor(np_array)`` inside the step is replayed as
the value it had when recorded), state read by functions the step calls but does not name
(another module's globals), objects without a ``__dict__``, containers of more than
``MAX_ITEMS`` items (only their identity and length), ``.numpy()`` or ``.item()`` calls
inside the function, and a Module's ``__dict__`` changed without ``setattr``
(``vars(m)[k] = v``). Keep those outside the captured step, or pass them in as Tensors.
On a device without compiled plans (numpy), capture simply calls the function every time.
"""

from __future__ import annotations

import enum
import functools
import types
import warnings
import weakref
from collections.abc import Callable
from itertools import repeat
from operator import is_

import numpy as np

from ir.graph.dtypes import DType
from ir.graph.node import Node
from ir.graph.ops import Op
from limn import tensor, versions
from limn.autograd import Ctx
from limn.nn import module
from limn.nn.module import Module
from limn.runtime.device import Buffer, get_device
from limn.runtime.jit import CompiledDevice, execute
from limn.tensor import Tensor, realize

RECORDINGS = 8  # recordings a capture keeps, the oldest go first
MAX_ITEMS = 1000  # a container or object with more is seen by identity and length alone
_PLAIN = (bool, int, float, complex, str, bytes, type(None), np.generic, DType, enum.Enum)
_OPAQUE = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, np.ndarray)


def _tensors(x) -> list[Tensor]:
    if isinstance(x, Tensor):
        return [x]
    if isinstance(x, list | tuple | dict):
        return [t for v in (x.values() if isinstance(x, dict) else x) for t in _tensors(v)]
    return []


def _rebuild(x, new: dict[int, Tensor]):
    if isinstance(x, Tensor):
        return new[id(x)]
    if isinstance(x, list | tuple):
        return type(x)(_rebuild(i, new) for i in x)
    if isinstance(x, dict):
        return {k: _rebuild(v, new) for k, v in x.items()}
    return x


def host_call(fn: Callable[[], object], device: str | None = None) -> None:
    """Run ``fn`` now; a capture recording on ``device`` replays it at this point."""
    fn()
    dev = get_device(device)
    if isinstance(dev, CompiledDevice) and dev.recorder is not None:
        dev.recorder.append(fn)


def _plain(x) -> tuple:
    """A plain value as a key that tells apart what ``==`` merges and a graph does not:
    1 from 1.0 and True (the dtype), 0.0 from -0.0 (the sign); and one nan equals another."""
    bits = np.asarray(x).tobytes() if isinstance(x, float | complex | np.generic) else x
    return type(x), bits


_UNBOUND = object()  # a name a function's code reads that is not bound (yet)


class _Walk:
    """One walk of what a call reads (the module docstring). ``key`` is what a recording
    is found by; ``found`` each Tensor met. With ``guarding``, the walk also notes what
    the next call must find to reuse this walk without walking again: each Tensor met
    with its value (``tensors``), and each list, dict and object met with its contents by
    identity (``holders``), except a Module's attributes, which ``module.edits`` counts."""

    def __init__(self, guarding: bool = False):
        self.key: list = []
        self.found: list[Tensor] = []
        self.seen: set[int] = set()
        self.guarding = guarding
        self.tensors: dict[int, tuple] = {}  # id -> (tensor, its value, requires_grad)
        self.holders: list[tuple] = []  # (container, length, keys, values)

    def visit(self, x, arg: bool = False) -> None:
        key = self.key
        if isinstance(x, Tensor):
            n = x.node
            if arg:  # bound to the call's buffer: only its kind matters
                key.append((n.dtype, n.shape))
            else:
                key.append((id(n.arg) if n.op is Op.BUFFER else id(n), x.requires_grad))
                if self.guarding:
                    self.tensors[id(x)] = (x, _value(n), x.requires_grad)
            self.found.append(x)
        elif isinstance(x, _PLAIN):
            key.append(_plain(x))
        elif isinstance(x, _OPAQUE) or id(x) in self.seen:
            key.append(id(x))
        else:
            self.seen.add(id(x))
            items = x if isinstance(x, list | tuple | dict) else getattr(x, "__dict__", None)
            if items is None or len(items) > MAX_ITEMS:
                key.append((id(x), None if items is None else len(items)))
                if self.guarding and items is not None:
                    self.holders.append((items, len(items), None, None))
                return
            key.append(len(items))
            counted = isinstance(x, Module) and type(x).__setattr__ is Module.__setattr__
            if isinstance(items, dict):
                arg = arg and items is x  # an object's Tensors are its own, not arguments
                skip = getattr(x, "device_settings", ())  # the kernels read these, not Python
                if isinstance(x, Module):
                    skip = (*skip, "_made_with")  # what it was made with, for printing only
                pairs = [(k, v) for k, v in items.items() if k not in skip]
                if self.guarding and not counted:
                    keys, values = zip(*pairs) if pairs else ((), ())
                    self.holders.append((items, len(items), keys, values))
                for k, v in pairs:
                    self.visit(k)
                    self.visit(v, arg)
            else:
                if self.guarding and not isinstance(items, tuple):
                    self.holders.append((items, len(items), None, tuple(items)))
                for v in items:
                    self.visit(v, arg)


def _value(n: Node):
    """A reached Tensor's value, for a guard: its buffer, or (weakly) its lazy node."""
    return n.arg if n.op is Op.BUFFER else weakref.ref(n)


def _holds(guard: tuple, roots: list) -> bool:
    """Whether what ``_Walk`` noted in ``guard`` is still so, ``roots`` being what the
    function reaches now: no Module attribute set since, the same roots, each Tensor
    with its value, each container with its contents."""
    edits, held, tensors, holders = guard
    if edits != module.edits or len(roots) != len(held) or not all(map(is_, roots, held)):
        return False
    buffer = Op.BUFFER
    for t, v, grad in tensors:
        n = t.node
        if (n.arg is not v or n.op is not buffer) and not (type(v) is weakref.ref and v() is n):
            return False
        if t.requires_grad is not grad:
            return False
    for items, size, keys, values in holders:
        if len(items) != size:
            return False
        if keys is not None:
            if not all(map(is_, map(items.get, keys, repeat(_UNBOUND)), values)):
                return False
        elif values is not None and not all(map(is_, items, values)):
            return False
    return True


@functools.cache
def _names(code: types.CodeType) -> tuple[str, ...]:
    """The global names ``code`` and the code nested in it read, sorted."""
    names, todo = set(), [code]
    while todo:
        c = todo.pop()
        names.update(c.co_names)
        todo += [k for k in c.co_consts if isinstance(k, types.CodeType)]
    return tuple(sorted(names))


def _reached(fn) -> list:
    """What ``fn`` reads besides its arguments: a bound method's object, and a function's
    defaults, closure and the globals its code, and the code nested in it, names."""
    f = getattr(fn, "__func__", fn)
    if not hasattr(f, "__code__"):
        return [fn]  # a callable object: its attributes
    g = f.__globals__
    return [getattr(fn, "__self__", None), f.__defaults__, f.__kwdefaults__,
            *map(_content, f.__closure__ or ()),
            *(g.get(n, _UNBOUND) for n in _names(f.__code__))]  # fmt: skip


def _content(cell):
    try:
        return cell.cell_contents
    except ValueError:  # a variable not bound yet
        return _UNBOUND


def _walk(*roots, guarding: bool = False) -> _Walk:
    walk = _Walk(guarding)
    for x, arg in roots:
        walk.visit(x, arg)
    return walk


def _settle(tensors: list[Tensor]) -> bool:
    """Realize the writes pending on ``tensors``' storages, made between calls: inside a
    recording they would be recorded as the step's own, and every replay would redo them.
    Whether there were any."""
    by_device: dict[str, dict] = {}
    for t in tensors:
        if t._st is not None and t._st.pending:
            by_device.setdefault(t.device, {})[id(t._st)] = (t._st, None)
    for name, items in by_device.items():
        versions.realize_on(name, list(items.values()))
    return bool(by_device)


class capture:
    """Wrap ``fn``; a call records, or replays the recording made where the arguments and
    what ``fn`` reaches were the same (see the module docstring)."""

    def __init__(self, fn: Callable):
        self.fn = fn
        self.recordings: dict[tuple, tuple] = {}  # what a call finds -> (steps, returned, outs)
        self.records = 0  # calls that recorded
        self.draws = False  # fn draws host random numbers: every call runs it
        self.last: tuple | None = None  # (arguments' key, guard, recording) of the last call

    def __call__(self, *args, **kwargs):
        dev = get_device()
        if not isinstance(dev, CompiledDevice) or self.draws:
            return self.fn(*args, **kwargs)
        arg_tensors = _tensors((args, kwargs))
        if any(t.node.op is not Op.BUFFER for t in arg_tensors):
            realize(*arg_tensors)
        given = (id(dev), *_walk(((args, kwargs), True)).key)
        roots, last = _reached(self.fn), self.last
        if last is not None and last[0] == given and _holds(last[1], roots):
            moved = _still_held(last[2])
            if moved is not None:  # nothing the last call read changed: no walk
                if moved:
                    self._moved(given, roots, last[2])
                return _replay(last[2], arg_tensors)
        walk = _walk(*((r, False) for r in roots), guarding=True)
        if _settle(walk.found):
            walk = _walk(*((r, False) for r in roots), guarding=True)
        rec = self.recordings.get((given, tuple(walk.key)))
        moved = None if rec is None else _still_held(rec)
        if moved is not None:
            if moved:
                self._moved(given, roots, rec)
            else:
                self.last = (given, _guard(walk, roots), rec)
            return _replay(rec, arg_tensors)
        self.last = None
        rng = tensor._rng[0], tensor._rng[0].bit_generator.state
        rec, result = _record(dev, self.fn, arg_tensors, args, kwargs)
        self.records += 1
        self.draws = tensor._rng[0] is not rng[0] or rng[0].bit_generator.state != rng[1]
        if self.draws:
            warnings.warn(f"capture: {self.fn!r} draws host random numbers (Tensor.rand, randn, "
                          "dropout), which a replay would repeat; every call runs it",
                          RuntimeWarning, stacklevel=2)  # fmt: skip
        else:  # keyed by what the recorded call left: what the next call should find
            if len(self.recordings) >= RECORDINGS:
                self.recordings.pop(next(iter(self.recordings)))
            roots = _reached(self.fn)
            walk = _walk(*((r, False) for r in roots), guarding=True)
            self.recordings[(given, tuple(walk.key))] = rec
            self.last = (given, _guard(walk, roots), rec)
        return result

    def _moved(self, given: tuple, roots: list, rec: tuple) -> None:
        """``rec`` writes other buffers now (``_still_held``): found by them from now on."""
        for key in [k for k, r in self.recordings.items() if r is rec]:
            del self.recordings[key]
        walk = _walk(*((r, False) for r in roots), guarding=True)
        self.recordings[(given, tuple(walk.key))] = rec
        self.last = (given, _guard(walk, roots), rec)


def _guard(walk: _Walk, roots: list) -> tuple:
    """What a call must find to replay without walking: ``_holds``."""
    return (module.edits, tuple(roots), tuple(walk.tensors.values()), tuple(walk.holders))


def _record(dev, fn, arg_tensors, args, kwargs) -> tuple:
    """Call ``fn`` recording its plans; (its plans with where each input comes from, what
    it returned, where each returned Tensor's buffer comes from), and what it returned."""
    dev.recorder, versions.recording, versions.relocated = [], [], {}
    try:
        result = fn(*args, **kwargs)
        # a write the call leaves pending (a BatchNorm's running statistics, read by no
        # result) is realized in the recording too, so every replay writes it again
        met = _walk(((args, kwargs), False), (_reached(fn), False)).found
        realize(*_tensors(result), *(t for t in met if t._st is not None and t._st.pending))
    finally:
        recorded, dev.recorder = dev.recorder, None
        wrote, versions.recording = versions.recording, None
        relocated, versions.relocated = versions.relocated, None
    arg_bufs = {id(t.node.arg): i for i, t in enumerate(arg_tensors)}
    made: dict[int, tuple[int, int]] = {}

    def source(b) -> tuple:
        if id(b) in arg_bufs:
            return ("arg", arg_bufs[id(b)])
        return ("step", *made[id(b)]) if id(b) in made else ("fixed", b)

    # per realize (its plan, its inputs with each fixed buffer in its place, (slot, source)
    # of each other input), per host call (None, the call, ())
    steps: list[tuple] = []
    fixed: set[int] = set()
    for s, entry in enumerate(recorded):
        if callable(entry):  # a host_call
            steps.append((None, entry, ()))
            continue
        plan, in_bufs, out_bufs = entry
        sources = [source(_moved_to(b, relocated, s)) for b in in_bufs]
        fixed.update(id(src[1]) for src in sources if src[0] == "fixed")
        inputs = [src[1] if src[0] == "fixed" else None for src in sources]
        steps.append((plan, inputs, [(i, x) for i, x in enumerate(sources) if x[0] != "fixed"]))
        for j, b in enumerate(out_bufs):
            if plan.graph.sinks[j].source is None:
                made[id(b)] = (s, j)
    # the recording keeps what was returned without its autograd history: that history
    # holds every intermediate of the recorded call, which each replay's search for
    # readers of what it overwrites would walk again (a decode step spent 27% there)
    bare = {id(t): Tensor._make(t.node, t.device) for t in _tensors(result)}
    for t in _tensors(result):
        bare[id(t)].requires_grad = t.requires_grad
    outs = {id(bare[id(t)]): source(t.node.arg) for t in _tensors(result)}
    stores = [st for st, n in wrote if id(n.arg) in fixed]
    nodes = [weakref.ref(n) for st, n in wrote if id(n.arg) in fixed]
    del wrote
    return (steps, _rebuild(result, bare), outs, stores, nodes), result


def _moved_to(buf: Buffer, relocated: dict, s: int) -> Buffer:
    """Where the value plan ``s`` of a recording read in ``buf`` is: a later write of the
    recording may have left ``buf`` to its readers (``versions.relocated``), the step's
    value going on in another buffer."""
    while id(buf) in relocated and s < relocated[id(buf)][2]:
        buf = relocated[id(buf)][1]
    return buf


def _still_held(rec: tuple) -> dict | None:
    """Whether the buffers the recorded step writes in place (parameters, state) still
    hold their tensors' values (a tensor given another value since makes the call record
    again): None if not; if so, each storage is given a fresh node over its buffer, and the
    answer is the buffers the step moves from (id -> the one it writes instead). An old
    node that lives on was read by a value built since (its graph holds it), which keeps
    the bytes it read: the step's writes go through another buffer (``versions.move``),
    to which every plan of the recording is pointed, so the reader keeps the old value as
    with an ordinary call."""
    stores, nodes = rec[3:]
    if any(st.node is not ref() for st, ref in zip(stores, nodes)):
        return None
    moved: dict[int, Buffer] = {}
    for i, st in enumerate(stores):
        buf = st.node.arg
        st.node = Node(Op.BUFFER, buf.dtype, buf.shape, (), buf)
        st.renew()
        if nodes[i]() is not None:
            moved[id(buf)] = buf = versions.move(buf, st.pinned)
            st.node = Node(Op.BUFFER, buf.dtype, buf.shape, (), buf)
        nodes[i] = weakref.ref(st.node)
    if moved:
        for _, inputs, _ in rec[0]:
            if isinstance(inputs, list):
                inputs[:] = [moved.get(id(b), b) if b is not None else b for b in inputs]
        outs = rec[2]
        for k, src in outs.items():
            if src[0] == "fixed" and id(src[1]) in moved:
                outs[k] = ("fixed", moved[id(src[1])])
    return moved


def _replay(rec: tuple, arg_tensors):
    steps, returned, out_sources = rec[:3]
    outs: list[list] = []

    def buffer(src):
        if src[0] == "arg":
            return arg_tensors[src[1]].node.arg
        return outs[src[1]][src[2]] if src[0] == "step" else src[1]

    for plan, inputs, bound in steps:
        if plan is None:
            inputs()  # the host call
            outs.append([])
            continue
        in_bufs = inputs.copy()
        for i, src in bound:
            in_bufs[i] = buffer(src)
        outs.append(execute(plan, in_bufs, None))
    new: dict[int, Tensor] = {}
    for t in _tensors(returned):
        buf = buffer(out_sources[id(t)])
        new[id(t)] = Tensor._make(Node(Op.BUFFER, buf.dtype, buf.shape, (), buf), t.device)
        if t.requires_grad:  # as the recorded call's was, and refused if differentiated
            new[id(t)].requires_grad = True
            new[id(t)]._ctx = Ctx(_no_history, ())
    return _rebuild(returned, new)


def _no_history(ctx, t, g):
    raise RuntimeError(
        "backward: this tensor is the output of a replayed limn.capture, which keeps no "
        "autograd history; call backward inside the captured function (as a training "
        "step does), or do not capture a forward whose outputs you differentiate"
    )
