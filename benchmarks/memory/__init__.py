"""Memory: activation memory of each attention variant, streaming probe extraction
(docs/benchmarks.md)."""
