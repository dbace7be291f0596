"""Speed as a user gets it: the command and its step beside the official code, and diagnoses of
the step (docs/benchmarks.md)."""
