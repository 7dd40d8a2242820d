"""torch's Transformer layers: ``MultiheadAttention``, ``TransformerEncoderLayer``,
``TransformerEncoder``, ``TransformerDecoderLayer``, ``TransformerDecoder`` and
``Transformer``, with torch's calls, defaults and parameter names.

They take torch's layout, sequence first ((T, B, E)) unless ``batch_first``, and torch's
masks: an ``attn_mask`` is added to the scores when float (``-inf`` hides) and hides where
True when bool; a ``key_padding_mask`` (B, S) hides the keys where True. (limn's own
``nn.MultiHeadAttention`` is batch first and marks the keys that take part; this
``MultiheadAttention`` is a subclass with the same parameters and torch's forward.) As in
torch, ``TransformerEncoder`` and ``TransformerDecoder`` start every layer as a copy of the
one they are given, and ``Transformer`` then draws every matrix again by
``xavier_uniform_``, so a program that subclasses ``nn.Transformer`` (the word language
model) gets torch's parameters, by name and by shape, and loads torch's state dict.
"""

from __future__ import annotations

import math

from limn.nn import init
from limn.nn.layers import Dropout, LayerNorm, Linear, MultiHeadAttention
from limn.nn.module import Module, ModuleList
from limn.tensor import Tensor


def _attention(mha, query, key, value, attn_mask, key_padding_mask, is_causal, need_weights):
    """torch's multi-head attention over batch-first (B, T, E) inputs: (out, weights)."""
    e, heads = mha.embed_dim, mha.num_heads
    hd = e // heads
    w, b = mha.in_proj_weight, mha.in_proj_bias
    ws, bs = w.split(e, 0), b.split(e, 0) if b is not None else (None,) * 3
    q, k, v = (x.linear(wi, bi) for x, wi, bi in zip((query, key, value), ws, bs))
    bsz, t, s = q.shape[0], q.shape[1], k.shape[1]
    q, k, v = (x.reshape(bsz, -1, heads, hd).transpose(1, 2) for x in (q, k, v))
    scores = (q @ k.transpose(-2, -1)) * (1 / math.sqrt(hd))
    if is_causal and attn_mask is None:
        attn_mask = Tensor.ones((t, s), dtype="bool", device=q.device).triu(1)
    if attn_mask is not None:
        if attn_mask.ndim == 3:  # (B * heads, T, S), torch's per-head form
            attn_mask = attn_mask.reshape(bsz, heads, t, s)
        if attn_mask.dtype.name == "bool":
            scores = scores.masked_fill(attn_mask, -math.inf)
        else:
            scores = scores + attn_mask
    if key_padding_mask is not None:
        if tuple(key_padding_mask.shape) != (bsz, s):
            raise ValueError(
                f"MultiheadAttention: key_padding_mask must be (batch, keys) = {(bsz, s)}, got "
                f"{key_padding_mask.shape}"
            )
        pad = key_padding_mask.reshape(bsz, 1, 1, s)
        if pad.dtype.name == "bool":
            scores = scores.masked_fill(pad, -math.inf)
        else:
            scores = scores + pad
    weights = scores.softmax(-1)
    y = weights.dropout(mha.dropout, mha.training) @ v
    out = mha.out_proj(y.transpose(1, 2).reshape(bsz, t, e))
    return out, (weights.mean(1) if need_weights else None)


class MultiheadAttention(MultiHeadAttention):
    """torch's ``nn.MultiheadAttention``: the parameters of limn's ``MultiHeadAttention``
    and torch's forward, ``(out, weights averaged over heads or None)``."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 batch_first: bool = False, dtype=None, **unsupported):  # fmt: skip
        if unsupported:
            raise ValueError(
                f"MultiheadAttention: {sorted(unsupported)} not supported; accepted: "
                "embed_dim, num_heads, dropout, bias, batch_first, dtype"
            )
        super().__init__(embed_dim, num_heads, bias=bias, dtype=dtype)
        self.dropout, self.batch_first = float(dropout), batch_first

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True,
                attn_mask=None, average_attn_weights=True, is_causal=False):  # fmt: skip
        if not self.batch_first:
            query, key, value = (x.transpose(0, 1) for x in (query, key, value))
        out, weights = _attention(self, query, key, value, attn_mask, key_padding_mask,
                                  is_causal, need_weights)  # fmt: skip
        return (out if self.batch_first else out.transpose(0, 1)), weights


def _activation(activation):
    if callable(activation):
        return activation
    if activation not in ("relu", "gelu"):
        raise ValueError(
            f"Transformer: activation must be 'relu', 'gelu' or a callable, got {activation!r}"
        )
    return Tensor.relu if activation == "relu" else Tensor.gelu


class TransformerEncoderLayer(Module):
    """Self-attention then a feed-forward block, each added back and normalized (after,
    or before with ``norm_first``), as torch's."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation="relu", layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 dtype=None):  # fmt: skip
        self.self_attn = MultiheadAttention(d_model, nhead, dropout, bias, batch_first=True,
                                            dtype=dtype)  # fmt: skip
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype)
        self.norm_first, self.batch_first = norm_first, batch_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.dropout1, self.dropout2 = Dropout(dropout), Dropout(dropout)
        self.activation = _activation(activation)

    def _sa(self, x, mask, kpm, causal):
        y = _attention(self.self_attn, x, x, x, mask, kpm, causal, False)[0]
        return self.dropout1(y)

    def _ff(self, x):
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        x = src if self.batch_first else src.transpose(0, 1)
        if self.norm_first:
            x = x + self._sa(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._ff(self.norm2(x))
        else:
            x = self.norm1(x + self._sa(x, src_mask, src_key_padding_mask, is_causal))
            x = self.norm2(x + self._ff(x))
        return x if self.batch_first else x.transpose(0, 1)


class TransformerDecoderLayer(TransformerEncoderLayer):
    """Self-attention over the target, attention over the encoder's ``memory``, then the
    feed-forward block, each added back and normalized, as torch's."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation="relu", layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 dtype=None):  # fmt: skip
        self.self_attn = MultiheadAttention(d_model, nhead, dropout, bias, batch_first=True,
                                            dtype=dtype)  # fmt: skip
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout, bias,
                                                 batch_first=True, dtype=dtype)  # fmt: skip
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype)
        self.norm_first, self.batch_first = norm_first, batch_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.dropout1, self.dropout2 = Dropout(dropout), Dropout(dropout)
        self.dropout3 = Dropout(dropout)
        self.activation = _activation(activation)

    def _mha(self, x, mem, mask, kpm, causal):
        y = _attention(self.multihead_attn, x, mem, mem, mask, kpm, causal, False)[0]
        return self.dropout2(y)

    def _ff(self, x):
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None,
                tgt_key_padding_mask=None, memory_key_padding_mask=None,
                tgt_is_causal=False, memory_is_causal=False):  # fmt: skip
        x, mem = (
            (tgt, memory) if self.batch_first else (tgt.transpose(0, 1), memory.transpose(0, 1))
        )
        sa_args = (tgt_mask, tgt_key_padding_mask, tgt_is_causal)
        mha_args = (memory_mask, memory_key_padding_mask, memory_is_causal)
        if self.norm_first:
            x = x + self._sa(self.norm1(x), *sa_args)
            x = x + self._mha(self.norm2(x), mem, *mha_args)
            x = x + self._ff(self.norm3(x))
        else:
            x = self.norm1(x + self._sa(x, *sa_args))
            x = self.norm2(x + self._mha(x, mem, *mha_args))
            x = self.norm3(x + self._ff(x))
        return x if self.batch_first else x.transpose(0, 1)


def _copies(layer: Module, n: int) -> ModuleList:
    """``n`` layers made as ``layer`` was, each holding a copy of its values (torch's
    deepcopy: they start equal, and train apart)."""
    args, kwargs = layer._made_with
    copies = [layer]
    for _ in range(n - 1):
        twin = type(layer)(*args, **kwargs)
        twin.load_state_dict({k: v.numpy() for k, v in layer.state_dict().items()})
        twin.train(layer.training)
        copies.append(twin)
    return ModuleList(copies)


class TransformerEncoder(Module):
    """``num_layers`` copies of ``encoder_layer`` in order, then ``norm`` if given."""

    def __init__(self, encoder_layer: Module, num_layers: int, norm: Module | None = None,
                 enable_nested_tensor: bool = True, mask_check: bool = True):  # fmt: skip
        self.layers = _copies(encoder_layer, num_layers)
        self.num_layers, self.norm = num_layers, norm

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                      is_causal=bool(is_causal))  # fmt: skip
        return x if self.norm is None else self.norm(x)


class TransformerDecoder(Module):
    """``num_layers`` copies of ``decoder_layer`` in order, then ``norm`` if given."""

    def __init__(self, decoder_layer: Module, num_layers: int, norm: Module | None = None):
        self.layers = _copies(decoder_layer, num_layers)
        self.num_layers, self.norm = num_layers, norm

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None,
                tgt_key_padding_mask=None, memory_key_padding_mask=None,
                tgt_is_causal=None, memory_is_causal=False):  # fmt: skip
        x = tgt
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
                      memory_key_padding_mask, bool(tgt_is_causal), memory_is_causal)  # fmt: skip
        return x if self.norm is None else self.norm(x)


class Transformer(Module):
    """torch's encoder-decoder: ``encoder`` (layers and a final LayerNorm), ``decoder``
    (the same), every matrix drawn by ``xavier_uniform_``. Subclassing it and using only
    ``self.encoder`` (the word language model) works as in torch."""

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6,
                 num_decoder_layers: int = 6, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation="relu", custom_encoder=None, custom_decoder=None,
                 layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, dtype=None):  # fmt: skip
        common = dict(dim_feedforward=dim_feedforward, dropout=dropout, activation=activation,
                      layer_norm_eps=layer_norm_eps, batch_first=batch_first,
                      norm_first=norm_first, bias=bias, dtype=dtype)  # fmt: skip
        self.encoder = custom_encoder or TransformerEncoder(
            TransformerEncoderLayer(d_model, nhead, **common), num_encoder_layers,
            LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype),
        )  # fmt: skip
        self.decoder = custom_decoder or TransformerDecoder(
            TransformerDecoderLayer(d_model, nhead, **common), num_decoder_layers,
            LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype),
        )  # fmt: skip
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
                src_key_padding_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None,
                memory_is_causal=False):  # fmt: skip
        memory = self.encoder(src, src_mask, src_key_padding_mask, src_is_causal)
        return self.decoder(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
                            memory_key_padding_mask, tgt_is_causal, memory_is_causal)  # fmt: skip

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device=None, dtype=None) -> Tensor:
        """(sz, sz) float: 0 on and below the diagonal, -inf above (a causal mask)."""
        later = Tensor.ones((sz, sz), dtype="bool", device=device).triu(1)
        return Tensor.zeros((sz, sz), device=device).masked_fill(later, -math.inf)
