"""What the equations say about composition: the pair operators a latent code can select.

With the pattern held fixed, the map from key x_k to query q's output is the pair's value
network. For the linear value network it is W_{q,k} = sum_h a[h,q,k] W_h^O W_h^V: the set
of all pair operators spans at most H dimensions, and with one head every pair applies a
scalar multiple of the same operator (nothing is composed). The mlp value network with
identity activation gives (sum_h a_h W_h^O)(sum_g a_g W_g^V), quadratic in the code: its
span grows to H(H+1)/2, and again collapses to one operator with one head.
"""

from __future__ import annotations

import pytest
import torch

from latentlens.models import Attention, AttentionConfig


def pair_operator_rank(variant: str, n_heads: int, seq: int = 4, d_model: int = 6) -> int:
    cfg = AttentionConfig.from_variant(
        variant, d_model=d_model, n_heads=n_heads, qk_dim=2 * n_heads, v_dim=2 * n_heads
    )
    torch.manual_seed(n_heads)
    attn = Attention(cfg).double().eval()
    with torch.no_grad():
        for param in attn.parameters():
            param.normal_()
    codes = torch.randn(1, n_heads, seq, seq, dtype=torch.float64)
    attn.hook_pattern.add_hook(lambda pattern, hook: codes)
    x = torch.randn(1, seq, d_model, dtype=torch.float64)
    jac = torch.autograd.functional.jacobian(lambda inp: attn(inp)[0], x)[:, :, 0]
    operators = jac.permute(0, 2, 1, 3).reshape(seq * seq, d_model * d_model)
    return int(torch.linalg.matrix_rank(operators))


@pytest.mark.parametrize("variant", ["softmax", "linear", "linear_rms_head"])
def test_linear_value_network_spans_one_operator_per_head(variant: str) -> None:
    assert pair_operator_rank(variant, n_heads=1) == 1
    assert pair_operator_rank(variant, n_heads=3) == 3


@pytest.mark.parametrize("variant", ["hyla_mlp_linear", "hyla_mlp_linear_no_rms_head"])
def test_mlp_value_network_composes_quadratically_in_the_code(variant: str) -> None:
    assert pair_operator_rank(variant, n_heads=1) == 1
    assert pair_operator_rank(variant, n_heads=3) == 6  # H (H + 1) / 2


def test_single_head_rms_code_is_a_sign_and_hyla_picks_one_of_two_operations() -> None:
    cfg = AttentionConfig.from_variant("hyla", d_model=5, n_heads=1, qk_dim=3, v_dim=4)
    torch.manual_seed(0)
    attn = Attention(cfg).double().eval()
    with torch.no_grad():
        for param in attn.parameters():
            param.normal_()
    seen: dict[str, torch.Tensor] = {}
    attn.hook_attn_scores.add_hook(lambda t, hook: seen.setdefault("s", t))
    attn.hook_pattern.add_hook(lambda t, hook: seen.setdefault("a", t))
    x = torch.randn(2, 6, 5, dtype=torch.float64)
    out = attn(x)
    scores, codes = seen["s"][:, 0], seen["a"][:, 0]
    # a = s / sqrt(s^2 + eps) is the sign of s up to eps / (2 s^2), eps = 1e-6
    bound = 1e-6 / (2 * scores.square()) + 1e-12
    assert torch.all((codes - scores.sign()).abs() <= bound)
    # z = sum_k a relu(a u_k) = sum_k a|a| relu(sign(a) u_k): every pair applies one of two
    # operations, u -> W^O relu(u) or u -> -W^O relu(-u), scaled by a^2 ~ 1
    values = x @ attn.W_V[0] + attn.b_V[0]  # [batch, key, d_v]
    sign = codes.sign()[..., None]
    chosen = (codes * codes.abs())[..., None] * torch.relu(sign * values[:, None])
    expected = chosen.sum(2) @ attn.W_O[0] + attn.b_O
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
