"""Stage 4 for C: loop nests become the C source the c device compiles.

``passes`` are the C-specific nest rewrites (pad-mask splits, tiling, lanes, threads),
``render`` writes one C function per nest, ``tile`` its register-tiled contractions, and
``spell`` the C words for dtypes, literals and indices that both renderers share.
"""
