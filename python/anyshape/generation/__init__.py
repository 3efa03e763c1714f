"""Compiled generation for HF causal LMs and encoder-decoders: ``compile_generator`` and ``Generator``.

``step`` (the function compiled once: new tokens after a cache, for prefill
and decode), ``seq2seq`` (an encoder-decoder's ``encode`` and decoder step),
``compile`` (export and compile them), ``generator`` (HF's ``generate``
contract on them, with the caches kept on the device).
"""
