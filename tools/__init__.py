"""Command-line tools: anyshape-opt and anyshape-compile."""
