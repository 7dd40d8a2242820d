"""Stage 2, the kernel graph: which op-graph nodes fuse into one kernel, and the buffers
each kernel reads and writes. ``schedule`` makes it from stage 1; ``kernel`` says what it is.
"""
