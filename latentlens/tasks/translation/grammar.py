"""A synthetic twin of CoGnition (docs/methods/tasks.md): English story-like
sentences and a deterministic toy target language, with novel compounds held out.

Source atoms are CoGnition's (DET 5, ADJ 11, N 19, MOD 3, V 19, P 17), carried by templates
with fillers of their own (names, carrier nouns, verbs and adjectives, openers)::

    [OPENER] SUBJ VERB OBJ .                     one day taylor took the small dog .
    [OPENER] SUBJ VERB OBJ PREP NP .             she saw every car near the farm he liked .
    SUBJ VERB OBJ , CONJ PRON VERB NP .          the clown lost a hat , but he found the box .

A noun phrase is ``DET [ADJ] N [MOD]``. The target language is verb-final with postpositions
and modifiers before the noun, as Chinese and Japanese are: ``NP' = DET' CLF MOD' ADJ' N'``
(the classifier ``CLF`` is chosen by the noun's class, one of four; ``the`` and its classifier
are dropped), ``VP' = OBJ' V'``, ``PP' = NP' P'`` placed before the object, and adjectives
and verbs take one of two forms by the animacy of their noun or object, so that the lexicon
lists two acceptable translations for them. Target words are capitalised four-letter
pseudo-words (prefix-free, so a substring match of a word is a whole word)::

    one day taylor took the small dog .   ->   Rizu Kemo Soba Gufa Tane Lupi

Novelty: for each pair of atom classes that a compound binds (DET-N, ADJ-N, N-MOD, V-N for
a verb and its object, P-N for a preposition and its noun) a fraction of the pairs is held
out: no training, validation or random-test sentence holds one. CG-test compounds are drawn
with CoGnition's pattern mix (DET+N 40, DET+N+MOD 80, DET+ADJ+N 200, DET+ADJ+N+MOD 400 per
subset, scaled by ``compounds_per_subset / 720``) and each holds a held-out pair: NP compounds
in their noun phrase, VP compounds (``V NP``) in the verb-object pair, PP compounds (``P NP``)
in the preposition-noun pair. Each compound appears in ``contexts`` random sentences on
consecutive lines. Every atom keeps training pairs.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import torch

from latentlens.tasks.translation.corpus import (
    PAD,
    SPECIAL_TOKENS,
    SUBSETS,
    CompoundTest,
    Lexicon,
    ParallelCorpus,
    strip,
)

DETERMINERS = ("the", "every", "any", "another", "each")
ADJECTIVES = (
    "small",
    "red",
    "dirty",
    "lazy",
    "smart",
    "large",
    "special",
    "silly",
    "quiet",
    "empty",
    "fake",
)
NOUNS = (
    "dog",
    "doctor",
    "sandwich",
    "hat",
    "waiter",
    "lawyer",
    "peanut",
    "farmer",
    "car",
    "girl",
    "boyfriend",
    "child",
    "chair",
    "building",
    "clown",
    "bee",
    "apartment",
    "farm",
    "airplane",
)
MODIFIERS = ("he liked", "at the store", "on the floor")
VERBS = (
    "asked",
    "visited",
    "heard",
    "lost",
    "hated",
    "stopped",
    "woke",
    "found",
    "watched",
    "took",
    "saw",
    "told",
    "caught",
    "liked",
    "left",
    "gave",
    "invited",
    "met",
    "chose",
)
PREPOSITIONS = (
    "about",
    "around",
    "before",
    "behind",
    "except",
    "for",
    "from",
    "inside",
    "like",
    "near",
    "on",
    "to",
    "toward",
    "towards",
    "under",
    "with",
    "without",
)
# Noun classes: 0 person, 1 animal (both animate), 2 object, 3 place or vehicle.
NOUN_CLASSES = (1, 0, 2, 2, 0, 0, 2, 0, 3, 0, 0, 0, 2, 3, 0, 1, 3, 3, 3)
CARRIER_NOUNS = {
    "friend": 0,
    "teacher": 0,
    "nurse": 0,
    "baby": 0,
    "cat": 1,
    "bird": 1,
    "horse": 1,
    "fish": 1,
    "book": 2,
    "ball": 2,
    "box": 2,
    "cake": 2,
    "phone": 2,
    "cup": 2,
    "key": 2,
    "letter": 2,
    "house": 3,
    "park": 3,
    "school": 3,
    "boat": 3,
    "bike": 3,
    "garden": 3,
}
CARRIER_ADJECTIVES = ("old", "new", "happy", "tired", "pretty", "strange", "tiny", "funny")
CARRIER_VERBS = (
    "bought",
    "painted",
    "cleaned",
    "carried",
    "helped",
    "called",
    "followed",
    "pushed",
    "fed",
    "loved",
    "missed",
    "kept",
)
NAMES = ("taylor", "she", "he", "they", "i", "we", "sam", "alex", "jamie", "morgan")
PRONOUNS = ("he", "she", "they", "we", "i")
OPENERS = (
    "one day",
    "yesterday",
    "later",
    "suddenly",
    "that night",
    "after lunch",
    "last week",
    "at noon",
)
CONJUNCTIONS = ("and", "but", "so")
# CoGnition's compound patterns per subset (counts of 720): (adjective, modifier) present
PATTERNS = ((False, False, 40), (False, True, 80), (True, False, 200), (True, True, 400))
PAIR_KINDS = ("det_noun", "adj_noun", "noun_mod", "verb_noun", "prep_noun")
# CoGnition's atom classes (CTER's order checks read them); a modifier phrase is one atom
MODIFIER_ATOMS = {phrase: f"mod{m}" for m, phrase in enumerate(MODIFIERS)}
ATOM_CLASSES = {
    **dict.fromkeys(DETERMINERS, "DET"),
    **dict.fromkeys(ADJECTIVES, "ADJ"),
    **dict.fromkeys(NOUNS, "N"),
    **dict.fromkeys(MODIFIER_ATOMS.values(), "MOD"),
    **dict.fromkeys(VERBS, "V"),
    **dict.fromkeys(PREPOSITIONS, "P"),
}
LANGUAGE_SEED = 7  # the toy language's words are fixed, whatever the split


def _pseudo_words(count: int) -> list[str]:
    """``count`` distinct capitalised CVCV words in a fixed shuffled order."""
    consonants, vowels = "bdfgklmnprstvz", "aeiou"
    words = [
        c1.upper() + v1 + c2 + v2
        for c1, v1, c2, v2 in itertools.product(consonants, vowels, consonants, vowels)
    ]
    order = torch.randperm(len(words), generator=torch.Generator().manual_seed(LANGUAGE_SEED))
    return [words[i] for i in order[:count].tolist()]


class Language:
    """The vocabulary and the lookup tables that render drawn slots into token ids."""

    def __init__(self) -> None:
        self.adjectives = ADJECTIVES + CARRIER_ADJECTIVES
        self.nouns = NOUNS + tuple(CARRIER_NOUNS)
        self.noun_class = torch.tensor(NOUN_CLASSES + tuple(CARRIER_NOUNS.values()))
        self.verbs = VERBS + CARRIER_VERBS
        # target meanings, each one pseudo-word
        meanings = (
            [f"det:{d}" for d in DETERMINERS[1:]]
            + [f"clf:{c}" for c in range(4)]
            + [f"adj:{a}:{f}" for a in self.adjectives for f in range(2)]
            + [f"noun:{n}" for n in self.nouns]
            + [f"mod:{m}:{w}" for m in range(len(MODIFIERS)) for w in range(2)]
            + ["rel"]
            + [f"verb:{v}:{f}" for v in self.verbs for f in range(2)]
            + [f"prep:{p}" for p in PREPOSITIONS]
            + [f"name:{n}" for n in NAMES]
            + [f"opener:{o}" for o in OPENERS]
            + [f"conj:{c}" for c in CONJUNCTIONS]
            + ["comma", "period"]
        )
        self.target_word = dict(zip(meanings, _pseudo_words(len(meanings)), strict=True))
        source_words = sorted(
            {
                w
                for phrase in (
                    *DETERMINERS,
                    *self.adjectives,
                    *self.nouns,
                    *MODIFIERS,
                    *self.verbs,
                    *PREPOSITIONS,
                    *NAMES,
                    *OPENERS,
                    *CONJUNCTIONS,
                )
                for w in phrase.split()
            }
            | {",", "."}
        )
        self.tokens = [*SPECIAL_TOKENS, *source_words, *self.target_word.values()]
        self.id = {token: i for i, token in enumerate(self.tokens)}
        src = self._source_table
        tgt = self._target_table
        self.src_det, self.tgt_det = (
            src(DETERMINERS),
            tgt(["det:the", *[f"det:{d}" for d in DETERMINERS[1:]]]),
        )
        self.tgt_clf = tgt([f"clf:{c}" for c in range(4)])
        self.src_adj = src(self.adjectives)
        self.tgt_adj = tgt([[f"adj:{a}:{f}" for f in range(2)] for a in self.adjectives])
        self.src_noun, self.tgt_noun = src(self.nouns), tgt([f"noun:{n}" for n in self.nouns])
        self.src_mod = src(MODIFIERS, width=3)
        self.tgt_mod = tgt([[f"mod:{m}:0", f"mod:{m}:1", "rel"] for m in range(len(MODIFIERS))])
        self.src_verb = src(self.verbs)
        self.tgt_verb = tgt([[f"verb:{v}:{f}" for f in range(2)] for v in self.verbs])
        self.src_prep, self.tgt_prep = src(PREPOSITIONS), tgt([f"prep:{p}" for p in PREPOSITIONS])
        self.src_name, self.tgt_name = src(NAMES), tgt([f"name:{n}" for n in NAMES])
        self.src_pron = src(PRONOUNS)
        self.tgt_pron = tgt([f"name:{n}" for n in PRONOUNS])
        self.src_opener = src(OPENERS, width=2)
        self.tgt_opener = tgt([f"opener:{o}" for o in OPENERS])
        self.src_conj, self.tgt_conj = src(CONJUNCTIONS), tgt([f"conj:{c}" for c in CONJUNCTIONS])
        self.comma, self.period = self.id[","], self.id["."]
        self.tgt_comma, self.tgt_period = tgt(["comma"]).item(), tgt(["period"]).item()

    def _source_table(self, phrases: Sequence[str], width: int = 1) -> torch.Tensor:
        rows = [[self.id[w] for w in p.split()] + [PAD] * (width - len(p.split())) for p in phrases]
        table = torch.tensor(rows)
        return table[:, 0] if width == 1 else table

    def _target_table(self, meanings: Sequence[Any]) -> torch.Tensor:
        def ids(m: Any) -> Any:
            if isinstance(m, str):
                return PAD if m == "det:the" else self.id[self.target_word[m]]
            return [ids(x) for x in m]

        return torch.tensor([ids(m) for m in meanings])

    def lexicon(self) -> Lexicon:
        """CTER's lexicon of the atoms: ``the`` accepts anything; adjectives and verbs list
        both forms; a modifier is its whole relative phrase."""
        word = self.target_word
        translations: dict[str, tuple[str, ...]] = {"the": ()}
        translations.update({d: (word[f"det:{d}"],) for d in DETERMINERS[1:]})
        translations.update({a: (word[f"adj:{a}:0"], word[f"adj:{a}:1"]) for a in ADJECTIVES})
        translations.update({n: (word[f"noun:{n}"],) for n in NOUNS})
        translations.update({v: (word[f"verb:{v}:0"], word[f"verb:{v}:1"]) for v in VERBS})
        translations.update({p: (word[f"prep:{p}"],) for p in PREPOSITIONS})
        translations.update(
            {
                f"mod{m}": (word[f"mod:{m}:0"] + word[f"mod:{m}:1"] + word["rel"],)
                for m in range(len(MODIFIERS))
            }
        )
        return Lexicon(translations, ATOM_CLASSES, MODIFIER_ATOMS)

    def detokenize(self, ids: Sequence[int]) -> str:
        return " ".join(self.tokens[i] for i in strip(ids))


def held_out_pairs(
    fractions: dict[str, float], generator: torch.Generator
) -> dict[str, torch.Tensor]:
    """For each pair kind, a boolean ``[rows, cols]`` mask of held-out atom pairs: the
    given fraction of the pairs, never one of a random cover that keeps every atom a pair
    in training (one per atom of the longer axis, then one for each atom of the shorter
    axis that missed)."""
    shapes = {
        "det_noun": (len(DETERMINERS), len(NOUNS)),
        "adj_noun": (len(ADJECTIVES), len(NOUNS)),
        "noun_mod": (len(NOUNS), len(MODIFIERS)),
        "verb_noun": (len(VERBS), len(NOUNS)),
        "prep_noun": (len(PREPOSITIONS), len(NOUNS)),
    }
    masks = {}
    for kind, (rows, cols) in shapes.items():
        short, long = sorted((rows, cols))
        kept = torch.zeros(short, long, dtype=torch.bool)  # rows: the shorter axis
        kept[torch.randint(short, (long,), generator=generator), torch.arange(long)] = True
        missed = (~kept.any(1)).nonzero()[:, 0]
        kept[missed, torch.randint(long, (len(missed),), generator=generator)] = True
        kept = kept if rows <= cols else kept.T
        count = round(fractions[kind] * rows * cols)
        free = (~kept.flatten()).nonzero()[:, 0]
        if count > len(free):
            raise ValueError(
                f"TranslationConfig.heldout_{kind}={fractions[kind]} holds out {count} of "
                f"{rows * cols} pairs, but {int(kept.sum())} must stay in training so that every "
                "atom occurs there; lower it"
            )
        mask = torch.zeros(rows * cols, dtype=torch.bool)
        mask[free[torch.randperm(len(free), generator=generator)[:count]]] = True
        masks[kind] = mask.view(rows, cols)
    return masks


class Generator:
    """Draws the slots of sentences and renders them; see the module docstring."""

    def __init__(self, config: Any, heldout: dict[str, torch.Tensor], generator: torch.Generator):
        self.cfg, self.heldout, self.gen = config, heldout, generator
        self.lang = Language()

    # ------------------------------------------------------------------ draws
    def _randint(self, high: int, count: int) -> torch.Tensor:
        return torch.randint(high, (count,), generator=self.gen)

    def _chance(self, p: float, count: int) -> torch.Tensor:
        return torch.rand(count, generator=self.gen) < p

    def _pick(self, atom: torch.Tensor, atoms: int, total: int) -> torch.Tensor:
        """An atom index where ``atom``, else a carrier index (atoms first in the table)."""
        count = len(atom)
        return torch.where(
            atom, self._randint(atoms, count), atoms + self._randint(total - atoms, count)
        )

    def noun_phrases(self, count: int, modifiers: bool = True) -> dict[str, torch.Tensor]:
        """``count`` training noun phrases (``det``, ``adj`` or -1, ``noun``, ``mod`` or -1)
        that hold no held-out pair."""
        cfg, lang = self.cfg, self.lang
        nps = {name: torch.empty(count, dtype=torch.long) for name in ("det", "adj", "noun", "mod")}
        todo = torch.ones(count, dtype=torch.bool)
        while todo.any():
            n = int(todo.sum())
            det = torch.where(self._chance(cfg.the_probability, n), 0, 1 + self._randint(4, n))
            noun = self._pick(self._chance(cfg.atom_probability, n), len(NOUNS), len(lang.nouns))
            adj = self._pick(
                self._chance(cfg.atom_probability, n), len(ADJECTIVES), len(lang.adjectives)
            )
            adj = torch.where(self._chance(cfg.adjective_probability, n), adj, -1)
            mod = self._randint(len(MODIFIERS), n)
            keep_mod = self._chance(cfg.modifier_probability, n) & modifiers
            mod = torch.where(keep_mod, mod, -1)
            both = self._chance(cfg.adjective_with_modifier_probability, n)
            adj = torch.where(keep_mod & ~both, -1, adj)
            draw = {"det": det, "adj": adj, "noun": noun, "mod": mod}
            ok = ~self.np_novel(draw)
            rows = todo.nonzero()[:, 0][ok]
            for name in nps:
                nps[name][rows] = draw[name][ok]
            todo[rows] = False
        return nps

    def np_novel(self, np_: dict[str, torch.Tensor]) -> torch.Tensor:
        """Whether each noun phrase holds a held-out DET-N, ADJ-N or N-MOD pair."""
        noun = np_["noun"]
        atom_noun = noun < len(NOUNS)
        n = noun.clamp(max=len(NOUNS) - 1)
        adj, mod = np_["adj"], np_["mod"]
        det_noun = self.heldout["det_noun"][np_["det"], n]
        adj_noun = (
            (adj >= 0)
            & (adj < len(ADJECTIVES))
            & self.heldout["adj_noun"][adj.clamp(0, len(ADJECTIVES) - 1), n]
        )
        noun_mod = (mod >= 0) & self.heldout["noun_mod"][n, mod.clamp(min=0)]
        return atom_noun & (det_noun | adj_noun | noun_mod)

    def _pair_held_out(self, kind: str, first: torch.Tensor, noun: torch.Tensor, atoms: int):
        atom = (first < atoms) & (noun < len(NOUNS))
        return atom & self.heldout[kind][first.clamp(max=atoms - 1), noun.clamp(max=len(NOUNS) - 1)]

    def verbs_for(self, objects: torch.Tensor) -> torch.Tensor:
        """A verb per object noun, never a held-out verb-object pair."""
        lang = self.lang
        verb = self._pick(
            self._chance(self.cfg.atom_probability, len(objects)), len(VERBS), len(lang.verbs)
        )
        while (bad := self._pair_held_out("verb_noun", verb, objects, len(VERBS))).any():
            verb[bad] = self._randint(len(lang.verbs), int(bad.sum()))
        return verb

    def prepositions_for(self, nouns: torch.Tensor) -> torch.Tensor:
        prep = self._randint(len(PREPOSITIONS), len(nouns))
        while (bad := self._pair_held_out("prep_noun", prep, nouns, len(PREPOSITIONS))).any():
            prep[bad] = self._randint(len(PREPOSITIONS), int(bad.sum()))
        return prep

    def sentences(self, count: int) -> dict[str, Any]:
        """The slots of ``count`` training-distribution sentences."""
        cfg = self.cfg
        template = torch.multinomial(
            torch.tensor(cfg.template_weights), count, True, generator=self.gen
        )
        subject = self.noun_phrases(count)
        obj = self.noun_phrases(count)
        pp = self.noun_phrases(count)
        second = self.noun_phrases(count, modifiers=False)
        return {
            "template": template,
            "opener": torch.where(
                self._chance(cfg.opener_probability, count) & (template < 2),
                self._randint(len(OPENERS), count),
                -1,
            ),
            "subject_is_np": self._chance(cfg.np_subject_probability, count),
            "name": self._randint(len(NAMES), count),
            "subject": subject,
            "object": obj,
            "pp": pp,
            "second": second,
            "verb": self.verbs_for(obj["noun"]),
            "prep": self.prepositions_for(pp["noun"]),
            "conj": self._randint(len(CONJUNCTIONS), count),
            "pronoun": self._randint(len(PRONOUNS), count),
            "verb2": self.verbs_for(second["noun"]),
        }

    # ------------------------------------------------------------------ CG test
    def compounds(self, subset: str) -> list[dict[str, int]]:
        """The held-out compounds of one subset, CoGnition's pattern mix, each holding a
        held-out pair (``det``, ``adj``, ``noun``, ``mod`` and, for VP/PP, ``head``)."""
        cfg, seen = self.cfg, set()
        chosen: list[dict[str, int]] = []
        for has_adj, has_mod, full in PATTERNS:
            want = round(full * cfg.compounds_per_subset / 720)
            pool = self._compound_pool(subset, has_adj, has_mod)
            if len(pool) < want:
                raise ValueError(
                    f"TranslationConfig: the {subset} pattern (adjective={has_adj}, "
                    f"modifier={has_mod}) has {len(pool)} novel compounds for {want} wanted; "
                    "raise the held-out fractions or lower compounds_per_subset"
                )
            for i in torch.randperm(len(pool), generator=self.gen)[:want].tolist():
                key = tuple(sorted(pool[i].items()))
                if key not in seen:
                    seen.add(key)
                    chosen.append(pool[i])
        return chosen

    def _compound_pool(self, subset: str, has_adj: bool, has_mod: bool) -> list[dict[str, int]]:
        adjs = range(len(ADJECTIVES)) if has_adj else [-1]
        mods = range(len(MODIFIERS)) if has_mod else [-1]
        heads = {"NP": [-1], "VP": range(len(VERBS)), "PP": range(len(PREPOSITIONS))}[subset]
        kind = {"VP": "verb_noun", "PP": "prep_noun"}.get(subset)
        pool = []
        for det, adj, noun, mod, head in itertools.product(
            range(len(DETERMINERS)), adjs, range(len(NOUNS)), mods, heads
        ):
            if kind is not None:
                novel = bool(self.heldout[kind][head, noun])
            else:
                novel = (
                    bool(self.heldout["det_noun"][det, noun])
                    if adj < 0 and mod < 0
                    else (
                        (adj >= 0 and bool(self.heldout["adj_noun"][adj, noun]))
                        or (mod >= 0 and bool(self.heldout["noun_mod"][noun, mod]))
                    )
                )
            if novel:
                pool.append({"det": det, "adj": adj, "noun": noun, "mod": mod, "head": head})
        return pool

    def compound_text(self, subset: str, c: dict[str, int]) -> str:
        words = [DETERMINERS[c["det"]]]
        words += [ADJECTIVES[c["adj"]]] if c["adj"] >= 0 else []
        words += [NOUNS[c["noun"]]]
        words += [MODIFIERS[c["mod"]]] if c["mod"] >= 0 else []
        if subset == "VP":
            words.insert(0, VERBS[c["head"]])
        elif subset == "PP":
            words.insert(0, PREPOSITIONS[c["head"]])
        return " ".join(words)

    def cg_sentences(self, subset: str, compounds: list[dict[str, int]]) -> dict[str, Any]:
        """Each compound in ``contexts`` random sentences, on consecutive lines: an NP
        compound as subject or object, a VP compound as verb and object, a PP compound as
        the prepositional phrase."""
        contexts = self.cfg.contexts
        count = len(compounds) * contexts
        slots = self.sentences(count)
        c = {
            k: torch.tensor([cp[k] for cp in compounds]).repeat_interleave(contexts)
            for k in ("det", "adj", "noun", "mod", "head")
        }
        np_ = {k: c[k] for k in ("det", "adj", "noun", "mod")}
        if subset == "NP":
            as_subject = self._chance(0.5, count)
            slots["subject_is_np"] = slots["subject_is_np"] | as_subject
            for k in np_:
                slots["subject"][k] = torch.where(as_subject, np_[k], slots["subject"][k])
                slots["object"][k] = torch.where(as_subject, slots["object"][k], np_[k])
            slots["verb"] = torch.where(as_subject, slots["verb"], self.verbs_for(np_["noun"]))
        elif subset == "VP":
            slots["object"] = np_
            slots["verb"] = c["head"]
        else:
            slots["template"] = torch.ones(count, dtype=torch.long)
            slots["pp"] = np_
            slots["prep"] = c["head"]
        return slots

    # ------------------------------------------------------------------ rendering
    def render_np(self, np_: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Source ``[n, 6]`` (DET ADJ N MOD×3) and target ``[n, 7]`` (DET' CLF MOD'×3 ADJ'
        N') ids with PAD gaps."""
        lang = self.lang
        det, adj, noun, mod = np_["det"], np_["adj"], np_["noun"], np_["mod"]
        has_adj, has_mod = adj >= 0, mod >= 0
        cls = lang.noun_class[noun]
        animate = (cls <= 1).long()
        pad = torch.full_like(det, PAD)
        src_adj = torch.where(has_adj, lang.src_adj[adj.clamp(min=0)], pad)
        src_mod = torch.where(has_mod[:, None], lang.src_mod[mod.clamp(min=0)], PAD)
        source = torch.cat(
            [lang.src_det[det, None], src_adj[:, None], lang.src_noun[noun, None], src_mod], dim=1
        )
        the = det == 0
        clf = torch.where(the, pad, lang.tgt_clf[cls])
        tgt_adj = torch.where(has_adj, lang.tgt_adj[adj.clamp(min=0), 1 - animate], pad)
        tgt_mod = torch.where(has_mod[:, None], lang.tgt_mod[mod.clamp(min=0)], PAD)
        target = torch.cat(
            [
                lang.tgt_det[det, None],
                clf[:, None],
                tgt_mod,
                tgt_adj[:, None],
                lang.tgt_noun[noun, None],
            ],
            dim=1,
        )
        return source, target

    def render(self, s: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """Packed, EOS-terminated source and target ids of sentence slots."""
        lang = self.lang
        count = len(s["template"])
        pad = torch.full((count, 1), PAD)

        def when(mask: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
            return torch.where(mask.view(-1, *[1] * (ids.dim() - 1)), ids, PAD)

        opener = s["opener"] >= 0
        subj_src, subj_tgt = self.render_np(s["subject"])
        name = s["name"]
        subj_src = torch.where(
            s["subject_is_np"][:, None],
            subj_src,
            torch.cat([pad, pad, lang.src_name[name, None], pad, pad, pad], 1),
        )
        subj_tgt = torch.where(
            s["subject_is_np"][:, None],
            subj_tgt,
            torch.cat([pad] * 6 + [lang.tgt_name[name, None]], 1),
        )
        obj_src, obj_tgt = self.render_np(s["object"])
        pp_src, pp_tgt = self.render_np(s["pp"])
        second_src, second_tgt = self.render_np(s["second"])
        animate_obj = (lang.noun_class[s["object"]["noun"]] <= 1).long()
        animate_second = (lang.noun_class[s["second"]["noun"]] <= 1).long()
        has_pp, has_second = s["template"] == 1, s["template"] == 2
        column = torch.ones(count, 1, dtype=torch.long)
        source = torch.cat(
            [
                when(opener, lang.src_opener[s["opener"].clamp(min=0)]),
                subj_src,
                lang.src_verb[s["verb"], None],
                obj_src,
                when(has_pp, lang.src_prep[s["prep"], None]),
                when(has_pp, pp_src),
                when(has_second, column * lang.comma),
                when(has_second, lang.src_conj[s["conj"], None]),
                when(has_second, lang.src_pron[s["pronoun"], None]),
                when(has_second, lang.src_verb[s["verb2"], None]),
                when(has_second, second_src),
                column * lang.period,
            ],
            dim=1,
        )
        target = torch.cat(
            [
                when(opener, lang.tgt_opener[s["opener"].clamp(min=0), None]),
                subj_tgt,
                when(has_pp, pp_tgt),
                when(has_pp, lang.tgt_prep[s["prep"], None]),
                obj_tgt,
                lang.tgt_verb[s["verb"], 1 - animate_obj, None],
                when(has_second, column * lang.tgt_comma),
                when(has_second, lang.tgt_conj[s["conj"], None]),
                when(has_second, lang.tgt_pron[s["pronoun"], None]),
                when(has_second, second_tgt),
                when(has_second, lang.tgt_verb[s["verb2"], 1 - animate_second, None]),
                column * lang.tgt_period,
            ],
            dim=1,
        )
        return pack(source), pack(target)


def pack(tokens: torch.Tensor) -> torch.Tensor:
    """Move PAD gaps to the end (stable), append EOS after the last word, and drop the
    columns that are PAD in every row but one (for the EOS)."""
    real = tokens != PAD
    order = torch.sort((~real).int(), dim=1, stable=True).indices
    lengths = real.sum(dim=1)
    packed = torch.nn.functional.pad(tokens.gather(1, order), (0, 1), value=PAD)
    packed.scatter_(1, lengths[:, None], 2)  # EOS
    return packed[:, : int(lengths.max()) + 1]


def build_synthetic_corpus(config: Any) -> ParallelCorpus:
    """The synthetic CoGnition twin of a :class:`TranslationConfig`."""
    gen = torch.Generator().manual_seed(config.split_seed)
    fractions = {kind: getattr(config, f"heldout_{kind}") for kind in PAIR_KINDS}
    heldout = held_out_pairs(fractions, gen)
    draw = Generator(config, heldout, gen)
    sizes = {
        "train": config.train_sentences,
        "valid": config.valid_sentences,
        "test": config.test_sentences,
    }
    splits = {name: draw.render(draw.sentences(size)) for name, size in sizes.items()}
    texts, compound_ids, subset_ids, cg_parts = [], [], [], []
    for subset_index, subset in enumerate(SUBSETS):
        compounds = draw.compounds(subset)
        cg_parts.append(draw.render(draw.cg_sentences(subset, compounds)))
        for c in compounds:
            compound_ids += [len(texts)] * config.contexts
            subset_ids += [subset_index] * config.contexts
            texts.append(draw.compound_text(subset, c))
    splits["cg"] = tuple(_concat_padded([part[i] for part in cg_parts]) for i in range(2))
    lang = draw.lang
    pairs = {
        kind: [
            [_atom_name(kind, 0, int(a)), _atom_name(kind, 1, int(b))]
            for a, b in mask.nonzero().tolist()
        ]
        for kind, mask in heldout.items()
    }
    return ParallelCorpus(
        tokens=lang.tokens,
        splits=splits,
        cg=CompoundTest(texts, torch.tensor(compound_ids), torch.tensor(subset_ids)),
        lexicon=lang.lexicon(),
        detokenize=lang.detokenize,
        description={
            "source": "synthetic",
            "heldout_pairs": pairs,
            "compounds_per_subset": {
                s: sum(1 for i in subset_ids[:: config.contexts] if SUBSETS[i] == s)
                for s in SUBSETS
            },
        },
    )


def _atom_name(kind: str, side: int, index: int) -> str:
    first, second = kind.split("_")
    table = {
        "det": DETERMINERS,
        "adj": ADJECTIVES,
        "noun": NOUNS,
        "mod": MODIFIERS,
        "verb": VERBS,
        "prep": PREPOSITIONS,
    }
    return table[(first, second)[side]][index]


def _concat_padded(parts: list[torch.Tensor]) -> torch.Tensor:
    width = max(p.shape[1] for p in parts)
    return torch.cat(
        [torch.nn.functional.pad(p, (0, width - p.shape[1]), value=PAD) for p in parts]
    )
