"""torch's questions about a tensor: what kind of numbers it holds, where, and how.

``Facts`` is a mixin of ``limn.Tensor``; each answer reads the tensor's dtype,
device or node and computes nothing. limn has dense real tensors only, so the sparse,
complex, quantized and meta questions answer False (what torch answers for a dense real
CPU tensor), and programs that test for them (torch's own LBFGS asks ``is_sparse``) take
the dense path.
"""

from __future__ import annotations

from ir.graph import dtypes
from ir.graph.ops import Op


class Facts:
    def is_floating_point(self) -> bool:
        return self.dtype.is_float

    def is_complex(self) -> bool:
        """False: limn has no complex dtype."""
        return False

    def is_signed(self) -> bool:
        return self.dtype.is_float or self.dtype.is_int and dtypes.min_value(self.dtype) < 0

    def element_size(self) -> int:
        return dtypes.to_numpy(self.dtype).itemsize

    def is_contiguous(self, memory_format=None) -> bool:
        """False for a view whose elements are not in row-major order over its source
        (a transpose, a step); every computed value is laid out contiguously."""
        node = self.node
        return node.op is not Op.VIEW or node.arg.is_contiguous

    def get_device(self) -> int:
        """torch's index: -1 on the host, 0 on the GPU."""
        return 0 if self.is_cuda else -1

    @property
    def is_cuda(self) -> bool:
        return self.device == "cuda"

    @property
    def is_cpu(self) -> bool:
        return self.device != "cuda"

    is_sparse = is_quantized = is_meta = is_mkldnn = is_nested = False
