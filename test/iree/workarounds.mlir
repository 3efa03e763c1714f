// RUN: %PYTHON -m anyshape.iree.workarounds separate-packing %s | FileCheck %s --check-prefix=PACK
// RUN: %PYTHON -m anyshape.iree.workarounds separate-scatters %s | FileCheck %s --check-prefix=SCATTER
// RUN: %PYTHON -m anyshape.iree.workarounds rewrite-flow %s --f64-math-in-f32 | FileCheck %s --check-prefix=FLOW
// RUN: %PYTHON -m anyshape.iree.workarounds rewrite-flow %s | FileCheck %s --check-prefix=KEEP64

// The rewrites of iree/workarounds.py, each run alone: `separate-packing` and
// `separate-scatters` on the torch-dialect IR IREE is given (functions
// @pack_*, @negative_pack_*, @scatter_*, @negative_scatter_*),
// `rewrite-flow` on the flow-phase IR between iree-compile's two runs (the
// dispatches below them). Each leaves the other's IR alone.

// ---- separate-packing ------------------------------------------------------

/// A product's operand whose last two dims are both dynamic (attention's
/// probabilities, [batch, L, L]) is packed inside its producer's dispatch by
/// IREE 3.13 (llvm/llvm-project#205288's form): a compute barrier, sized by the
/// operand's dims, keeps it apart. The other operand ([?,?,8]) needs none.
// PACK-LABEL: func.func @pack_two_dynamic_dims
// PACK-SAME: (%[[P:[^:]*]]: !torch.vtensor<[?,?,?],f32>, %[[V:[^:]*]]: !torch.vtensor<[?,?,8],f32>)
// PACK: %[[E:.+]] = torch.aten.exp %[[P]]
// PACK: %[[T:.+]] = torch_c.to_builtin_tensor %[[E]] : !torch.vtensor<[?,?,?],f32> -> tensor<?x?x?xf32>
// PACK: %[[D0:.+]] = tensor.dim %[[T]], %{{.+}} : tensor<?x?x?xf32>
// PACK: %[[D1:.+]] = tensor.dim %[[T]], %{{.+}} : tensor<?x?x?xf32>
// PACK: %[[D2:.+]] = tensor.dim %[[T]], %{{.+}} : tensor<?x?x?xf32>
// PACK: %[[B:.+]] = iree_tensor_ext.compute_barrier.start %[[T]] : tensor<?x?x?xf32>{%[[D0]], %[[D1]], %[[D2]]} -> tensor<?x?x?xf32>
// PACK: %[[S:.+]] = torch_c.from_builtin_tensor %[[B]] : tensor<?x?x?xf32> -> !torch.vtensor<[?,?,?],f32>
// PACK: torch.aten.bmm %[[S]], %[[V]]
func.func @pack_two_dynamic_dims(%arg0: !torch.vtensor<[?,?,?],f32>, %arg1: !torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[?,?,8],f32> {
  %0 = torch.aten.exp %arg0 : !torch.vtensor<[?,?,?],f32> -> !torch.vtensor<[?,?,?],f32>
  %1 = torch.aten.bmm %0, %arg1 : !torch.vtensor<[?,?,?],f32>, !torch.vtensor<[?,?,8],f32> -> !torch.vtensor<[?,?,8],f32>
  return %1 : !torch.vtensor<[?,?,8],f32>
}

/// A feed-forward layer with one dynamic dim: IREE 3.13 would fuse the first
/// linear's unpacking, the GELU and the second linear's packing into one slow
/// dispatch. The second linear's input, elementwise of a product through
/// reshapes, goes behind a barrier; the first linear's input (an argument's
/// reshape) and the weights do not.
// PACK-LABEL: func.func @pack_elementwise_of_product
// PACK: %[[IN:.+]] = torch.aten.flatten.using_ints %arg0
// PACK-NOT: compute_barrier.start
// PACK: torch.aten.linear %[[IN]], %arg1, %arg2
// PACK-NOT: compute_barrier.start
// PACK: %[[G:.+]] = torch.aten.gelu
// PACK: %[[F:.+]] = torch.aten.flatten.using_ints %[[G]]
// PACK: %[[T:.+]] = torch_c.to_builtin_tensor %[[F]] : !torch.vtensor<[?,16],f32> -> tensor<?x16xf32>
// PACK: %[[D:.+]] = tensor.dim %[[T]], %{{.+}} : tensor<?x16xf32>
// PACK: %[[B:.+]] = iree_tensor_ext.compute_barrier.start %[[T]] : tensor<?x16xf32>{%[[D]]} -> tensor<?x16xf32>
// PACK: %[[S:.+]] = torch_c.from_builtin_tensor %[[B]]
// PACK: torch.aten.linear %[[S]], %arg3, %arg4
// PACK-NOT: compute_barrier.start
func.func @pack_elementwise_of_product(%arg0: !torch.vtensor<[2,?,8],f32>, %arg1: !torch.vtensor<[16,8],f32>, %arg2: !torch.vtensor<[16],f32>, %arg3: !torch.vtensor<[8,16],f32>, %arg4: !torch.vtensor<[8],f32>) -> !torch.vtensor<[?,8],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %str = torch.constant.str "none"
  %0 = torch.aten.flatten.using_ints %arg0, %int0, %int1 : !torch.vtensor<[2,?,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,8],f32>
  %1 = torch.aten.linear %0, %arg1, %arg2 : !torch.vtensor<[?,8],f32>, !torch.vtensor<[16,8],f32>, !torch.vtensor<[16],f32> -> !torch.vtensor<[?,16],f32>
  %2 = torch.aten.size.int %arg0, %int1 : !torch.vtensor<[2,?,8],f32>, !torch.int -> !torch.int
  %3 = torch.prim.ListConstruct %int2, %2 : (!torch.int, !torch.int) -> !torch.list<int>
  %4 = torch.aten.unflatten.int %1, %int0, %3 : !torch.vtensor<[?,16],f32>, !torch.int, !torch.list<int> -> !torch.vtensor<[2,?,16],f32>
  %5 = torch.aten.gelu %4, %str : !torch.vtensor<[2,?,16],f32>, !torch.str -> !torch.vtensor<[2,?,16],f32>
  %6 = torch.aten.flatten.using_ints %5, %int0, %int1 : !torch.vtensor<[2,?,16],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,16],f32>
  %7 = torch.aten.linear %6, %arg3, %arg4 : !torch.vtensor<[?,16],f32>, !torch.vtensor<[8,16],f32>, !torch.vtensor<[8],f32> -> !torch.vtensor<[?,8],f32>
  return %7 : !torch.vtensor<[?,8],f32>
}

/// One value read by two products, or twice by one, goes behind one barrier.
/// addmm's added term (operand 0) is not packed: no barrier for it.
// PACK-LABEL: func.func @pack_once_per_value
// PACK-SAME: (%[[X:[^:]*]]: !torch.vtensor<[?,?],f32>)
// PACK: %[[A:.+]] = torch.aten.tanh %[[X]]
// PACK: %[[T:.+]] = torch_c.to_builtin_tensor %[[A]]
// PACK: %[[B:.+]] = iree_tensor_ext.compute_barrier.start %[[T]]
// PACK: %[[S:.+]] = torch_c.from_builtin_tensor %[[B]]
// PACK: %[[M:.+]] = torch.aten.mm %[[S]], %[[S]]
// PACK-NOT: compute_barrier.start
// PACK: torch.aten.addmm %[[M]], %[[S]], %[[S]]
func.func @pack_once_per_value(%arg0: !torch.vtensor<[?,?],f32>) -> !torch.vtensor<[?,?],f32> {
  %int1 = torch.constant.int 1
  %0 = torch.aten.tanh %arg0 : !torch.vtensor<[?,?],f32> -> !torch.vtensor<[?,?],f32>
  %1 = torch.aten.mm %0, %0 : !torch.vtensor<[?,?],f32>, !torch.vtensor<[?,?],f32> -> !torch.vtensor<[?,?],f32>
  %2 = torch.aten.addmm %1, %0, %0, %int1, %int1 : !torch.vtensor<[?,?],f32>, !torch.vtensor<[?,?],f32>, !torch.vtensor<[?,?],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,?],f32>
  return %2 : !torch.vtensor<[?,?],f32>
}

/// Arguments are not computed in a dispatch: nothing to keep apart.
// PACK-LABEL: func.func @negative_pack_arguments
// PACK-NOT: compute_barrier.start
// PACK: torch.aten.mm %arg0, %arg1
func.func @negative_pack_arguments(%arg0: !torch.vtensor<[?,?],f32>, %arg1: !torch.vtensor<[?,?],f32>) -> !torch.vtensor<[?,?],f32> {
  %0 = torch.aten.mm %arg0, %arg1 : !torch.vtensor<[?,?],f32>, !torch.vtensor<[?,?],f32> -> !torch.vtensor<[?,?],f32>
  return %0 : !torch.vtensor<[?,?],f32>
}

/// The feed-forward layer with a dynamic batch and length: the reshape of two
/// dynamic dims keeps IREE's packing apart already, so no barrier.
// PACK-LABEL: func.func @negative_pack_two_dynamic_dims_elementwise
// PACK-NOT: compute_barrier.start
// PACK: torch.aten.linear %{{.+}}, %arg3, %arg4
func.func @negative_pack_two_dynamic_dims_elementwise(%arg0: !torch.vtensor<[?,?,8],f32>, %arg1: !torch.vtensor<[16,8],f32>, %arg2: !torch.vtensor<[16],f32>, %arg3: !torch.vtensor<[8,16],f32>, %arg4: !torch.vtensor<[8],f32>) -> !torch.vtensor<[?,8],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %str = torch.constant.str "none"
  %0 = torch.aten.flatten.using_ints %arg0, %int0, %int1 : !torch.vtensor<[?,?,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,8],f32>
  %1 = torch.aten.linear %0, %arg1, %arg2 : !torch.vtensor<[?,8],f32>, !torch.vtensor<[16,8],f32>, !torch.vtensor<[16],f32> -> !torch.vtensor<[?,16],f32>
  %2 = torch.aten.size.int %arg0, %int0 : !torch.vtensor<[?,?,8],f32>, !torch.int -> !torch.int
  %3 = torch.aten.size.int %arg0, %int1 : !torch.vtensor<[?,?,8],f32>, !torch.int -> !torch.int
  %4 = torch.prim.ListConstruct %2, %3 : (!torch.int, !torch.int) -> !torch.list<int>
  %5 = torch.aten.unflatten.int %1, %int0, %4 : !torch.vtensor<[?,16],f32>, !torch.int, !torch.list<int> -> !torch.vtensor<[?,?,16],f32>
  %6 = torch.aten.gelu %5, %str : !torch.vtensor<[?,?,16],f32>, !torch.str -> !torch.vtensor<[?,?,16],f32>
  %7 = torch.aten.flatten.using_ints %6, %int0, %int1 : !torch.vtensor<[?,?,16],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,16],f32>
  %8 = torch.aten.linear %7, %arg3, %arg4 : !torch.vtensor<[?,16],f32>, !torch.vtensor<[8,16],f32>, !torch.vtensor<[8],f32> -> !torch.vtensor<[?,8],f32>
  return %8 : !torch.vtensor<[?,8],f32>
}

/// With static shapes IREE's code for the fused dispatch is fast: no barrier.
// PACK-LABEL: func.func @negative_pack_static
// PACK-NOT: compute_barrier.start
// PACK: return
func.func @negative_pack_static(%arg0: !torch.vtensor<[4,16],f32>, %arg1: !torch.vtensor<[16,16],f32>) -> !torch.vtensor<[4,16],f32> {
  %0 = torch.aten.mm %arg0, %arg1 : !torch.vtensor<[4,16],f32>, !torch.vtensor<[16,16],f32> -> !torch.vtensor<[4,16],f32>
  %1 = torch.aten.tanh %0 : !torch.vtensor<[4,16],f32> -> !torch.vtensor<[4,16],f32>
  %2 = torch.aten.mm %1, %arg1 : !torch.vtensor<[4,16],f32>, !torch.vtensor<[16,16],f32> -> !torch.vtensor<[4,16],f32>
  return %2 : !torch.vtensor<[4,16],f32>
}

// ---- separate-scatters -----------------------------------------------------

/// index_add of computed rows at computed positions (JetMoE's experts): IREE
/// 3.13 fuses both producers into the scatter's dispatch, which then needs a
/// stack buffer of dynamic size and does not compile. Each goes behind a
/// barrier sized by its dims; the target, an argument, needs none.
// SCATTER-LABEL: func.func @scatter_index_add_of_computed_operands
// SCATTER-SAME: (%[[X:[^:]*]]: !torch.vtensor<[?,32],f32>, %[[I:[^:]*]]: !torch.vtensor<[?],si64>)
// SCATTER: %[[ROWS:.+]] = torch.aten.div.Tensor_mode %[[I]]
// SCATTER: %[[VALUES:.+]] = torch.aten.mul.Scalar %[[X]]
// SCATTER: %[[TR:.+]] = torch_c.to_builtin_tensor %[[ROWS]] : !torch.vtensor<[?],si64> -> tensor<?xi64>
// SCATTER: %[[DR:.+]] = tensor.dim %[[TR]], %{{.+}} : tensor<?xi64>
// SCATTER: %[[BR:.+]] = iree_tensor_ext.compute_barrier.start %[[TR]] : tensor<?xi64>{%[[DR]]} -> tensor<?xi64>
// SCATTER: %[[KEPT_ROWS:.+]] = torch_c.from_builtin_tensor %[[BR]]
// SCATTER: %[[LIST:.+]] = torch.prim.ListConstruct %[[KEPT_ROWS]]
// SCATTER: %[[TV:.+]] = torch_c.to_builtin_tensor %[[VALUES]] : !torch.vtensor<[?,32],f32> -> tensor<?x32xf32>
// SCATTER: %[[BV:.+]] = iree_tensor_ext.compute_barrier.start %[[TV]]
// SCATTER: %[[KEPT_VALUES:.+]] = torch_c.from_builtin_tensor %[[BV]]
// SCATTER: torch.aten.index_put %[[X]], %[[LIST]], %[[KEPT_VALUES]], %true
func.func @scatter_index_add_of_computed_operands(%arg0: !torch.vtensor<[?,32],f32>, %arg1: !torch.vtensor<[?],si64>) -> !torch.vtensor<[?,32],f32> {
  %int2 = torch.constant.int 2
  %str = torch.constant.str "trunc"
  %true = torch.constant.bool true
  %two = torch.vtensor.literal(dense<2> : tensor<si64>) : !torch.vtensor<[],si64>
  %0 = torch.aten.div.Tensor_mode %arg1, %two, %str : !torch.vtensor<[?],si64>, !torch.vtensor<[],si64>, !torch.str -> !torch.vtensor<[?],si64>
  %1 = torch.aten.mul.Scalar %arg0, %int2 : !torch.vtensor<[?,32],f32>, !torch.int -> !torch.vtensor<[?,32],f32>
  %2 = torch.prim.ListConstruct %0 : (!torch.vtensor<[?],si64>) -> !torch.list<optional<vtensor>>
  %3 = torch.aten.index_put %arg0, %2, %1, %true : !torch.vtensor<[?,32],f32>, !torch.list<optional<vtensor>>, !torch.vtensor<[?,32],f32>, !torch.bool -> !torch.vtensor<[?,32],f32>
  return %3 : !torch.vtensor<[?,32],f32>
}

/// A write that replaces (accumulate false: a KV cache's update) is left
/// alone: IREE compiles it, and the in-place writes rely on its form.
// SCATTER-LABEL: func.func @negative_scatter_replacing_write
// SCATTER-NOT: compute_barrier.start
// SCATTER: torch.aten.index_put
func.func @negative_scatter_replacing_write(%arg0: !torch.vtensor<[?,32],f32>, %arg1: !torch.vtensor<[?],si64>) -> !torch.vtensor<[?,32],f32> {
  %int2 = torch.constant.int 2
  %false = torch.constant.bool false
  %0 = torch.aten.mul.Scalar %arg0, %int2 : !torch.vtensor<[?,32],f32>, !torch.int -> !torch.vtensor<[?,32],f32>
  %1 = torch.prim.ListConstruct %arg1 : (!torch.vtensor<[?],si64>) -> !torch.list<optional<vtensor>>
  %2 = torch.aten.index_put %arg0, %1, %0, %false : !torch.vtensor<[?,32],f32>, !torch.list<optional<vtensor>>, !torch.vtensor<[?,32],f32>, !torch.bool -> !torch.vtensor<[?,32],f32>
  return %2 : !torch.vtensor<[?,32],f32>
}

/// Static operands need no buffer of dynamic size: no barrier.
// SCATTER-LABEL: func.func @negative_scatter_static
// SCATTER-NOT: compute_barrier.start
// SCATTER: torch.aten.scatter_add
func.func @negative_scatter_static(%arg0: !torch.vtensor<[4,8],f32>, %arg1: !torch.vtensor<[4,8],si64>) -> !torch.vtensor<[4,8],f32> {
  %int0 = torch.constant.int 0
  %int2 = torch.constant.int 2
  %0 = torch.aten.mul.Scalar %arg0, %int2 : !torch.vtensor<[4,8],f32>, !torch.int -> !torch.vtensor<[4,8],f32>
  %1 = torch.aten.scatter_add %arg0, %int0, %arg1, %0 : !torch.vtensor<[4,8],f32>, !torch.int, !torch.vtensor<[4,8],si64>, !torch.vtensor<[4,8],f32> -> !torch.vtensor<[4,8],f32>
  return %1 : !torch.vtensor<[4,8],f32>
}

// ---- rewrite-flow ----------------------------------------------------------

flow.executable private @ex_elementwise {
  flow.executable.export public @elementwise workgroups(%arg0: index, %arg1: index) -> (index, index, index) {
    %x, %y, %z = iree_tensor_ext.dispatch.workgroup_count_from_slice(%arg0, %arg1)
    flow.return %x, %y, %z : index, index, index
  }
  builtin.module {
    func.func @elementwise(%arg0: index, %arg1: !iree_tensor_ext.dispatch.tensor<readonly:tensor<?xf32>>, %arg2: index, %arg3: !iree_tensor_ext.dispatch.tensor<writeonly:tensor<?xf32>>) {
      %0 = iree_tensor_ext.dispatch.workload.ordinal %arg0, 0 : index
      %1 = iree_tensor_ext.dispatch.workload.ordinal %arg2, 1 : index
      %2 = flow.dispatch.tie_shape %arg1 : !iree_tensor_ext.dispatch.tensor<readonly:tensor<?xf32>>{%1}
      %3 = flow.dispatch.tie_shape %arg3 : !iree_tensor_ext.dispatch.tensor<writeonly:tensor<?xf32>>{%0}
      %4 = iree_tensor_ext.dispatch.tensor.load %2, offsets = [0], sizes = [%1], strides = [1] : !iree_tensor_ext.dispatch.tensor<readonly:tensor<?xf32>>{%1} -> tensor<?xf32>
      %5 = tensor.empty(%0) : tensor<?xf32>
      %6 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%4 : tensor<?xf32>) outs(%5 : tensor<?xf32>) {
      ^bb0(%in: f32, %out: f32):
        %7 = math.erf %in : f32
        linalg.yield %7 : f32
      } -> tensor<?xf32>
      iree_tensor_ext.dispatch.tensor.store %6, %3, offsets = [0], sizes = [%0], strides = [1] : tensor<?xf32> -> !iree_tensor_ext.dispatch.tensor<writeonly:tensor<?xf32>>{%0}
      return
    }
  }
}

/// A dispatch whose workload repeats a value (an elementwise op over [n], its
/// output and input sized alike): IREE's FoldUniformOperands would renumber
/// them; the repeat becomes a distinct value through util.optimization_barrier.
/// Only the workload changes, not the dispatch's operands.
// FLOW-LABEL: util.func public @untie
// FLOW-SAME: (%[[T:[^:]*]]: tensor<?xf32>, %[[N:[^:]*]]: index)
// FLOW: %[[N2:.+]] = util.optimization_barrier %[[N]] : index
// FLOW: flow.dispatch @ex_elementwise::@elementwise[%[[N]], %[[N2]]](%[[N]], %[[T]], %[[N]])
util.func public @untie(%arg0: tensor<?xf32>, %arg1: index) -> tensor<?xf32> {
  %0 = flow.dispatch @ex_elementwise::@elementwise[%arg1, %arg1](%arg1, %arg0, %arg1) : (index, tensor<?xf32>{%arg1}, index) -> tensor<?xf32>{%arg1}
  util.return %0 : tensor<?xf32>
}

/// Repeats in two dispatches read one copy, made right after the value's
/// definition and ahead of both dispatches: a barrier between two dispatches
/// would end IREE's execution region there, and each region is a command
/// buffer of its own with its own submission and fences.
// FLOW-LABEL: util.func public @untie_shares_copies
// FLOW-SAME: (%[[T:[^:]*]]: tensor<?xf32>, %[[N:[^:]*]]: index)
// FLOW: %[[M:.+]] = arith.addi %[[N]], %[[N]] : index
// FLOW-NEXT: %[[M2:.+]] = util.optimization_barrier %[[M]] : index
// FLOW-NEXT: %[[A:.+]] = flow.dispatch @ex_elementwise::@elementwise[%[[M]], %[[M2]]](%[[M]], %[[T]], %[[M]])
// FLOW-NOT: util.optimization_barrier
// FLOW: flow.dispatch @ex_elementwise::@elementwise[%[[M]], %[[M2]]](%[[M]], %[[A]], %[[M]])
util.func public @untie_shares_copies(%arg0: tensor<?xf32>, %arg1: index) -> tensor<?xf32> {
  %m = arith.addi %arg1, %arg1 : index
  %0 = flow.dispatch @ex_elementwise::@elementwise[%m, %m](%m, %arg0, %m) : (index, tensor<?xf32>{%m}, index) -> tensor<?xf32>{%m}
  %1 = flow.dispatch @ex_elementwise::@elementwise[%m, %m](%m, %0, %m) : (index, tensor<?xf32>{%m}, index) -> tensor<?xf32>{%m}
  util.return %1 : tensor<?xf32>
}

/// A size computed between two dispatches (pure index arithmetic) moves up
/// with its constant to where its operands are defined, and its copy with it,
/// so that no barrier is left between the dispatches.
// FLOW-LABEL: util.func public @untie_moves_size_arithmetic_up
// FLOW-SAME: (%[[T:[^:]*]]: tensor<?xf32>, %[[N:[^:]*]]: index)
// FLOW: %[[C:.+]] = arith.constant 768 : index
// FLOW-NEXT: %[[M:.+]] = arith.muli %[[N]], %[[C]] : index
// FLOW-NEXT: %[[M2:.+]] = util.optimization_barrier %[[M]] : index
// FLOW-NEXT: %[[N2:.+]] = util.optimization_barrier %[[N]] : index
// FLOW-NEXT: %[[A:.+]] = flow.dispatch @ex_elementwise::@elementwise[%[[N]], %[[N2]]]
// FLOW-NEXT: flow.dispatch @ex_elementwise::@elementwise[%[[M]], %[[M2]]](%[[M]], %[[A]], %[[M]])
util.func public @untie_moves_size_arithmetic_up(%arg0: tensor<?xf32>, %arg1: index) -> tensor<?xf32> {
  %0 = flow.dispatch @ex_elementwise::@elementwise[%arg1, %arg1](%arg1, %arg0, %arg1) : (index, tensor<?xf32>{%arg1}, index) -> tensor<?xf32>{%arg1}
  %c768 = arith.constant 768 : index
  %m = arith.muli %arg1, %c768 : index
  %1 = flow.dispatch @ex_elementwise::@elementwise[%m, %m](%m, %0, %m) : (index, tensor<?xf32>{%m}, index) -> tensor<?xf32>{%m}
  util.return %1 : tensor<?xf32>
}

/// A size that is not arithmetic (read from a tensor) stays where it is
/// computed; its copy follows it there.
// FLOW-LABEL: util.func public @negative_untie_moves_no_tensor_read
// FLOW-SAME: (%[[T:[^:]*]]: tensor<?xf32>, %[[N:[^:]*]]: index)
// FLOW: flow.dispatch @ex_elementwise::@elementwise[%[[N]],
// FLOW: %[[D:.+]] = tensor.dim
// FLOW-NEXT: %[[D2:.+]] = util.optimization_barrier %[[D]] : index
// FLOW-NEXT: flow.dispatch @ex_elementwise::@elementwise[%[[D]], %[[D2]]]
util.func public @negative_untie_moves_no_tensor_read(%arg0: tensor<?xf32>, %arg1: index) -> tensor<?xf32> {
  %0 = flow.dispatch @ex_elementwise::@elementwise[%arg1, %arg1](%arg1, %arg0, %arg1) : (index, tensor<?xf32>{%arg1}, index) -> tensor<?xf32>{%arg1}
  %c0 = arith.constant 0 : index
  %d = tensor.dim %0, %c0 : tensor<?xf32>
  %1 = flow.dispatch @ex_elementwise::@elementwise[%d, %d](%d, %0, %d) : (index, tensor<?xf32>{%d}, index) -> tensor<?xf32>{%d}
  util.return %1 : tensor<?xf32>
}

/// A value repeated three times gets two copies, in order, at the start of
/// the block that defines it (here the function's arguments).
// FLOW-LABEL: util.func public @untie_third_repeat
// FLOW-SAME: (%[[T:[^:]*]]: tensor<?xf32>, %[[N:[^:]*]]: index)
// FLOW-NEXT: %[[N2:.+]] = util.optimization_barrier %[[N]] : index
// FLOW-NEXT: %[[N3:.+]] = util.optimization_barrier %[[N]] : index
// FLOW-NEXT: flow.dispatch @ex_three_sizes::@three_sizes[%[[N]], %[[N2]], %[[N3]]]
util.func public @untie_third_repeat(%arg0: tensor<?xf32>, %arg1: index) -> tensor<?xf32> {
  %0 = flow.dispatch @ex_three_sizes::@three_sizes[%arg1, %arg1, %arg1](%arg1, %arg0, %arg1) : (index, tensor<?xf32>{%arg1}, index) -> tensor<?xf32>{%arg1}
  util.return %0 : tensor<?xf32>
}

flow.executable private @ex_three_sizes {
  flow.executable.export public @three_sizes workgroups(%arg0: index, %arg1: index, %arg2: index) -> (index, index, index) {
    %x, %y, %z = iree_tensor_ext.dispatch.workgroup_count_from_slice(%arg0, %arg1, %arg2)
    flow.return %x, %y, %z : index, index, index
  }
  builtin.module {
    func.func @three_sizes(%arg0: index, %arg1: !iree_tensor_ext.dispatch.tensor<readonly:tensor<?xf32>>, %arg2: index, %arg3: !iree_tensor_ext.dispatch.tensor<writeonly:tensor<?xf32>>) {
      return
    }
  }
}

/// Distinct workload values stay as they are.
// FLOW-LABEL: util.func public @negative_untie_distinct
// FLOW-NOT: util.optimization_barrier
// FLOW: flow.dispatch @ex_elementwise::@elementwise[%arg1, %arg2](%arg1, %arg0, %arg2)
util.func public @negative_untie_distinct(%arg0: tensor<?xf32>, %arg1: index, %arg2: index) -> tensor<?xf32> {
  %0 = flow.dispatch @ex_elementwise::@elementwise[%arg1, %arg2](%arg1, %arg0, %arg2) : (index, tensor<?xf32>{%arg2}, index) -> tensor<?xf32>{%arg1}
  util.return %0 : tensor<?xf32>
}

/// float64 math IREE 3.13's CPU code lacks (tanh: a C library call its linker
/// does not have) is computed in float32 and widened back; a float64 logarithm
/// to a base becomes the natural one (float64 code) times a constant; fmod
/// (arith.remf) is a - b * trunc(a / b) in float64. exp has float64 code and
/// float32 math needs nothing: both stay. Without --f64-math-in-f32 (a CUDA
/// target) tanh stays float64.
// FLOW-LABEL: func.func @f64_math
// FLOW: ^bb0(%[[IN:.+]]: f32, %[[B:.+]]: f64, %{{.+}}: f64):
// FLOW: %[[X:.+]] = arith.extf %[[IN]] : f32 to f64
// FLOW: %[[N:.+]] = arith.truncf %[[X]] : f64 to f32
// FLOW: %[[TANH:.+]] = math.tanh %[[N]] : f32
// FLOW: %[[WIDE:.+]] = arith.extf %[[TANH]] : f32 to f64
// FLOW-NOT: math.tanh %{{.+}} : f64
// FLOW: %[[LN:.+]] = math.log %[[X]] : f64
// FLOW: %[[INV:.+]] = arith.constant 0.43429448190325{{[0-9]*}} : f64
// FLOW: %[[LOG10:.+]] = arith.mulf %[[LN]], %[[INV]] : f64
// FLOW-NOT: math.log10
// FLOW: %[[Q:.+]] = arith.divf %[[X]], %[[B]] : f64
// FLOW: %[[W:.+]] = math.trunc %[[Q]] : f64
// FLOW: %[[P:.+]] = arith.mulf %[[B]], %[[W]] : f64
// FLOW: %[[REM:.+]] = arith.subf %[[X]], %[[P]] : f64
// FLOW-NOT: arith.remf
// FLOW: math.exp %[[X]] : f64
// FLOW: math.tanh %[[IN]] : f32
// FLOW: arith.addf %[[WIDE]], %[[LOG10]] : f64
// FLOW: arith.addf %[[REM]], %{{.+}} : f64
// KEEP64-LABEL: func.func @f64_math
// KEEP64: math.tanh %{{.+}} : f64
// KEEP64: math.log10 %{{.+}} : f64
// KEEP64: arith.remf %{{.+}} : f64
flow.executable private @ex_f64 {
  flow.executable.export public @f64_math workgroups(%arg0: index) -> (index, index, index) {
    %x, %y, %z = iree_tensor_ext.dispatch.workgroup_count_from_slice(%arg0)
    flow.return %x, %y, %z : index, index, index
  }
  builtin.module {
    func.func @f64_math(%arg0: index, %arg1: !iree_tensor_ext.dispatch.tensor<readonly:tensor<?xf32>>, %arg2: !iree_tensor_ext.dispatch.tensor<readonly:tensor<?xf64>>, %arg3: !iree_tensor_ext.dispatch.tensor<writeonly:tensor<?xf64>>) {
      %0 = iree_tensor_ext.dispatch.workload.ordinal %arg0, 0 : index
      %1 = flow.dispatch.tie_shape %arg1 : !iree_tensor_ext.dispatch.tensor<readonly:tensor<?xf32>>{%0}
      %2 = flow.dispatch.tie_shape %arg2 : !iree_tensor_ext.dispatch.tensor<readonly:tensor<?xf64>>{%0}
      %3 = flow.dispatch.tie_shape %arg3 : !iree_tensor_ext.dispatch.tensor<writeonly:tensor<?xf64>>{%0}
      %4 = iree_tensor_ext.dispatch.tensor.load %1, offsets = [0], sizes = [%0], strides = [1] : !iree_tensor_ext.dispatch.tensor<readonly:tensor<?xf32>>{%0} -> tensor<?xf32>
      %5 = iree_tensor_ext.dispatch.tensor.load %2, offsets = [0], sizes = [%0], strides = [1] : !iree_tensor_ext.dispatch.tensor<readonly:tensor<?xf64>>{%0} -> tensor<?xf64>
      %6 = tensor.empty(%0) : tensor<?xf64>
      %7 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%4, %5 : tensor<?xf32>, tensor<?xf64>) outs(%6 : tensor<?xf64>) {
      ^bb0(%in: f32, %b: f64, %out: f64):
        %8 = arith.extf %in : f32 to f64
        %9 = math.tanh %8 : f64
        %10 = math.log10 %8 : f64
        %11 = arith.remf %8, %b : f64
        %12 = math.exp %8 : f64
        %13 = math.tanh %in : f32
        %14 = arith.extf %13 : f32 to f64
        %15 = arith.addf %9, %10 : f64
        %16 = arith.addf %11, %12 : f64
        %17 = arith.addf %15, %16 : f64
        %18 = arith.addf %17, %14 : f64
        linalg.yield %18 : f64
      } -> tensor<?xf64>
      iree_tensor_ext.dispatch.tensor.store %7, %3, offsets = [0], sizes = [%0], strides = [1] : tensor<?xf64> -> !iree_tensor_ext.dispatch.tensor<writeonly:tensor<?xf64>>{%0}
      return
    }
  }
}

/// An integer division computing elements: with dynamic dims IREE 3.13's CPU
/// code also divides the lanes past a partial vector's end, by zeros (SIGFPE);
/// a divisor of 0 becomes 1. The index arithmetic outside the body (sizes) is
/// left alone.
// FLOW-LABEL: func.func @integer_division
// FLOW: %[[C2:.+]] = arith.constant 2 : index
// FLOW: arith.divui %{{.+}}, %[[C2]] : index
// FLOW-NOT: arith.select
// FLOW: ^bb0(%[[A:.+]]: i64, %[[D:.+]]: i64, %{{.+}}: i64):
// FLOW: %[[ZERO:.+]] = arith.constant 0 : i64
// FLOW: %[[ONE:.+]] = arith.constant 1 : i64
// FLOW: %[[IS0:.+]] = arith.cmpi eq, %[[D]], %[[ZERO]] : i64
// FLOW: %[[SAFE:.+]] = arith.select %[[IS0]], %[[ONE]], %[[D]] : i64
// FLOW: arith.divsi %[[A]], %[[SAFE]] : i64
// KEEP64-LABEL: func.func @integer_division
// KEEP64: arith.select
flow.executable private @ex_integer_division {
  flow.executable.export public @integer_division workgroups(%arg0: index) -> (index, index, index) {
    %x, %y, %z = iree_tensor_ext.dispatch.workgroup_count_from_slice(%arg0)
    flow.return %x, %y, %z : index, index, index
  }
  builtin.module {
    func.func @integer_division(%arg0: index, %arg1: !iree_tensor_ext.dispatch.tensor<readonly:tensor<?xi64>>, %arg2: !iree_tensor_ext.dispatch.tensor<readonly:tensor<?xi64>>, %arg3: !iree_tensor_ext.dispatch.tensor<writeonly:tensor<?xi64>>) {
      %c2 = arith.constant 2 : index
      %0 = iree_tensor_ext.dispatch.workload.ordinal %arg0, 0 : index
      %n = arith.divui %0, %c2 : index
      %1 = flow.dispatch.tie_shape %arg1 : !iree_tensor_ext.dispatch.tensor<readonly:tensor<?xi64>>{%n}
      %2 = flow.dispatch.tie_shape %arg2 : !iree_tensor_ext.dispatch.tensor<readonly:tensor<?xi64>>{%n}
      %3 = flow.dispatch.tie_shape %arg3 : !iree_tensor_ext.dispatch.tensor<writeonly:tensor<?xi64>>{%n}
      %4 = iree_tensor_ext.dispatch.tensor.load %1, offsets = [0], sizes = [%n], strides = [1] : !iree_tensor_ext.dispatch.tensor<readonly:tensor<?xi64>>{%n} -> tensor<?xi64>
      %5 = iree_tensor_ext.dispatch.tensor.load %2, offsets = [0], sizes = [%n], strides = [1] : !iree_tensor_ext.dispatch.tensor<readonly:tensor<?xi64>>{%n} -> tensor<?xi64>
      %6 = tensor.empty(%n) : tensor<?xi64>
      %7 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%4, %5 : tensor<?xi64>, tensor<?xi64>) outs(%6 : tensor<?xi64>) {
      ^bb0(%a: i64, %d: i64, %out: i64):
        %8 = arith.divsi %a, %d : i64
        linalg.yield %8 : i64
      } -> tensor<?xi64>
      iree_tensor_ext.dispatch.tensor.store %7, %3, offsets = [0], sizes = [%n], strides = [1] : tensor<?xi64> -> !iree_tensor_ext.dispatch.tensor<writeonly:tensor<?xi64>>{%n}
      return
    }
  }
}

// ---- rewrite-flow: a fill for each in-place write ---------------------------

/// Two in-place writes into one fill: IREE 3.13's stream clones the fill to
/// each writer, then CSE merges the identical copies after copy-on-write, so
/// both write one buffer (beam's router). The first writer gets a copy of the
/// fill calling a copy of its executable, which no CSE can merge; the second,
/// then the fill's only user, keeps it. Views (the reshape) are copied too.
// FLOW-LABEL: flow.executable private @ex_fill {
// FLOW: func.func @fill(
// FLOW-LABEL: flow.executable private @ex_fill_fill1 {
// FLOW: flow.executable.export public @fill_fill1
// FLOW: func.func @fill_fill1(
// FLOW-LABEL: flow.executable private @ex_write {
flow.executable private @ex_fill {
  flow.executable.export public @fill workgroups() -> (index, index, index) {
    %x, %y, %z = iree_tensor_ext.dispatch.workgroup_count_from_slice()
    flow.return %x, %y, %z : index, index, index
  }
  builtin.module {
    func.func @fill(%arg0: !iree_tensor_ext.dispatch.tensor<writeonly:tensor<8xf32>>) {
      %cst = arith.constant 0.000000e+00 : f32
      %0 = tensor.empty() : tensor<8xf32>
      %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<8xf32>) -> tensor<8xf32>
      iree_tensor_ext.dispatch.tensor.store %1, %arg0, offsets = [0], sizes = [8], strides = [1] : tensor<8xf32> -> !iree_tensor_ext.dispatch.tensor<writeonly:tensor<8xf32>>
      return
    }
  }
}
flow.executable private @ex_write {
  flow.executable.export public @write workgroups() -> (index, index, index) {
    %x, %y, %z = iree_tensor_ext.dispatch.workgroup_count_from_slice()
    flow.return %x, %y, %z : index, index, index
  }
  builtin.module {
    func.func @write(%arg0: !iree_tensor_ext.dispatch.tensor<readonly:tensor<2x4xf32>>, %arg1: !iree_tensor_ext.dispatch.tensor<readwrite:tensor<2x4xf32>>) {
      %0 = iree_tensor_ext.dispatch.tensor.load %arg0, offsets = [0, 0], sizes = [2, 4], strides = [1, 1] : !iree_tensor_ext.dispatch.tensor<readonly:tensor<2x4xf32>> -> tensor<2x4xf32>
      iree_tensor_ext.dispatch.tensor.store %0, %arg1, offsets = [0, 0], sizes = [2, 4], strides = [1, 1] : tensor<2x4xf32> -> !iree_tensor_ext.dispatch.tensor<readwrite:tensor<2x4xf32>>
      return
    }
  }
}
// FLOW-LABEL: util.func public @fills_for_two_writers
// FLOW-SAME: (%[[X:[^:]*]]: tensor<2x4xf32>, %[[Y:[^:]*]]: tensor<2x4xf32>)
// FLOW: %[[FILL:.+]] = flow.dispatch @ex_fill::@fill() : () -> tensor<8xf32>
// FLOW: %[[VIEW:.+]] = flow.tensor.reshape %[[FILL]] : tensor<8xf32> -> tensor<2x4xf32>
// FLOW: %[[OWN:.+]] = flow.dispatch @ex_fill_fill1::@fill_fill1() : () -> tensor<8xf32>
// FLOW: %[[OWN_VIEW:.+]] = flow.tensor.reshape %[[OWN]] : tensor<8xf32> -> tensor<2x4xf32>
// FLOW: %[[A:.+]] = flow.dispatch @ex_write::@write(%[[X]], %[[OWN_VIEW]]) : (tensor<2x4xf32>, tensor<2x4xf32>) -> %[[OWN_VIEW]]
// FLOW: %[[B:.+]] = flow.dispatch @ex_write::@write(%[[Y]], %[[VIEW]]) : (tensor<2x4xf32>, tensor<2x4xf32>) -> %[[VIEW]]
// FLOW: util.return %[[A]], %[[B]]
util.func public @fills_for_two_writers(%arg0: tensor<2x4xf32>, %arg1: tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>) {
  %0 = flow.dispatch @ex_fill::@fill() : () -> tensor<8xf32>
  %1 = flow.tensor.reshape %0 : tensor<8xf32> -> tensor<2x4xf32>
  %2 = flow.dispatch @ex_write::@write(%arg0, %1) : (tensor<2x4xf32>, tensor<2x4xf32>) -> %1
  %3 = flow.dispatch @ex_write::@write(%arg1, %1) : (tensor<2x4xf32>, tensor<2x4xf32>) -> %1
  util.return %2, %3 : tensor<2x4xf32>, tensor<2x4xf32>
}

/// A fill written in place and also read: merged back, the reader could see
/// the write. The writer gets its own.
// FLOW-LABEL: util.func public @fill_written_and_read
// FLOW: %[[FILL:.+]] = flow.dispatch @ex_fill::@fill()
// FLOW: %[[VIEW:.+]] = flow.tensor.reshape %[[FILL]]
// FLOW: %[[OWN:.+]] = flow.dispatch @ex_fill_fill2::@fill_fill2()
// FLOW: %[[OWN_VIEW:.+]] = flow.tensor.reshape %[[OWN]]
// FLOW: flow.dispatch @ex_write::@write(%{{.+}}, %[[OWN_VIEW]]) : {{.+}} -> %[[OWN_VIEW]]
// FLOW: util.return %{{.+}}, %[[VIEW]]
util.func public @fill_written_and_read(%arg0: tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>) {
  %0 = flow.dispatch @ex_fill::@fill() : () -> tensor<8xf32>
  %1 = flow.tensor.reshape %0 : tensor<8xf32> -> tensor<2x4xf32>
  %2 = flow.dispatch @ex_write::@write(%arg0, %1) : (tensor<2x4xf32>, tensor<2x4xf32>) -> %1
  util.return %2, %1 : tensor<2x4xf32>, tensor<2x4xf32>
}

/// A fill with one writer and no other user: nothing to merge it with.
// FLOW-LABEL: util.func public @negative_fill_with_one_writer
// FLOW-NOT: @ex_fill_fill
// FLOW: util.return
util.func public @negative_fill_with_one_writer(%arg0: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %0 = flow.dispatch @ex_fill::@fill() : () -> tensor<8xf32>
  %1 = flow.tensor.reshape %0 : tensor<8xf32> -> tensor<2x4xf32>
  %2 = flow.dispatch @ex_write::@write(%arg0, %1) : (tensor<2x4xf32>, tensor<2x4xf32>) -> %1
  util.return %2 : tensor<2x4xf32>
}

/// A computed value written in place twice: stream's copy-on-write clones
/// it, and those clones are kept (measured: two scatters into `2 * x`).
// FLOW-LABEL: util.func public @negative_computed_value_written_twice
// FLOW-NOT: @ex_fill_fill
// FLOW: util.return
util.func public @negative_computed_value_written_twice(%arg0: tensor<2x4xf32>, %arg1: tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>) {
  %0 = flow.dispatch @ex_write::@write(%arg0, %arg1) : (tensor<2x4xf32>, tensor<2x4xf32>) -> %arg1
  %1 = flow.dispatch @ex_write::@write(%arg0, %0) : (tensor<2x4xf32>, tensor<2x4xf32>) -> %0
  %2 = flow.dispatch @ex_write::@write(%arg1, %0) : (tensor<2x4xf32>, tensor<2x4xf32>) -> %0
  util.return %1, %2 : tensor<2x4xf32>, tensor<2x4xf32>
}

// ---- rewrite-flow: inputs written in place ----------------------------------

/// An input updated in place (hal.tensor.alias onto its buffer) is taken out
/// of the closing barrier, which IREE 3.13 turns into a copy of the whole
/// buffer: the other result is computed from the written value, so it is
/// ready only after the write, and the fence still waits for it.
// FLOW-LABEL: util.func public @alias_out_of_barrier
// FLOW: %[[NEW:.+]] = arith.addf
// FLOW: hal.tensor.alias wait(%{{.+}}) => %[[NEW]]
// FLOW: %[[READ:.+]] = arith.mulf %[[NEW]], %[[NEW]]
// FLOW: %[[JOINED:.+]] = hal.tensor.barrier join(%[[READ]] : tensor<4xf32>) => %arg3 : !hal.fence
// FLOW: hal.tensor.export %[[JOINED]]
util.func public @alias_out_of_barrier(%arg0: !hal.buffer_view, %arg1: !hal.buffer_view, %arg2: !hal.fence, %arg3: !hal.fence) -> !hal.buffer_view {
  %0 = hal.tensor.import wait(%arg2) => %arg0 : !hal.buffer_view -> tensor<4xf32>
  %1 = hal.tensor.import wait(%arg2) => %arg1 : !hal.buffer_view -> tensor<4xf32>
  %2 = arith.addf %0, %1 : tensor<4xf32>
  %3 = hal.tensor.alias wait(%arg2) => %2 : tensor<4xf32> to %arg1 : !hal.buffer_view
  %4 = arith.mulf %2, %2 : tensor<4xf32>
  %5:2 = hal.tensor.barrier join(%3, %4 : tensor<4xf32>, tensor<4xf32>) => %arg3 : !hal.fence
  %6 = hal.tensor.export %5#1 : tensor<4xf32> -> !hal.buffer_view
  util.return %6 : !hal.buffer_view
}

/// A result not computed from the written value could be ready first: the
/// alias stays in the barrier (and IREE copies), so the fence waits for it.
// FLOW-LABEL: util.func public @negative_alias_no_other_result_reads
// FLOW: %[[ALIAS:.+]] = hal.tensor.alias
// FLOW: hal.tensor.barrier join(%[[ALIAS]], %{{.+}} : tensor<4xf32>, tensor<4xf32>)
util.func public @negative_alias_no_other_result_reads(%arg0: !hal.buffer_view, %arg1: !hal.buffer_view, %arg2: !hal.fence, %arg3: !hal.fence) -> !hal.buffer_view {
  %0 = hal.tensor.import wait(%arg2) => %arg0 : !hal.buffer_view -> tensor<4xf32>
  %1 = hal.tensor.import wait(%arg2) => %arg1 : !hal.buffer_view -> tensor<4xf32>
  %2 = arith.addf %0, %1 : tensor<4xf32>
  %3 = hal.tensor.alias wait(%arg2) => %2 : tensor<4xf32> to %arg1 : !hal.buffer_view
  %4 = arith.mulf %0, %0 : tensor<4xf32>
  %5:2 = hal.tensor.barrier join(%3, %4 : tensor<4xf32>, tensor<4xf32>) => %arg3 : !hal.fence
  %6 = hal.tensor.export %5#1 : tensor<4xf32> -> !hal.buffer_view
  util.return %6 : !hal.buffer_view
}
