"""The TransformerLens root every latentlens model inherits from."""

from __future__ import annotations

from typing import Any

import torch
from transformer_lens import ActivationCache, HookedRootModule
from transformer_lens.hook_points import HookPoint as LensHookPoint


class HookPoint(LensHookPoint):
    """TransformerLens's ``HookPoint`` whose forward hooks must keep the activation's
    shape, device and dtype: a hook returning a tensor of another shape raises, naming the
    hook, instead of being broadcast silently into the rest of the pass; one on another
    device or of another dtype raises instead of computing on (a meta tensor's garbage, a
    float16's rounding)."""

    def add_hook(self, hook: Any, dir: str = "fwd", **kwargs: Any) -> None:  # noqa: A002
        if dir != "fwd":
            return super().add_hook(hook, dir=dir, **kwargs)

        def shape_kept(tensor: torch.Tensor, hook: LensHookPoint) -> Any:
            result = user_hook(tensor, hook=hook)
            if not isinstance(result, torch.Tensor):
                return result
            if result.shape != tensor.shape:
                raise ValueError(
                    f"the hook on {self.name} returned shape {list(result.shape)}; it must "
                    f"return the activation's shape {list(tensor.shape)} (or None)"
                )
            if result.device != tensor.device or result.dtype != tensor.dtype:
                raise ValueError(
                    f"the hook on {self.name} returned a {result.dtype} tensor on "
                    f"{result.device}; it must return the activation's {tensor.dtype} on "
                    f"{tensor.device} (e.g. `.to(tensor)`), or None"
                )
            return result

        user_hook = hook
        shape_kept.__name__ = getattr(hook, "__name__", "hook")
        return super().add_hook(shape_kept, dir=dir, **kwargs)


def any_hooked(points: Any) -> bool:
    """Whether any of the hook ``points`` has a forward or backward hook: a fused path
    that never forms their tensors must then give way to the one that does."""
    return any(point._forward_hooks or point._backward_hooks for point in points)


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
