"""Arrays between numpy (what IREE's runtime reads and writes) and torch, in
the dtypes a signature names."""

from __future__ import annotations

import numpy as np
import torch


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype of a torch dtype's name; bfloat16 is ml_dtypes', which
    IREE reads and writes."""
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def host_tensor(array: np.ndarray, dtype: str) -> torch.Tensor:
    """A result as the torch dtype the signature says: IREE's buffers are
    signless (a uint8 result reads back as int8), and torch takes no numpy
    bfloat16 (ml_dtypes')."""
    if array.dtype.name == "bfloat16":
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    tensor = torch.from_numpy(array)
    want = getattr(torch, dtype, None)
    if isinstance(want, torch.dtype) and tensor.dtype != want and \
            tensor.element_size() == want.itemsize:
        tensor = tensor.view(want)
    return tensor
