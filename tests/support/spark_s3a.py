"""Spark settings for the suites that reach the S3 API server through S3A."""

from __future__ import annotations

import os

#: Comma-separated paths of the hadoop-aws and AWS SDK bundle jars that give a
#: test Spark session Hadoop's S3A filesystem (``.ci/run`` fetches them).
S3A_JARS_ENV = "EDDYLINE_TEST_S3A_JARS"


def spark_s3a_test_conf() -> tuple[dict[str, str] | None, str]:
    """Spark settings that load Hadoop's S3A filesystem for the test suites, or
    ``(None, why)`` when the jars named by ``EDDYLINE_TEST_S3A_JARS`` are missing.

    The jars ``.ci/run`` extracts (hadoop-aws 3.3.1 with AWS SDK 1.11) are older
    than pyspark's Hadoop client (3.4/3.5), whose defaults they cannot parse:
    durations with units (``60s``) and SDK-v2 credential provider classes. The
    settings give those as plain numbers and name the v1 provider. Endpoint and
    keys are set by the tests (:func:`eddyline.spark.s3a_settings`).

    Example:
        >>> conf, why = spark_s3a_test_conf()
        >>> conf is None or "spark.jars" in conf
        True
    """
    listed = [p for p in os.environ.get(S3A_JARS_ENV, "").split(",") if p.strip()]
    if not listed:
        return None, f"{S3A_JARS_ENV} is not set (.ci/run fetches the S3A jars)"
    missing = [p for p in listed if not os.path.isfile(p)]
    if missing:
        return None, f"{S3A_JARS_ENV} names missing jars: {missing}"
    prefix = "spark.hadoop.fs.s3a."
    numeric = {
        "threads.keepalivetime": "60",
        "connection.establish.timeout": "5000",
        "connection.timeout": "200000",
        "multipart.purge.age": "86400",
        "connection.ttl": "300000",
        "assumed.role.session.duration": "1800",
        "retry.interval": "500",
        "retry.throttle.interval": "100",
        "connection.request.timeout": "0",
    }
    conf = {prefix + k: v for k, v in numeric.items()}
    conf["spark.jars"] = ",".join(listed)
    conf[prefix + "impl"] = "org.apache.hadoop.fs.s3a.S3AFileSystem"
    conf[prefix + "aws.credentials.provider"] = (
        "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
    )
    return conf, ""
