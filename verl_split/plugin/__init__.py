"""Switching verl-split on in a process: the seam registry and its wrapt hooks (activation), the seam format
and its patch/unpatch (seam), the wrappers (wrapping, args), the preflight, and the detection of verl source
patches. Nothing here imports verl at module level, nor the features of ``runtime/`` (they import this; their
seam tables reach the registry from above, through ``verl_split.seam_catalogue``)."""
