"""limn.utils: torch.utils's data loading (``limn.utils.data``)."""

from limn.utils import data  # noqa: F401
