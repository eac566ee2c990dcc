"""Damaged Parquet files for the tests that check a reader never touches a
column it does not need (projection pushdown, SQL column pruning)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq


def corrupt_column(path: Path, column: str) -> None:
    """Overwrites every chunk of ``column`` in the uncompressed Parquet file
    ``path`` with bytes no Parquet reader can decode."""
    meta = pq.ParquetFile(path).metadata
    index = meta.schema.to_arrow_schema().get_field_index(column)
    data = bytearray(path.read_bytes())
    for group in range(meta.num_row_groups):
        chunk = meta.row_group(group).column(index)
        start = chunk.dictionary_page_offset or chunk.data_page_offset
        data[start : start + chunk.total_compressed_size] = b"\xff" * chunk.total_compressed_size
    path.write_bytes(bytes(data))
