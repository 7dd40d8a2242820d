"""limn.cuda.amp: torch's older spelling of ``limn.amp`` (no-ops that say so)."""

from limn.amp import GradScaler, autocast  # noqa: F401
