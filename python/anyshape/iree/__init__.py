"""The IREE layer: what IREE is given and how it is run.

- ``flags.py``: compile targets and the IREE options for each.
- ``cpu.py``: the CPU a CPU artifact is for, and whether this host has its features.
- ``dim_facts.py``: the ``anyshape.dims`` argument facts as IREE range assumptions.
- ``parameters.py``: weights in an IREE parameter archive (``params="external"``).
- ``parameter_reads.py``: the parameters a module reads, by scope and key.
- ``workarounds.py``: rewrites of the IR given to IREE that IREE 3.13 needs.
- ``invocation.py``: running ``iree-compile`` and reading its first error.

Nothing is imported here: ``flags.py`` and ``cpu.py`` are read by the
runtime, which runs without the IREE compiler.
"""
