"""limn: a deep learning framework built to be read.

``from limn import Tensor`` is the training frontend: lazy tensors with autograd over the
op graph in ``ir/``. ``limn.array_namespace()`` is the Python Array API frontend.
"""

import os

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
from ir.printer import ir
from limn.autograd import enable_grad, no_grad
from limn.capture import capture
from limn.export import export_c
from limn.runtime import current_device, get_device, set_device
from limn.runtime import profile as _profile
from limn.runtime.profile import profile
from limn.tensor import Tensor, cat, realize, set_seed, stack, where
from limn.viewer import viz

if os.environ.get("LIMN_VIZ"):  # record every graph the program realizes into one page
    from limn.viewer import record

    record(os.environ["LIMN_VIZ"])


def array_namespace():
    """The Python Array API namespace over limn (the ``limn_array`` package)."""
    import limn_array

    return limn_array


_profile.from_env()  # LIMN_PROFILE=1: time every kernel, print the table at exit


__all__ = [
    "Tensor",
    "array_namespace",
    "bfloat16",
    "bool_",
    "capture",
    "cat",
    "current_device",
    "enable_grad",
    "export_c",
    "float16",
    "float32",
    "float64",
    "format_graph",
    "get_device",
    "int8",
    "int16",
    "int32",
    "int64",
    "ir",
    "no_grad",
    "profile",
    "realize",
    "set_device",
    "set_seed",
    "stack",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "viz",
    "where",
]
