"""limn.capture: record one call of a step function's kernel launches, then replay them.

A training step rebuilds the same graph every time: the Python that builds it, walks it
and looks its plan up costs more than the kernels of a small model. ``capture(step)``
runs the first call normally while the device records every plan it executes and the
buffers each one read and wrote. Later calls run no Python graph code at all: each
recorded plan runs again, with three kinds of input buffer told apart:

* a buffer of a Tensor passed as an argument is replaced by the new argument's buffer
  (same position, same dtype and shape, or the call is refused);
* a buffer an earlier recorded plan produced is replaced by what that plan produces now;
* any other buffer (parameters, optimizer state, constants) is the same buffer: ASSIGNs
  write into it in place, so the next replay reads the updated values.

What the function returns is rebuilt the same way, as new Tensors over the new buffers.
Replaying gives the same bits as calling the function again, because it runs the same
compiled kernels on the same buffers in the same order.

Host work between the kernels, such as the all-reduce of a data-parallel step, joins the
recording through ``host_call(fn)``: it runs ``fn`` now and a replay calls it again at the
same point. ``fn`` must act on buffers that outlive the call (the gradient buckets of
``limn.distributed``), since a replay hands it nothing.

What replay cannot see: Python control flow that depends on data, buffers created inside
the function from host data (a fresh ``Tensor(np.array(...))`` or a dropout mask drawn on
the host is replayed as the value it had on the first call), and ``.numpy()`` or
``.item()`` calls inside the function. Keep those outside the captured step. On a device
without compiled plans (numpy), capture simply calls the function every time.
"""

from __future__ import annotations

from collections.abc import Callable

from ir.graph.node import Node
from ir.graph.ops import Op
from limn.runtime.device import get_device
from limn.runtime.jit import CompiledDevice, execute
from limn.tensor import Tensor, realize


def _tensors(x) -> list[Tensor]:
    if isinstance(x, Tensor):
        return [x]
    if isinstance(x, list | tuple):
        return [t for item in x for t in _tensors(item)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _tensors(v)]
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


class capture:
    """Wrap ``fn``; the first call records, later calls replay (see the module docstring)."""

    def __init__(self, fn: Callable):
        self.fn = fn
        self.device: CompiledDevice | None = None
        self.steps: list = []  # (plan, input sources) per realize, (None, fn) per host call
        self.arg_specs: list[tuple] = []
        self.returned = None  # the first call's return value
        self.out_sources: dict[int, tuple[int, int]] = {}  # id(returned tensor) -> (step, sink)

    def __call__(self, *args, **kwargs):
        dev = get_device()
        if not isinstance(dev, CompiledDevice):
            return self.fn(*args, **kwargs)
        arg_tensors = _tensors((args, kwargs))
        realize(*arg_tensors)
        if self.device is None:
            return self._record(dev, arg_tensors, args, kwargs)
        return self._replay(arg_tensors)

    def _record(self, dev, arg_tensors, args, kwargs):
        dev.recorder = []
        try:
            result = self.fn(*args, **kwargs)
            realize(*_tensors(result))
        finally:
            recorded, dev.recorder = dev.recorder, None
        arg_bufs = {id(t.node.arg): i for i, t in enumerate(arg_tensors)}
        made: dict[int, tuple[int, int]] = {}
        for s, entry in enumerate(recorded):
            if callable(entry):  # a host_call
                self.steps.append((None, entry))
                continue
            plan, in_bufs, out_bufs = entry
            sources = []
            for b in in_bufs:
                if id(b) in arg_bufs:
                    sources.append(("arg", arg_bufs[id(b)]))
                elif id(b) in made:
                    sources.append(("step", *made[id(b)]))
                else:
                    sources.append(("fixed", b))
            self.steps.append((plan, sources))
            for j, b in enumerate(out_bufs):
                if plan.graph.sinks[j].source is None:
                    made[id(b)] = (s, j)
        for t in _tensors(result):
            buf = t.node.arg
            if id(buf) in made:
                self.out_sources[id(t)] = made[id(buf)]
            elif id(buf) in arg_bufs:
                self.out_sources[id(t)] = ("arg", arg_bufs[id(buf)])
            else:
                self.out_sources[id(t)] = ("fixed", buf)
        self.arg_specs = [(t.dtype, t.shape) for t in arg_tensors]
        self.device, self.returned = dev, result
        return result

    def _replay(self, arg_tensors):
        specs = [(t.dtype, t.shape) for t in arg_tensors]
        if specs != self.arg_specs:
            raise ValueError(
                f"capture: recorded with arguments {self.arg_specs}, called with {specs}; "
                "a captured step replays one set of shapes and dtypes"
            )
        outs: list[list] = []
        for plan, sources in self.steps:
            if plan is None:
                sources()  # the host call
                outs.append([])
                continue
            bufs = []
            for src in sources:
                if src[0] == "arg":
                    bufs.append(arg_tensors[src[1]].node.arg)
                elif src[0] == "step":
                    bufs.append(outs[src[1]][src[2]])
                else:
                    bufs.append(src[1])
            outs.append(execute(plan, bufs, None))
        new: dict[int, Tensor] = {}
        for t in _tensors(self.returned):
            src = self.out_sources[id(t)]
            if src[0] == "arg":
                buf = arg_tensors[src[1]].node.arg
            elif src[0] == "fixed":
                buf = src[1]
            else:
                buf = outs[src[0]][src[1]]
            node = Node(Op.BUFFER, buf.dtype, buf.shape, (), buf)
            new[id(t)] = Tensor._make(node, t.device)
        return _rebuild(self.returned, new)
