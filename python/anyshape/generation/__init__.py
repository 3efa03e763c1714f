"""Compiled generation for HF causal LMs and encoder-decoders: ``compile_generator``.

``step`` (the function compiled once: new tokens after a cache, for prefill
and decode), ``causal_lm`` (``compile_generator``: export and compile a
causal LM's step), ``seq2seq`` (an encoder-decoder's ``encode`` and decoder
step), ``model_spec`` (what both record of the model, and the decode
entries). What runs them, HF's ``generate`` contract with the caches kept on
the device, is the runtime's ``Generator`` (``runtime/generator.py``).
"""
