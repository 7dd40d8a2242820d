"""limn._inductor: a stand-in for torch's compiler package, so ``import
torch._inductor.config as config`` (llm.c, nanoGPT-style scripts) ports by its import.
limn has no Inductor: every realize is compiled by limn's own pipeline (docs/runtime.md),
and ``config``'s settings are kept and change nothing."""

from limn._inductor import config  # noqa: F401
