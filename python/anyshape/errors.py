"""Errors anyshape raises for compile failures."""

from __future__ import annotations


class CompileError(RuntimeError):
    """A compile stage failed.

    ``stage`` names it, ``diagnostic`` is the first error with its source
    location, ``reproducer`` is the saved input of the failing stage and
    ``command`` replays the failure from that file.
    """

    def __init__(self, stage: str, diagnostic: str, reproducer: str | None, command: str | None,
                 details: str = ""):
        self.stage = stage
        self.diagnostic = diagnostic
        self.reproducer = reproducer
        self.command = command
        self.details = details
        lines = [f"stage '{stage}' failed: {diagnostic}"]
        if reproducer:
            lines.append(f"reproducer: {reproducer}")
        if command:
            lines.append(f"replay with: {command}")
        super().__init__("\n".join(lines))


class DataTilingFallback(UserWarning):
    """Automatic data tiling (``data_tiling=None``) was dropped for a module
    because IREE failed to compile it with data tiling; the module was
    compiled without it."""


class PackedWeightsFallback(UserWarning):
    """The encoder that packs a CPU module's weights into its archive
    (``params="external"``, ``runtime/parameter_encoding.py``) could not be
    built or run (IREE failed, or the archive could not hold the weights read
    by name); the module was compiled again without it, and packs them when
    it loads."""


class DimBoundedByConfig(UserWarning):
    """A dim of ``dynamic_shapes`` was given the max the model's config implies
    (its position count), which torch.export needed to export the model
    (``frontend/config_bounds.py``); ``strict_dims=True`` refuses instead."""


class RunError(RuntimeError):
    """A compiled module failed while it ran: the message names the function,
    the inputs' shapes and IREE's own message (``iree_message``)."""

    def __init__(self, message: str, iree_message: str):
        self.iree_message = iree_message
        super().__init__(message)
