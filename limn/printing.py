"""How a Tensor prints: its values in torch's layout, computed when printed.

``repr(t)`` and ``str(t)`` realize what they show, as torch users expect of ``print(t)``:
``tensor([[1.0000, 2.5000], ...])``, with the dtype named unless it is a default one
(float32, int64, bool), the device named unless it is the current default, and
``requires_grad=True`` or the op autograd would differentiate (``grad_fn=<AddBackward>``). A
tensor of more than ``THRESHOLD`` elements shows its first and last ``EDGE`` items per
dim around ``...``, and only those are computed: the edges are sliced out lazily and
realized alone, so printing a large lazy tensor never computes the rest (the numpy
device, which runs node by node, still computes each node whole). Numbers follow torch's
choices: 4 decimals, whole numbers as ``1.``, scientific notation when the magnitudes
span more than 1000x or leave [1e-4, 1e8).
"""

from __future__ import annotations

import sys

import numpy as np

from ir.graph import compose, dtypes

THRESHOLD, EDGE = 1000, 3


def format_tensor(t) -> str:
    from limn.runtime.device import current_device

    summarize = t.numel() > THRESHOLD
    edges = t
    for d, n in enumerate(t.shape):  # keep 3 + one hidden + 3 along each long dim
        if summarize and n > 2 * EDGE:
            edges = _ends(edges, d, n)
    a = edges.numpy()
    a = a.astype(np.float64) if t.dtype.is_float else a
    body = "[]"
    if a.size:
        layout = {"separator": ", ", "prefix": "tensor(", "edgeitems": EDGE, "max_line_width": 80}
        limit = 0 if summarize else sys.maxsize
        body = np.array2string(a, formatter=_formatter(a, t.dtype), threshold=limit, **layout)
    extras = [body.replace(", ..., ", ",  ..., ")]  # torch's spacing around an elision
    if a.size == 0 and t.ndim != 1:
        extras.append(f"size={t.shape}")
    if t.dtype not in (dtypes.float32, dtypes.int64, dtypes.bool_):
        extras.append(f"dtype={t.dtype}")
    if t.device != current_device():
        extras.append(f"device={t.device!r}")
    if t._ctx is not None:
        extras.append(f"grad_fn={t._ctx!r}")
    elif t.requires_grad:
        extras.append("requires_grad=True")
    return f"tensor({', '.join(extras)})"


def _ends(t, d: int, n: int):
    """The first EDGE and last EDGE + 1 items along dim d (numpy hides the extra one)."""
    head = t.shrink([(0, EDGE) if i == d else None for i in range(t.ndim)])
    tail = t.shrink([(n - EDGE - 1, n) if i == d else None for i in range(t.ndim)])
    return compose.cat([head.detach(), tail.detach()], d)


def _formatter(a: np.ndarray, dtype) -> dict:
    if not dtype.is_float:
        width = max((len(str(v)) for v in a.flat), default=1)
        return {"bool" if dtype == dtypes.bool_ else "int": lambda v: str(v).rjust(width)}
    finite = np.abs(a[np.isfinite(a)])
    nonzero = finite[finite != 0]
    big = nonzero.size and (nonzero.max() / nonzero.min() > 1000 or nonzero.max() >= 1e8)
    sci = bool(nonzero.size) and (big or nonzero.min() < 1e-4)
    whole = finite.size and not sci and np.all(finite == np.round(finite))
    spell = "{:.0f}.".format if whole else ("{:.4e}" if sci else "{:.4f}").format
    width = max((len(spell(v)) for v in a[np.isfinite(a)].flat), default=1)  # finite only
    return {"float_kind": lambda v: (spell(v) if np.isfinite(v) else str(v)).rjust(width)}
