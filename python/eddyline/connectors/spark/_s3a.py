"""Spark's side of object stores: ``s3://`` locations as Hadoop's S3A filesystem
sees them (``s3a://``), and a clear error when the Spark session lacks it.

eddyline writes objects through its own storage layer (``core/src/store.rs`` on
object_store, ``storage_options`` over the ``AWS_*`` environment variables);
Spark reads and writes them through Hadoop's S3A connector, which the pip
pyspark package does not ship. A cluster adds it with
``--packages org.apache.hadoop:hadoop-aws:<its Hadoop version>`` and configures
it with ``spark.hadoop.fs.s3a.*`` settings (:func:`s3a_settings` maps eddyline's
``storage_options`` to them). Only S3 is wired up and tested here; ``gs://`` and
``az://`` locations are refused (:func:`spark_location`).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..._storage import is_object_store_uri
from ...errors import StorageError

__all__ = ["S3A_HELP", "missing_s3a", "s3a_settings", "spark_location"]

S3A_HELP = (
    "Spark needs Hadoop's S3A filesystem for s3:// locations: start it with "
    "--packages org.apache.hadoop:hadoop-aws:<the Hadoop version of your Spark> "
    "(or spark.jars = hadoop-aws and the AWS SDK bundle jars) and configure "
    "spark.hadoop.fs.s3a.* (endpoint, credentials; see eddyline.spark.s3a_settings)"
)

_S3A_MISSING = (
    "org.apache.hadoop.fs.s3a.S3AFileSystem not found",
    'No FileSystem for scheme "s3a"',
    "No FileSystem for scheme: s3a",
    "NoClassDefFoundError: com/amazonaws",
    "NoClassDefFoundError: software/amazon/awssdk",
)


def spark_location(uri: str, *, what: str) -> str | None:
    """``uri`` as Spark names it when it is an object store URI (``s3a://`` for
    ``s3://``), ``None`` for a local path.

    Raises:
        StorageError: For object stores other than S3 (not tested with Spark here).
    """
    if not is_object_store_uri(uri):
        return None
    scheme, _, rest = uri.partition("://")
    if scheme.lower() not in ("s3", "s3a"):
        raise StorageError(
            f"{what}: {uri!r} is on an object store Spark is not wired up for here; "
            "s3:// locations are supported (through Hadoop's S3A filesystem), gs:// and "
            "az:// are not tested yet: use ed.DeltaSink or ed.ParquetSink for them",
            uri=uri,
        )
    if not rest.split("/", 1)[0]:
        raise StorageError(f"{what}: the URI {uri!r} names no bucket", uri=uri)
    return "s3a://" + rest.rstrip("/")


def missing_s3a(exc: BaseException, uri: str, what: str) -> StorageError | None:
    """A :class:`StorageError` saying what to install when ``exc`` (from Spark) means
    the session has no S3A filesystem (a ``ClassNotFoundException`` for
    ``S3AFileSystem``, no filesystem for scheme ``s3a``, or the AWS SDK missing)."""
    text = str(exc)
    if not any(marker in text for marker in _S3A_MISSING):
        return None
    first = next((line for line in text.splitlines() if line.strip()), type(exc).__name__)
    return StorageError(f"{what}: Spark cannot reach {uri!r}: {first.strip()}. {S3A_HELP}", uri=uri)


def s3a_settings(storage_options: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``spark.hadoop.fs.s3a.*`` settings that reach the store eddyline's
    ``storage_options`` (or, for keys not given, the ``AWS_*`` environment
    variables) describe.

    Pass them to ``SparkSession.builder.config(...)`` (or ``spark-submit
    --conf``) so that Spark reads and writes the same bucket as eddyline;
    Hadoop's S3A connector itself must be installed (``--packages
    org.apache.hadoop:hadoop-aws:<Hadoop version>``).

    Example:
        >>> s3a_settings({"aws_endpoint_url": "http://127.0.0.1:9000",
        ...               "aws_allow_http": "true"})["spark.hadoop.fs.s3a.path.style.access"]
        'true'
    """
    import os

    options = {k.lower(): v for k, v in (storage_options or {}).items()}

    def get(key: str) -> str | None:
        return options.get(key) or os.environ.get(key.upper())

    out = {"spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem"}
    endpoint = get("aws_endpoint_url") or get("aws_endpoint")
    if endpoint:
        out["spark.hadoop.fs.s3a.endpoint"] = endpoint
        # A custom endpoint (MinIO, moto, ...) serves buckets as paths, as
        # object_store addresses it unless virtual-hosted style is asked for.
        virtual = (get("aws_virtual_hosted_style_request") or "false").lower() == "true"
        out["spark.hadoop.fs.s3a.path.style.access"] = "false" if virtual else "true"
        if endpoint.startswith("http://"):
            out["spark.hadoop.fs.s3a.connection.ssl.enabled"] = "false"
    key, secret = get("aws_access_key_id"), get("aws_secret_access_key")
    if key and secret:
        out["spark.hadoop.fs.s3a.access.key"] = key
        out["spark.hadoop.fs.s3a.secret.key"] = secret
        out["spark.hadoop.fs.s3a.aws.credentials.provider"] = (
            "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        )
        token = get("aws_session_token")
        if token:
            out["spark.hadoop.fs.s3a.session.token"] = token
            out["spark.hadoop.fs.s3a.aws.credentials.provider"] = (
                "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
            )
    region = get("aws_region") or get("aws_default_region")
    if region:
        out["spark.hadoop.fs.s3a.endpoint.region"] = region
    return out
