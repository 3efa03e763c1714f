"""``anyshape-print-flops`` (``pass_.py``) and the symbolic FLOP counts it
prints (``flops.py``)."""
