"""``parameter_reads.parameters_read``: the parameters a stream-phase module
reads, by scope and key, which a packed CPU module's archive must hold."""

import pytest

from anyshape.iree.parameter_reads import parameters_read

SCOPES = ("model", "encoded")

# A module at IREE's stream phase as the encoder leaves it: one slab of packed
# weights from the encoder's scope, one weight read by its own name.
_STREAM = """
util.global private @head : !stream.resource<constant>
util.global private @slab : !stream.resource<constant>
util.initializer {
  %c0_i64 = arith.constant 0 : i64
  %c16 = arith.constant 16 : index
  %c64 = arith.constant 64 : index
  %model = util.buffer.constant : !util.buffer = "model"
  %head_key = util.buffer.constant : !util.buffer = "head.weight"
  %encoded = util.buffer.constant : !util.buffer = "encoded"
  %slab_key = util.buffer.constant : !util.buffer = "parameter0"
  %slab, %t0 = stream.cmd.parameter.load {
    %encoded::%slab_key[%c0_i64] : !stream.resource<constant>{%c64}
  } => !stream.timepoint
  %head, %t1 = stream.cmd.parameter.load {
    %model::%head_key[%c0_i64] : !stream.resource<constant>{%c16}
  } => !stream.timepoint
  %both = stream.timepoint.join max(%t0, %t1) => !stream.timepoint
  %ready:2 = stream.timepoint.await sync %both => %head, %slab : !stream.resource<constant>{%c16}, !stream.resource<constant>{%c64}
  util.global.store %ready#0, @head : !stream.resource<constant>
  util.global.store %ready#1, @slab : !stream.resource<constant>
  util.return
}
"""


def test_each_read_is_named_by_its_scope_and_key(tmp_path):
    path = tmp_path / "stream.mlir"
    path.write_text(_STREAM)
    assert parameters_read(path, SCOPES) == [("encoded", "parameter0"), ("model", "head.weight")]


def test_a_module_that_reads_no_parameter_has_none(tmp_path):
    path = tmp_path / "stream.mlir"
    path.write_text("util.global private @x = 1 : i32\n")
    assert parameters_read(path, SCOPES) == []


def test_a_file_iree_cannot_read_is_a_value_error_naming_it(tmp_path):
    """/// The compile takes a ValueError from the encoder's side as IREE failing
    /// to pack the weights, and builds the module that packs at load."""
    path = tmp_path / "stream.mlir"
    path.write_text("module {")
    with pytest.raises(ValueError, match=r"IREE's bindings cannot read .*stream.mlir"):
        parameters_read(path, SCOPES)


def test_a_read_of_a_scope_not_named_is_refused(tmp_path):
    """/// A read this cannot name (a scope-less one reads its first key as a
    /// scope) would leave the weight out of the archive, and the module would
    /// fail to load: refused, the compile packs at load instead."""
    path = tmp_path / "stream.mlir"
    path.write_text(_STREAM.replace('"model"', '"other"'))
    with pytest.raises(ValueError, match=r"expected each parameter read to name a scope among "
                                         r"\['model', 'encoded'\] and its keys as constants, got "
                                         r"stream.cmd.parameter.load of \['other', 'head.weight'\]"):
        parameters_read(path, SCOPES)
