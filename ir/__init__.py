"""The limn compiler: staged dataclass IRs and pure passes between them.

One subpackage per stage, each importing only from the stages before it: ``ir.graph``
(1, the op graph both frontends build), ``ir.kernel`` (2, fusion), ``ir.loop`` (3, the loop
nest and its passes), ``ir.c`` (4, C source). ``ir.printer`` prints any of them. ``ir``
imports nothing from ``limn`` or ``limn_array``.
"""

from ir.printer import ir  # noqa: E402  (the printer of every stage: ``from ir import ir``)

__all__ = ["ir"]
