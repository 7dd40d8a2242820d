"""Recurrent layers: ``nn.RNN``, ``nn.GRU`` and ``nn.LSTM`` in torch's layout, and their
one-step cells (``nn.RNNCell``, ``nn.GRUCell``, ``nn.LSTMCell``).

Each layer and direction holds torch's four tensors under torch's names
(``weight_ih_l0``, ``weight_hh_l0``, ``bias_ih_l0``, ``bias_hh_l0``, with ``_reverse`` for
the backward direction of a bidirectional layer), the gates stacked in torch's order
(LSTM: input, forget, cell, output; GRU: reset, update, new), so torch's state dict loads
as it is and the outputs and gradients are torch's.

The recurrence is unrolled into the graph: one step per time position, each a matmul of
the hidden state and a few elementwise ops. What does not depend on the previous step is
taken out of the loop: the input projection of every position is one matmul over the
whole sequence (with both biases folded in, except GRU's hidden bias of the new gate,
which sits inside the reset product), and the per-step slices are an ``unbind`` of it,
whose gradient is one stack rather than a padded copy per step.
"""

from __future__ import annotations

import math

from ir.graph import dtypes
from limn.autograd import no_grad
from limn.nn.module import Module, _uniform_param
from limn.ops.joining import cat, stack
from limn.tensor import Tensor

GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


class _RNNBase(Module):
    mode = "RNN_TANH"

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        dtype=None,
    ):
        name = type(self).__name__
        if not 0 <= dropout <= 1:
            raise ValueError(f"{name}: dropout must be in [0, 1], got {dropout}")
        if hidden_size < 1 or num_layers < 1:
            raise ValueError(
                f"{name}: hidden_size ({hidden_size}) and num_layers ({num_layers}) must be >= 1"
            )
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, float(dropout)
        self.bidirectional = bidirectional
        gates, bound = GATES[self.mode] * hidden_size, 1 / math.sqrt(hidden_size)
        dt = dtype or dtypes.float32
        dirs = 2 if bidirectional else 1
        for layer in range(num_layers):
            width = input_size if layer == 0 else hidden_size * dirs
            for suffix in ("", "_reverse")[:dirs]:
                sfx = f"_l{layer}{suffix}"
                setattr(self, "weight_ih" + sfx, _uniform_param((gates, width), bound, dt))
                setattr(self, "weight_hh" + sfx, _uniform_param((gates, hidden_size), bound, dt))
                if bias:
                    setattr(self, "bias_ih" + sfx, _uniform_param((gates,), bound, dt))
                    setattr(self, "bias_hh" + sfx, _uniform_param((gates,), bound, dt))

    def flatten_parameters(self) -> None:
        """torch's cuDNN weight packing; limn's weights are always usable as they are."""

    def _weights(self, layer: int, reverse: bool) -> tuple:
        sfx = f"_l{layer}" + ("_reverse" if reverse else "")
        return tuple(
            getattr(self, f"{kind}{sfx}", None)
            for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        )

    def forward(self, input: Tensor, hx=None):
        """input (T, B, in), (B, T, in) with ``batch_first``, or (T, in) unbatched; ``hx``
        the first hidden state(s), (layers * directions, B, hidden), zeros if None.
        Returns (output, h_n), and for an LSTM (output, (h_n, c_n)), as torch does."""
        name, lstm = type(self).__name__, self.mode == "LSTM"
        batched = input.ndim == 3
        if input.ndim not in (2, 3) or input.shape[-1] != self.input_size:
            raise ValueError(
                f"{name}: input must be (T, B, {self.input_size}) (batch_first: (B, T, "
                f"{self.input_size})) or unbatched (T, {self.input_size}), got {input.shape}"
            )
        x = input if batched else input.unsqueeze(1)
        if batched and self.batch_first:
            x = x.transpose(0, 1)
        dirs = 2 if self.bidirectional else 1
        state_shape = (self.num_layers * dirs, x.shape[1], self.hidden_size)
        h0, c0 = (hx if lstm else (hx, None)) if hx is not None else (None, None)
        starts = []
        for what, s in (("h0", h0), ("c0", c0)):
            if s is not None:
                s = s if batched else s.unsqueeze(1)
                if tuple(s.shape) != state_shape:
                    raise ValueError(
                        f"{name}: {what} must be {state_shape} (layers * directions, batch, "
                        f"hidden), got {s.shape}"
                    )
            starts.append(s)
        h0, c0 = starts
        zeros = Tensor.zeros(state_shape[1:], dtype=x.dtype, device=x.device)
        last_h, last_c = [], []
        for layer in range(self.num_layers):
            if layer and self.dropout and self.training:
                x = x.dropout(self.dropout)
            outs = []
            for d in range(dirs):
                k = layer * dirs + d
                h = zeros if h0 is None else h0[k]
                c = zeros if c0 is None else c0[k]
                y, h, c = self._run(x, h, c, self._weights(layer, bool(d)), bool(d))
                outs.append(y)
                last_h.append(h)
                last_c.append(c)
            x = outs[0] if dirs == 1 else cat(outs, dim=-1)
        out = x.transpose(0, 1) if batched and self.batch_first else x
        h_n, c_n = stack(last_h), stack(last_c)
        if not batched:
            out, h_n, c_n = out.squeeze(1), h_n.squeeze(1), c_n.squeeze(1)
        return (out, (h_n, c_n)) if lstm else (out, h_n)

    def _run(self, x: Tensor, h: Tensor, c: Tensor, weights: tuple, reverse: bool):
        """One layer in one direction over x (T, B, in): outputs (T, B, H), last h and c."""
        w_ih, w_hh, b_ih, b_hh = weights
        hidden = self.hidden_size
        steps = x.linear(w_ih, _input_bias(self.mode, hidden, b_ih, b_hh)).unbind(0)
        order = range(len(steps) - 1, -1, -1) if reverse else range(len(steps))
        outs: list[Tensor | None] = [None] * len(steps)
        for t in order:
            h, c = self._cell(steps[t], h, c, w_hh, b_hh)
            outs[t] = h
        return _stacked(outs), h, c

    def _cell(self, xt: Tensor, h: Tensor, c: Tensor, w_hh: Tensor, b_hh):
        return _step(self.mode, self.hidden_size, xt, h, c, w_hh, b_hh)

    def extra_repr(self) -> str:
        """torch's: the sizes, then what differs from the defaults."""
        shown = [str(self.input_size), str(self.hidden_size)]
        if self.mode == "RNN_RELU":
            shown.append("nonlinearity='relu'")
        defaults = dict(
            num_layers=1, bias=True, batch_first=False, dropout=0.0, bidirectional=False
        )
        shown += [f"{k}={getattr(self, k)!r}" for k, v in defaults.items() if getattr(self, k) != v]
        return ", ".join(shown)


def _input_bias(mode: str, hidden: int, b_ih, b_hh):
    """Both biases, folded into the input projection; GRU's hidden bias of the new gate
    stays out (it sits inside r * (...), added by ``_step``)."""
    if b_ih is None:
        return None
    if mode == "GRU":
        keep = [1.0] * (2 * hidden) + [0.0] * hidden
        return b_ih + b_hh * Tensor(keep, dtype=b_hh.dtype, device=b_hh.device)
    return b_ih + b_hh


def _step(mode: str, hidden: int, xt: Tensor, h: Tensor, c, w_hh: Tensor, b_hh):
    """One time step: ``xt`` is the input's projection with ``_input_bias`` in it; returns
    the next h and c (c is passed through unless an LSTM)."""
    if mode == "LSTM":
        i, f, g, o = (xt + h.linear(w_hh)).chunk(4, -1)
        c = f.sigmoid() * c + i.sigmoid() * g.tanh()
        return o.sigmoid() * c.tanh(), c
    if mode == "GRU":
        hr, hz, hn = h.linear(w_hh).chunk(3, -1)
        xr, xz, xn = xt.chunk(3, -1)
        if b_hh is not None:
            hn = hn + b_hh[2 * hidden :]
        r, z = (xr + hr).sigmoid(), (xz + hz).sigmoid()
        n = (xn + r * hn).tanh()
        return n + z * (h - n), c
    pre = xt + h.linear(w_hh)
    return (pre.tanh() if mode == "RNN_TANH" else pre.relu()), c


def _stacked(steps: list[Tensor]) -> Tensor:
    """``stack(steps)`` whose gradient is a view of the incoming gradient per step.

    Through the primitives, a stack's gradient reaches step t through every other step's
    select (its WHERE chain), so each of the T per-step gradients costs T: a 35-step
    sequence spent most of its backward there. Recorded as one op, step t's gradient is
    row t of the stack's gradient."""
    with no_grad():
        y = stack(steps)
    return Tensor._make(y.node, y.device, _unstack_grad, tuple(steps))


def _unstack_grad(ctx, out, g):
    return g.unbind(0)


class RNN(_RNNBase):
    """h' = tanh(W_ih x + b_ih + W_hh h + b_hh) (or relu: ``nonlinearity='relu'``)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 nonlinearity: str = "tanh", **kwargs):  # fmt: skip
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNN: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        self.mode = "RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU"
        super().__init__(input_size, hidden_size, num_layers, **kwargs)


class LSTM(_RNNBase):
    """c' = f * c + i * g, h' = o * tanh(c'); gates i, f, g, o stacked in that order."""

    mode = "LSTM"


class GRU(_RNNBase):
    """r, z = sigmoid(...), n = tanh(W_in x + b_in + r * (W_hn h + b_hn)),
    h' = (1 - z) * n + z * h; gates r, z, n stacked in that order."""

    mode = "GRU"


# ---- cells: one step, the caller loops --------------------------------------------------


class _CellBase(Module):
    """One step of a recurrent layer: ``weight_ih`` (gates * hidden, input),
    ``weight_hh`` (gates * hidden, hidden), ``bias_ih`` and ``bias_hh``, torch's names and
    initialization U(+-1/sqrt(hidden))."""

    mode = "RNN_TANH"

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None,
                 dtype=None):  # fmt: skip
        if input_size < 0 or hidden_size < 1:
            raise ValueError(
                f"{type(self).__name__}: input_size ({input_size}) must be >= 0 and "
                f"hidden_size ({hidden_size}) >= 1"
            )
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        gates, bound = GATES[self.mode] * hidden_size, 1 / math.sqrt(hidden_size)
        dt = dtype or dtypes.float32
        self.weight_ih = _uniform_param((gates, input_size), bound, dt)
        self.weight_hh = _uniform_param((gates, hidden_size), bound, dt)
        self.bias_ih = _uniform_param((gates,), bound, dt) if bias else None
        self.bias_hh = _uniform_param((gates,), bound, dt) if bias else None

    def forward(self, input: Tensor, hx=None):
        """input (B, input_size) or unbatched (input_size,); ``hx`` the state, zeros if
        None (an LSTMCell's is the pair (h, c)). Returns the next h (LSTMCell: (h, c))."""
        name, lstm = type(self).__name__, self.mode == "LSTM"
        if input.ndim not in (1, 2) or input.shape[-1] != self.input_size:
            raise ValueError(
                f"{name}: input must be (batch, {self.input_size}) or ({self.input_size},), "
                f"got {input.shape}"
            )
        batched = input.ndim == 2
        x = input if batched else input.unsqueeze(0)
        shape = (x.shape[0], self.hidden_size)
        zeros = Tensor.zeros(shape, dtype=x.dtype, device=x.device)
        if hx is None:
            h, c = zeros, (zeros if lstm else None)
        else:
            h, c = hx if lstm else (hx, None)
            for what, s in (("h", h), ("c", c))[: 1 + lstm]:
                if tuple(s.shape) != shape[2 - s.ndim :] or s.ndim != x.ndim - (not batched):
                    raise ValueError(
                        f"{name}: {what} must be {shape if batched else shape[1:]}, got {s.shape}"
                    )
            if not batched:
                h, c = h.unsqueeze(0), (c.unsqueeze(0) if lstm else None)
        xt = x.linear(self.weight_ih, _input_bias(self.mode, self.hidden_size, self.bias_ih,
                                                  self.bias_hh))  # fmt: skip
        h, c = _step(self.mode, self.hidden_size, xt, h, c, self.weight_hh, self.bias_hh)
        if not batched:
            h, c = h[0], (c[0] if lstm else None)
        return (h, c) if lstm else h

    def extra_repr(self) -> str:
        shown = f"{self.input_size}, {self.hidden_size}"
        shown += "" if self.bias else ", bias=False"
        return shown + (", nonlinearity=relu" if self.mode == "RNN_RELU" else "")  # torch's


class RNNCell(_CellBase):
    """h' = tanh(W_ih x + b_ih + W_hh h + b_hh) (or relu: ``nonlinearity='relu'``)."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 nonlinearity: str = "tanh", device=None, dtype=None):  # fmt: skip
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(
                f"RNNCell: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}"
            )
        self.mode = "RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU"
        super().__init__(input_size, hidden_size, bias, device, dtype)


class LSTMCell(_CellBase):
    """One LSTM step: (h, c) -> (h', c'), gates i, f, g, o stacked in that order."""

    mode = "LSTM"


class GRUCell(_CellBase):
    """One GRU step: h -> h', gates r, z, n stacked in that order."""

    mode = "GRU"
