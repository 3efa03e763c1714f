"""Which functions of a compiled module a test's calls run."""


def record_invocations(monkeypatch, module, dim: int = 0) -> list:
    """The (function, size) of every ``invoke`` of ``module``'s class from
    now on, in order (function None: ``main``; size: the first argument's
    ``dim``, 0 its rows, 1 a step's new tokens)."""
    calls = []
    original = type(module).invoke

    def recorded(self, arrays, entry=None):
        calls.append((entry, arrays[0].shape[dim]))
        return original(self, arrays, entry=entry)

    monkeypatch.setattr(type(module), "invoke", recorded)
    return calls


def record_host_copies(monkeypatch) -> list:
    """The shape of every device array copied to the host from now on."""
    import iree.runtime as rt

    copies = []
    original = rt.DeviceArray.to_host

    def counted(self):
        copies.append(tuple(self.shape))
        return original(self)

    monkeypatch.setattr(rt.DeviceArray, "to_host", counted)
    return copies


def record_calls(monkeypatch, owner, name: str) -> list:
    """The arguments (after ``self``) of every call of ``owner.name`` from
    now on, in order; the calls still run."""
    calls = []
    original = getattr(owner, name)

    def recorded(self, *args):
        calls.append(args)
        return original(self, *args)

    monkeypatch.setattr(owner, name, recorded)
    return calls
