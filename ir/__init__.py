"""The limn compiler: staged dataclass IRs and pure passes between them.

Stage 1 (this package's ``dtypes``, ``ops``, ``view``, ``graph``, ``compose``) is the op
graph both frontends build. ``ir`` imports nothing from ``limn`` or ``limn_array``.
"""

from ir.printer import ir  # noqa: E402  (the printer of every stage: ``from ir import ir``)

__all__ = ["ir"]
