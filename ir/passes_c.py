"""Loop-nest passes that make a nest fast in C. Each is pure and keeps every cell's order.

(Filled in below as the c device grows.)
"""

from __future__ import annotations

C_PASSES: list = []
