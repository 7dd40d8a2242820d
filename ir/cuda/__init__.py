"""Stage 4 for CUDA: loop nests rendered as CUDA C kernels, and the passes that shape them.

A sibling of ``ir/c``: the same nests, other text. ``passes.py`` puts every nest in the
form a GPU wants (the output cells outermost, a reduce folded in a register inside them);
``render.py`` picks a kernel shape per nest and writes the CUDA C that NVRTC compiles.
"""
