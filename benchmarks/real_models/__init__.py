"""Real pretrained models: the atlas's extraction speed, codes beside SDPA, K-composition
(docs/atlas/)."""
