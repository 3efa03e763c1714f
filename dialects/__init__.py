"""The ``anyshape`` dialect: ops that state shape facts the torch dialect leaves implicit.

Defined in Python through the upstream bindings' IRDL-backed ``dialects.ext``;
its ops therefore print in generic form (``"anyshape.op"(...)``). The ops
themselves arrive with the shape passes; every context anyshape creates loads
the dialect so that IR holding them parses anywhere in the tool chain.
"""

from anyshape.mlir import ext, ir


class AnyshapeDialect(ext.Dialect, name="anyshape"):
    pass


def load_anyshape_dialect() -> None:
    """Load the dialect into the current context (a no-op if it is already there)."""
    if ir.Context.current.is_dialect_loaded(AnyshapeDialect.DIALECT_NAMESPACE):
        return
    AnyshapeDialect.load()
