"""The size conditions a signature keeps from torch.export's guards, and their
evaluation (an evaluator of its own: a manifest is data, never eval'd)."""

from anyshape.runtime.size_conditions import from_guards, holds, readable



def test_guards_become_conditions_over_symbols_and_ranges_are_left_out():
    guards = ["L['x'].size()[0] <= L['kwargs']['mask'].size()[0]",  # a relation
              "2 <= L['x'].size()[0]",                               # a range
              "L['x'].size()[1] == 5",                               # names no symbol
              "L['x'].stride()[0] == 5",                             # not a size
              "(L['x'].size()[0] * L['x'].size()[1]) % 4 == 0"]
    dims = {("x", 0): "s0", ("x", 1): 5, ("mask", 0): "s1"}
    assert from_guards(guards, dims, ["s0", "s1"]) == ["(s0) <= (s1)", "((s0) * 5) % 4 == 0"]


def test_conditions_evaluate_with_python_semantics():
    assert holds("(s0) <= (s1)", {"s0": 3, "s1": 3}) is True
    assert holds("(s0) <= (s1)", {"s0": 4, "s1": 3}) is False
    assert holds("((-s0) % 4) == 3 and not s0 // 2 == 0", {"s0": 5}) is True  # floor semantics
    assert holds("1 < s0 <= max(s1, 2) != 7", {"s0": 2, "s1": 1}) is True  # chained
    assert holds("abs(s0 - s1) ** 2 >= 4", {"s0": 1, "s1": 4}) is True


def test_what_it_cannot_evaluate_is_unchecked_not_refused():
    assert holds("s0 in (1, 2)", {"s0": 3}) is None
    assert holds("__import__('os').getcwd()", {}) is None
    assert holds("s9 > 1", {"s0": 3}) is None  # a symbol no argument binds
    assert holds("s0 //", {"s0": 3}) is None


def test_readable_writes_dim_names():
    assert readable("(s0) <= (s12)", {"s0": "a", "s12": "b"}) == "(a) <= (b)"


def test_a_guard_on_an_input_inside_a_tuple_names_its_flattened_input():
    # step(ids, mask, *cache): torch.export writes cache's first tensor as
    # L['cache'][0] in its guards and names the input cache_0; a guard on a
    # keyword argument's tensor names it as the keyword.
    dims = {("ids", 1): "s0", ("mask", 1): "s1", ("cache_0", 2): "s2", ("cache_1", 2): "s2"}
    guards = ["L['mask'].size()[1] + ((-1)*L['ids'].size()[1]) <= L['cache'][0].size()[2]",
              "L['kwargs']['mask'].size()[1] >= L['ids'].size()[1]",
              "L['cache'][7].size()[2] > 3"]  # no such input: left out, not guessed
    assert from_guards(guards, dims, ["s0", "s1", "s2"]) == [
        "(s1) + ((-1)*(s0)) <= (s2)", "(s1) >= (s0)"]
