"""Robustness: runs killed at random moments and resumed bit for bit (docs/guide/training.md)."""
