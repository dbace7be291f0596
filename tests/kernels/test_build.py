"""The kernel cache trusts only what this user built (#71): a library planted at the
predicted path, replaced after its build, or in a folder others can write is never
loaded; a failed build is retried after a day, and its warning names the compiler's error."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from latentlens.kernels import build

# A library whose constructor runs as it is loaded: it leaves a file where it ran.
PLANT = """
#include <stdio.h>
__attribute__((constructor)) static void planted(void) {
    FILE *f = fopen("%s", "w"); if (f) { fputs("ran", f); fclose(f); }
}
int value(void) { return 666; }
"""


@pytest.fixture
def kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A one-function kernel beside an empty cache; its library's path once built."""
    monkeypatch.setenv("LATENTLENS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "HERE", tmp_path)
    (tmp_path / "kernel.c").write_text("int value(void) { return 1; }\n")
    build.load.cache_clear()
    assert build.load("kernel").value() == 1
    build.load.cache_clear()
    yield next((tmp_path / "cache" / "kernels").glob("*/kernel.so"))
    build.load.cache_clear()


def plant(library: Path, marker: Path) -> None:
    """Replace ``library`` with one whose constructor writes ``marker``."""
    source = library.parent.parent / "plant.c"
    source.write_text(PLANT % marker)
    compiler = build.c_compiler()
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(library), str(source)], check=True)


def test_a_built_library_is_recorded_and_the_cache_is_the_users_alone(kernel: Path) -> None:
    assert kernel.with_suffix(".sha256").read_text().strip() == build.sha256_of(kernel)
    for path in (kernel, kernel.parent, kernel.parent.parent):
        assert path.stat().st_uid == os.getuid() and not path.stat().st_mode & 0o022


def test_a_library_replaced_after_its_build_is_refused_before_it_runs(
    kernel: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    plant(kernel, marker)
    with pytest.raises(RuntimeError, match="differs from the SHA-256 recorded"):
        build.load("kernel")
    assert not marker.exists()


def test_a_planted_library_without_a_record_is_built_over(kernel: Path, tmp_path: Path) -> None:
    """A library at the predicted path that latentlens did not record (planted, or left by
    a version before records) is never loaded: the kernel is built again over it."""
    marker = tmp_path / "ran"
    plant(kernel, marker)
    kernel.with_suffix(".sha256").unlink()
    assert build.load("kernel").value() == 1
    assert not marker.exists()


def test_a_cache_others_can_write_or_a_linked_library_is_refused(
    kernel: Path, tmp_path: Path
) -> None:
    kernel.parent.chmod(0o777)
    with pytest.raises(RuntimeError, match=rf"{kernel.parent} is writable by others .* "
                       "set LATENTLENS_CACHE"):  # fmt: skip
        build.load("kernel")
    kernel.parent.chmod(0o700)
    elsewhere = tmp_path / "elsewhere.so"
    kernel.rename(elsewhere)
    kernel.symlink_to(elsewhere)
    build.load.cache_clear()
    with pytest.raises(RuntimeError, match="is a symbolic link"):
        build.load("kernel")


@pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root")
def test_a_library_of_another_user_is_refused(kernel: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    plant(kernel, marker)
    kernel.with_suffix(".sha256").write_text(build.sha256_of(kernel) + "\n")  # consistent
    os.chown(kernel, 65534, 65534)
    with pytest.raises(RuntimeError, match="belongs to user id 65534"):
        build.load("kernel")
    assert not marker.exists()


def test_a_failed_build_is_retried_after_a_day_and_its_warning_names_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Round two's fault: one failed OpenMP build was remembered forever, every later run
    built without OpenMP and said only "could not build -fopenmp"."""
    monkeypatch.setenv("LATENTLENS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "HERE", tmp_path)
    (tmp_path / "kernel.c").write_text("int value(void) { return 1; }\n")
    monkeypatch.setattr(build, "OPENMP", "-fno-such-openmp-option")
    attempts, compile_source = [], build.build
    monkeypatch.setattr(build, "build", lambda *a: attempts.append(a[1][-1]) or compile_source(*a))
    build.load.cache_clear()
    try:
        with pytest.warns(UserWarning, match="could not build -fno-such-openmp-option: .*"
                          "no-such-openmp-option"):  # fmt: skip
            build.load("kernel")
        assert attempts == ["-fno-such-openmp-option", "-fopenmp-simd"]
        build.load.cache_clear()
        with pytest.warns(UserWarning, match="no-such-openmp-option"):
            build.load("kernel")  # within a day: the failure is remembered, named again
        assert len(attempts) == 2
        marker = next((tmp_path / "cache" / "kernels").glob("*/kernel.failed"))
        day = time.time() - build.RETRY_FAILED_AFTER - 60
        os.utime(marker, (day, day))
        build.load.cache_clear()
        with pytest.warns(UserWarning, match="no-such-openmp-option"):
            build.load("kernel")  # a day on: tried again
        assert attempts == ["-fno-such-openmp-option", "-fopenmp-simd", "-fno-such-openmp-option"]
    finally:
        build.load.cache_clear()
