"""Compiled generation for HF causal LMs: ``compile_generator`` and ``Generator``.

``step`` (the function compiled once: new tokens after a cache, for prefill
and decode), ``compile`` (export and compile it), ``generator`` (HF's
``generate`` contract on it, with the cache kept on the device).
"""
