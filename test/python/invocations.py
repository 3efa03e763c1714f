"""Which functions of a compiled module a test's calls run."""


def record_invocations(monkeypatch, module) -> list:
    """The (function, rows) of every ``module.invoke`` from now on, in order
    (function None: ``main``; rows: the first argument's dim 0)."""
    calls = []
    original = type(module).invoke

    def recorded(self, arrays, entry=None):
        calls.append((entry, arrays[0].shape[0]))
        return original(self, arrays, entry=entry)

    monkeypatch.setattr(type(module), "invoke", recorded)
    return calls
