"""``eddyline.kafka``: the import path docs/API.md gives for :func:`end_offsets`.

The Kafka connector lives in :mod:`eddyline.connectors.kafka`; this module
re-exports its public names.
"""

from __future__ import annotations

from .connectors.kafka import KafkaSink, KafkaSource, end_offsets

__all__ = ["KafkaSink", "KafkaSource", "end_offsets"]
