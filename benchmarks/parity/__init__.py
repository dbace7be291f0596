"""Parity with the official code: both codes trained on the same configurations, and the plain-
PyTorch twin (docs/RESULTS.md)."""
