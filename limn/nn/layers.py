"""The layers with state: Linear, the norms, Embedding, Dropout and attention.

Each keeps torch's weight layout, default initialization and parameter names, so a state
dict moves between the two untransposed, and each is composed from Tensor methods (and
``limn.nn.functional``), so it runs on any device.
"""

from __future__ import annotations

import math

from ir.graph import dtypes
from ir.graph.dtypes import as_dtype
from limn.attention import scaled_dot_product_attention
from limn.nn import functional as F
from limn.nn.module import Module, _uniform_param
from limn.tensor import Tensor

# ---- layers -----------------------------------------------------------------------


class Linear(Module):
    """y = x @ weight.T + bias, weight (out, in); weight and bias ~ U(+-1/sqrt(in))."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, dtype=None):
        bound = 1 / math.sqrt(in_features) if in_features else 0.0
        dt = dtype or dtypes.float32
        self.in_features, self.out_features = in_features, out_features
        self.weight = _uniform_param((out_features, in_features), bound, dt)
        self.bias = _uniform_param((out_features,), bound, dt) if bias else None

    def extra_repr(self) -> str:
        out, inp = self.weight.shape
        return f"in_features={inp}, out_features={out}, bias={self.bias is not None}"

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim == 0 or x.shape[-1] != self.weight.shape[1]:
            raise ValueError(
                f"Linear: input shape {x.shape} does not end in in_features={self.weight.shape[1]}"
            )
        return x.linear(self.weight, self.bias)


class LayerNorm(Module):
    """Normalize over the trailing ``normalized_shape`` dims (biased variance), then scale
    and shift elementwise; weight starts at ones, bias at zeros. ``RMSNorm`` divides by
    the root mean square instead, with a weight and no bias."""

    rms = False

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, dtype=None):
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
        self.normalized_shape = tuple(shape)
        self.eps = eps
        dt = dtype or dtypes.float32
        self.weight = self.bias = None
        if elementwise_affine:
            self.weight = Tensor.ones(self.normalized_shape, dtype=dt, requires_grad=True)
            if bias and not self.rms:
                self.bias = Tensor.zeros(self.normalized_shape, dtype=dt, requires_grad=True)

    def extra_repr(self) -> str:
        """torch's: the shape as a tuple, eps, elementwise_affine (and bias)."""
        affine = self.weight is not None
        shown = f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={affine}"
        return shown if self.rms else f"{shown}, bias={self.bias is not None or not affine}"

    def forward(self, x: Tensor) -> Tensor:
        if self.rms:
            return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


class RMSNorm(LayerNorm):
    rms = True

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, dtype=None):
        super().__init__(normalized_shape, eps, elementwise_affine, False, dtype)


class BatchNorm1d(Module):
    """Per-channel normalization over the batch (and length): batch statistics while
    training, which also update ``running_mean``/``running_var``; those in eval mode.
    ``BatchNorm2d`` is the same over (N, C, H, W)."""

    def __init__(self, num_features: int, eps=1e-5, momentum=0.1, affine=True, dtype=None):
        dt = dtype or dtypes.float32
        self.eps, self.momentum = eps, momentum
        self.weight = Tensor.ones(num_features, dtype=dt, requires_grad=True) if affine else None
        self.bias = Tensor.zeros(num_features, dtype=dt, requires_grad=True) if affine else None
        self.running_mean = Tensor.zeros(num_features, dtype=dt).clone().realize()
        self.running_var = Tensor.ones(num_features, dtype=dt).clone().realize()
        # torch counts training batches in the state dict; kept so checkpoints trade as they are
        self.num_batches_tracked = Tensor(0, dtype=dtypes.int64)

    def extra_repr(self) -> str:
        return (
            f"{self.running_mean.shape[0]}, eps={self.eps}, momentum={self.momentum}, "
            f"affine={self.weight is not None}, track_running_stats=True"
        )

    def forward(self, x: Tensor) -> Tensor:
        if self.training:
            self.num_batches_tracked.add_(1)
        return F.batch_norm(
            x, self.running_mean, self.running_var, self.weight, self.bias, self.training,
            self.momentum, self.eps,
        )  # fmt: skip


BatchNorm2d = type("BatchNorm2d", (BatchNorm1d,), {})
BatchNorm3d = type("BatchNorm3d", (BatchNorm1d,), {})


class GroupNorm(Module):
    """Normalize each sample over groups of ``num_channels / num_groups`` channels (and
    the spatial dims), then scale and shift per channel; weight ones, bias zeros."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5,
                 affine: bool = True, device=None, dtype=None, *, bias: bool = True):  # fmt: skip
        if num_groups < 1 or num_channels % num_groups:
            raise ValueError(
                f"GroupNorm: num_channels={num_channels} must be divisible by "
                f"num_groups={num_groups}"
            )
        dt = dtype or dtypes.float32
        self.num_groups, self.num_channels, self.eps, self.affine = (
            num_groups, num_channels, eps, affine
        )  # fmt: skip
        self.weight = Tensor.ones(num_channels, dtype=dt, requires_grad=True) if affine else None
        self.bias = None
        if affine and bias:
            self.bias = Tensor.zeros(num_channels, dtype=dt, requires_grad=True)

    def extra_repr(self) -> str:
        shown = f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"
        return shown + f", bias={self.bias is not None}"

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim < 2 or x.shape[1] != self.num_channels:
            raise ValueError(f"GroupNorm: input must be (N, {self.num_channels}, *), got {x.shape}")
        return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)


class InstanceNorm1d(Module):
    """Normalize each sample's channels over their spatial dims. torch's defaults: no
    affine weight, no running statistics; with ``track_running_stats`` the statistics
    are kept as BatchNorm's (the mean over the batch of each sample's) and used in eval
    mode. An input without the batch dim ((C, L) for 1d) is one sample."""

    n = 1

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1,
                 affine: bool = False, track_running_stats: bool = False, device=None,
                 dtype=None, *, bias: bool = True):  # fmt: skip
        dt = dtype or dtypes.float32
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        self.weight = Tensor.ones(num_features, dtype=dt, requires_grad=True) if affine else None
        self.bias = None
        if affine and bias:
            self.bias = Tensor.zeros(num_features, dtype=dt, requires_grad=True)
        self.running_mean = self.running_var = self.num_batches_tracked = None
        if track_running_stats:
            self.running_mean = Tensor.zeros(num_features, dtype=dt).contiguous().realize()
            self.running_var = Tensor.ones(num_features, dtype=dt).contiguous().realize()
            self.num_batches_tracked = Tensor(0, dtype=dtypes.int64)

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
            f"affine={self.affine}, bias={self.bias is not None}, "
            f"track_running_stats={self.track_running_stats}"
        )

    def forward(self, x: Tensor) -> Tensor:
        name, n = type(self).__name__, self.n
        if x.ndim not in (n + 1, n + 2):
            raise ValueError(
                f"{name}: input must be (N, C, *{n} spatial dims) or (C, *spatial), got {x.shape}"
            )
        if x.ndim == n + 1:
            return self(x.unsqueeze(0))[0]
        if x.shape[1] != self.num_features and (self.affine or self.track_running_stats):
            raise ValueError(f"{name}: input {x.shape} does not have {self.num_features} channels")
        use_batch = self.training or not self.track_running_stats  # (torch counts no batches)
        return F.instance_norm(
            x, self.running_mean, self.running_var, self.weight, self.bias, use_batch,
            self.momentum, self.eps,
        )  # fmt: skip


InstanceNorm2d = type("InstanceNorm2d", (InstanceNorm1d,), {"n": 2})
InstanceNorm3d = type("InstanceNorm3d", (InstanceNorm1d,), {"n": 3})


class Embedding(Module):
    """Rows of a (num_embeddings, embedding_dim) table picked by integer ids; ~ N(0, 1).
    The row ``padding_idx`` starts at zeros and takes no gradient, as in torch."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx=None, dtype=None):
        dt = as_dtype(dtype or dtypes.float32)
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(
                    f"Embedding: padding_idx {padding_idx} is outside the {num_embeddings} rows"
                )
            padding_idx %= num_embeddings
        self.padding_idx = padding_idx
        table = Tensor.randn((num_embeddings, embedding_dim), dtype=dt)
        if padding_idx is not None:
            rows = Tensor.arange(num_embeddings).reshape(num_embeddings, 1)
            table = (rows == padding_idx).where(0.0, table).cast(dt)
        self.weight = table.clone().realize().requires_grad_(True)

    def extra_repr(self) -> str:
        n, dim = self.weight.shape
        return f"{n}, {dim}" + (
            "" if self.padding_idx is None else f", padding_idx={self.padding_idx}"
        )

    def forward(self, ids: Tensor) -> Tensor:
        return F.embedding(ids, self.weight, self.padding_idx)


class EmbeddingBag(Module):
    """``Embedding``'s table reduced per bag (``F.embedding_bag``): ``forward(input,
    offsets=None, per_sample_weights=None)`` gives (bags, embedding_dim); ~ N(0, 1), the
    ``padding_idx`` row starting at zeros."""

    def __init__(self, num_embeddings: int, embedding_dim: int, max_norm=None,
                 norm_type: float = 2.0, scale_grad_by_freq: bool = False, mode: str = "mean",
                 sparse: bool = False, _weight=None, include_last_offset: bool = False,
                 padding_idx=None, dtype=None):  # fmt: skip
        table = Embedding(num_embeddings, embedding_dim, padding_idx, dtype)
        self.weight = table.weight if _weight is None else _weight.detach().requires_grad_(True)
        self.padding_idx, self.mode = table.padding_idx, mode
        self.max_norm, self.norm_type, self.scale_grad_by_freq = (
            max_norm,
            norm_type,
            scale_grad_by_freq,
        )
        self.include_last_offset = include_last_offset

    def extra_repr(self) -> str:
        n, dim = self.weight.shape
        return f"{n}, {dim}, mode={self.mode!r}" + (
            "" if self.padding_idx is None else f", padding_idx={self.padding_idx}"
        )

    def forward(self, input: Tensor, offsets=None, per_sample_weights=None) -> Tensor:
        return F.embedding_bag(
            input, self.weight, offsets, self.max_norm, self.norm_type, self.scale_grad_by_freq,
            self.mode, False, per_sample_weights, self.include_last_offset, self.padding_idx,
        )  # fmt: skip


class Dropout(Module):
    """Zero each element with probability p while training (scaling the rest by
    1/(1-p)); the identity in eval mode."""

    def __init__(self, p: float = 0.5, inplace: bool = False):
        if not 0 <= p <= 1:
            raise ValueError(f"Dropout: p must be in [0, 1], got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training, self.inplace)


def _dropout_kind(name: str, fn, doc: str) -> type:
    """A Dropout whose draw is ``fn``'s (the same p, inplace and training switch)."""
    forward = lambda self, x: fn(x, self.p, self.training, self.inplace)  # noqa: E731
    return type(name, (Dropout,), {"forward": forward, "__doc__": doc, "__module__": __name__})


Dropout1d, Dropout2d, Dropout3d = (
    _dropout_kind(f"Dropout{n}d", getattr(F, f"dropout{n}d"), f"Zero whole channels of {n}-d maps.")
    for n in (1, 2, 3)
)
AlphaDropout = _dropout_kind(
    "AlphaDropout", F.alpha_dropout, "Dropout that keeps a SELU network's mean and variance."
)
FeatureAlphaDropout = _dropout_kind(
    "FeatureAlphaDropout", F.feature_alpha_dropout, "AlphaDropout of whole channels."
)


class RReLU(Module):
    """LeakyReLU with a slope drawn from U(lower, upper) while training; their mean in eval."""

    def __init__(self, lower: float = 1 / 8, upper: float = 1 / 3, inplace: bool = False):
        self.lower, self.upper, self.inplace = lower, upper, inplace

    def forward(self, x: Tensor) -> Tensor:
        return F.rrelu(x, self.lower, self.upper, self.training, self.inplace)


# ---- attention --------------------------------------------------------------------


class MultiHeadAttention(Module):
    """Attention over ``num_heads`` heads of (batch, t, embed_dim) inputs, batch first.

    Parameters keep torch's ``nn.MultiheadAttention`` names and layout (``in_proj_weight``
    (3E, E) stacking the q, k, v projections, ``in_proj_bias``, ``out_proj``), so a state
    dict moves between the two. The call differs: ``forward(query, key=None, value=None,
    *, key_mask=None, is_causal=False)`` returns the output alone, and ``key_mask`` is True
    where a key takes part (torch's ``key_padding_mask`` is True where it does not).
    """

    def __init__(self, embed_dim: int, num_heads: int, bias: bool = True, dtype=None):
        if num_heads < 1 or embed_dim % num_heads:
            raise ValueError(
                f"MultiHeadAttention: embed_dim={embed_dim} must be divisible by "
                f"num_heads={num_heads}"
            )
        self.embed_dim, self.num_heads = embed_dim, num_heads
        dt = as_dtype(dtype or dtypes.float32)
        bound = math.sqrt(6 / (embed_dim + 3 * embed_dim))  # xavier_uniform on (3E, E)
        self.in_proj_weight = _uniform_param((3 * embed_dim, embed_dim), bound, dt)
        self.in_proj_bias = (
            Tensor.zeros((3 * embed_dim,), dtype=dt, requires_grad=True) if bias else None
        )
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, dtype=dt)
        if bias:
            self.out_proj.bias = Tensor.zeros((embed_dim,), dtype=dt, requires_grad=True)

    def _heads(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        h = self.num_heads
        return x.reshape(b, t, h, self.embed_dim // h).permute(0, 2, 1, 3)

    def forward(
        self, query: Tensor, key=None, value=None, *, key_mask=None, is_causal=False, cache=None
    ):
        e = self.embed_dim
        for name, x in (("query", query), ("key", key), ("value", value)):
            if x is not None and (x.ndim != 3 or x.shape[-1] != e):
                raise ValueError(
                    f"MultiHeadAttention: {name} must be (batch, t, {e}), got {x.shape}"
                )
        # three projections by slices of the stacked weight, not one split after: the
        # gradient of a split is a concatenation, which would be fused into (and slow down)
        # the matmul that takes the input's gradient
        key = query if key is None else key
        value = key if value is None else value
        w, b = self.in_proj_weight, self.in_proj_bias
        ws, bs = w.split(e, 0), b.split(e, 0) if b is not None else (None,) * 3
        q, k, v = (x.linear(wi, bi) for x, wi, bi in zip((query, key, value), ws, bs))
        if cache is not None:
            k, v, key_mask = cache.write(k, v)
            is_causal = False
        if key_mask is not None and key_mask.ndim == 2:  # (batch, t_k): one flag per key
            key_mask = key_mask.unsqueeze(1)
        y = scaled_dot_product_attention(
            self._heads(q), self._heads(k), self._heads(v), is_causal=is_causal, key_mask=key_mask
        )
        bsz, t = y.shape[0], y.shape[2]
        return self.out_proj(y.permute(0, 2, 1, 3).reshape(bsz, t, e))


class GPTBlock(Module):
    """A pre-norm decoder block: x + attn(ln1(x)) with a causal mask, then x + mlp(ln2(x)).

    The MLP is Linear(d, 4d), GELU (or ``activation``, a Tensor method name), Linear(4d, d).
    """

    def __init__(self, d: int, heads: int, mlp_ratio: int = 4, activation="gelu", dtype=None):
        self.ln1, self.ln2 = LayerNorm(d, dtype=dtype), LayerNorm(d, dtype=dtype)
        self.attn = MultiHeadAttention(d, heads, dtype=dtype)
        self.fc1 = Linear(d, mlp_ratio * d, dtype=dtype)
        self.fc2 = Linear(mlp_ratio * d, d, dtype=dtype)
        self.activation = activation

    def forward(self, x: Tensor, key_mask: Tensor | None = None, cache=None) -> Tensor:
        """``cache``: generate one position over a ``limn.generate.KVCache``."""
        x = x + self.attn(self.ln1(x), key_mask=key_mask, is_causal=True, cache=cache)
        return x + self.fc2(getattr(self.fc1(self.ln2(x)), self.activation)())


class Upsample(Module):
    """F.interpolate as a layer: to ``size`` or by ``scale_factor``, in ``mode``."""

    def __init__(self, size=None, scale_factor=None, mode: str = "nearest", align_corners=None,
                 recompute_scale_factor=None):  # fmt: skip
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def forward(self, x: Tensor) -> Tensor:
        return F.interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners,
                             self.recompute_scale_factor)  # fmt: skip
