"""One module per patched verl seam, each with ``patch(module)`` and ``unpatch(module)``.

``verl_split.activation.SEAMS`` lists them with their target modules.
"""
