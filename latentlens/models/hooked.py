"""The TransformerLens root every latentlens model inherits from."""

from __future__ import annotations

from typing import Any

import torch
from transformer_lens import ActivationCache, HookedRootModule


class HookedModel(HookedRootModule):
    """A ``HookedRootModule`` whose ``run_with_cache`` returns an ``ActivationCache``.

    A plain ``HookedRootModule`` returns ``(output, dict)``; TransformerLens users expect
    ``(output, ActivationCache)``, as ``HookedTransformer`` gave them. Subclasses call
    ``self.setup()`` at the end of ``__init__``.
    """

    def run_with_cache(
        self, *model_args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, ActivationCache]:
        """Forward pass caching hook activations. Pass ``names_filter`` to cache only what
        you need: an unfiltered cache holds every intermediate of the pass."""
        output, cache_dict = super().run_with_cache(*model_args, **kwargs)
        has_batch_dim = not kwargs.get("remove_batch_dim", False)
        return output, ActivationCache(cache_dict, self, has_batch_dim=has_batch_dim)
