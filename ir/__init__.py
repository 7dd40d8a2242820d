"""The limn compiler: staged dataclass IRs and pure passes between them.

Stage 1 (this package's ``dtypes``, ``ops``, ``view``, ``graph``, ``compose``) is the op
graph both frontends build. ``ir`` imports nothing from ``limn`` or ``limn_array``.
"""
