"""Making tensors: from data, constants, ranges and random draws, on a named device.

``Creation`` is a mixin of ``limn.Tensor`` (its methods are classmethods, so they make
Tensors without importing the class). Data becomes a BUFFER with torch's default dtypes
(Python floats float32, ints int64); constants are CONST nodes, lazy until used; random
numbers are drawn on the host by one numpy generator (``set_seed``), so a seed gives the
same numbers on every device. A device is checked where a tensor is made (``device=``):
an unknown name fails there, naming the accepted ones, and ``"cpu"`` is the c device
where a C compiler works, else the numpy reference (``limn.runtime.device.resolve``).
torch's free makers that need the class itself (``linspace``, ``empty_strided``,
``tril_indices`` ...) are in ``limn/ops/creation.py``.
"""

from __future__ import annotations

import math

import numpy as np

from ir.graph import compose, dtypes
from ir.graph.build import Spelled
from ir.graph.dtypes import DType, as_dtype
from ir.graph.node import Node
from ir.graph.ops import Op
from limn.ops.arguments import _shape_arg
from limn.ops.inplace import write_result
from limn.runtime import profile
from limn.runtime.device import Buffer, current_device, device_names, installed, resolve

_rng = [np.random.default_rng(0)]


def set_seed(seed: int) -> None:
    """Seed the generator behind rand, randn, randint and dropout."""
    _rng[0] = np.random.default_rng(seed)


class Generator:
    """torch's ``Generator``: a stream of random numbers of its own, for a draw that must
    not depend on (nor move) the global one: ``g = limn.Generator().manual_seed(42)``,
    then ``limn.randn(3, generator=g)``, ``nn.init.normal_(w, generator=g)``,
    ``DataLoader(generator=g)``. The same seed gives the same draws on every device; not
    the numbers torch draws (its generator is another algorithm). A new one is seeded
    from the global generator, as torch's take a fixed default seed."""

    def __init__(self, device="cpu"):
        self.device = device
        self.manual_seed(int(_rng[0].integers(2**63)))

    def manual_seed(self, seed: int) -> Generator:
        if not isinstance(seed, int | np.integer) or isinstance(seed, bool):
            raise TypeError(f"Generator.manual_seed: needs an int seed, got {seed!r}")
        self._seed = int(seed)
        self._rng = np.random.default_rng(self._seed)
        return self

    def initial_seed(self) -> int:
        return self._seed

    def seed(self) -> int:
        """A fresh seed from the operating system, set and returned."""
        self.manual_seed(int(np.random.SeedSequence().entropy % 2**63))
        return self._seed

    def permutation(self, n: int) -> np.ndarray:
        return self._rng.permutation(n)


def _draws(generator: Generator | None, op: str) -> np.random.Generator:
    """The numpy generator a draw takes its numbers from: ``generator``'s, else the
    global one (``set_seed``)."""
    if generator is None:
        return _rng[0]
    if not isinstance(generator, Generator):
        raise TypeError(f"{op}: generator must be a limn.Generator, got {type(generator).__name__}")
    return generator._rng


def _as_array(data) -> np.ndarray:
    """np.asarray, with a Tensor-level message when nested lists do not form a box."""
    try:
        return np.asarray(data)
    except ValueError:
        where = _ragged_at(data, 0)
        if where is None:
            raise
        depth, a, b = where
        a, b = (f"length {n}" if n is not None else "a scalar" for n in (a, b))
        raise ValueError(
            f"Tensor: nested data is ragged: items at depth {depth} have {a} and {b}; "
            "accepted: nested lists or tuples with equal lengths at every depth"
        ) from None


def _ragged_at(data, depth: int):
    """(depth, length, length) of the first siblings whose lengths differ (None for a
    scalar), or None if the data is a box."""
    if not isinstance(data, list | tuple) or not data:
        return None
    lengths = [len(d) if isinstance(d, list | tuple) else None for d in data]
    for n in lengths[1:]:
        if n != lengths[0]:
            return depth + 1, lengths[0], n
    for d in data:
        found = _ragged_at(d, depth + 1)
        if found is not None:
            return found
    return None


def _counted(like, n: int, dtype, row: int = 64):
    """0 .. n-1 as ``compose.arange``'s, a long run as rows of ``row``: the c device cuts a
    loop at each of compose.arange's bits, and past a dozen bits the cut copies multiply
    (``arange(10000)`` took minutes to compile)."""
    if n <= row:
        return compose.arange(like, n, dtype)
    rows = -(-n // row)
    high = _counted(like, rows, dtype).p_mul(like.p_const(row, shape=(rows,), dtype=dtype))
    low = compose.arange(like, row, dtype).p_reshape((1, row)).p_expand((rows, row))
    grid = high.p_reshape((rows, 1)).p_expand((rows, row)).p_add(low)
    return grid.p_reshape((rows * row,)).p_shrink(((0, n),))


def device_name(name=None, op: str = "device") -> str:
    """The device a tensor made with ``device=name`` lives on (the default for None): a
    registered name, ``"cpu"`` resolved, torch's ``"cuda:0"`` as ``"cuda"``; an unknown
    name raises here, naming ``op`` and the accepted names."""
    if name is None:
        return current_device()
    name = str(name).split(":")[0]
    if name not in device_names() and name != "cpu" and not installed(name):
        raise ValueError(
            f"{op}: unknown device {name!r}; accepted: {', '.join(device_names())} and "
            "'cpu' (c where a C compiler works, else numpy)"
        )
    return resolve(name)


class device(str):  # noqa: N801  (torch's spelling)
    """torch's ``device("cpu")``, ``device("cuda", 0)``: the limn device name a tensor
    made with it lives on (so ``t.device == device("cpu")`` holds, and it goes wherever a
    name goes), shown in torch's spelling: ``cpu``, ``device(type='cpu')``; ``type`` and
    ``index`` as torch's."""

    def __new__(cls, type, index: int | None = None):  # noqa: A002  (torch's name)
        if isinstance(type, device):
            return type
        given = str(type) if index is None else f"{type}:{index}"
        self = super().__new__(cls, device_name(given, "device"))
        kind, _, at = given.partition(":")
        self.type, self.index = kind, int(at) if at else None
        return self

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        at = "" if self.index is None else f", index={self.index}"
        return f"device(type={self.type!r}{at})"

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


def _infer_dtype(data) -> DType:
    arr = _as_array(data)
    if arr.dtype == np.float64 and not isinstance(data, np.ndarray | np.generic):
        return dtypes.float32  # Python floats become float32, as in torch
    if arr.dtype.kind in "iu" and not isinstance(data, np.ndarray | np.generic):
        return dtypes.int64
    return as_dtype(arr.dtype)


class Creation:
    @classmethod
    def full(cls, shape, value, dtype=None, device=None, requires_grad=False):
        shape = _shape_arg((shape,))
        d = as_dtype(dtype) if dtype is not None else _infer_dtype(value)
        value = dtypes.python_type(d)(value)
        if d.is_int and not dtypes.min_value(d) <= value <= dtypes.max_value(d):
            raise ValueError(
                f"full: {value} is out of range for {d}; accepted: "
                f"{dtypes.min_value(d)}..{dtypes.max_value(d)}"
            )
        node = Node(Op.CONST, d, shape, (), value)
        t = cls._make(node, device_name(device, "Tensor"))
        return t.clone().realize().requires_grad_(requires_grad) if requires_grad else t

    @classmethod
    def zeros(cls, *shape, dtype=dtypes.float32, device=None, requires_grad=False):
        """``zeros(2, 3)`` or ``zeros((2, 3))``, as in torch."""
        return cls.full(_shape_arg(shape), 0, dtype, device, requires_grad)

    @classmethod
    def ones(cls, *shape, dtype=dtypes.float32, device=None, requires_grad=False):
        return cls.full(_shape_arg(shape), 1, dtype, device, requires_grad)

    def zeros_like(self, dtype=None, device=None, requires_grad=False, **_):
        return self.full_like(0, dtype, device, requires_grad)

    def ones_like(self, dtype=None, device=None, requires_grad=False, **_):
        return self.full_like(1, dtype, device, requires_grad)

    def full_like(self, value, dtype=None, device=None, requires_grad=False, **_):
        """torch's ``*_like``: this shape, and this dtype and device unless given
        (``memory_format`` and ``layout`` are accepted: limn has one of each)."""
        device = self.device if device is None else device
        return self.full(self.shape, value, dtype or self.dtype, device, requires_grad)

    def empty_like(self, dtype=None, device=None, requires_grad=False, **_):
        """Zeros: limn never hands out uninitialized memory."""
        return self.full_like(0, dtype, device, requires_grad)

    def randn_like(self, dtype=None, device=None, requires_grad=False, **_):
        return self.randn(self.shape, dtype=dtype or self.dtype, device=device or self.device,
                          requires_grad=requires_grad)  # fmt: skip

    def rand_like(self, dtype=None, device=None, requires_grad=False, **_):
        return self.rand(self.shape, dtype=dtype or self.dtype, device=device or self.device,
                         requires_grad=requires_grad)  # fmt: skip

    def randint_like(self, low, high=None, dtype=None, device=None, **_):
        return self.randint(low, high, self.shape, dtype or self.dtype, device or self.device)

    def new_full(self, size, fill_value, dtype=None, device=None, requires_grad=False, **_):
        """torch's ``new_*``: this dtype and device unless given."""
        return self.full(_shape_arg((size,)), fill_value, dtype or self.dtype,
                         device or self.device, requires_grad)  # fmt: skip

    def new_zeros(self, *size, dtype=None, device=None, requires_grad=False, **_):
        return self.new_full(_shape_arg(size), 0, dtype, device, requires_grad)

    def new_ones(self, *size, dtype=None, device=None, requires_grad=False, **_):
        return self.new_full(_shape_arg(size), 1, dtype, device, requires_grad)

    new_empty = new_zeros

    def new_tensor(self, data, dtype=None, device=None, requires_grad=False):
        return type(self)(data, dtype or self.dtype, requires_grad, device or self.device)

    def bernoulli(self, p=None, *, generator=None):
        """1 with probability ``p`` (this tensor's values if none), else 0."""
        prob = self if p is None else self.full_like(p, dtypes.float64)
        if not prob.dtype.is_float:
            raise TypeError(f"bernoulli: needs float probabilities, got {prob.dtype}")
        u = self._lift(_draws(generator, "bernoulli").random(self.shape))
        return (u < prob).cast(self.dtype)

    @classmethod
    def arange(cls, start=0, stop=None, step=1, dtype=None, device=None, *, end=None, out=None,
               **_):  # fmt: skip
        if out is not None:
            raise TypeError("arange: out= is not supported (limn writes no given tensor); use "
                            "the result")  # fmt: skip
        stop = end if end is not None else stop
        if stop is None:
            start, stop = 0, start
        if dtype is not None and as_dtype(dtype).is_int:  # torch's: each cast to the dtype
            start, stop, step = int(start), int(stop), int(step)
        if step == 0:
            raise ValueError("arange: step must not be zero")
        if (stop - start) * step < 0:
            raise ValueError(f"arange: step {step} leads away from {start} toward {stop}")
        n = max(0, math.ceil((stop - start) / step))
        is_int = all(isinstance(v, int) for v in (start, stop, step))
        d = as_dtype(dtype) if dtype is not None else (dtypes.int64 if is_int else dtypes.float32)
        # built on bare nodes: its dozens of intermediates are no program's tensors
        count = dtypes.int64 if d.is_int else dtypes.float64  # the dtype it counts in
        steps = _counted(Spelled(Node(Op.CONST, d, (), (), 0)), n, count)
        idx = cls._make(steps.node, device_name(device, "Tensor"))
        if step != 1:
            idx = idx * step
        if start != 0 or step != 1:  # torch's start + i * step: 0.0 + -0.0 is 0.0
            idx = idx + start
        return idx.p_cast(d)

    @classmethod
    def eye(cls, n: int, m: int | None = None, dtype=None, device=None, requires_grad=False):
        m = n if m is None else m
        if n < 0 or m < 0:
            raise ValueError(f"eye: sizes must be non-negative, got {n} and {m}")
        i = cls.arange(n, device=device).reshape(n, 1).expand(n, m)
        j = cls.arange(m, device=device).reshape(1, m).expand(n, m)
        out = (i == j).cast(dtype or dtypes.float32)
        return out.clone().realize().requires_grad_() if requires_grad else out

    @classmethod
    def rand(cls, *shape, generator=None, dtype=dtypes.float32, requires_grad=False,
             device=None):  # fmt: skip
        data = _draws(generator, "rand").random(_shape_arg(shape))
        return cls(data, dtype=dtype, requires_grad=requires_grad, device=device)

    @classmethod
    def randn(cls, *shape, generator=None, dtype=dtypes.float32, requires_grad=False,
              device=None):  # fmt: skip
        data = _draws(generator, "randn").standard_normal(_shape_arg(shape))
        return cls(data, dtype=dtype, requires_grad=requires_grad, device=device)

    @classmethod
    def uniform(
        cls, shape, low=0.0, high=1.0, dtype=dtypes.float32, requires_grad=False, device=None,
        generator=None,
    ):  # fmt: skip
        data = _draws(generator, "uniform").uniform(low, high, _shape_arg((shape,)))
        return cls(data, dtype=dtype, requires_grad=requires_grad, device=device)

    @classmethod
    def randint(cls, low, high=None, size=None, dtype=dtypes.int64, device=None, *,
                generator=None):  # fmt: skip
        """Integers in [low, high); torch's ``randint(high, size)`` form too."""
        if size is None:
            low, high, size = 0, low, high
        data = _draws(generator, "randint").integers(low, high, _shape_arg((size,)))
        return cls(data, dtype=dtype, device=device)

    @classmethod
    def randperm(cls, n: int, dtype=dtypes.int64, device=None, *, generator=None):
        return cls(_draws(generator, "randperm").permutation(n), dtype=dtype, device=device)

    @classmethod
    def from_numpy(cls, array: np.ndarray):
        """torch's ``from_numpy``: the Tensor's buffer is ``array`` itself, so a write
        through either shows in the other at once: a write through the Tensor (or a view
        of it) is computed when made, into the array (a value built before it keeps the
        old bytes, in a copy). A lazy value built from the Tensor reads the array when it
        is computed, so a write into the array before then is seen by it.

        A strided array (a slice, a transpose: not C-contiguous) shares its memory too:
        the buffer is the span of memory it covers, and the Tensor a view of that span
        (``_strided``), as torch's tensor takes the array's strides."""
        if not isinstance(array, np.ndarray):
            raise TypeError(f"from_numpy: needs a numpy array, got {type(array).__name__}")
        if not array.flags.c_contiguous and array.size:
            return _strided(cls, array)
        array = array if array.flags.c_contiguous else np.ascontiguousarray(array)
        d = as_dtype(array.dtype)
        node = Node(Op.BUFFER, d, array.shape, (), Buffer(d, array.shape, array))
        t = cls._make(node, device_name(None, "from_numpy"))
        st = t._storage()
        st.shared = st.pinned = True
        return t

    def one_hot(self, num_classes: int = -1, dtype=dtypes.int64):
        """torch's: int64, and ``num_classes=-1`` reads the largest index (+1) from the data."""
        if not self.dtype.is_int:
            raise TypeError(f"one_hot: needs integer class indices, got {self.dtype}")
        if num_classes == -1:
            num_classes = int(self.max().item()) + 1 if self.numel() else 0
        if num_classes < 0 or self.numel() and num_classes == 0:
            raise ValueError(f"one_hot: num_classes must be positive, got {num_classes}")
        # rows of the identity, gathered: a class outside 0..num_classes-1 is refused by the
        # gather's bounds check where the value is computed, naming one_hot (as torch raises)
        n, eye = self.numel(), self.eye(num_classes, dtype=as_dtype(dtype), device=self.device)
        ids = self.reshape(n, 1).expand(n, num_classes)
        return profile.name_gather(eye.gather(0, ids), "one_hot").reshape(*self.shape, num_classes)

    def dropout(self, p: float = 0.5, training: bool = True):
        """Zero each element with probability p and scale the rest by 1/(1-p)."""
        if not 0 <= p <= 1:
            raise ValueError(f"dropout: p must be in [0, 1], got {p}")
        if not training or p == 0:
            return self
        if p == 1:
            return self * 0
        keep = self._lift(_rng[0].random(self.shape) >= p)
        return keep.where(self * (1 / (1 - p)), 0.0)

    def uniform_(self, a: float = 0.0, b: float = 1.0, *, generator=None):
        draw = self.uniform(self.shape, a, b, self.dtype, device=self.device)
        return write_result(self, "uniform_", lambda _: draw, cast=False)

    def normal_(self, mean: float = 0.0, std: float = 1.0, *, generator=None):
        if std < 0:
            raise ValueError(f"normal_: std must be >= 0, got {std}")
        draw = self.randn(self.shape, dtype=self.dtype, device=self.device) * std + mean
        return write_result(self, "normal_", lambda _: draw.cast(self.dtype), cast=False)

    def cauchy_(self, median: float = 0.0, sigma: float = 1.0, *, generator=None):
        """Cauchy draws: median + sigma tan(pi (u - 1/2)) for u uniform in [0, 1)."""
        if not sigma > 0:
            raise ValueError(f"cauchy_: sigma must be > 0, got {sigma}")
        return self._draw_by_inverse(
            "cauchy_", lambda u: median + sigma * ((u - 0.5) * math.pi).tan()
        )

    def exponential_(self, lambd: float = 1.0, *, generator=None):
        if not lambd > 0:
            raise ValueError(f"exponential_: lambd must be > 0, got {lambd}")
        return self._draw_by_inverse("exponential_", lambda u: -(1 - u).log() / lambd)

    def geometric_(self, p: float, *, generator=None):
        """The number of Bernoulli(p) trials up to the first success (1, 2, ...)."""
        if not 0 < p < 1:
            raise ValueError(f"geometric_: p must be in (0, 1), got {p}")
        return self._draw_by_inverse(
            "geometric_", lambda u: ((1 - u).log() / math.log1p(-p)).ceil().clamp(min=1)
        )

    def log_normal_(self, mean: float = 1.0, std: float = 2.0, *, generator=None):
        if not std > 0:
            raise ValueError(f"log_normal_: std must be > 0, got {std}")
        draw = self.randn(self.shape, dtype=dtypes.float64, device=self.device) * std + mean
        return write_result(self, "log_normal_", lambda _: draw.exp().cast(self.dtype), cast=False)

    def _draw_by_inverse(self, name: str, inverse_cdf):
        """The write of ``inverse_cdf`` of uniform draws, computed in float64."""
        u = self.uniform(self.shape, 0.0, 1.0, dtypes.float64, device=self.device)
        return write_result(self, name, lambda _: inverse_cdf(u).cast(self.dtype), cast=False)


def _strided(cls, array: np.ndarray):
    """``array`` as a view of the memory it spans: each dim (largest stride first) a
    window over that span (``p_window``: out[i, j] = span[i * stride + j]), then the one
    position left; a dim read backwards is a negative step (a view, where ``flip`` copies),
    one of stride 0 expanded."""
    size = array.itemsize
    if any(s % size for s in array.strides):
        raise ValueError(
            f"from_numpy: strides {array.strides} are not multiples of the item size {size}; "
            "copy it with limn.tensor(a)"
        )
    backwards = tuple(i for i, s in enumerate(array.strides) if s < 0)
    forward = np.flip(array, backwards) if backwards else array
    steps = [s // size for s in forward.strides]
    dims = sorted((i for i, n in enumerate(array.shape) if n > 1 and steps[i]),
                  key=lambda i: -steps[i])  # fmt: skip
    span = 1 + sum((array.shape[i] - 1) * steps[i] for i in dims)
    memory = np.lib.stride_tricks.as_strided(forward, (span,), (size,))
    x = cls.from_numpy(memory)
    for i in dims:
        x = x.p_window(x.ndim - 1, x.shape[-1] - (array.shape[i] - 1) * steps[i], steps[i])
    x = x[..., 0].permute(*sorted(range(len(dims)), key=lambda k: dims[k]))
    x = x.reshape(tuple(n if i in dims else 1 for i, n in enumerate(array.shape)))
    x = x.expand(*array.shape)
    return x[tuple(slice(None, None, -1 if i in backwards else 1) for i in range(x.ndim))]


def multinomial(probs, num_samples: int = 1, replacement: bool = False, *, generator=None):
    """Indices drawn by the weights along the last dim, by inverting the running total:
    for u ~ U(0, total), the index is how many running totals are <= u. Draws are
    independent (with replacement), so more than one needs ``replacement=True``."""
    if probs.ndim not in (1, 2) or not probs.dtype.is_float:
        raise ValueError(
            f"multinomial: needs a 1-d or 2-d float tensor of weights, got "
            f"{probs.dtype}{list(probs.shape)}"
        )
    if num_samples < 1:
        raise ValueError(f"multinomial: num_samples must be positive, got {num_samples}")
    if probs.shape[-1] > 2**24:
        raise ValueError(f"multinomial: {probs.shape[-1]} categories; at most 2**24")
    w = probs.float().numpy()  # torch refuses weights that are no distribution: read them
    if not np.isfinite(w).all() or (w < 0).any() or (w.sum(-1) <= 0).any():
        raise ValueError(
            "multinomial: the weights must be finite and >= 0, with a positive sum in each "
            "row (an inf, nan, negative or all-zero row is no distribution)"
        )
    rng = _draws(generator, "multinomial")
    if num_samples > 1 and not replacement:
        if num_samples > probs.shape[-1]:
            raise ValueError(
                f"multinomial: cannot draw {num_samples} of {probs.shape[-1]} categories "
                "without replacement"
            )
        # the k largest of log(w) + Gumbel noise: draws without replacement, each in
        # proportion to the weights that are left (the Gumbel-top-k trick)
        g = -np.log(-np.log(rng.random(probs.shape).clip(1e-300, None)))
        keys = probs.float().log() + probs._lift(g.astype(np.float32))
        return keys.topk(num_samples, -1).indices
    cdf = probs.float().cumsum(-1)
    u = probs._lift(rng.random(probs.shape[:-1] + (num_samples,)))
    u = u * cdf[..., -1:]
    return (cdf.unsqueeze(-2) <= u.unsqueeze(-1)).sum(-1).minimum(probs.shape[-1] - 1)
