"""GPU leases: one prepared command per lease, and the reports of what it brought back
(docs/guide/gpu.md)."""
