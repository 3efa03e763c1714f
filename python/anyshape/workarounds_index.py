"""Every workaround of an upstream bug, declared in one form.

A module that works around torch.export, torch-mlir or IREE declares it at
module level, in ``WORKAROUNDS``, a tuple of ``Workaround``: the stage it acts
in, the upstream bug or behaviour, the test that guards it (fails when it is
removed, or when upstream changes so that it can go), and when it can go.
``all_workarounds()`` collects them from every module of the package, and
``tools/dev/gen_workarounds_doc.py`` writes ``docs/workarounds.md`` from them
(``test_docs.py`` fails when that page is stale, and when a declared guard
names a test that does not exist). It is the page the next IREE or
torch-mlir upgrade starts from.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil

# Where in the pipeline a workaround acts, in pipeline order.
STAGES = {
    "export": "torch.export and the decomposition table",
    "import": "rewrites and refusals on the exported graph, before torch-mlir imports it",
    "torch-ir": "anyshape passes on the torch dialect",
    "iree-input": "rewrites of what IREE receives",
    "iree-flags": "iree-compile flags",
    "iree-fallback": "compiled again another way when iree-compile fails",
    "generation": "what compile_generator exports and compiles for generate",
    "runtime": "running a compiled module",
}


@dataclasses.dataclass(frozen=True)
class Workaround:
    name: str
    stage: str          # a key of STAGES
    upstream: str       # the component, the bug or behaviour (its message, its issue)
    guard: tuple[str, ...]  # pytest node ids or lit files, from the repository root
    remove_when: str
    where: str = ""     # module (and function) implementing it; filled in by all_workarounds
    unguarded: str = ""  # with no guard: why no test shows the upstream failure

    def __post_init__(self):
        if self.stage not in STAGES:
            raise ValueError(f"workaround {self.name!r}: stage {self.stage!r} is not one of "
                             f"{', '.join(STAGES)}")
        if isinstance(self.guard, str):
            object.__setattr__(self, "guard", (self.guard,))
        if not self.guard and not self.unguarded:
            raise ValueError(f"workaround {self.name!r}: no guard, and no word on why")


def _modules():
    import anyshape
    import anyshape.passes

    for package in (anyshape, anyshape.passes):
        yield package.__name__
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            yield info.name


def all_workarounds() -> list[Workaround]:
    """Every module's ``WORKAROUNDS``, by stage then name, each with ``where`` set."""
    found: dict[str, Workaround] = {}
    for name in sorted(set(_modules())):
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
    order = list(STAGES)
    return sorted(found.values(), key=lambda w: (order.index(w.stage), w.name))
