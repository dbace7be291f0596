"""Probe a trained run: the task's latent-code protocol, written to ``runs/NAME/probes/``.

- fuzzy logic (docs/methods/probes.md): the last token's self-code with a fixed query,
  decoded to the term bits by ridge (fit on one half of the held-out-combination split,
  R² on the other); clustering against the term combinations; topographic similarity
  against the term bits; head ablations and latent-code patching on that split.
- SRAVEN: the final query's codes towards the same feature in panels 6 and 7, a classifier
  of that feature's rule fit on in-distribution tasks and scored on OOD tasks; clustering
  and topographic similarity against the rule; head ablations; swapping the codes of two
  rules.
- modular ICL: ridge decoding of z from every layer (fit in-distribution, R² OOD); head
  ablations.

Everything lands in ``probes/results.json``; figures read it, never the model.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from latentlens.models.registry import resolve_model_kind
from latentlens.probes.code_interventions import (
    DONOR_KINDS,
    clean_run,
    donor_problems,
    swap_codes,
)
from latentlens.probes.codes import (
    CodeSet,
    embedding_of,
    fuzzy_logic_codes,
    sraven_codes,
    sraven_key_positions,
)
from latentlens.probes.decoding import decoding_table
from latentlens.probes.health import (
    HealthNote,
    constant_codes,
    dead_value_networks,
    not_learned,
)
from latentlens.probes.interventions import (
    head_ablation_table,
    patch_latent_code,
    stream_keepers,
    swap_rule_codes,
    task_metric,
)
from latentlens.probes.sraven_swaps import sraven_code_swaps
from latentlens.probes.structure import (
    CLUSTER_SCORES,
    CLUSTERINGS,
    all_identical,
    cluster_scores,
    topographic_similarity,
)
from latentlens.probes.tracking import LatentDecodingTracker
from latentlens.progress import progress_bar
from latentlens.tasks.sraven import RULE_NAMES
from latentlens.training.checkpoint import atomic_write_bytes, select_checkpoint
from latentlens.training.run_dir import RunDirectory
from latentlens.training.trainer import Trainer

RESULTS = "results.json"


def probes_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "probes"


def read_probe_results(run_dir: str | Path) -> dict[str, Any]:
    """The results ``latentlens probe`` wrote for a run."""
    path = probes_dir(run_dir) / RESULTS
    if not path.is_file():
        raise ValueError(f"{run_dir} has no {path.name}: run `latentlens probe {run_dir}` first")
    return json.loads(path.read_text())


def _structure(codes: CodeSet) -> dict[str, Any]:
    """Clustering and topographic similarity; codes that do not vary (e.g. HYLA's self-code,
    which depends on the token alone, with a fixed query whose residual the context never
    reaches) are recorded as undefined with the reason instead of stopping the run."""
    features = codes.features()
    if all_identical(features):
        note = "all codes are identical: clustering and topographic similarity are undefined"
        undefined = dict.fromkeys(CLUSTER_SCORES)
        clustering = {method: dict(undefined) for method in CLUSTERINGS}
        return {
            "clustering": {**clustering, "note": note},
            "topography": {"rho": None, "p_value": None, "note": note},
        }
    try:
        topography = topographic_similarity(features, codes.factors)
    except ValueError as err:  # the examples it draws may still all coincide
        topography = {"rho": None, "p_value": None, "note": str(err)}
    return {"clustering": cluster_scores(features, codes.groups), "topography": topography}


def probe_fuzzy_logic(trainer: Trainer, examples: int, embedding: str, step: Callable) -> dict:
    model, task = trainer.model, trainer.task
    codes = fuzzy_logic_codes(model, task, "test", examples)
    step("codes")
    results: dict[str, Any] = {"decoding": decoding_table(codes, folds=2)}
    step("decoding")
    results.update(_structure(codes))
    step("structure")
    names = ["terms " + "+".join(map(str, c)) for c in task.combinations["test"].tolist()]
    results["embedding"] = embedding_of([codes], embedding, names, "term combination")
    results["health"] = constant_codes(codes.codes, "fixed-query self-codes, split 'test'")
    batch = trainer.evaluation_set("test")  # the evaluation's examples: one baseline
    results["ablation"] = head_ablation_table(model, task, batch)
    source = task.sample(len(batch), "test", task.make_generator(8))
    last = task.config.seq_len - 1
    flat = codes.codes.flatten(2)  # [examples, layer, head * key]
    constant = {layer for layer in range(flat.shape[1]) if all_identical(flat[:, layer])}
    layers = range(codes.codes.shape[1])
    entering: dict[int, torch.Tensor] = {}  # the streams of the baseline's pass
    unpatched = task_metric(model, task, batch, stream_keepers(model, layers, entering))
    results["patching"] = [  # a layer whose codes carry nothing is not patched
        {"layer": layer, "query": last, "key": last,
         **patch_latent_code(model, task, batch, source, layer, last, last,
                             baseline=unpatched, entering=entering).to_dict()}
        for layer in layers if layer not in constant
    ]  # fmt: skip
    donors, (clean, streams) = torch.Generator().manual_seed(9), clean_run(model, batch)
    results["code_swaps"] = [  # the final query's codes to every key, from a donor problem
        swap_codes(model, batch, donor_problems(task, batch, kind, donors), [layer], kind,
                   clean, streams).to_dict()
        for kind in DONOR_KINDS
        for layer in layers
    ]  # fmt: skip
    step("interventions")
    results["protocol"] = (
        "codes: a[:, T-1, T-1] per layer and head, fixed query, split 'test' (held-out "
        "combinations); decoding: ridge (alpha 1) to the K*L term bits, 2-fold; structure: "
        "clusters vs term combinations, topographic similarity vs term bits"
    )
    return results


def probe_sraven(trainer: Trainer, examples: int, embedding: str, step: Callable) -> dict:
    model, task = trainer.model, trainer.task
    fit = sraven_codes(model, task, "test_unpermuted", examples)
    test = sraven_codes(model, task, "ood_unpermuted", examples, seed=1)
    step("codes")
    results: dict[str, Any] = {"decoding": decoding_table(fit, test)}
    step("decoding")
    results.update(_structure(test))
    step("structure")
    results["embedding"] = embedding_of([fit, test], embedding, list(RULE_NAMES), "rule")
    results["health"] = constant_codes(test.codes, "final query's codes, split 'ood_unpermuted'")
    batch = trainer.evaluation_set("ood_unpermuted")  # the evaluation's examples
    results["ablation"] = head_ablation_table(model, task, batch, metric="feature_accuracy")
    rules = batch.labels["answer_rules"][:, -1]
    keys = sraven_key_positions(batch, task.config.num_features)[:, 1]
    last_layer = fit.codes.shape[1] - 1
    swaps = []
    for rule_a, rule_b in ((0, 1), (1, 3), (5, 6)):
        if (rules == rule_a).any() and (rules == rule_b).any():
            result = swap_rule_codes(
                model, task, batch, rules, rule_a, rule_b, last_layer, -1, keys,
                metric="feature_accuracy",
            )  # fmt: skip
            swaps.append(
                {"rules": [RULE_NAMES[rule_a], RULE_NAMES[rule_b]], "layer": last_layer,
                 **result.to_dict()}
            )  # fmt: skip
    results["rule_swaps"] = swaps
    # the final queries' codes to every key, from a donor whose rules differ in one feature
    results["rule_code_swaps"] = sraven_code_swaps(model, task, min(examples, 1_024))
    step("interventions")
    results["protocol"] = (
        "codes: the final query towards the same feature in panels 6 and 7, per layer and "
        "head; decoding: logistic regression of that feature's rule, fit on "
        "'test_unpermuted', scored on 'ood_unpermuted'; structure on the OOD codes"
    )
    return results


def probe_modular_icl(trainer: Trainer, examples: int, embedding: str, step: Callable) -> dict:
    tracker = LatentDecodingTracker(examples=examples)
    results: dict[str, Any] = {"z_decoding": tracker.scores(trainer)}
    step("decoding")
    batch = trainer.evaluation_set("ood")  # the evaluation's examples
    results["ablation"] = head_ablation_table(trainer.model, trainer.task, batch)
    step("interventions")
    results["protocol"] = "ridge (alpha 1) from each layer's last-token residual to z, fit ID"
    return results


PROTOCOLS = {
    "fuzzy-logic": (probe_fuzzy_logic, 4),
    "sraven": (probe_sraven, 4),
    "modular-icl": (probe_modular_icl, 2),
}
# The split whose evaluation the probe's headline reads (and its ablations are measured
# on), and the chance level of its metric.
HEADLINE_SPLIT = {"fuzzy-logic": "test", "sraven": "ood_unpermuted", "modular-icl": "ood"}


def _chance(trainer: Trainer) -> float:
    """Chance of the headline metric: 0 for R², one value in V for SRAVEN's features."""
    config = trainer.task.config
    return 1.0 / config.num_values if trainer.task_name == "sraven" else 0.0


def evaluation_and_health(trainer: Trainer, results: dict[str, Any]) -> dict[str, Any]:
    """Every split's metrics with standard errors over its evaluation batches, and the
    health notes (dead value networks on the headline split's evaluation set, a task not
    learned), added to the protocol's (constant codes)."""
    split = HEADLINE_SPLIT[trainer.task_name]
    evaluation = {s: trainer.evaluate(s, errors=True) for s in trainer.task.eval_splits}
    batch = trainer.evaluation_set(split)
    notes = [
        *[HealthNote(**note) for note in results.get("health", [])],
        *dead_value_networks(trainer.model, trainer.task, batch),
        *not_learned(trainer.task_name, evaluation[split], split, _chance(trainer)),
    ]
    return {"evaluation": evaluation, "evaluation_examples": trainer.train_cfg.eval_examples,
            "headline_split": split, "health": [note.to_dict() for note in notes]}  # fmt: skip


def probe_protocol(config: dict[str, Any]) -> tuple[Callable, int]:
    """The protocol of a run's stored ``config`` and its number of stages; a ``ValueError``
    where there is none (the encoder-decoder's translation, whose analysis is recorded while
    it trains)."""
    task, kind = config["task"]["name"], resolve_model_kind(config.get("model_kind", "transformer"))
    if kind == "transformer" and task in PROTOCOLS or task == "modular-icl":
        return PROTOCOLS[task]
    problem = f"latentlens probe has no protocol for the {kind} model on "
    if task != "translation":
        raise ValueError(problem + task)
    raise ValueError(
        problem + "translation: its analysis is recorded while it trains (fuse weights "
        "and routing in RUN/tracking/*.safetensors, CTER and BLEU in "
        "RUN/tracking/translation_quality.jsonl); draw it with: latentlens figures RUN"
    )


def check_probe_run(run_dir: str | Path, checkpoint: int | None = None) -> None:
    """What :func:`probe_run` would refuse about ``run_dir``, found from its files alone
    (no model is built): not a run, no protocol for its task and model, no such checkpoint."""
    directory = RunDirectory(run_dir)
    probe_protocol(directory.read_config())
    select_checkpoint(directory.checkpoints, checkpoint)


def probe_run(
    run_dir: str | Path,
    examples: int = 2_048,
    embedding: str = "pca",
    checkpoint: int | None = None,
    device: str = "auto",
    quiet: bool = False,
    evaluation_examples: int | None = None,
) -> dict[str, Any]:
    """Run the task's probes on a trained run and write ``probes/results.json``.
    ``evaluation_examples``: how much of the run's fixed evaluation set (its first examples)
    the metrics and the head ablations read (default: the run's ``eval_examples``)."""
    protocol, stages = probe_protocol(RunDirectory(run_dir).read_config())
    trainer = Trainer.load(run_dir, checkpoint, device)
    if evaluation_examples is not None:
        if evaluation_examples < 1:
            raise ValueError(f"evaluation_examples={evaluation_examples}: at least 1 is needed")
        trainer.train_cfg = replace(trainer.train_cfg, eval_examples=evaluation_examples)
    bar = progress_bar(total=stages, desc=f"probe {Path(run_dir).name}", disable=quiet, leave=False)

    def step(stage: str) -> None:
        bar.set_postfix_str(stage)
        bar.update(1)

    with bar:
        results = protocol(trainer, examples, embedding, step)
        results["health"] = [note.to_dict() for note in results.get("health", [])]
        results.update(evaluation_and_health(trainer, results))
    results = {
        "task": trainer.task_name,
        "model_kind": trainer.model_kind,
        "attention": trainer.config["model"].get("attention"),
        "step": trainer.step,
        "examples": examples,
        **results,
    }
    out = probes_dir(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out / RESULTS, (json.dumps(results, indent=1) + "\n").encode())
    return results
