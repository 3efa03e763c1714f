"""The ``anyshape-canonicalize-shapes`` pass (``pass_.py``: its driver, dim
rooting and dynamic iotas) and the rewrites it runs from its helpers:
``structural_reshapes.py`` (views by structure), ``iota_lookups.py`` (lookups
indexed by an iota as slices) and ``broadcasts.py`` (size-list broadcasts over
the rooted dims). Importing this package registers nothing; the registry
imports ``pass_`` on first use."""
