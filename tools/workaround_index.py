"""Every workaround of an upstream bug the package declares (``WORKAROUNDS`` of
``anyshape.stages.Workaround`` in each module), collected by importing every
module: for ``tools/dev/gen_workarounds_doc.py`` and ``test_docs.py``. A tool,
not a library module: nothing in the package imports it, so importing every
module from here closes no import cycle.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil

from anyshape.stages import WORKAROUND_STAGES, Workaround


def modules():
    """The names of every module of ``anyshape`` and ``anyshape.passes``."""
    import anyshape
    import anyshape.passes

    for package in (anyshape, anyshape.passes):
        yield package.__name__
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            yield info.name


def all_workarounds() -> list[Workaround]:
    """Every module's ``WORKAROUNDS``, by stage then name, each with ``where`` set."""
    found: dict[str, Workaround] = {}
    for name in sorted(set(modules())):
        if name.endswith("__main__"):
            continue
        module = importlib.import_module(name)
        for workaround in getattr(module, "WORKAROUNDS", ()):
            where = workaround.where or name
            if not where.startswith(name):
                where = f"{name}.{where}"
            if workaround.name in found:
                raise ValueError(f"workaround {workaround.name!r} declared twice "
                                 f"({found[workaround.name].where}, {where})")
            found[workaround.name] = dataclasses.replace(workaround, where=where)
    order = list(WORKAROUND_STAGES)
    return sorted(found.values(), key=lambda w: (order.index(w.stage), w.name))
