"""Every task names what each of its splits holds (figure titles read these)."""

from __future__ import annotations

import pytest

from latentlens.tasks import TASKS


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_split_has_its_own_title(name: str) -> None:
    task_cls = TASKS[name][0]
    assert list(task_cls.split_titles) == list(task_cls.splits)
    titles = list(task_cls.split_titles.values())
    assert len(set(titles)) == len(titles) and all(titles)


def test_test_split_titles_say_whether_the_combinations_are_held_out() -> None:
    # The same split name holds different things: new combinations in fuzzy logic,
    # new puzzles of the training rules in SRAVEN (its held-out rules are ``ood``).
    assert TASKS["fuzzy-logic"][0].split_titles["test"] == "held-out combinations"
    assert TASKS["sraven"][0].split_titles["test"].startswith("in-distribution")
    assert TASKS["sraven"][0].split_titles["ood"] == "held-out rule combinations"
