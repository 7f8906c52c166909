"""Small helpers every layer uses: the one atomic file writer and content hashes.

Every file nepcore writes (structures.h5, qscaler.json, checkpoint.pt, nep.txt, loss.out,
status.json, the *.out tables, metrics.json, the PNGs, demo.xyz, train.xyz) goes through
:func:`atomic_path` or :func:`atomic_open`: the content is written to a temporary
``.<name>.<random>.tmp`` file in the destination folder, flushed to disk and moved onto the
final name with ``os.replace``. A reader therefore sees the old file or the whole new one, and
an interrupted run leaves no half-written output under the final name.

The temporary file is created with ``os.open(..., 0o666)`` so that the umask decides its
permissions exactly as for ``open(path, "w")`` (``tempfile.mkstemp`` would make it 0600,
hiding results from whoever shares the folder).

:func:`update_array_digest` is the one way nepcore hashes array content: the structures
HDF5 checksum (``content_sha256``, :mod:`nepcore.data.structures_h5`), the training data hash a
checkpoint carries (:mod:`nepcore.training.stage`) and the starting parameters' hash all feed
their arrays through it, so equal content always gives equal digests. :func:`sha256_file`
hashes a file's bytes (the source files of a dataset, an exported model).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

import numpy as np

from nepcore.errors import OutputError, writing

__all__ = [
    "atomic_open",
    "atomic_path",
    "atomic_write_text",
    "sha256_arrays",
    "sha256_file",
    "update_array_digest",
]


def _create_temporary(path: Path) -> Path:
    """Create an empty, new temporary file beside ``path`` with the umask's permissions."""
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        os.close(fd)
        return tmp
    raise FileExistsError(f"{path}: could not create a temporary file beside it")


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; move it onto ``path`` when the block succeeds.

    For writers that take a file name (h5py, torch.save, matplotlib, ase.io). The temporary
    file already exists (empty, with the umask's permissions); writers that truncate it keep
    those permissions. On any exception (KeyboardInterrupt included) it is removed and
    ``path`` is left untouched. The parent folder is created if needed. A read-only folder,
    a full disk or a file in the way becomes :class:`~nepcore.errors.OutputError` ("cannot
    write <path>: <reason>"), naming ``path`` and not the temporary file.

    Args:
        path: the final file name.

    Returns:
        A context manager yielding the temporary :class:`~pathlib.Path` to write.
    """
    path = Path(path)
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = _create_temporary(path)
    try:
        try:
            yield tmp
        except OSError as err:
            if _about_the_output(err, tmp):
                raise OutputError.from_os_error(path, err) from err
            raise
        with writing(path):
            _fsync(tmp)
            os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


#: errno values that only a write can raise (a full disk, a read-only file system).
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})


def _about_the_output(err: OSError, tmp: Path) -> bool:
    """Whether an OSError from the writer's block concerns the output being written (a full
    disk, the temporary file itself) rather than an input the block reads."""
    return err.errno in _WRITE_ERRNOS or (err.filename is not None and Path(err.filename) == tmp)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary file beside ``path`` for writing; ``os.replace`` it on success.

    Args:
        path: the final file name.
        mode: ``"w"`` (text) or ``"wb"`` (binary).
        encoding: text encoding (ignored in binary mode).

    Returns:
        A context manager yielding the open file object.
    """
    with atomic_path(path) as tmp, open(tmp, mode, encoding=None if "b" in mode else encoding) as fh:
        yield fh


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; returns ``path`` as a Path."""
    with atomic_open(path) as fh:
        fh.write(text)
    return Path(path)


def sha256_file(path: str | os.PathLike) -> str:
    """Hex SHA-256 digest of a file's bytes (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def update_array_digest(digest: hashlib._Hash, name: str, array: np.ndarray, layout: bool = True) -> None:
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
