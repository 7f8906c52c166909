"""Small helpers every layer uses: content hashes of arrays.

:func:`update_array_digest` is the one way nepcore hashes array content: the structures
HDF5 checksum (``content_sha256``, :mod:`nepcore.data.structures_h5`), the training data hash a
checkpoint carries (:mod:`nepcore.training.stage`) and the starting parameters' hash all feed
their arrays through it, so equal content always gives equal digests.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import numpy as np

__all__ = ["sha256_arrays", "update_array_digest"]


def update_array_digest(digest: "hashlib._Hash", name: str, array: np.ndarray, layout: bool = True) -> None:
    """Feed ``name`` and ``array``'s bytes (C order) into ``digest``.

    Args:
        digest: a hashlib object (e.g. ``hashlib.sha256()``), updated in place.
        name: a label hashed before the data, so that the same bytes under another name differ.
        array: any numeric or bool array (object and string arrays are not hashable this way).
        layout: also hash the dtype and shape, so that e.g. a (2, 3) and a (3, 2) array with
            the same bytes differ. False reproduces hashes made from the name and bytes alone.
    """
    array = np.ascontiguousarray(array)
    if array.dtype.kind in "OUS":
        raise TypeError(f"{name}: cannot hash a {array.dtype} array by its bytes")
    digest.update(name.encode())
    if layout:
        digest.update(f"|{array.dtype.str}|{array.shape}|".encode())
    digest.update(array.tobytes())


def sha256_arrays(named_arrays: Iterable[tuple[str, np.ndarray]], layout: bool = True) -> str:
    """Hex SHA-256 of ``(name, array)`` pairs in the given order (see :func:`update_array_digest`).

    Args:
        named_arrays: the arrays with their labels, in a fixed order.
        layout: hash dtypes and shapes too.

    Returns:
        The 64-character hex digest.
    """
    digest = hashlib.sha256()
    for name, array in named_arrays:
        update_array_digest(digest, name, array, layout)
    return digest.hexdigest()
