"""limn._inductor.config: torch Inductor's tuning settings, a stand-in. A program may set
and read them back; limn's compiler does not read them (its tiles come from the target's
detected shape, docs/passes.md)."""

from __future__ import annotations

import types

coordinate_descent_tuning = False
max_autotune = False
fx_graph_cache = False
triton = types.SimpleNamespace(cudagraphs=False, unique_kernel_names=False)
