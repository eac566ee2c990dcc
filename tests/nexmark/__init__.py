"""Nexmark: the generator and queries under benches/nexmark, checked against DuckDB."""
