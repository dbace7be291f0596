"""The loader of the real CoGnition release, on small files in its format written here:
tokenisation round trip, CTER of the references, and a clear error for each bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from latentlens.tasks import make_task
from latentlens.tasks.translation import compound_translation_error_rate

LEXICON = (
    "the\t/\ndog\t狗/犬\nsmall\t小\nmod0\t他喜欢的\ntook\t带/拿\nnear\t附近/靠近\nevery\t每/所有\n"
)
TRAIN = [
    ("the dog ran .", "狗 跑 了 。"),
    ("every dog ate .", "每 只 狗 吃 了 。"),
    ("she took the cat .", "她 带 了 猫 。"),
    ("the small cat slept near the tree .", "小 猫 在 树 附近 睡 了 。"),
    (
        "i saw it , we went home .",
        "我 看到 它 ， 我们 把 它 带 回家 了 ， 他 坐 在 她 喜欢的 那里 。",
    ),
]
CG = [  # one compound per subset, in 2 contexts each (the release has 5)
    ("the small dog ran .", "小 狗 跑 了 。", "the small dog"),
    ("i saw the small dog .", "我 看到 了 小 狗 。", "the small dog"),
    ("he took the dog he liked .", "他 带 了 他喜欢的 狗 。", "took the dog he liked"),
    ("she took the dog he liked home .", "她 把 他喜欢的 狗 带 回家 。", "took the dog he liked"),
    ("it sat near every dog .", "它 坐 在 每 只 狗 附近 。", "near every dog"),
    ("we ran near every dog .", "我们 在 每 只 狗 附近 跑 。", "near every dog"),
]


def write_release(root: Path) -> Path:
    """A tiny copy of the release's layout: data/{train,valid,test}.{en,zh},
    data/cg-test/cg-test.{en,zh,compound} and eval/lexicon."""
    data = root / "data"
    (data / "cg-test").mkdir(parents=True)
    (root / "eval").mkdir()
    (root / "eval" / "lexicon").write_text(LEXICON, encoding="utf-8")
    for split in ("train", "valid", "test"):
        (data / f"{split}.en").write_text("\n".join(en for en, _ in TRAIN * 5) + "\n")
        (data / f"{split}.zh").write_text("\n".join(zh for _, zh in TRAIN * 5) + "\n")
    for index, suffix in enumerate(("en", "zh", "compound")):
        (data / "cg-test" / f"cg-test.{suffix}").write_text(
            "\n".join(row[index] for row in CG) + "\n"
        )
    return data


def test_release_files_load_tokenise_and_score(tmp_path: Path) -> None:
    data = write_release(tmp_path)
    task = make_task("translation", {"data_dir": str(data), "contexts": 2, "bpe_vocab_size": 120})
    corpus = task.corpus
    assert corpus.cg.compounds == ["the small dog", "took the dog he liked", "near every dog"]
    assert corpus.cg.compound.tolist() == [0, 0, 1, 1, 2, 2]
    assert corpus.cg.subset.tolist() == [0, 0, 1, 1, 2, 2]  # NP, VP, PP from the first atom
    references = [task.detokenize(row) for row in corpus.splits["cg"][1].tolist()]
    assert references == [zh for _, zh, _ in CG]  # BPE decoding restores the segmentation
    compounds = [c for *_, c in CG]
    assert compound_translation_error_rate(references, compounds, task.lexicon)["instance"] == 0.0
    wrong = ["狗 小 跑 了 。", *references[1:4], "它 坐 在 只 狗 附近 。", references[5]]
    scores = compound_translation_error_rate(wrong, compounds, task.lexicon)
    assert scores["instance"] == pytest.approx(2 / 6) and scores["aggregate"] == pytest.approx(
        2 / 3
    )
    assert (data / "latentlens-bpe-120.json").is_file()  # kept: the same vocabulary next time
    again = make_task("translation", {"data_dir": str(data), "contexts": 2, "bpe_vocab_size": 120})
    assert again.corpus.tokens == corpus.tokens


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: (d / "train.zh").unlink(), "CoGnition file 'train.zh' not found"),
        (lambda d: (d / "valid.zh").write_text("只 一 行\n"), "needs the same number of source"),
        (
            lambda d: (d / "cg-test" / "cg-test.compound").write_text("the dog\n"),
            "one compound per",
        ),
        (lambda d: (d.parent / "eval" / "lexicon").write_text("dog 狗\n"), "ATOM<TAB>TRANSLATIONS"),
        (lambda d: (d / "test.en").write_bytes(b"\xff\xfe\x00bad"), "could not be read as UTF-8"),
        (lambda d: (d.parent / "eval" / "lexicon").write_text("dog\t狗\n"), "not in the lexicon"),
    ],
)
def test_bad_release_files_get_a_clear_error(tmp_path: Path, damage, message: str) -> None:
    data = write_release(tmp_path)
    damage(data)
    with pytest.raises(ValueError, match=message):
        make_task("translation", {"data_dir": str(data), "contexts": 2, "bpe_vocab_size": 100})


def test_a_data_dir_that_is_not_a_folder(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="is not a folder"):
        make_task("translation", {"data_dir": str(tmp_path / "missing")})
