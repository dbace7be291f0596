"""Token sequences with a labelled query-key pair each: the text adapter of the probes.

A researcher defines a relation between a query token and an earlier key token (e.g.
"the key is the token after the earlier occurrence of the query": induction) and gives,
per sequence, the pair and its class. :class:`TokenPairs` holds them with an in-distribution
split (``"id"``, where decoders are fit) and an out-of-distribution one (``"ood"``: held-out
combinations of the relation's factors, where they are scored); it is a
:class:`~latentlens.probes.LabelledSource`, so :func:`pair_codes`, ``extract`` and the
interventions run on it with any hooked model (a TransformerLens ``TransformerBridge``, a
latentlens token model).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from latentlens.probes.codes import CodeSet
from latentlens.probes.extraction import extract
from latentlens.probes.source import HookedLike, LabelledSource, pattern_hooks
from latentlens.tasks import Batch

SPLITS = ("id", "ood")


@dataclass(frozen=True)
class TokenPairs:
    """Token sequences, each with one labelled query-key pair.

    - ``tokens`` ``[n, pos]`` token ids (long);
    - ``query`` ``[n]``: the query position; ``keys`` ``[n, k]``: the key positions whose
      codes are read (``k`` is usually 1);
    - ``label`` ``[n]``: the relation's class id, named by ``label_names``;
    - ``ood`` ``[n]`` bool: the example belongs to a held-out combination;
    - ``factors`` ``[n, f]``: the factors that generate the example (for topographic
      similarity and held-out combinations), ``groups`` ``[n]``: its combination id;
    - ``answer`` ``[n]``: the token the model should predict at the query (``-1``: none),
      which the interventions score;
    - ``attention_mask`` ``[n, pos]`` (optional): 1 at real tokens, 0 at padding (left or
      right), for sequences of different lengths; passed to the model as
      ``attention_mask``, and the query and keys must be real tokens, so padding never
      enters a code, a decoder or an ablation's score.

    Build it with :meth:`build`, which checks every shape and names what is wrong.
    """

    tokens: torch.Tensor
    query: torch.Tensor
    keys: torch.Tensor
    label: torch.Tensor
    ood: torch.Tensor
    factors: torch.Tensor
    groups: torch.Tensor
    answer: torch.Tensor
    label_names: tuple[str, ...]
    factor_names: tuple[str, ...]
    description: str = ""
    splits: tuple[str, ...] = SPLITS
    attention_mask: torch.Tensor | None = None

    @classmethod
    def build(
        cls,
        tokens: torch.Tensor,
        query: torch.Tensor | Sequence[int],
        keys: torch.Tensor | Sequence[int],
        label: torch.Tensor | Sequence[int],
        ood: torch.Tensor | Sequence[bool],
        label_names: Sequence[str] | None = None,
        factors: torch.Tensor | None = None,
        factor_names: Sequence[str] | None = None,
        answer: torch.Tensor | Sequence[int] | None = None,
        description: str = "",
        attention_mask: torch.Tensor | None = None,
    ) -> TokenPairs:
        """Validated pairs; ``keys`` may be ``[n]`` (one key each). ``factors`` default to
        the label alone, ``groups`` are the distinct factor rows, ``answer`` to none,
        ``attention_mask`` to none (no padding)."""
        tokens = torch.as_tensor(tokens)
        if tokens.ndim != 2 or tokens.dtype.is_floating_point or tokens.dtype == torch.bool:
            raise ValueError(
                f"tokens must be [examples, pos] integer token ids, got shape "
                f"{list(tokens.shape)} and dtype {tokens.dtype}"
            )
        n, pos = tokens.shape
        query, keys, label = (torch.as_tensor(x).long() for x in (query, keys, label))
        ood = torch.as_tensor(ood).bool()
        keys = keys[:, None] if keys.ndim == 1 else keys
        factors = label[:, None] if factors is None else torch.as_tensor(factors).long()
        answer = torch.full((n,), -1) if answer is None else torch.as_tensor(answer).long()
        for name, value in (("query", query), ("keys", keys), ("label", label), ("ood", ood),
                            ("factors", factors), ("answer", answer)):  # fmt: skip
            if value.ndim == 0 or len(value) != n:
                got = "a scalar" if value.ndim == 0 else f"{len(value)} rows"
                raise ValueError(
                    f"{name} has {got} but tokens has {n} sequences: give one {name} per sequence"
                )
        for name, value in (("query", query), ("keys", keys)):
            if value.min() < 0 or value.max() >= pos:
                raise ValueError(f"{name} holds positions outside [0, {pos - 1}] (the tokens')")
        mask = _checked_mask(attention_mask, tokens, query, keys)
        names = tuple(label_names or (str(i) for i in range(int(label.max()) + 1)))
        if label.min() < 0 or label.max() >= len(names):
            raise ValueError(f"label holds ids outside [0, {len(names) - 1}] (label_names')")
        for split, rows in (("id", ~ood), ("ood", ood)):
            classes = label[rows].unique()
            if len(classes) < 2:
                raise ValueError(
                    f"the {split!r} split holds {len(classes)} class of the relation "
                    f"({[names[int(c)] for c in classes]}): a decoder needs at least 2 to "
                    "tell apart; give it examples of at least two labels"
                )
        groups = torch.unique(factors, dim=0, return_inverse=True)[1]
        factor_names = tuple(factor_names or (f"factor {i}" for i in range(factors.shape[1])))
        if len(factor_names) != factors.shape[1]:
            raise ValueError(
                f"factor_names has {len(factor_names)} names for {factors.shape[1]} factors"
            )
        return cls(tokens.long(), query, keys, label, ood, factors, groups, answer, names,
                   factor_names, description, attention_mask=mask)  # fmt: skip

    def __len__(self) -> int:
        return len(self.tokens)

    def rows(self, split: str) -> torch.Tensor:
        """The example indices of ``split``."""
        if split not in self.splits:
            raise ValueError(f"split={split!r} is unknown; choose one of {list(self.splits)}")
        return torch.nonzero(self.ood if split == "ood" else ~self.ood).flatten()

    def labelled_batches(
        self,
        split: str,
        examples: int | None = None,
        batch_size: int = 256,
        seed: int = 0,
        through_query: bool = False,
    ) -> Iterator[Batch]:
        """The first ``examples`` (default: all) examples of ``split`` in a ``seed``-ed
        order, in batches; labels ``query`` ``[b]``, ``keys`` ``[b, k]``, ``label``,
        ``factors``, ``groups``, ``index`` (the row in the dataset); targets: ``answer``.
        ``through_query`` cuts each batch's tokens after its last query: for a causal
        model, whose attention at a query never reads a later token, the codes are the
        same and the tokens after them are not computed."""
        rows = self.rows(split)
        examples = len(rows) if examples is None else examples
        if isinstance(examples, bool) or not isinstance(examples, int) or examples <= 0:
            raise ValueError(f"examples={examples!r} is invalid: it must be a positive integer")
        if examples > len(rows):
            raise ValueError(
                f"examples={examples} exceeds the {len(rows)} examples of split {split!r}; "
                f"ask for at most {len(rows)} or generate more pairs"
            )
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size={batch_size!r} is invalid: it must be a positive integer")
        order = rows[torch.randperm(len(rows), generator=torch.Generator().manual_seed(seed))]
        for start in range(0, examples, batch_size):
            index = order[start : min(start + batch_size, examples)]
            batch = self.batch(index)
            yield _through(batch, int(batch.labels["query"].max()) + 1) if through_query else batch

    def batch(self, index: torch.Tensor) -> Batch:
        """The examples ``index`` as a :class:`~latentlens.tasks.Batch`."""
        labels = {
            "query": self.query[index], "keys": self.keys[index], "label": self.label[index],
            "factors": self.factors[index], "groups": self.groups[index], "index": index,
        }  # fmt: skip
        if self.attention_mask is not None:
            labels["attention_mask"] = self.attention_mask[index]
        return Batch(self.tokens[index], self.answer[index], labels)

    @staticmethod
    def model_inputs(batch: Batch) -> tuple[torch.Tensor, ...]:
        return (batch.inputs,)

    @staticmethod
    def model_kwargs(batch: Batch) -> dict[str, torch.Tensor]:
        """``attention_mask`` where the sequences are padded, else nothing (a latentlens
        token model takes no mask)."""
        mask = batch.labels.get("attention_mask")
        return {} if mask is None else {"attention_mask": mask}

    @staticmethod
    def metrics(output: torch.Tensor, batch: Batch) -> dict[str, torch.Tensor]:
        """``answer_accuracy`` (the argmax at the query is the answer) and
        ``answer_logprob`` (its log-probability), over the examples with an answer;
        ``output``: logits ``[batch, pos, vocab]``."""
        if output.ndim != 3:
            raise ValueError(f"output must be logits [batch, pos, vocab], got {list(output.shape)}")
        has = batch.targets >= 0
        if not has.any():
            raise ValueError("these pairs have no answer token to score (answer is -1 for all)")
        rows = torch.arange(len(batch), device=output.device)
        logits = output[rows, batch.labels["query"].to(output.device)][has]
        answer = batch.targets.to(output.device)[has]
        logprob = F.log_softmax(logits.float(), dim=-1).gather(1, answer[:, None])[:, 0]
        return {
            "answer_accuracy": (logits.argmax(-1) == answer).float().mean(),
            "answer_logprob": logprob.mean(),
        }


def _through(batch: Batch, length: int) -> Batch:
    """``batch`` with its tokens (and attention mask) cut to the first ``length``."""
    labels = dict(batch.labels)
    if "attention_mask" in labels:
        labels["attention_mask"] = labels["attention_mask"][:, :length]
    return Batch(batch.inputs[:, :length], batch.targets, labels)


def _checked_mask(
    mask: torch.Tensor | None, tokens: torch.Tensor, query: torch.Tensor, keys: torch.Tensor
) -> torch.Tensor | None:
    """``mask`` as a long 0/1 tensor of the tokens' shape, checked: every query and key is a
    real token (a pair on padding would read a code the model never computes)."""
    if mask is None:
        return None
    mask = torch.as_tensor(mask)
    if mask.shape != tokens.shape:
        raise ValueError(
            f"attention_mask has shape {list(mask.shape)}, the tokens {list(tokens.shape)}: "
            "give one 0/1 entry per token"
        )
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError("attention_mask holds values other than 0 and 1")
    mask = mask.long()
    rows = torch.arange(len(tokens))
    on_padding = (mask[rows, query] == 0) | (mask[rows[:, None], keys] == 0).any(dim=1)
    if bool(on_padding.any()):
        first = int(on_padding.nonzero()[0])
        raise ValueError(
            f"example {first}'s query or key lies on padding (attention_mask 0); pairs must "
            "join real tokens"
        )
    return mask


def pair_codes(
    model: HookedLike,
    source: LabelledSource,
    split: str,
    examples: int | None = None,
    batch_size: int = 256,
    seed: int = 0,
    prefix: str = "",
    module: str = "attn",
    causal: bool = False,
) -> CodeSet:
    """The latent codes of each example's labelled pair in every layer:
    ``codes[e, layer, head, j] = pattern[e, head, query_e, keys_e[j]]``, read from the
    model's ``{prefix}blocks.{layer}.{module}.hook_pattern``; target: ``label``.

    ``source``'s batches carry labels ``query`` ``[b]``, ``keys`` ``[b, k]`` and ``label``
    ``[b]`` (and, optionally, ``factors`` ``[b, f]`` and ``groups`` ``[b]``), as
    :class:`TokenPairs` does. ``examples`` defaults to the whole split of a
    :class:`TokenPairs`. ``causal``: the model's attention never reads a later token (a
    decoder), so each batch of a :class:`TokenPairs` is cut after its last query
    (the tokens after it cost time and change no code)."""
    names = pattern_hooks(model, prefix, module)

    def select(pattern: torch.Tensor, batch: Batch) -> torch.Tensor:
        missing = [k for k in ("query", "keys", "label") if k not in batch.labels]
        if missing:
            raise ValueError(
                f"the {type(source).__name__}'s batches carry no {missing} labels; pair_codes "
                "reads the pair's positions and class from them (see TokenPairs)"
            )
        if pattern.ndim != 4:
            raise ValueError(
                f"a hook_pattern of shape {list(pattern.shape)}; expected [batch, head, query, key]"
            )
        query = batch.labels["query"].to(pattern.device)
        keys = batch.labels["keys"].to(pattern.device)
        rows = torch.arange(len(query), device=pattern.device)
        by_query = pattern[rows, :, query]  # [batch, head, key]
        return by_query.gather(2, keys[:, None, :].expand(-1, pattern.shape[1], -1))

    if examples is None:
        if not isinstance(source, TokenPairs):
            raise ValueError("examples=None takes a whole split of TokenPairs; give a number")
        examples = len(source.rows(split))
    options = {"through_query": True} if causal and isinstance(source, TokenPairs) else None
    got = extract(model, source, split, names, examples, batch_size, seed,
                  select=dict.fromkeys(names, select), sample_options=options)  # fmt: skip
    label = got.labels["label"]
    return CodeSet(
        codes=torch.stack([got.activations[name] for name in names], dim=1),
        target=label,
        factors=got.labels.get("factors", label[:, None]),
        groups=got.labels.get("groups", label),
        split=split,
        target_kind="classification",
    )
