"""limn.signal: torch.signal's window functions (``limn.signal.windows``)."""

from limn.signal import windows  # noqa: F401
