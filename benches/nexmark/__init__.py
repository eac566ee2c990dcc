"""Nexmark for eddyline: an event generator, the queries, and a harness."""
