"""limn: a deep learning framework built to be read.

``from limn import Tensor`` is the training frontend: lazy tensors with autograd over the
op graph in ``ir/``, with ``limn.nn`` and ``limn.optim`` beside it. ``limn.array_namespace()``
is the Python Array API frontend.

The namespace also answers in torch's names, so a torch script ports by its imports
(docs/torch.md): ``limn.tensor``, the dtype names (``limn.long``, ``limn.float``, ...),
``limn.manual_seed``, ``limn.cuda.is_available()``, ``limn.device``, and every Tensor
method as a function (``limn.zeros(2, 3)``, ``limn.cat(xs, dim=1)``, ``limn.softmax(x,
dim=-1)``, ``limn.tril(m)``), found on ``Tensor`` when asked (``__getattr__`` below).
"""

import inspect
import os

import numpy as np

from ir import printer
from ir.graph.dtypes import (
    bfloat16,
    bool_,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
)
from ir.graph.node import format_graph
from limn import (  # noqa: F401  (_inductor: torch's path)
    _inductor,
    accelerator,
    amp,
    autograd,
    backends,
    cuda,
    distributed,
    fft,
    masked,
    missing,
    nn,
    onnx,
    optim,
    serialize,
    signal,
    special,
    utils,
    version,
)
from limn.autograd import enable_grad, inference_mode, no_grad, set_grad_enabled
from limn.capture import capture
from limn.creation import Generator, device, multinomial, set_seed
from limn.einsum import einsum
from limn.export import export_c
from limn.generate import generate
from limn.nn.functional_grid import grid_sampler_2d, grid_sampler_3d  # noqa: F401
from limn.ops import (  # noqa: F401  (each sets Tensor's methods of its concept)
    counting,
    decompositions,
    moments,
    order_statistics,
    pairs,
    view_scatter,
)
from limn.ops.counting import histogramdd  # noqa: F401
from limn.ops.creation import (  # noqa: F401  (torch's free functions, by concept)
    empty,
    empty_permuted,
    empty_strided,
    linspace,
    logspace,
    normal,
    scalar_tensor,
    tril_indices,
    triu_indices,
    unravel_index,
)
from limn.ops.joining import (  # noqa: F401
    atleast_1d,
    atleast_2d,
    atleast_3d,
    block_diag,
    cartesian_prod,
    cat,
    column_stack,
    dstack,
    hstack,
    meshgrid,
    row_stack,
    stack,
    vstack,
)
from limn.ops.lapack import lu_unpack  # noqa: F401
from limn.ops.linalg import cross, linalg, tensordot  # noqa: F401
from limn.ops.movement import broadcast_shapes, broadcast_tensors  # noqa: F401
from limn.ops.normalization import (  # noqa: F401
    native_batch_norm,
    native_group_norm,
    native_layer_norm,
)
from limn.ops.pairs import cdist  # noqa: F401  (torch.cdist)
from limn.ops.reductions import gradient  # noqa: F401
from limn.runtime import current_device, get_device, set_device
from limn.runtime import profile as _profile
from limn.runtime import target as _target
from limn.runtime.device import held
from limn.runtime.profile import profile
from limn.special import polygamma  # noqa: F401  (torch.polygamma(n, x): n first)
from limn.tensor import Tensor, realize, where
from limn.viewer import viz

if os.environ.get("LIMN_VIZ"):  # record every graph the program realizes into one page
    from limn.viewer import record

    record(os.environ["LIMN_VIZ"])


def ir(x, stage: str = "loop", passes=None) -> str:
    """What realizing ``x`` runs, at ``stage``. On a device that prints its plans (the c
    device: "kernel", "loop" and "c"), the plan that device runs for ``x``, built now if
    it has none: its passes, its held values, its units. Elsewhere, or
    with other ``passes``, ``ir.printer.ir`` as the runtime stands now: a value it holds
    (a result read earlier, or one a device kept on the way) is an input there too."""
    first = x[0] if isinstance(x, list | tuple) and x else x
    where = getattr(first, "device", None)  # a name, or an Array API Device (its .name)
    dev = get_device(getattr(where, "name", where))
    if passes is None and stage in getattr(dev, "stages", ()):
        return dev.ir(printer._roots(x), stage)
    target = _target.detect() if stage == "c" else None  # the CPU the c device compiles for
    return printer.ir(x, stage, passes, held, target)


def array_namespace():
    """The Python Array API namespace over limn (the ``limn_array`` package)."""
    import limn_array

    return limn_array


_profile.from_env()  # LIMN_PROFILE=1: time every kernel, print the table at exit


def _one_thread_in_a_forked_child() -> None:
    """libgomp's thread team does not survive ``fork()``: a child (Python's
    ``multiprocessing`` forks by default, and so does a DataLoader of other libraries)
    that enters a parallel region after its parent ran one waits forever for threads it
    does not have. So a forked child runs the c device's kernels on one thread, which
    gives the same bits (no fold's order depends on the thread count)."""
    from limn.runtime.device import _devices

    for dev in list(_devices.values()):
        if hasattr(dev, "set_threads"):
            dev.set_threads(1)


os.register_at_fork(after_in_child=_one_thread_in_a_forked_child)

# ---- torch's names --------------------------------------------------------------------

tensor, manual_seed, save, load = Tensor, set_seed, serialize.save, serialize.load
__version__ = version.__version__
long, int, float, double, half, bool = int64, int32, float32, float64, float16, bool_  # noqa: A001
Size = tuple  # a limn shape is a plain tuple
# torch's memory formats: limn has one layout, so each is accepted and means it
preserve_format, contiguous_format, channels_last = "preserve_format", "contiguous", "channels_last"
byte, char, short = uint8, int8, int16


def is_tensor(x):
    return isinstance(x, Tensor)


def get_default_dtype():
    """float32, what Python floats make; limn has no switch to change it."""
    return float32


def allclose(a, b, rtol=1e-5, atol=1e-8, equal_nan=False):
    return np.allclose(np.asarray(a), np.asarray(b), rtol, atol, equal_nan)


def compile(model=None, **options):  # noqa: A001
    """torch.compile's stand-in: ``model`` itself. limn compiles every realize already
    (a plan per graph, cached), so there is nothing to wrap; ``options`` are ignored."""
    return (lambda m: m) if model is None else model


def __getattr__(name: str):
    """``limn.zeros``, ``limn.exp``, ``limn.tril``...: a Tensor method as a function. A
    name limn does not answer raises, saying that torch's name is not in limn, with what
    limn offers instead where ``limn.missing`` knows, or the torch name limn does answer
    that it is nearest to (never one of limn's own modules)."""
    fn = inspect.getattr_static(Tensor, name, None)
    if name.startswith("_") or not isinstance(fn, classmethod) and not inspect.isfunction(fn):
        raise missing.no_such_name("limn", name, _answers())
    return getattr(Tensor, name)


def _answers() -> list[str]:
    """The torch names the namespace answers: its public names that are not limn's own
    internal modules, and Tensor's methods (which ``__getattr__`` hands out)."""
    own = {
        n for n, v in globals().items() if inspect.ismodule(v) and n not in missing.TORCH_MODULES
    }
    names = [n for n in globals() if not n.startswith("_") and n not in own]
    return names + [n for n in dir(Tensor) if not n.startswith("_")]


__all__ = [
    "Generator",
    "Tensor",
    "array_namespace",
    "accelerator",
    "amp",
    "autograd",
    "backends",
    "bfloat16",
    "bool_",
    "capture",
    "cat",
    "compile",
    "cuda",
    "current_device",
    "device",
    "distributed",
    "einsum",
    "enable_grad",
    "export_c",
    "float16",
    "float32",
    "float64",
    "format_graph",
    "generate",
    "get_default_dtype",
    "get_device",
    "inference_mode",
    "int8",
    "int16",
    "int32",
    "int64",
    "ir",
    "is_tensor",
    "multinomial",
    "nn",
    "no_grad",
    "onnx",
    "optim",
    "profile",
    "realize",
    "set_device",
    "set_grad_enabled",
    "set_seed",
    "stack",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "utils",
    "version",
    "viz",
    "where",
]
