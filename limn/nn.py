"""limn.nn: layers, losses and the Module tree that names their parameters.

A Module is a plain Python object; whatever Tensors it holds in its attributes, directly
or inside lists, dicts and other Modules, are its state. Nothing is registered: the tree
is walked when asked, so ``named_parameters()`` gives the dotted path of each trainable
Tensor (``blocks.0.qkv.weight``) in attribute order, and ``state_dict()`` is keyed by the
same paths. A Tensor with ``requires_grad`` is a parameter; one without is a buffer,
saved and loaded but not trained. Attributes whose names start with ``_`` are private
and not walked (a cache, a mask recomputed on demand).

Every layer keeps torch's weight layout and default initialization, so a state dict moves
between the two untransposed. Every layer is composed from Tensor methods, so it runs on
any device. A convolution is one multiply and one reduce over a windowed view of the
padded input (``_unfold``): each window is a View over the input (``Tensor.p_window``),
so the only copy is the padded input itself, made once when there is padding.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

from ir.graph import dtypes
from ir.graph.dtypes import as_dtype
from limn import autograd
from limn.attention import scaled_dot_product_attention
from limn.serialize import assign_named
from limn.tensor import Tensor

# ---- the module tree --------------------------------------------------------------


def _children(obj) -> Iterator[tuple[str, object]]:
    if isinstance(obj, Module):
        return ((k, v) for k, v in vars(obj).items() if not k.startswith("_"))
    if isinstance(obj, dict):
        return ((str(k), v) for k, v in obj.items())
    return ((str(i), v) for i, v in enumerate(obj))


def _named_attributes(obj, prefix: str, seen: set[int]) -> Iterator[tuple[str, object]]:
    """Every Tensor and Module under ``obj``, each once (the first path that reaches it)."""
    for name, v in _children(obj):
        path = f"{prefix}.{name}" if prefix else name
        if isinstance(v, Tensor | Module):
            if id(v) in seen:
                continue
            seen.add(id(v))
            yield path, v
            if isinstance(v, Module):
                yield from _named_attributes(v, path, seen)
        elif isinstance(v, list | tuple | dict):
            yield from _named_attributes(v, path, seen)


class Module:
    """Base class: subclasses set attributes in ``__init__`` and define ``forward``."""

    training = True

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__}: define forward()")

    def named_modules(self) -> list[tuple[str, Module]]:
        """This module (path "") and every module below it."""
        return [("", self)] + [
            (p, v) for p, v in _named_attributes(self, "", set()) if isinstance(v, Module)
        ]

    def _named_tensors(self) -> list[tuple[str, Tensor]]:
        return [(p, v) for p, v in _named_attributes(self, "", set()) if isinstance(v, Tensor)]

    def named_parameters(self) -> list[tuple[str, Tensor]]:
        return [(p, t) for p, t in self._named_tensors() if t.requires_grad]

    def parameters(self) -> list[Tensor]:
        return [t for _, t in self.named_parameters()]

    def named_buffers(self) -> list[tuple[str, Tensor]]:
        return [(p, t) for p, t in self._named_tensors() if not t.requires_grad]

    def state_dict(self) -> dict[str, Tensor]:
        """Parameters and buffers by path: the live Tensors, not copies."""
        return dict(self._named_tensors())

    def load_state_dict(self, state: dict, strict: bool = True) -> None:
        """Write ``state`` (Tensors or numpy arrays by path) into this module's own Tensors.

        Everything is checked first (names, shapes, dtypes); then every write commits in
        one realize, so a Tensor a captured step holds keeps its buffer.
        """
        assign_named(self.state_dict(), state, strict=strict, source="load_state_dict")

    def train(self, mode: bool = True) -> Module:
        for _, m in self.named_modules():
            m.training = mode
        return self

    def eval(self) -> Module:
        return self.train(False)

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.grad = None

    def __repr__(self) -> str:
        shapes = ", ".join(f"{p}={list(t.shape)}" for p, t in self.named_parameters())
        return f"{type(self).__name__}({shapes})"


class Sequential(Module):
    """Layers applied in order; a layer is a Module or any callable (``Tensor.relu``)."""

    def __init__(self, *layers: Callable):
        for i, layer in enumerate(layers):
            setattr(self, str(i), layer)  # paths "0.weight", "1.bias", as in torch
        self._layers = list(layers)

    def forward(self, x: Tensor) -> Tensor:
        for layer in self._layers:
            x = layer(x)
        return x


# ---- initialization ---------------------------------------------------------------


def _uniform_param(shape, bound: float, dtype) -> Tensor:
    return Tensor.uniform(shape, -bound, bound, dtype=as_dtype(dtype), requires_grad=True)


# ---- layers -----------------------------------------------------------------------


class Linear(Module):
    """y = x @ weight.T + bias, weight (out, in); weight and bias ~ U(+-1/sqrt(in))."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, dtype=None):
        bound = 1 / math.sqrt(in_features) if in_features else 0.0
        dt = dtype or dtypes.float32
        self.weight = _uniform_param((out_features, in_features), bound, dt)
        self.bias = _uniform_param((out_features,), bound, dt) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim == 0 or x.shape[-1] != self.weight.shape[1]:
            raise ValueError(
                f"Linear: input shape {x.shape} does not end in in_features={self.weight.shape[1]}"
            )
        return x.linear(self.weight, self.bias)


class LayerNorm(Module):
    """Normalize over the trailing ``normalized_shape`` dims (biased variance), then scale
    and shift elementwise; weight starts at ones, bias at zeros."""

    def __init__(
        self,
        normalized_shape,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        dtype=None,
    ):
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
        self.normalized_shape = tuple(shape)
        self.eps = eps
        dt = dtype or dtypes.float32
        self.weight = self.bias = None
        if elementwise_affine:
            self.weight = Tensor.ones(self.normalized_shape, dtype=dt, requires_grad=True)
            if bias:
                self.bias = Tensor.zeros(self.normalized_shape, dtype=dt, requires_grad=True)

    def forward(self, x: Tensor) -> Tensor:
        n = len(self.normalized_shape)
        if tuple(x.shape[x.ndim - n :]) != self.normalized_shape or x.ndim < n:
            raise ValueError(
                f"LayerNorm: input shape {x.shape} does not end in {self.normalized_shape}"
            )
        axes = tuple(range(x.ndim - n, x.ndim))
        mean = x.mean(axes, keepdim=True)
        var = x.var(axes, keepdim=True, correction=0)
        y = (x - mean) * (var + self.eps).rsqrt()
        if self.weight is not None:
            y = y * self.weight
        if self.bias is not None:
            y = y + self.bias
        return y


class Embedding(Module):
    """Rows of a (num_embeddings, embedding_dim) table picked by integer ids; ~ N(0, 1)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, dtype=None):
        dt = as_dtype(dtype or dtypes.float32)
        self.weight = Tensor.randn((num_embeddings, embedding_dim), dtype=dt, requires_grad=True)

    def forward(self, ids: Tensor) -> Tensor:
        if not ids.dtype.is_int:
            raise TypeError(f"Embedding: ids must be an integer tensor, got {ids.dtype}")
        n, dim = ids.size, self.weight.shape[1]
        rows = ids.reshape(n, 1).expand(n, dim)
        return self.weight.gather(0, rows).reshape(*ids.shape, dim)


class Dropout(Module):
    """Zero each element with probability p while training (scaling the rest by
    1/(1-p)); the identity in eval mode."""

    def __init__(self, p: float = 0.5):
        if not 0 <= p <= 1:
            raise ValueError(f"Dropout: p must be in [0, 1], got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return x.dropout(self.p, self.training)


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


# ---- convolution ------------------------------------------------------------------


def _tuple(v, n: int, name: str) -> tuple[int, ...]:
    t = (v,) * n if isinstance(v, int) else tuple(v)
    if len(t) != n or any(not isinstance(i, int) for i in t):
        raise ValueError(f"conv: {name} must be an int or {n} ints, got {v!r}")
    return t


def _unfold(x: Tensor, kernel, stride, dilation) -> Tensor:
    """(N, C, *L) -> (N, C, *o, *k): every kernel window of every output position, a view."""
    n = len(kernel)
    for i in range(n):
        # spatial dim i sits at axis 2 + 2i once the dims before it became (o, k) pairs
        x = x.p_window(2 + 2 * i, kernel[i], stride[i], dilation[i])
    # now (N, C, o0, k0, o1, k1, ...): outputs first, then kernel offsets
    outs = tuple(2 + 2 * i for i in range(n))
    return x.permute((0, 1) + outs + tuple(a + 1 for a in outs))


def conv(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride=1,
    padding=0,
    dilation=1,
    groups: int = 1,
) -> Tensor:
    """N-d cross-correlation as torch computes it: x (N, C, *L), weight (O, C/groups, *k).

    ``padding`` is an int, one int per spatial dim, or "valid" / "same" (stride 1). An
    unbatched x (C, *L) gives an unbatched result.
    """
    n = weight.ndim - 2
    if n < 1:
        raise ValueError(f"conv: weight must be (out, in/groups, *kernel), got {weight.shape}")
    if x.ndim == n + 1:
        return conv(x.unsqueeze(0), weight, bias, stride, padding, dilation, groups)[0]
    if x.ndim != n + 2:
        raise ValueError(
            f"conv{n}d: input must be (N, C, *{n} spatial dims) or (C, *spatial), got {x.shape}"
        )
    O, cg, *kernel = weight.shape
    N, C, *size = x.shape
    stride, dilation = _tuple(stride, n, "stride"), _tuple(dilation, n, "dilation")
    if groups < 1 or C != cg * groups or O % groups:
        raise ValueError(
            f"conv{n}d: input {x.shape} with {C} channels, weight {weight.shape} and "
            f"groups={groups} do not fit: need C == weight.shape[1] * groups and out "
            f"channels divisible by groups"
        )
    if min(stride) < 1 or min(dilation) < 1:
        raise ValueError(f"conv{n}d: stride {stride} and dilation {dilation} must be >= 1")
    if padding == "valid":
        pads = ((0, 0),) * n
    elif padding == "same":
        if max(stride) != 1:
            raise ValueError(f"conv{n}d: padding='same' needs stride 1, got {stride}")
        total = [d * (k - 1) for d, k in zip(dilation, kernel)]
        pads = tuple((t // 2, t - t // 2) for t in total)
    else:
        pads = tuple((p, p) for p in _tuple(padding, n, "padding"))
        if min(p for p, _ in pads) < 0:
            raise ValueError(f"conv{n}d: padding must be >= 0, got {padding}")
    sizes = [s + a + b for s, (a, b) in zip(size, pads)]
    if any(L < d * (k - 1) + 1 for L, d, k in zip(sizes, dilation, kernel)):
        raise ValueError(
            f"conv{n}d: kernel {tuple(kernel)} with dilation {dilation} is larger than "
            f"the padded input {tuple(sizes)}"
        )
    spans = [d * (k - 1) for d, k in zip(dilation, kernel)]
    direct = max(stride) == 1 and groups == 1 and all(b <= s for (_, b), s in zip(pads, spans))
    direct = direct and all(a <= s for (a, _), s in zip(pads, spans))
    if direct and autograd.grad_enabled() and (x.requires_grad or weight.requires_grad):
        # the gradients as convolutions of their own (see _conv_grad), not through unfold
        with autograd.no_grad():
            out = _correlate(x, weight, pads, dilation)
        parents = (x, weight)
        out = Tensor._make(out.node, x.device, _conv_grad, parents, (pads, dilation))
    else:
        out = _correlate(x, weight, pads, dilation, stride, groups)
    return out if bias is None else out + bias.reshape(O, *([1] * n))


def _correlate(x: Tensor, weight: Tensor, pads, dilation, stride=None, groups: int = 1) -> Tensor:
    """The cross-correlation as one contraction over (C, *k) of the unfolded padded input."""
    n = weight.ndim - 2
    O, cg, *kernel = weight.shape
    N = x.shape[0]
    stride = stride or (1,) * n
    padded = x.pad(pads)
    if any(a or b for a, b in pads):
        # a window cannot read through a pad's mask, so the padded input is copied once
        padded = padded.contiguous()
    cols = _unfold(padded, kernel, stride, dilation)  # (N, C, *o, *k)
    outs = cols.shape[2 : 2 + n]
    cols = cols.reshape(N, groups, 1, cg, *outs, *kernel)
    w = weight.reshape(1, groups, O // groups, cg, *([1] * n), *kernel)
    reduce = (3,) + tuple(range(4 + n, 4 + 2 * n))
    return (cols * w).sum(reduce).reshape(N, O, *outs)


def _conv_grad(ctx, out, g):
    """Both gradients of a stride-1 convolution, each a contraction on the tiled path.

    dx is the correlation of g, padded by span - pad on each side, with the kernel flipped
    and its in/out channels swapped (each input element collects every output it fed);
    dw[o, c, *k] sums g[n, o, *y] * x_padded[n, c, *y + d*k] over n and the positions.
    Autograd through the unfold would make a (N, C, *y, *k) gradient first, k times the
    input, and overlap-add it.
    """
    x, weight = ctx.parents
    pads, dilation = ctx.saved
    n = weight.ndim - 2
    O, C, *kernel = weight.shape
    N, _, *outs = g.shape
    spans = [d * (k - 1) for d, k in zip(dilation, kernel)]
    gx = gw = None
    if x.requires_grad:
        flipped = weight.flip(*range(2, 2 + n)).transpose(0, 1)  # (C, O, *k)
        back = tuple((s - a, s - b) for s, (a, b) in zip(spans, pads))
        gx = _correlate(g, flipped.contiguous(), back, dilation)
    if weight.requires_grad:
        padded = x.pad(pads)
        if any(a or b for a, b in pads):
            padded = padded.contiguous()
        cols = _unfold(padded, kernel, (1,) * n, dilation)  # (N, C, *o, *k)
        cols = cols.reshape(N, 1, C, *outs, *kernel)
        gg = g.reshape(N, O, 1, *outs, *([1] * n))
        gw = (gg * cols).sum((0, *range(3, 3 + n)))
    return gx, gw


class _ConvNd(Module):
    n = 0

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        dtype=None,
    ):
        name = type(self).__name__
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise ValueError(
                f"{name}: in_channels={in_channels} and out_channels={out_channels} must "
                f"both be divisible by groups={groups}"
            )
        kernel = _tuple(kernel_size, self.n, "kernel_size")
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        fan_in = in_channels // groups * math.prod(kernel)
        bound = 1 / math.sqrt(fan_in) if fan_in else 0.0
        dt = dtype or dtypes.float32
        self.weight = _uniform_param((out_channels, in_channels // groups, *kernel), bound, dt)
        self.bias = _uniform_param((out_channels,), bound, dt) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return conv(
            x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups
        )


class Conv1d(_ConvNd):
    """x (N, C, L) -> (N, O, L'); weight (O, C/groups, k), init U(+-1/sqrt(fan_in))."""

    n = 1


class Conv2d(_ConvNd):
    """x (N, C, H, W) -> (N, O, H', W'); weight (O, C/groups, kh, kw)."""

    n = 2


# ---- losses -----------------------------------------------------------------------


def _reduce(loss: Tensor, reduction: str, name: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"{name}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """Squared error, averaged (or summed) over every element."""
    if input.shape != target.shape:
        raise ValueError(
            f"mse_loss: input {input.shape} and target {target.shape} must share a shape"
        )
    return _reduce((input - target).square(), reduction, "mse_loss")


def cross_entropy(
    logits: Tensor, target: Tensor, reduction: str = "mean", ignore_index: int = -100
) -> Tensor:
    """-log softmax(logits)[target] from raw logits and integer class ids.

    logits (N, C) or (N, C, *d) with target (N,) or (N, *d), or logits (C,) with a 0-d
    target, as in torch. log_softmax subtracts the row max before exponentiating, so huge
    logits stay finite. Targets equal to ``ignore_index`` count for nothing, and the mean
    is over the rest.
    """
    if not target.dtype.is_int:
        raise TypeError(f"cross_entropy: target must hold integer class ids, got {target.dtype}")
    class_axis = 0 if logits.ndim == 1 else 1
    expected = logits.shape[:class_axis] + logits.shape[class_axis + 1 :]
    if logits.ndim == 0 or target.shape != expected:
        raise ValueError(
            f"cross_entropy: logits {logits.shape} need target of shape {expected} "
            f"(class dim {class_axis} removed), got {target.shape}"
        )
    order = tuple(a for a in range(logits.ndim) if a != class_axis) + (class_axis,)
    logp = logits.permute(order).log_softmax(-1)  # classes last
    keep = target != ignore_index
    safe = keep.where(target, 0)
    picked = logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    nll = keep.where(-picked, 0.0)
    if reduction == "mean":
        return nll.sum() / keep.sum().cast(nll.dtype)
    return _reduce(nll, reduction, "cross_entropy")
