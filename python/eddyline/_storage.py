"""Which paths storage can serve: local paths and ``file://`` URIs.

DESIGN.md "Where the data lives" puts object stores behind one storage
layer; until it exists, a URI with another scheme (``s3://``, ``gs://``, ...)
is refused with a :class:`~eddyline.errors.StorageError` naming it, instead of
being written to a local directory called ``s3:`` (issue 12, item 6).

Example:
    >>> local_path("file:///tmp/out", what="ParquetSink")
    '/tmp/out'
    >>> local_path("out/dir", what="ParquetSink")
    'out/dir'
    >>> local_path("s3://bucket/out", what="ParquetSink")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    eddyline.errors.StorageError: ParquetSink: the URI scheme 's3' of 's3://bucket/out' is not ...
"""

from __future__ import annotations

import os
import re
from typing import Final

from .errors import StorageError

__all__ = ["local_path"]

_URI: Final = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$", re.DOTALL)


def local_path(value: str | os.PathLike[str], *, what: str) -> str:
    """The local path ``value`` names: itself, or the path of a ``file://`` URI.

    Args:
        value: A local path or a URI.
        what: What the path is for (``"ParquetSink"``, ``"checkpoint dir"``, ...),
            named in the error.

    Raises:
        StorageError: For a URI whose scheme is not ``file``, or a ``file://``
            URI that does not name an absolute path on this host.
    """
    path = os.fspath(value)
    if not isinstance(path, str):
        return path
    match = _URI.match(path)
    if match is None:
        return path
    scheme, rest = match.group(1), match.group(2)
    if scheme.lower() == "file":
        local = rest[len("localhost") :] if rest.startswith("localhost") else rest
        if local.startswith("/"):
            return local
        raise StorageError(
            f"{what}: the file:// URI {path!r} does not name an absolute path on this host "
            "(write file:///dir/name)",
            uri=path,
        )
    raise StorageError(
        f"{what}: the URI scheme {scheme!r} of {path!r} is not supported yet: eddyline reads "
        "and writes local paths and file:// URIs only (object stores such as s3:// are not "
        "implemented); use a local path",
        uri=path,
    )
