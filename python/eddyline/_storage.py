"""Which paths storage can serve.

DESIGN.md "Where the data lives" puts object stores behind one storage layer
(``core/src/store.rs``). Checkpoints, savepoints and ``restore_from`` take local
paths, ``file://`` URIs and object store URIs (``s3://``, ``gs://``, ``az://``,
``abfss://``; see :func:`storage_location`); the file sources and sinks take
local paths and ``file://`` URIs so far (:func:`local_path`). Any other URI is
refused with a :class:`~eddyline.errors.StorageError` naming it, instead of
being written to a local directory called ``s3:``. Sinks on an object store
are probed before the job runs (:func:`probe_writable`), as checkpoint storage
is, so a missing bucket, wrong credentials or an unreachable endpoint is a
``StorageError`` naming the sink, the URI and the endpoint.

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
import uuid
from collections.abc import Mapping
from typing import Any, Final

from .errors import StorageError

__all__ = [
    "OBJECT_STORE_SCHEMES",
    "checked_storage_options",
    "is_object_store_uri",
    "endpoint_of",
    "local_path",
    "probe_writable",
    "storage_failure",
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


_ENDPOINT_KEYS: Final = {
    "s3": ("aws_endpoint_url", "aws_endpoint", "endpoint_url", "endpoint"),
    "gs": ("google_service_endpoint", "endpoint"),
    "az": ("azure_storage_endpoint", "azure_endpoint", "endpoint"),
}
_ENDPOINT_ENV: Final = {
    "s3": ("AWS_ENDPOINT_URL", "AWS_ENDPOINT"),
    "gs": ("GOOGLE_SERVICE_ENDPOINT",),
    "az": ("AZURE_STORAGE_ENDPOINT", "AZURE_ENDPOINT"),
}
_DEFAULT_ENDPOINT: Final = {
    "s3": "the AWS default endpoint",
    "gs": "the Google Cloud Storage default endpoint",
    "az": "the Azure default endpoint",
}


def _store_family(uri: str) -> str:
    scheme = uri.split("://", 1)[0].lower()
    return "s3" if scheme.startswith("s3") else "gs" if scheme.startswith("g") else "az"


def endpoint_of(uri: str, options: Mapping[str, str]) -> str:
    """The endpoint requests for ``uri`` go to, as the storage layer picks it:
    ``storage_options`` first, then the standard environment variables.

    Example:
        >>> endpoint_of("s3://b/x", {"aws_endpoint_url": "http://127.0.0.1:9000"})
        'http://127.0.0.1:9000'
    """
    family = _store_family(uri)
    lowered = {k.lower(): v for k, v in options.items()}
    for key in _ENDPOINT_KEYS[family]:
        if lowered.get(key):
            return lowered[key]
    for var in _ENDPOINT_ENV[family]:
        if os.environ.get(var):
            return os.environ[var]
    return _DEFAULT_ENDPOINT[family]


_S3_CODE: Final = re.compile(r"<Code>([^<]+)</Code>")
_HINTS: Final = {
    "NoSuchBucket": "the bucket does not exist",
    "InvalidAccessKeyId": "the access key is not known to the store: check the credentials",
    "SignatureDoesNotMatch": "the secret key does not match: check the credentials",
    "AccessDenied": "access is denied: check the credentials and their permissions",
    "InvalidToken": "the session token is invalid: check the credentials",
    "ExpiredToken": "the session token expired: renew the credentials",
}


def _reason(cause: BaseException) -> str:
    """A one-line reason for a failed request: the store's error code and what it
    means, or that the endpoint did not answer, or the error's first line."""
    text = str(cause)
    code = _S3_CODE.search(text)
    if code is not None:
        name = code.group(1).strip()
        return f"{name} ({_HINTS.get(name, 'the store refused the request')})"
    lowered = text.lower()
    if any(
        marker in lowered
        for marker in ("connection refused", "error sending request", "dns error", "timed out")
    ):
        return "the endpoint cannot be reached (nothing answers there)"
    first = text.strip().splitlines()[0] if text.strip() else type(cause).__name__
    return first if len(first) <= 300 else first[:297] + "..."


def probe_writable(
    uri: str,
    options: Mapping[str, str],
    *,
    what: str,
    operator: str,
    store: Any | None = None,
) -> None:
    """Writes and removes one probe object under the object store URI ``uri``, so
    that a missing bucket, wrong credentials or an unreachable endpoint is known
    before the job runs, as for checkpoints (docs/DESIGN.md "Where the data lives").

    The probe's name starts with ``.``, which readers of the location ignore.

    Args:
        uri: The object store location the sink writes to.
        options: The ``storage_options`` it is reached with.
        what: The kind of sink (``"ParquetSink"``), named in the error.
        operator: The sink operator's name.
        store: The ``StoreDir`` to probe in, when the sink writes under a
            sub-prefix of ``uri`` with options of its own; else one for ``uri``.

    Raises:
        StorageError: Naming the operator, the URI, the endpoint and the cause
            (kept as ``__cause__``).
    """
    from ._core import StoreDir

    probe = f".eddyline-probe-{uuid.uuid4().hex}"
    try:
        target = store if store is not None else StoreDir(uri, dict(options) or None)
        target.put(probe, b"probe")
        target.remove(probe)
    except (StorageError, OSError) as exc:
        raise storage_failure(exc, uri, options, what=what, operator=operator) from exc


def storage_failure(
    exc: BaseException, uri: str, options: Mapping[str, str], *, what: str, operator: str
) -> StorageError:
    """The :class:`StorageError` for a failed request of a built-in sink's storage:
    it names the sink, the URI, the endpoint and the short reason; the caller
    raises it ``from exc`` so the store's full answer stays the ``__cause__``.

    Example:
        >>> err = storage_failure(OSError("Generic S3 error: <Code>NoSuchBucket</Code>"),
        ...     "s3://b/t", {"aws_endpoint_url": "http://127.0.0.1:9"}, what="DeltaSink",
        ...     operator="out")
        >>> print(err)
        DeltaSink 'out': cannot write to 's3://b/t' at endpoint http://127.0.0.1:9: \
NoSuchBucket (the bucket does not exist)
    """
    where = f" at endpoint {endpoint_of(uri, options)}" if is_object_store_uri(uri) else ""
    return StorageError(
        f"{what} '{operator}': cannot write to {uri!r}{where}: {_reason(exc)}",
        operator=operator,
        uri=uri,
    )
