"""Causal tests of fuzzy logic's latent codes: swap the final query's codes for a donor's,
and steer them along a decoder's direction (docs/methods/probes.md, "Interventions on
the codes").

The code is the vector of attention weights over heads, a(·, q, k); here q is the final
query (the position whose output is the prediction) and k every key, in one layer or
several. Every intervention replaces weights at ``hook_pattern``: the model then mixes its
values with the new weights, everything else computed as usual.

*Swap.* A donor problem is built for each problem: ``one-term`` keeps every input and
changes the function in one of its K terms; ``random-combination`` keeps every input and
draws another combination; ``same-combination`` keeps the function and the query input and
draws the context inputs afresh. The problem's final-query codes are replaced by the
donor's; ``moved`` is the least-squares fraction of the donor run's change of the
prediction that the swap reproduces, Σ(p_swap − p)(p_donor − p) / Σ(p_donor − p)²
(1: the codes carry the whole difference; 0: none of it).

*Steer.* A ridge decoder maps the layer's final-query codes to the K·L term bits. For bit
j, the smallest edit of an example's codes that changes the decoded bit by one, toward the
other value, is δ = s·w_j / ‖w_j‖² (s = +1 where the bit is 0, −1 where it is 1). The
prediction's change is compared with the change toward the function with that bit flipped
(``toward``: Σ Δp (y_flip − y) / Σ (y_flip − y)²) and with the same edits along random
directions of equal norm (the control).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from latentlens.models import pattern_hook_name
from latentlens.probes.interventions import PARTS, rows_of, stream_keepers
from latentlens.probes.linear import label_permutations, ridge_decoding
from latentlens.probes.source import hooks_change_nothing, last_positions_kwargs

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from latentlens.probes.source import HookedLike
    from latentlens.tasks import Batch
    from latentlens.tasks.fuzzy_logic import FuzzyLogicTask

DONOR_KINDS = ("one-term", "random-combination", "same-combination")
# Random directions of the steering control: the smallest p-value they give is 1 / 21.
RANDOM_DIRECTIONS = 20
RIDGE_ALPHA = 1.0


def donor_problems(
    task: FuzzyLogicTask, batch: Batch, kind: str, generator: torch.Generator
) -> Batch:
    """A donor for every problem of ``batch`` (see the module docstring): ``one-term``
    replaces one of its K terms (drawn uniformly) by a term the model was trained on and the
    combination lacks; ``random-combination`` draws K such terms, a set other than its own;
    ``same-combination`` keeps the terms and the query input, drawing the context inputs."""
    if kind not in DONOR_KINDS:
        raise ValueError(f"kind={kind!r} is unknown; choose one of {list(DONOR_KINDS)}")
    terms = batch.labels["term_indices"].cpu()
    x = batch.inputs[..., :-1].cpu()
    seen = task.config.num_term_kinds - task.config.num_heldout_terms
    if kind == "same-combination":
        fresh = torch.rand(x.shape, generator=generator)
        fresh[:, -1] = x[:, -1]
        return task.problems(terms.to(task.device), fresh.to(task.device))
    donors = []
    for row in terms.tolist():
        if kind == "one-term":
            others = [t for t in range(seen) if t not in row]
            slot = int(torch.randint(len(row), (1,), generator=generator))
            pick = others[int(torch.randint(len(others), (1,), generator=generator))]
            donor = [*row[:slot], pick, *row[slot + 1 :]]
        else:
            while True:
                donor = torch.randperm(seen, generator=generator)[: len(row)].tolist()
                if set(donor) != set(row):
                    break
        donors.append(sorted(donor))
    return task.problems(torch.tensor(donors, device=task.device), x.to(task.device))


def final_query_run(
    model: HookedLike, batch: Batch, layers: Sequence[int], queries: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The output at the last ``queries or 1`` positions ``[batch, queries, d_output]``
    and the codes :func:`final_query_codes` returns, from one pass. The model computes the
    last block's queries at those positions alone."""
    names = [pattern_hook_name(layer) for layer in layers]
    rows = -1 if queries is None else slice(-queries, None)
    only = last_positions_kwargs(model, queries or 1)
    with torch.no_grad():
        output, cache = model.run_with_cache(batch.inputs, names_filter=names, **only)
    codes = torch.stack([cache[name][:, :, rows, :] for name in names], dim=1)
    return output[:, -(queries or 1) :], codes


def final_query_codes(
    model: HookedLike, batch: Batch, layers: Sequence[int], queries: int | None = None
) -> torch.Tensor:
    """The final query's codes ``[batch, layer, head, key]`` in ``layers``; with
    ``queries``, the last ``queries`` positions' ``[batch, layer, head, queries, key]``.
    The model computes the last block's queries at those positions alone."""
    return final_query_run(model, batch, layers, queries)[1]


def run_with_final_codes(
    model: HookedLike,
    inputs: torch.Tensor,
    replaced: dict[int, torch.Tensor] | None = None,
    queries: int = 1,
    keep: list[tuple[str, Callable]] | None = None,
    start_at_layer: int | None = None,
) -> torch.Tensor:
    """The model's output at the last ``queries`` positions ``[batch, queries, d_output]``
    (in eval mode, without gradients) with the codes of those query positions of each layer
    in ``replaced`` put in place (layer -> ``[batch, head, queries, key]``, or
    ``[batch, head, key]`` for one query). The model computes the last block's queries,
    MLP and readout at those positions alone where it can. ``keep``: hooks that read the
    pass and change nothing (:func:`~latentlens.probes.interventions.stream_keepers`);
    ``start_at_layer`` l: ``inputs`` is the stream entering block l, where the pass starts
    (a model that :func:`~latentlens.probes.source.starts_at_layer`)."""
    hooks = list(keep or [])
    for layer, codes in (replaced or {}).items():

        def hook(pattern: torch.Tensor, hook: object, codes: torch.Tensor = codes) -> torch.Tensor:
            pattern = pattern.clone()
            rows = pattern[:, :, -queries:, :]
            rows.copy_(codes.reshape(rows.shape))
            return pattern

        hooks.append((pattern_hook_name(layer), hook))
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            only = last_positions_kwargs(model, queries)
            if start_at_layer is not None:
                only["start_at_layer"] = start_at_layer
            return model.run_with_hooks(inputs, fwd_hooks=hooks, **only)[:, -queries:]
    finally:
        model.train(was_training)


def predictions(
    model: HookedLike,
    batch: Batch,
    replaced: dict[int, torch.Tensor] | None = None,
    entering: dict[int, torch.Tensor] | None = None,
) -> torch.Tensor:
    """The model's prediction ``[batch]`` at the final position, with the final query's
    codes of each layer in ``replaced`` (layer -> ``[batch, head, key]``) put in place.
    ``entering``: the streams entering blocks in ``batch``'s clean pass (:func:`clean_run`);
    the pass then starts at the first block replaced, where one of them enters it."""
    first = min(replaced or {}, default=None)
    if entering and first in entering:
        output = run_with_final_codes(model, entering[first], replaced, start_at_layer=first)
    else:
        output = run_with_final_codes(model, batch.inputs, replaced)
    return output[:, -1, 0]


def clean_run(model: HookedLike, batch: Batch) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
    """``predictions(model, batch)`` and the streams entering its later blocks, kept from
    the same pass where the model :func:`~latentlens.probes.source.starts_at_layer` (else
    none): a pass with codes replaced from block l on starts there (:func:`predictions`'s
    ``entering``), the same numbers bit for bit."""
    entering: dict[int, torch.Tensor] = {}
    keep = stream_keepers(model, range(len(getattr(model, "blocks", ()))), entering)
    return run_with_final_codes(model, batch.inputs, keep=keep)[:, -1, 0], entering


def fraction_moved(change: torch.Tensor, reference: torch.Tensor) -> tuple[float, float]:
    """Σ change·reference / Σ reference² over examples (``[n]`` each), and its standard
    error from the spread of the same ratio over
    :data:`~latentlens.probes.interventions.PARTS` parts of the examples (as every
    intervention's)."""
    change, reference = change.double().cpu(), reference.double().cpu()
    whole = float((change * reference).sum() / reference.square().sum())
    parts = [
        float((c * r).sum() / r.square().sum())
        for c, r in zip(change.tensor_split(PARTS), reference.tensor_split(PARTS), strict=True)
        if r.square().sum() > 0
    ]
    error = float(np.std(parts, ddof=1) / len(parts) ** 0.5) if len(parts) > 1 else float("nan")
    return whole, error


def r2_against(prediction: torch.Tensor, batch: Batch) -> float:
    """The task's R² of ``prediction`` ``[batch]`` against ``batch``'s targets."""
    error = (prediction - batch.targets).square() / batch.labels["target_variance"]
    return float(1.0 - error.mean())


@dataclass(frozen=True)
class SwapResult:
    """A swap of the final query's codes in ``layers`` from ``donor`` problems.

    ``moved`` ± ``moved_se``: the fraction of the donor run's prediction change the swap
    reproduces; ``r2_own`` / ``r2_donor``: R² of the swapped predictions against the
    problem's and the donor's targets, beside ``r2_own_clean`` (no swap) and
    ``r2_donor_run`` (the model run on the donor problem, against the donor's targets).
    """

    donor: str
    layers: tuple[int, ...]
    examples: int
    moved: float
    moved_se: float
    r2_own_clean: float
    r2_own: float
    r2_donor: float
    r2_donor_run: float

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def swap_codes(
    model: HookedLike,
    batch: Batch,
    donor: Batch,
    layers: Sequence[int],
    donor_name: str,
    clean: torch.Tensor | None = None,
    entering: dict[int, torch.Tensor] | None = None,
) -> SwapResult:
    """Swap ``batch``'s final-query codes in ``layers`` for ``donor``'s (same size);
    ``clean``: ``predictions(model, batch)`` where the caller has them already, and
    ``entering`` the streams its pass brought to later blocks (:func:`clean_run`): the
    swapped pass starts at the first layer swapped."""
    if len(donor) != len(batch):
        raise ValueError(f"donor has {len(donor)} problems, batch {len(batch)}: pass equal sizes")
    layers = tuple(layers)
    was_training = model.training
    model.eval()  # as predictions() runs the model
    try:
        donor_output, codes = final_query_run(model, donor, layers)
    finally:
        model.train(was_training)
    # the donor's own run from the same pass, where reading its codes changes nothing
    same = hooks_change_nothing(model)
    donor_run = donor_output[:, -1, 0] if same else predictions(model, donor)
    clean = predictions(model, batch) if clean is None else clean
    replaced = {layer: codes[:, i] for i, layer in enumerate(layers)}
    swapped = predictions(model, batch, replaced, entering)
    moved, error = fraction_moved(swapped - clean, donor_run - clean)
    return SwapResult(
        donor_name, layers, len(batch), moved, error,
        r2_against(clean, batch), r2_against(swapped, batch), r2_against(swapped, donor),
        r2_against(donor_run, donor),
    )  # fmt: skip


def fit_bit_decoder(codes: torch.Tensor, bits: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Ridge (alpha :data:`RIDGE_ALPHA`, unpenalised intercept) from ``codes`` ``[n, d]``
    to ``bits`` ``[n, t]``: the weights ``[t, d]`` (float64) and the mean R² on the fit."""
    from sklearn.linear_model import Ridge  # noqa: PLC0415 (scikit-learn loads slowly)

    x, y = codes.double().cpu().numpy(), bits.double().cpu().numpy()
    ridge = Ridge(alpha=RIDGE_ALPHA).fit(x, y)
    return torch.from_numpy(np.atleast_2d(ridge.coef_)), float(ridge.score(x, y))


def flipped_targets(task: FuzzyLogicTask, batch: Batch, bit: int) -> torch.Tensor:
    """The targets ``[batch]`` of each problem's function with term bit ``bit`` (of the
    K·L, term-major) flipped: a literal of one term negated."""
    variables = task.config.num_variables
    term, variable = divmod(bit, variables)
    terms = batch.labels["term_indices"].clone()
    terms[:, term] ^= 1 << (variables - 1 - variable)
    return task.problems(terms, batch.inputs[..., :-1]).targets


@dataclass(frozen=True)
class SteerResult:
    """Steering layer ``layer``'s final-query codes along bit ``bit``'s decoder direction.

    ``edit_norm``: ‖δ‖ = 1 / ‖w_bit‖; ``change``: mean |Δp| over problems; ``toward`` ±
    ``toward_se``: the fraction of the way to the bit-flipped function's targets; the same
    edits along :data:`RANDOM_DIRECTIONS` random directions of equal norm give
    ``random_change`` (their mean) and ``random_toward`` (mean and 5th–95th percentiles);
    ``p_value``: (1 + random directions changing the output at least as much) / (1 + count).
    """

    layer: int
    bit: int
    examples: int
    edit_norm: float
    change: float
    toward: float
    toward_se: float
    random_change: float
    random_change_band: tuple[float, float]
    random_toward: float
    random_toward_band: tuple[float, float]
    p_value: float

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def steer_codes(
    model: HookedLike,
    task: FuzzyLogicTask,
    batch: Batch,
    layer: int,
    weights: torch.Tensor,
    bit: int,
    seed: int = 0,
    directions: int = RANDOM_DIRECTIONS,
) -> SteerResult:
    """Steer ``batch``'s final-query codes of ``layer`` along ``weights[bit]`` (a decoder's
    weights ``[bits, head x key]`` on the flattened codes), toward each problem's other
    value of the bit, and along ``directions`` random directions of the same norm."""
    codes = final_query_codes(model, batch, [layer])[:, 0]  # [batch, head, key]
    row = weights[bit].to(codes)
    norm = float(row.norm())
    if norm == 0:
        raise ValueError(f"the decoder's weights of bit {bit} are zero: there is no direction")
    signs = 1.0 - 2.0 * batch.labels["term_bits"].flatten(1)[:, bit].to(codes)  # +1 if bit 0
    clean = predictions(model, batch)
    flip = flipped_targets(task, batch, bit) - batch.targets

    def edited(direction: torch.Tensor) -> torch.Tensor:
        step = signs[:, None] * direction.reshape(1, -1) / norm  # ‖step‖ = 1 / ‖w‖
        return predictions(model, batch, {layer: codes + step.reshape(codes.shape)}) - clean

    change = edited(row / norm)
    toward, toward_se = fraction_moved(change, flip)
    generator = torch.Generator().manual_seed(seed)
    random_changes, random_toward = [], []
    for _ in range(directions):
        direction = torch.randn(row.shape, generator=generator, dtype=torch.float64).to(codes)
        other = edited(direction / direction.norm())
        random_changes.append(float(other.abs().mean()))
        random_toward.append(fraction_moved(other, flip)[0])
    size = float(change.abs().mean())
    band = lambda values: tuple(float(v) for v in np.percentile(values, [5, 95]))  # noqa: E731
    return SteerResult(
        layer, bit, len(batch), 1.0 / norm, size, toward, toward_se,
        float(np.mean(random_changes)), band(random_changes),
        float(np.mean(random_toward)), band(random_toward),
        (1 + sum(c >= size for c in random_changes)) / (1 + directions),
    )  # fmt: skip


def code_decoding_by_key(
    codes: torch.Tensor, bits: torch.Tensor, seed: int = 0, permutations: int = 20
) -> dict[str, object]:
    """Where the terms live in the final query's codes ``[n, layer, head, key]``: ridge R²
    (first half fits, second half scores) of the term bits ``[n, K·L]`` from the codes of
    each layer to each key (``by_key`` ``[layer][key]``), from all keys of a layer
    (``pooled`` ``[layer]``) and from every layer's self-code (``self_all_layers``: the
    official protocol's features), each beside ``permutations`` label permutations."""
    half = len(codes) // 2
    y = bits.double().cpu().numpy()
    x = codes.double().cpu().numpy()
    shuffle = label_permutations(len(codes), 1, seed)[0]  # one order for every decoder
    x, y = x[shuffle], y[shuffle]

    def score(features: np.ndarray) -> dict[str, object]:
        flat = features.reshape(len(features), -1)
        return ridge_decoding(
            flat[:half], y[:half], flat[half:], y[half:], alpha=RIDGE_ALPHA, seed=seed,
            permutations=permutations,
        ).to_dict()  # fmt: skip

    layers, keys = codes.shape[1], codes.shape[3]
    return {
        "by_key": [[score(x[:, layer, :, key]) for key in range(keys)] for layer in range(layers)],
        "pooled": [score(x[:, layer]) for layer in range(layers)],
        "self_all_layers": score(x[:, :, :, -1]),
    }


def code_interventions(
    model: HookedLike,
    task: FuzzyLogicTask,
    examples: int = 1_024,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> dict[str, object]:
    """Every analysis of this module on one fuzzy-logic model, on training combinations
    with the fixed query input (the official protocol's problems): where the codes carry
    the terms (:func:`code_decoding_by_key`, on ``examples`` problems), the three swaps in
    each layer and in all layers together, and steering along each term bit's decoder
    direction in each layer (the decoder fit on the first half, the edits made on the
    second)."""
    generator = task.make_generator(seed)
    batch = task.sample(2 * examples, "train", generator, inputs="fixed_query")
    bits = batch.labels["term_bits"].flatten(1).float()
    layers = list(range(len(model.blocks)))
    codes = final_query_codes(model, batch, layers)
    results: dict[str, object] = {"decoding": code_decoding_by_key(codes, bits, seed)}
    if progress:
        progress("decoding")
    fit, held = slice(0, examples), slice(examples, 2 * examples)
    held_batch = rows_of(batch, held)
    swaps = []
    donor_generator = torch.Generator().manual_seed(seed + 1)
    clean = predictions(model, held_batch)
    for kind in DONOR_KINDS:
        donor = donor_problems(task, held_batch, kind, donor_generator)
        for chosen in [[layer] for layer in layers] + ([layers] if len(layers) > 1 else []):
            swaps.append(swap_codes(model, held_batch, donor, chosen, kind, clean).to_dict())
    results["swaps"] = swaps
    if progress:
        progress("swaps")
    steering = []
    for layer in layers:
        weights, _ = fit_bit_decoder(codes[fit, layer].flatten(1), bits[fit])
        for bit in range(bits.shape[1]):
            steering.append(
                steer_codes(model, task, held_batch, layer, weights, bit, seed).to_dict()
            )
    results["steering"] = steering
    if progress:
        progress("steering")
    return results
