"""The ``anyshape-eliminate-padding`` pass (``pass_.py``: token rows gathered
and scattered back) and ``padding_safety.py``, the proof that no real token
reads a padded position. Importing this package registers nothing; the
registry imports ``pass_`` on first use."""
