"""Stage 3, the loop nest: one kernel as a flat stream of instructions over explicit indices.

``nest`` is the IR and its text, ``rewrite`` the tools a pass uses on it (and ``verify``),
``lower`` makes it from a stage-2 kernel, ``passes`` holds the default rewrites, and
``interp`` runs a nest instruction by instruction: the oracle every backend answers to.
"""
