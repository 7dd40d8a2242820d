"""torch's OpInfo database as an oracle for limn's torch names (tests/test_opinfo.py).

``torch.testing._internal.common_methods_invocations.op_db`` lists torch's ops, each with a
generator of sample inputs and of inputs torch refuses. For every op whose name limn
answers (``limn_op``), ``check`` runs a sample through torch and through limn, on limn's
current device, and compares:

- a value: ``torch.testing.assert_close`` at torch's default tolerances for the dtype;
- an error: where torch raises, limn must raise too (any exception: the messages differ);
- a random op (one whose torch output changes with the seed): the two distributions, by a
  two-sample Kolmogorov-Smirnov test over many draws, not the values.

An op whose torch ``op`` is a lambda over other names (``lambda t, eq: torch.einsum(eq,
t)``) runs that same lambda with ``torch`` bound to ``limn`` (``_rebind``), so the
argument order it encodes is kept.
"""

from __future__ import annotations

import functools
import math
import types

import mpmath
import numpy as np
import torch

import limn
from ir.graph import dtypes

TORCH_DTYPES = {
    torch.float32: dtypes.float32,
    torch.float64: dtypes.float64,
    torch.float16: dtypes.float16,
    torch.bfloat16: dtypes.bfloat16,
    torch.int64: dtypes.int64,
    torch.int32: dtypes.int32,
    torch.int16: dtypes.int16,
    torch.int8: dtypes.int8,
    torch.uint8: dtypes.uint8,
    torch.bool: dtypes.bool_,
}

# A deliberate difference from torch (docs/torch.md, "Where the OpInfo samples differ"):
# (op name, variant) -> why. A sample of such an op is not compared.
DIFFERENT = {
    ("nn.functional.silu", "complex"): "limn has no complex dtypes",
    ("nn.functional.batch_norm", "without_cudnn"): "cudnn is torch's; the op is covered",
    ("as_strided", "partial_views"): "the sample is a view into a larger storage, which the "
    "samples hand limn as its values alone (no storage to stride into); as_strided on limn's "
    "own views: tests/test_writes_torch.py",
    ("bfloat16", ""): "torch rounds bfloat16 to nearest-even from float32; compared in bfloat16",
}


# Where torch refuses a sample that limn computes (its answer is still checked by value
# elsewhere): (op name, what torch's message says) -> why limn accepts it.
# (op name, what torch's message says) -> why limn accepts it; "*" is any op.
LENIENT = {
    ("*", "must be Tensor, not"): "a Python number is a tensor's operand anywhere in limn",
    ("__rdiv__", "no attribute 'reciprocal'"): "torch's fails on a Python number's missing "
    "method; limn divides",
}

# (op name, dtype) whose samples torch computes less accurately than its own tolerance for
# the dtype, where limn is held to torch's float64 answer (rounded to the dtype) instead.
UPCAST = {
    ("polygamma", "float32"): "torch's float32 zeta is 1e-5 off near the poles (trigamma at "
    "-3.973: 1377.0603 where torch's float64, mpmath and limn give 1377.0506)",
    ("hermite_polynomial_he", "float32"): "torch's float32 recurrence cancels: 1.9562988 "
    "where torch's float64 and limn give 1.9563218",
    ("matrix_exp", "float32"): "torch squares in float32: 3.5e-4 from its own float64 answer "
    "on a 5x5 batch, where limn's float32 is within 6e-8 of it",
}

# Ops whose torch float64 answer is further from the true value than torch's own tolerance
# (bessel_j0 at 5.01 is 3.7e-7 off, its rational fits meeting there): limn is held to
# mpmath's value, rounded to the dtype, where torch's is finite.
EXACT = {
    "special.bessel_j0": lambda v: mpmath.besselj(0, v),
    "special.bessel_y1": lambda v: mpmath.bessely(1, v),
}

# Ops whose torch result is uninitialized memory: limn's is zeros; shapes and dtypes compare.
EMPTY = {"empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided", "empty_permuted"}

# Ops answering (values, indices) whose indices torch leaves open among equal values: an
# index limn picks is checked by what it points at. The dim the op works along, per sample.
TIES = {
    "topk": lambda s: s.args[1] if len(s.args) > 1 else s.kwargs.get("dim", -1),
    "sort": lambda s: s.args[0] if s.args else s.kwargs.get("dim", -1),
    "argsort": lambda s: s.args[0] if s.args else s.kwargs.get("dim", -1),
    "mode": lambda s: s.args[0] if s.args else s.kwargs.get("dim", -1),
    "kthvalue": lambda s: s.args[1] if len(s.args) > 1 else s.kwargs.get("dim", -1),
}


# Ops answering vectors that torch defines only up to sign (docs: "not unique"): a singular
# pair (u_i, v_i) or an eigenvector may be negated, and the columns a full U adds beyond
# the singular values are any orthonormal completion. How each answer is laid out.
SIGNS = {"linalg.svd": "U S Vh", "svd": "U S V", "linalg.eigh": "L V"}


# Ops that pass their first samples but not all of torch's (the slow suite marks them
# expected failures, strictly: fixing one shows). Each is a gap still to close, not a choice.
FULL_GAPS = {}

# (op, dtype) pairs whose samples still fail in that dtype: a gap to close, not a choice.
DTYPE_GAPS: dict[tuple[str, str], str] = {}


@functools.cache
def op_db():
    from torch.testing._internal.common_methods_invocations import op_db

    return op_db


def limn_op(name: str):
    """The limn function answering torch's op ``name`` (``nn.functional.relu`` is
    ``limn.nn.functional.relu``; ``__radd__`` and ``mT`` are the Tensor's), or None."""
    if name.startswith("__"):
        return getattr(limn.Tensor, name, None)
    obj = limn
    for part in name.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:  # a Tensor attribute alone (``mT``), or its in-place form
            if "." in name:  # alone (``cauchy``: Tensor.cauchy_), is torch's too
                return None
            return getattr(limn.Tensor, name, None) or getattr(limn.Tensor, name + "_", None)
    if not callable(obj) or isinstance(obj, dtypes.DType):  # limn.float is a dtype
        obj = getattr(limn.Tensor, name, None) if "." not in name else None
    return obj


def named_ops():
    """The op_db entries limn has a name for, less the deliberate differences."""
    return [o for o in op_db() if limn_op(o.name) is not None]


def op_id(o) -> str:
    return f"{o.name}.{o.variant_test_name}" if o.variant_test_name else o.name


def _is_lambda(fn) -> bool:
    return getattr(fn, "__name__", "") == "<lambda>"


def _rebind(fn):
    """torch's lambda ``fn`` with the names it reads from torch read from limn."""
    glb = dict(fn.__globals__)
    glb["torch"] = limn
    glb["wrapper_set_seed"] = lambda op, *a, **kw: op(*a, **kw)
    return types.FunctionType(fn.__code__, glb, fn.__name__, fn.__defaults__, fn.__closure__)


def runner(o):
    """What runs torch's sample through limn: the op by its name, or torch's lambda."""
    if _is_lambda(o.op):
        return _rebind(o.op)
    return limn_op(o.name)


def to_limn(x):
    if isinstance(x, torch.Tensor):
        return limn.Tensor(x.detach().numpy(), dtype=TORCH_DTYPES[x.dtype])
    if isinstance(x, torch.dtype):
        return TORCH_DTYPES[x]
    if isinstance(x, torch.device):
        return None if x.type == "cpu" else str(x)
    if isinstance(x, torch.memory_format):
        return getattr(limn, str(x).removeprefix("torch."))
    if isinstance(x, torch.nn.PairwiseDistance):  # a sample's distance function
        return limn.nn.PairwiseDistance(x.norm, x.eps, x.keepdim)
    if isinstance(x, list):
        return [to_limn(v) for v in x]
    if isinstance(x, tuple):
        return tuple(to_limn(v) for v in x)
    if isinstance(x, dict):
        return {k: to_limn(v) for k, v in x.items()}
    return x


def _tensors(out) -> list:
    if isinstance(out, list | tuple):
        return [t for o in out for t in _tensors(o)]
    return [out]


def to_torch(out):
    """limn's result as torch's (its values read now); Python numbers stay as they are."""
    if isinstance(out, limn.Tensor):
        a = out.numpy()
        if out.dtype == dtypes.bfloat16:
            return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
        return torch.from_numpy(np.array(a, order="C"))
    if isinstance(out, list | tuple):
        return (
            type(out)(to_torch(v) for v in out)
            if not hasattr(out, "_fields")
            else tuple(to_torch(v) for v in out)
        )
    return out


def _torch_out(o, s):
    torch.manual_seed(0)
    dtype = str(getattr(s.input, "dtype", "")).removeprefix("torch.")
    if (o.name.removeprefix("special."), dtype) in UPCAST:
        out = o(*_float64((s.input, *s.args)), **_float64(s.kwargs))
        return _tensors(out)[0].to(s.input.dtype) if isinstance(out, torch.Tensor) else out
    return o(s.input, *s.args, **s.kwargs)


def _float64(x):
    if isinstance(x, torch.Tensor):
        return x.double() if x.dtype == torch.float32 else x
    if isinstance(x, list | tuple):
        return type(x)(_float64(v) for v in x)
    return {k: _float64(v) for k, v in x.items()} if isinstance(x, dict) else x


def _limn_out(run, s):
    limn.set_seed(0)
    args = to_limn(s.args)
    out = run(to_limn(s.input), *args, **to_limn(s.kwargs))
    ts = [t for t in _tensors(out) if isinstance(t, limn.Tensor)]
    limn.realize(*ts)
    return out


def unseeded(o):
    """torch's op, less the seeding some of its lambdas do (``wrapper_set_seed``)."""
    if not _is_lambda(o.op):
        return o.op
    glb = dict(o.op.__globals__)
    glb["wrapper_set_seed"] = lambda op, *a, **kw: op(*a, **kw)
    fn = o.op
    return types.FunctionType(fn.__code__, glb, fn.__name__, fn.__defaults__, fn.__closure__)


def is_random(o, s) -> bool:
    """Whether torch's output for sample ``s`` depends on the seed."""
    a, b = (_seeded(unseeded(o), s, seed) for seed in (0, 1))
    return any(
        isinstance(x, torch.Tensor) and x.numel() > 0 and not _same(x, y)
        for x, y in zip(_tensors(a), _tensors(b))
    )


def _same(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Equal, a nan equal to a nan (a nan is no sign of a random op)."""
    if not x.is_floating_point():
        return torch.equal(x, y)
    return x.shape == y.shape and bool(((x == y) | (x.isnan() & y.isnan())).all())


def _seeded(fn, s, seed):
    torch.manual_seed(seed)
    out = fn(s.input, *s.args, **s.kwargs)  # a copy: an in-place op returns its input
    return [t.clone() if isinstance(t, torch.Tensor) else t for t in _tensors(out)]


def check(o, s) -> str:
    """Compare op ``o`` on sample ``s``; returns what was checked ("value", "raises",
    "distribution"), raising AssertionError on a difference."""
    try:
        want = _torch_out(o, s)
    except Exception as e:  # torch refuses this sample: so must limn
        return check_refused(o, s, e)
    if o.name in EMPTY:
        return check_distribution(o, s, draws=False)
    if is_random(o, s):
        return check_distribution(o, s)
    got = _limn_out(runner(o), s)
    if o.name in TIES and isinstance(want, tuple | list) and len(want) == 2:
        return check_ties(o, s, want, got)
    if o.name in SIGNS:
        return check_signs(o, s, want, got)
    if o.name in EXACT:
        want = _exact(o, s, want)
    if o.name == "argsort":
        want, got = _argsort_values(o, s, want, got)
    compare(want, got, op_id(o), tolerance(o, s.input.dtype if hasattr(s.input, "dtype") else None))
    return "value"


def _argsort_values(o, s, want, got):
    """argsort's orders as the values they put in place (equal values may swap)."""
    dim = TIES["argsort"](s)
    idx = to_torch(got)
    return s.input.gather(dim, want), limn.Tensor(s.input.gather(dim, idx).numpy())


def check_ties(o, s, want, got) -> str:
    """(values, indices): the values as torch's; limn's indices pick those values."""
    compare(want[0], got[0], op_id(o))
    idx = to_torch(got[1])
    assert idx.dtype == want[1].dtype, f"{op_id(o)}: index dtype {idx.dtype}"
    dim = TIES[o.name](s)
    reduced = s.input.ndim and idx.ndim < s.input.ndim  # a reduction without keepdim (mode)
    idx = idx.unsqueeze(dim) if reduced else idx
    picked = s.input.gather(dim, idx) if s.input.ndim else s.input.expand(idx.shape)
    picked = picked.squeeze(dim) if reduced else picked
    torch.testing.assert_close(picked, want[0], equal_nan=True)
    return "value"


def _exact(o, s, want: torch.Tensor) -> torch.Tensor:
    """mpmath's values in place of torch's finite ones."""
    fn, x = EXACT[o.name], s.input.double().reshape(-1).tolist()
    w = want.double().reshape(-1).tolist()
    vals = [float(fn(v)) if math.isfinite(t) else t for v, t in zip(x, w)]
    return torch.tensor(vals, dtype=torch.float64).reshape(want.shape).to(want.dtype)


def check_signs(o, s, want, got) -> str:
    """Vectors up to sign: limn's values as torch's; each of limn's vectors negated where
    it points against torch's, then compared; a full U's extra columns only orthonormal."""
    name, tol = op_id(o), tolerance(o, s.input.dtype)
    got = [to_torch(g) for g in got]
    if SIGNS[o.name] == "L V":
        compare(want[0], limn.Tensor(got[0].numpy()), name, tol)
        flip = _flips(want[1], got[1])
        compare(want[1], limn.Tensor((got[1] * flip.unsqueeze(-2)).numpy()), name, tol)
        return "value"
    (uw, sw, vw), (ug, sg, vg) = want, got
    compare(sw, limn.Tensor(sg.numpy()), name, tol)
    k = sw.shape[-1]
    flip = _flips(uw[..., :k], ug[..., :k])
    ug, vg = ug.clone(), vg.clone()
    ug[..., :k] *= flip.unsqueeze(-2)
    if SIGNS[o.name] == "U S Vh":
        vg[..., :k, :] *= flip.unsqueeze(-1)
        v_w, v_g, v_full = vw[..., :k, :], vg[..., :k, :], vg.mT
    else:
        vg[..., :k] *= flip.unsqueeze(-2)
        v_w, v_g, v_full = vw[..., :k], vg[..., :k], vg
    compare(uw[..., :k], limn.Tensor(ug[..., :k].numpy()), name, tol)
    compare(v_w, limn.Tensor(v_g.numpy()), name, tol)
    for full in (ug, v_full):  # the completion: any orthonormal columns (zeros without uv)
        if full.numel() and full.any():
            eye = torch.eye(full.shape[-1], dtype=full.dtype).expand(full.mT.shape[:-2] + (-1, -1))
            torch.testing.assert_close(full.mT @ full, eye, msg=f"{name}: not orthonormal")
    return "value"


def _flips(want: torch.Tensor, got: torch.Tensor) -> torch.Tensor:
    """+1 or -1 per column: whether limn's column points with torch's or against it."""
    dots = (want * got).sum(-2)
    return torch.where(dots < 0, -1.0, 1.0).to(got.dtype)


def check_refused(o, s, e: Exception) -> str:
    """Sample ``s`` that torch refused with ``e``: limn refuses it too, or LENIENT says
    why not."""
    if any(n in (o.name, "*") and m in str(e) for n, m in LENIENT):
        return "lenient"
    return check_raises(o, s.input, s.args, s.kwargs)


def check_raises(o, inp, args, kwargs) -> str:
    try:
        _limn_out(runner(o), types.SimpleNamespace(input=inp, args=args, kwargs=kwargs))
    except Exception:
        return "raises"
    raise AssertionError(f"{op_id(o)}: torch raises on this sample, limn does not")


def tolerance(o, dtype) -> dict:
    """torch's tolerances for ``o`` in ``dtype``: the defaults, or the largest of the
    overrides its OpInfo gives any of torch's own tests."""
    from torch.testing._internal.common_device_type import toleranceOverride

    atol = rtol = 0.0
    for info in o.decorators:
        for dec in getattr(info, "decorators", [info]):
            if isinstance(dec, toleranceOverride) and dtype in dec.d:
                atol, rtol = max(atol, dec.d[dtype].atol), max(rtol, dec.d[dtype].rtol)
    return {"atol": atol, "rtol": rtol} if atol or rtol else {}


def compare(want, got, name: str, tol=None) -> None:
    ws, gs = _tensors(want), _tensors(got)
    assert len(ws) == len(gs), f"{name}: torch returns {len(ws)} values, limn {len(gs)}"
    for w, g in zip(ws, gs):
        if not isinstance(w, torch.Tensor):
            if isinstance(g, limn.Tensor):
                g = g.item()
            if isinstance(w, float) and math.isnan(w):
                assert isinstance(g, float) and math.isnan(g), f"{name}: {g} is not nan"
            else:
                assert w == g or abs(w - g) <= 1e-5 + 1.3e-6 * abs(w), f"{name}: {g} != {w}"
            continue
        assert isinstance(g, limn.Tensor), f"{name}: limn returns {type(g).__name__}"
        g = to_torch(g)
        assert tuple(g.shape) == tuple(w.shape), f"{name}: shape {tuple(g.shape)} != {w.shape}"
        assert g.dtype == w.dtype, f"{name}: dtype {g.dtype} != torch's {w.dtype}"
        if tol is None or not w.is_floating_point() or not tol.get("atol"):
            kw = {}
        else:  # torch's default, or its override if looser
            atol, rtol = torch.testing._comparison.default_tolerances(w)[::-1]
            kw = {"atol": max(tol["atol"], atol), "rtol": max(tol["rtol"], rtol)}
        msg = lambda m, n=name: f"{n}: {m}"  # noqa: E731
        torch.testing.assert_close(g, w, equal_nan=True, msg=msg, **kw)


DRAWS = 200

# Random ops drawing once per channel, not per element: how many leading dims of the input
# hold the draws. The test takes one element of each channel (the rest repeat its draw).
CHANNELS = {
    "nn.functional.dropout2d": lambda x: 2 if x.ndim in (3, 4) else 1,
    "nn.functional.dropout3d": lambda x: 2 if x.ndim == 5 else 1,
    "nn.functional.feature_alpha_dropout": lambda x: 2,
}


def check_distribution(o, s, draws: bool = True) -> str:
    """Many draws of torch's and limn's outputs, pooled, by a two-sample KS test; shapes
    and dtypes must match as for a value (and only they, without ``draws``)."""
    from scipy.stats import ks_2samp

    want = _tensors(_torch_out(o, s))
    got = _tensors(_limn_out(runner(o), s))
    assert len(want) == len(got)
    for w, g in zip(want, got):
        assert tuple(g.shape) == tuple(w.shape), f"{op_id(o)}: shape {g.shape} != {w.shape}"
        assert TORCH_DTYPES[w.dtype] == g.dtype, f"{op_id(o)}: dtype {g.dtype} != {w.dtype}"
    if not draws:
        return "shape"
    units = sum(w.numel() for w in want)
    if o.name in CHANNELS:
        units = math.prod(s.input.shape[: CHANNELS[o.name](s.input)])
    n = max(1, DRAWS // max(1, units))
    tw, tg = [], []
    run, fn = runner(o), unseeded(o)
    limn.set_seed(1)
    for _ in range(n):
        # (a copy: a float64 in-place draw's .double() is the input itself, drawn again)
        tw += [t.double().clone() for t in _tensors(fn(s.input, *s.args, **s.kwargs))]
        out = run(to_limn(s.input), *to_limn(s.args), **to_limn(s.kwargs))
        tg += [t for t in _tensors(out)]
    limn.realize(*tg)
    a = np.concatenate([_draws(o, t.numpy(), units) for t in tw])
    b = np.concatenate([_draws(o, t.numpy().astype(np.float64), units) for t in tg])
    if a.size and np.ptp(a) > 0 or b.size and np.ptp(b) > 0:
        p = ks_2samp(a, b).pvalue
        assert p > 1e-4, f"{op_id(o)}: limn's draws differ from torch's (KS p = {p:.2g})"
    return "distribution"


def _draws(o, a: np.ndarray, units: int) -> np.ndarray:
    """The independent draws of one output: every element, or one of each channel."""
    return a.reshape(units, -1)[:, 0] if o.name in CHANNELS and a.size else a.reshape(-1)
