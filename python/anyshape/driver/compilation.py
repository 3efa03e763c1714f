"""What one ``compile_module`` call compiles with, shared by its stages and its
retries (``compile.py``, ``iree_input.py``)."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Callable, Sequence

from anyshape.iree.flags import Target
from anyshape.runtime.signature import ModuleSignature


@dataclasses.dataclass(frozen=True)
class Compilation:
    """What ``compile_module`` compiles with, the same for each attempt but for
    ``target``'s data tiling. The module and its stage files are not here: each
    attempt has its own, and the module is released before IREE runs."""
    workdir: tempfile.TemporaryDirectory  # holds every attempt's files; kept alive by the result
    signature: ModuleSignature
    target: Target
    pass_names: Sequence[str]
    dump_ir_dir: str | Path | None
    report: Callable[[str], None]
    entry: str
    weights: dict | None  # params="external": resource blob name -> array; None: inline
    # in_place_writes: function name -> the inputs its first results are the new values of
    in_place: dict[str, list[int]] | None = None
    # Every weight's array (resource blob name -> array), where weights are
    # quantized (target.weights); the blobs of the quantized ones join it
    arrays: dict | None = None
    # The weights the module's blobs hold no data for (resource blob name ->
    # array): the iree-input stage attaches them (iree/detached_weights.py)
    detached: dict | None = None
    # The CPU threads the module runs on (None: one per core): its encoder's too
    threads: int | None = None

    def with_data_tiling(self, data_tiling: bool) -> "Compilation":
        return dataclasses.replace(self, target=dataclasses.replace(self.target,
                                                                    data_tiling=data_tiling))
