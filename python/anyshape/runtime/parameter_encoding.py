"""Weights packed once, when they are written, not each time the module loads.

With data tiling, a CPU module packs every weight of a product into its tiles
(and transposes some) when it loads: a copy of all the weights in new memory,
written at load time. IREE's parameter encoder
(``--iree-parameter-encoder-output-file``, iree/invocation.py) moves that work
into a module of its own, the encoder, which IREE's runtime runs over the
weights once to write an archive of the packed weights (scope ``encoded``,
slabs named ``parameter0``, ``parameter1``, ...). The main module then maps
that archive and uses it as it is.

Here is what IREE's ``iree-encode-parameters`` tool does (its wheels do not
ship it), with the weights read from memory or from an archive of them by
name. The encoded archive is of one compile only: its slabs' offsets and tile
layouts are that compile's, and nothing in IREE checks them. It carries the
compile's ``layout`` (the SHA-256 of the main module before IREE built its
code, which the manifest records too; ``LAYOUT_KEY``), and a module refuses
an archive of another layout (``check_archive``).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

ENCODER = "encoder.vmfb"
ENCODED_SCOPE = "encoded"    # the encoder's output scope (IREE's default)
LAYOUT_KEY = "anyshape.layout"  # a 1-byte entry whose metadata is the layout


def encode_parameters(encoder: Path, weights: Mapping[str, np.ndarray], input_scope: str,
                      output: Path, layout: str, device, by_name: Sequence[str] = ()) -> None:
    """Run ``encoder`` on ``device`` (IREE's CPU device) over ``weights``
    (name -> array, read where they are) and write what it makes into the
    archive ``output``, marked with the compile's ``layout``. The weights
    named in ``by_name``, which the module reads as they are (IREE's encoder
    left them to pack at load: iree/parameter_reads.py), go in as they are,
    under their names."""
    import iree.runtime as rt

    inputs = rt.ParameterIndex()
    as_bytes = {name: np.ascontiguousarray(array).reshape(-1).view(np.uint8)
                for name, array in weights.items()}
    for name, data in as_bytes.items():
        inputs.add_buffer(name, data)
    missing = [name for name in by_name if name not in as_bytes]
    if missing:
        raise ValueError(f"weights: expected the weights the module reads by name, got none "
                         f"named {', '.join(missing)}")
    _run(rt, encoder, inputs.create_provider(scope=input_scope), output, layout, device,
         {name: as_bytes[name] for name in by_name})


def _run(rt, encoder: Path, inputs, output: Path, layout: str, device,
         by_name: Mapping[str, np.ndarray]) -> None:
    instance = rt.VmInstance()
    encoder_module = rt.VmModule.mmap(instance, str(encoder))
    functions = _encoder_functions(rt, encoder_module, encoder)
    hal = rt.create_hal_module(instance, device)
    listing = rt.VmContext(instance, [rt.create_io_parameters_module(instance, inputs), hal,
                                      encoder_module])
    results = rt.VmVariantList(1)
    listing.invoke(functions["indices"], rt.VmVariantList(0), results)
    scopes = _python_value(rt, results.get_as_list(0))
    del listing
    if [scope for scope, _ in scopes] != [ENCODED_SCOPE]:
        raise RuntimeError(f"{encoder}: expected an encoder writing the one scope "
                           f"'{ENCODED_SCOPE}', got scopes {[scope for scope, _ in scopes]}")
    # Written beside the archive and renamed over it once whole: an encode
    # that fails leaves the archive that was there, not a marked one of zeros.
    partial = output.with_name(f"{output.name}.partial")
    try:
        _create_archive(rt, scopes[0][1], partial, layout, by_name)
        _encode_into(rt, instance, hal, encoder_module, functions, inputs, partial, device)
        os.replace(partial, output)
    finally:
        partial.unlink(missing_ok=True)


def _encode_into(rt, instance, hal, encoder_module, functions, inputs, archive: Path,
                 device) -> None:
    written = rt.ParameterIndex()
    # ParameterIndex.load maps read-only whatever it is asked (IREE 3.13's
    # binding, io.cc); the encoder writes through a handle opened for writing
    # (wrap_fd keeps a duplicate of the descriptor).
    descriptor = os.open(archive, os.O_RDWR)
    try:
        handle = rt.FileHandle.wrap_fd(descriptor, readable=True, writable=True)
    finally:
        os.close(descriptor)
    written.load_from_file_handle(handle, "irpa")
    context = rt.VmContext(instance, [
        rt.create_io_parameters_module(instance, inputs,
                                       written.create_provider(scope=ENCODED_SCOPE)),
        hal, encoder_module])
    results = rt.VmVariantList(1)
    context.invoke(functions["steps"], rt.VmVariantList(0), results)
    semaphore = device.create_semaphore(0)
    done = rt.HalFence.create_at(semaphore, 1)
    arguments = rt.VmVariantList(3)
    arguments.push_list(results.get_as_list(0))
    arguments.push_ref(rt.HalFence(1).ref)  # nothing to wait for
    arguments.push_ref(done.ref)
    context.invoke(functions["encode"], arguments, rt.VmVariantList(0))
    done.wait()


def _encoder_functions(rt, module, path: Path) -> dict:
    """The encoder's functions by their role (IREE marks each with the
    reflection key ``iree.encode.function``)."""
    functions = {}
    for name in module.function_names:
        function = module.lookup_function(name)
        role = function.reflection.get("iree.encode.function")
        if role:
            functions[role] = function
    missing = {"indices", "steps", "encode"} - set(functions)
    if missing:
        raise RuntimeError(f"{path}: expected an IREE parameter encoder, got a module without "
                           f"its functions {', '.join(sorted(missing))}")
    return functions


def _python_value(rt, value):
    """The encoder's ``indices``, nested VM lists of integers and strings, in Python."""
    if isinstance(value, rt.VmRef):
        if value.isinstance(rt.VmVariantList):
            value = value.deref(rt.VmVariantList)
        elif value.isinstance(rt.VmBuffer):
            value = value.deref(rt.VmBuffer)
    if isinstance(value, rt.VmVariantList):
        return [_python_value(rt, value.get_variant(i)) for i in range(len(value))]
    if isinstance(value, rt.VmBuffer):
        return bytes(memoryview(value)).decode()
    return value


def _create_archive(rt, entries: list, output: Path, layout: str,
                    by_name: Mapping[str, np.ndarray]) -> None:
    """The archive ``entries`` (the encoder's ``indices``) describe, its data
    zero (pages of the file not yet written), for the encoder to write into,
    and the weights ``by_name`` as they are."""
    taken = {entry[1] for entry in entries} | {LAYOUT_KEY}
    clashes = sorted(taken & set(by_name))
    if clashes:
        raise ValueError(f"weights named {', '.join(clashes)}: expected names other than "
                         f"the encoder's own keys, got the same (the archive holds both)")
    index = rt.ParameterIndex()
    for entry in entries:
        kind, key, metadata, length = entry[:4]
        if kind == 0:  # [0, key, metadata, length, pattern, pattern length]: a splat
            pattern, width = entry[4], entry[5]
            index.add_splat(key, int(pattern).to_bytes(8, "little")[:width], length,
                            metadata=metadata)
        else:          # [1, key, metadata, length, alignment]: data
            # np.zeros is untouched calloc memory: the archive's writer reads
            # zero pages, which take no memory of their own.
            index.add_buffer(key, np.zeros(length, np.uint8), metadata=metadata)
    for name, data in by_name.items():
        index.add_buffer(name, data)
    index.add_splat(LAYOUT_KEY, b"\0", 1, metadata=layout)
    create_archive_file(index, output)


def create_archive_file(index, path: Path) -> None:
    """``index.create_archive_file(path)``, with a full disk raised as one
    (OSError ENOSPC naming the file and its bytes): IREE reports it as a
    ValueError, "failed to extend file ... (out of disk space or permission
    denied)"."""
    try:
        index.create_archive_file(str(path))
    except ValueError as error:
        if "out of disk space" not in str(error) or not os.access(path.parent, os.W_OK):
            raise
        needed = sum(entry.length for _, entry in index.items())
        raise OSError(errno.ENOSPC, f"no space left on the device of {path} for its "
                                    f"{needed} bytes of parameters ({error})",
                      str(path)) from None


def check_archive(index, archive: Path, layout: str) -> None:
    """Refuse an encoded archive (loaded into ``index``) not written in the
    module's ``layout``: it would be read as if it were, silently."""
    marks = [entry.metadata.decode(errors="replace") for key, entry in index.items()
             if key == LAYOUT_KEY]
    if marks != [layout]:
        got = f"one packed for layout {marks[0]}" if marks else \
            "one without the mark of the layout it was packed for"
        raise ValueError(f"{archive}: expected weights packed for this module's layout "
                         f"{layout}, got {got} (another compile's); write them again with "
                         f"anyshape.write_parameters")
