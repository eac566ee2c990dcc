"""Which paths storage can serve.

DESIGN.md "Where the data lives" puts object stores behind one storage layer
(``core/src/store.rs``). Checkpoints, savepoints and ``restore_from`` take local
paths, ``file://`` URIs and object store URIs (``s3://``, ``gs://``, ``az://``,
``abfss://``; see :func:`storage_location`); the file sources and sinks take
local paths and ``file://`` URIs so far (:func:`local_path`). Any other URI is
refused with a :class:`~eddyline.errors.StorageError` naming it, instead of
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
    >>> storage_location("s3://bucket/chk", what="checkpoint dir")
    's3://bucket/chk'
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Final

from .errors import StorageError

__all__ = [
    "OBJECT_STORE_SCHEMES",
    "checked_storage_options",
    "is_object_store_uri",
    "local_path",
    "storage_location",
]

_URI: Final = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$", re.DOTALL)

#: URI schemes of the object stores the storage layer serves (``store.rs``).
OBJECT_STORE_SCHEMES: Final = frozenset(
    {"s3", "s3a", "gs", "gcs", "az", "azure", "abfs", "abfss", "adl"}
)


def is_object_store_uri(value: str | os.PathLike[str]) -> bool:
    """Whether ``value`` is a URI of an object store (``s3://bucket/key``, ...)."""
    match = _URI.match(os.fspath(value)) if isinstance(os.fspath(value), str) else None
    return match is not None and match.group(1).lower() in OBJECT_STORE_SCHEMES


def storage_location(value: str | os.PathLike[str], *, what: str) -> str:
    """A location checkpoints can live at: an object store URI, or a local path.

    Args:
        value: A local path, a ``file://`` URI or an object store URI.
        what: What the location is for, named in the error.

    Raises:
        StorageError: For a URI of a scheme no store serves, or an object
            store URI without a bucket (``s3://``).
    """
    location = os.fspath(value)
    if isinstance(location, str) and is_object_store_uri(location):
        rest = location.split("://", 1)[1]
        if not rest.split("/", 1)[0]:
            raise StorageError(
                f"{what}: the URI {location!r} names no bucket or container "
                "(write s3://bucket/prefix)",
                uri=location,
            )
        return location
    return local_path(location, what=what)


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
    if scheme.lower() in OBJECT_STORE_SCHEMES:
        served = (
            "object stores serve checkpoints, savepoints and restore_from so far; this "
            "takes a local path or a file:// URI"
        )
    else:
        served = (
            "eddyline reads and writes local paths, file:// URIs and object store URIs "
            "(s3://, gs://, az://, abfss://)"
        )
    raise StorageError(
        f"{what}: the URI scheme {scheme!r} of {path!r} is not supported here: {served}",
        uri=path,
    )


def checked_storage_options(options: Mapping[str, str] | None) -> dict[str, str]:
    """``storage_options`` checked: a mapping of str to str (values given as
    bools or numbers are written as the store expects, ``"true"``/``"5"``)."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise TypeError(
            f"storage_options must be a dict of str to str, got {type(options).__name__}"
        )
    checked: dict[str, str] = {}
    for key, value in options.items():
        if not isinstance(key, str) or not key:
            raise TypeError(f"storage_options keys must be non-empty str, got {key!r}")
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, (int, float)):
            value = str(value)
        if not isinstance(value, str):
            raise TypeError(f"storage_options[{key!r}] must be a str, got {type(value).__name__}")
        checked[key.lower()] = value
    return checked
