"""The ``latentlens`` console command, through the installed entry point."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from latentlens.cli import main
from latentlens.models import VARIANTS


def run_cli(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("latentlens")
    command = [exe, *args] if exe else [sys.executable, "-m", "latentlens.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def test_help_through_the_console_script() -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    assert "inspect" in result.stdout and "usage: latentlens" in result.stdout


def test_inspect_prints_reference_parameter_counts_and_hooks() -> None:
    result = run_cli("inspect", "--preset", "sraven", "--attention", "hyla", "--batch", "2")
    assert result.returncode == 0, result.stderr
    assert "402,824" in result.stdout
    vnet = r"\n  blocks\.3\.attn\.hook_vnet_post +\[2, 36, 36, 4\] +batch, query, key, d_head\n"
    assert re.search(vnet, result.stdout)
    header = result.stdout.splitlines()[2]
    assert header.index("norm") == result.stdout.splitlines()[3].index("rms_head")


@pytest.mark.parametrize(
    ("preset", "model", "hooks"),
    [
        ("translation", "fusion", ["decoder.blocks.1.cross_attn.hook_pattern",
                                   "encoder.blocks.1.fuse.hook_pattern"]),
        ("modular-icl", "hypernetwork", ["hook_task_latent",
                                          "transformer.blocks.0.attn.hook_pattern"]),
    ],
)  # fmt: skip
def test_inspect_builds_every_model_kind_on_its_tasks_batch(
    preset: str, model: str, hooks: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Every model the toolkit trains can be inspected, fed its task's own batch (token
    ids and teacher-forced decoder inputs for translation)."""
    argv = ["inspect", "--preset", preset, "--model", model, "--attention", "hyla"]
    assert main([*argv, "--batch", "2", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    for hook in hooks:
        assert re.search(rf"\n  {re.escape(hook)} +\[2, ", out), hook
    assert "latent code of the last token attending to itself" in out


def test_inspect_refuses_a_model_kind_of_another_task(capsys) -> None:
    assert main(["inspect", "--preset", "sraven", "--model", "fusion"]) == 2
    assert "model='fusion' is for the translation task" in capsys.readouterr().err


def test_inspect_all_variants_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--batch", "1", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert out.count("151,009") == 8
    # Columns line up: the longest paper name ("linear attention + RMSHead") used to run
    # into the norm column.
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("variant"))
    norm_at = header.index("norm")
    for line in lines:
        if line.endswith("151,009"):
            name = line.split()[0]
            assert line[norm_at:].split()[0] == VARIANTS[name].normalization, line
            assert line[norm_at - 1] == " ", line


def test_quick_commands_do_not_load_scikit_learn() -> None:
    """`--help`, `inspect` and `eval` import the CLI; scikit-learn (about 2 s) loads only
    where training or probing needs it."""
    code = "import sys, latentlens.cli; print('sklearn' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_training_start_up_loads_neither_the_probe_libraries_nor_dynamo_for_the_count() -> None:
    """Before its first step `latentlens train` imports its trackers (latentlens.probes)
    and counts the model's parameters on the meta device: without scikit-learn and SciPy's
    statistics (1.5 s, for probing only) and without torch._dynamo, which torch's meta
    ``normal_`` imports (1.9 s; the optimizer imports it later, for training only)."""
    code = (
        "import sys, torch\n"
        "from latentlens.models import TransformerConfig\n"
        "from latentlens.probes import tracking_callbacks\n"
        "from latentlens.training.memory import parameter_count\n"
        "config = TransformerConfig.preset('fuzzy-logic', attention='hyla')\n"
        "assert parameter_count('transformer', config) > 0\n"
        "print([m for m in ('sklearn', 'scipy.stats', 'torch._dynamo') if m in sys.modules])\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_probes_public_names_are_all_there_though_imported_on_first_use() -> None:
    import latentlens.probes as probes  # noqa: PLC0415

    for name in probes.__all__:
        assert getattr(probes, name).__module__.startswith("latentlens.probes."), name
        assert name in dir(probes)
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        probes.nope  # noqa: B018


def test_output_cut_short_by_its_reader_ends_quietly() -> None:
    """`latentlens inspect | head -1`: no BrokenPipeError traceback."""
    exe = shutil.which("latentlens")
    command = [exe] if exe else [sys.executable, "-m", "latentlens.cli"]
    with subprocess.Popen(
        [*command, "inspect", "--device", "cpu"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        assert process.stdout.readline().startswith("latentlens")
        process.stdout.close()
        stderr = process.stderr.read()
        process.wait(timeout=300)
    assert "Traceback" not in stderr, stderr


def test_bad_argument_gives_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--batch", "0"]) == 2
    assert "--batch=0 is invalid" in capsys.readouterr().err


def test_metrics_table_columns_line_up_with_long_split_names(capsys) -> None:
    from latentlens.cli.tables import print_table

    records = [
        {"step": 5, "split": "train", "loss": 2.5, "accuracy": 0.25},
        {"step": 5, "split": "ood_unpermuted", "loss": 12.125, "accuracy": 1.0},
    ]
    print_table(records)
    header, *rows = capsys.readouterr().out.splitlines()
    assert [len(line) for line in rows] == [len(header)] * 2
    assert header.split() == ["split", "loss", "accuracy"]
    assert rows[1].split() == ["ood_unpermuted", "12.1250", "1.0000"]
    assert header.index("loss") + len("loss") == rows[1].index("12.1250") + len("12.1250")


def test_seed_summary_gives_mean_and_sample_std_per_split(capsys) -> None:
    from latentlens.cli.tables import print_seed_summary

    runs = [
        [{"step": 9, "split": "train", "loss": 1.0, "r2": 0.5},
         {"step": 9, "split": "ood", "loss": 3.0, "r2": -0.25}],
        [{"step": 9, "split": "ood", "loss": 5.0, "r2": 0.25},  # order of splits differs
         {"step": 9, "split": "train", "loss": 2.0, "r2": 0.75}],
    ]  # fmt: skip
    print_seed_summary(runs)
    title, header, train, ood = capsys.readouterr().out.splitlines()
    assert title == "mean ± std over 2 seeds" and header.split() == ["split", "loss", "r2"]
    # sample std of two values a, b is |a - b| / sqrt(2)
    assert train.split() == ["train", "1.5000", "±", "0.7071", "0.6250", "±", "0.1768"]
    assert ood.split() == ["ood", "4.0000", "±", "1.4142", "0.0000", "±", "0.3536"]
    print_seed_summary(runs[:1])  # one seed: no spread to give
    print_seed_summary([runs[0], []])  # a resumed run that had no steps left
    assert capsys.readouterr().out == ""


def test_inspect_of_every_variant_lists_the_default_models_hooks() -> None:
    result = run_cli("inspect", "--batch", "2")
    assert result.returncode == 0, result.stderr
    assert "hook points of softmax (batch 2):" in result.stdout
    assert "hook_vnet_post" not in result.stdout  # softmax has no value network hooks


def test_the_command_lines_value_sets_are_the_librarys() -> None:
    from latentlens.cli import choices as cli_choices
    from latentlens.devices import DEVICE_CHOICES, resolve_device
    from latentlens.figures.save import MATPLOTLIB_FORMATS
    from latentlens.models import MODEL_ALIASES, MODEL_KINDS, VARIANTS
    from latentlens.models.encoder_decoder import FUSE_CHOICES
    from latentlens.models.fusion import CONNECTIONS
    from latentlens.probes.structure import EMBEDDINGS
    from latentlens.reports.atlas import RELATION_SOURCES
    from latentlens.sweep.spec import MAX_CELLS
    from latentlens.tasks import SUPPORTS, TASK_ALIASES, TASKS
    from latentlens.training import PRECISIONS
    from latentlens.training.loggers import LOGGERS

    assert tuple(sorted(VARIANTS)) == cli_choices.VARIANT_NAMES
    assert tuple(MODEL_KINDS) == cli_choices.MODEL_KIND_NAMES
    assert cli_choices.MODEL_ALIASES == MODEL_ALIASES
    assert tuple(sorted(TASKS)) == cli_choices.TASK_NAMES
    assert cli_choices.TASK_ALIASES == TASK_ALIASES
    assert tuple(SUPPORTS) == cli_choices.SUPPORTS
    assert tuple(FUSE_CHOICES) == cli_choices.FUSE_CHOICES
    assert tuple(CONNECTIONS) == cli_choices.CONNECTIONS
    assert tuple(PRECISIONS) == cli_choices.PRECISIONS
    assert tuple(LOGGERS) == cli_choices.LOGGERS
    assert tuple(MATPLOTLIB_FORMATS) == cli_choices.MATPLOTLIB_FORMATS
    assert tuple(EMBEDDINGS) == cli_choices.EMBEDDINGS
    assert cli_choices.DEVICE_CHOICES == DEVICE_CHOICES
    assert cli_choices.MAX_CELLS == MAX_CELLS
    assert cli_choices.RELATION_SOURCES == RELATION_SOURCES
    for device in cli_choices.DEVICE_CHOICES[:2]:
        resolve_device(device)


def test_help_and_argument_errors_import_no_torch() -> None:
    """What makes `latentlens --help` answer at once (0.3 s rather than 3 s): the parser is
    built, and bad arguments refused, before torch, the models or matplotlib load."""
    probe = (
        "import sys\n"
        "from latentlens.cli import build_parser\n"
        "parser = build_parser()\n"
        "try:\n"
        "    parser.parse_args(['train', '--task', 'nope'])\n"
        "except SystemExit as stop:\n"
        "    assert stop.code == 2\n"
        "heavy = [m for m in ('torch', 'matplotlib', 'sklearn', 'transformer_lens') "
        "if m in sys.modules]\n"
        "print(heavy)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_schedule_longer_than_the_run_is_named_before_it_starts(tmp_path, capsys) -> None:
    """SRAVEN's defaults (warm-up and evaluation every 1,000 steps) kept for a 400-step run
    never left warm-up and drew two curve points, without a word."""
    flags = ["train", "--task", "fuzzy-logic", "--d-model", "16", "--steps", "4",
             "--eval-every", "8", "--device", "cpu", "--quiet", "--tracking-examples", "256",
             "--run-dir", str(tmp_path / "r")]  # fmt: skip
    assert main(flags) == 0
    err = capsys.readouterr().err
    assert "warning: warmup_steps=100 is not shorter than steps=4" in err
    assert "warning: eval_every=8 is not shorter than steps=4" in err
    assert main([*flags[:7], "--warmup-steps", "1", "--eval-every", "2", "--device", "cpu",
                 "--quiet", "--tracking-examples", "256",
                 "--run-dir", str(tmp_path / "ok")]) == 0  # fmt: skip
    assert "warning" not in capsys.readouterr().err


def test_a_folder_of_runs_is_named_with_the_runs_inside(tmp_path, capsys) -> None:
    for name in ("softmax", "hyla"):
        (tmp_path / "demo" / name).mkdir(parents=True)
        (tmp_path / "demo" / name / "config.json").write_text("{}")
    assert main(["eval", str(tmp_path / "demo")]) == 2
    err = capsys.readouterr().err
    assert "is not a run directory but holds 2 runs" in err
    assert str(tmp_path / "demo" / "hyla") in err and "Traceback" not in err
