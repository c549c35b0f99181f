"""dev.py, the README's set-up and test runner: ``test --quick`` is the inner loop without the
real model, and every test that runs the real model carries the marker that leaves it out."""

from __future__ import annotations

import importlib.util
import io
import sys

import pytest

from conftest import MODEL_FIXTURE, REPO


def load_dev():
    """dev.py as a module (it is a script at the repository root, not part of the package)."""
    spec = importlib.util.spec_from_file_location("dev_script", REPO / "dev.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quick_leaves_out_the_real_model_and_passes_the_rest_to_pytest():
    dev = load_dev()
    n = dev.parallel_args()
    assert dev.pytest_args(["--quick"]) == ["-m", "not model", *n]
    assert dev.pytest_args(["--quick", "-k", "cli", "-x"]) == [
        "-m",
        "not model",
        *n,
        "-k",
        "cli",
        "-x",
    ]
    assert dev.pytest_args(["-x", "--quick"]) == ["-m", "not model", *n, "-x"]


def test_without_quick_the_arguments_go_to_pytest_on_a_worker_per_core():
    dev = load_dev()
    n = dev.parallel_args()
    assert dev.workers() >= 2  # the suite mostly waits: two workers even on one core
    assert dev.pytest_args([]) == n  # the whole suite: CI's command
    some = ["-k", "cli", "tests/engine/chat/test_batch.py"]
    assert dev.pytest_args(some) == [*n, *some]
    # saying how many workers (or none: -n 0, one process) is the caller's choice
    for given in (["-n", "0"], ["-n4", "-x"], ["--numprocesses=3"], ["-x", "-n", "auto"]):
        assert dev.pytest_args(given) == given


def test_every_collected_test_on_the_real_model_is_marked_model(request: pytest.FixtureRequest):
    """Over the tests collected with this one (the whole suite, when run whole): a test that uses
    the starter model through any fixture carries ``model``, so ``-m "not model"`` (``--quick``)
    never assembles nor loads it, whether or not the test says so itself."""
    items = request.session.items
    on_model = [item for item in items if MODEL_FIXTURE in getattr(item, "fixturenames", ())]
    unmarked = [item.nodeid for item in on_model if not item.get_closest_marker("model")]
    assert not unmarked, f"tests on the real model without the model marker: {unmarked}"


BANNER = """\
  /tmp/pip-build-env-x/overlay/lib/python3.11/site-packages/setuptools/\
command/editable_wheel.py:354: \
BuildBackendWarning: Editable installation.
  !!

          ********************************************************************************
          Please be careful with folders in your working directory with the same
          name as your package as they may take precedence during imports.
          ********************************************************************************

  !!
WARNING: Location 'file:///opt/pypi/simple/textual/' is ignored: \
it is neither a file nor a directory.
"""


def pip_like(tmp_path, output: str, code: int) -> list[str]:
    """A real child that prints ``output`` as pip would (on stdout and stderr) and exits
    ``code``."""
    script = tmp_path / "pip_like.py"
    script.write_text(
        "import sys\n"
        f"text = {output!r}\n"
        "half = len(text) // 2\n"
        "sys.stdout.write(text[:half]); sys.stdout.flush()\n"
        "sys.stderr.write(text[half:]); sys.stderr.flush()\n"
        f"sys.exit({code})\n"
    )
    return [sys.executable, str(script)]


def test_set_up_runs_pip_at_its_normal_level_and_builds_a_gpu_llama_first():
    """The set-up's pip commands: pip upgraded, then vibechat editable; with CMAKE_ARGS,
    llama-cpp-python rebuilt first (the cached CPU wheel would be reused silently). pip is not
    told to be quiet: its output is captured (``run_step``), and read for the build's start."""
    dev = load_dev()
    pip = [str(dev.PYTHON), "-m", "pip", "install", "--disable-pip-version-check"]
    assert dev.install_steps(".[test]", "") == [[*pip, "--upgrade", "pip"], [*pip, "-e", ".[test]"]]
    gpu = dev.install_steps(".", "-DGGML_CUDA=on")
    assert gpu[1] == [
        *pip,
        "--no-cache-dir",
        "--force-reinstall",
        "--no-deps",
        dev.llama_requirement(),
    ]
    assert gpu[2] == [*pip, "-e", "."] and dev.llama_requirement().startswith("llama-cpp-python")


def test_set_up_shows_its_own_progress_lines_not_pips_banners(tmp_path):
    """Issue 46 point 7: setuptools' "Editable installation ... be careful with folders" banner
    and pip's warnings stay in the set-up log; the one long step, building llama-cpp-python,
    is said in dev.py's own words with how long it takes."""
    dev = load_dev()
    assert (
        dev.progress_line("  Building wheel for llama-cpp-python (pyproject.toml): started\n")
        == dev.BUILD_NOTE
    )
    assert (
        dev.progress_line("Building wheel for llama_cpp_python (pyproject.toml) ... done")
        == dev.BUILD_NOTE
    )
    assert "7 minutes" in dev.BUILD_NOTE
    assert all(dev.progress_line(line) is None for line in BANNER.splitlines())
    log, shown = tmp_path / "setup.log", io.StringIO()
    building = "  Building wheel for llama-cpp-python (pyproject.toml): started\n"
    code, tail = dev.run_step(
        pip_like(tmp_path, BANNER + building + "Successfully installed vibechat\n", 0),
        log,
        out=shown,
    )
    assert code == 0
    assert shown.getvalue() == dev.BUILD_NOTE + "\n"  # the build said once, nothing of pip's
    kept = log.read_text()
    assert "be careful with folders" in kept and "Successfully installed vibechat" in kept


def test_a_failed_set_up_step_shows_why(tmp_path):
    """A step that fails: its status and pip's last lines come back for the user (the error
    itself among them); the log keeps all of it."""
    dev = load_dev()
    log, shown = tmp_path / "setup.log", io.StringIO()
    noise = "".join(f"Collecting package-{i}\n" for i in range(100))
    error = "ERROR: Could not find a version that satisfies the requirement llama-cpp-python==9.9\n"
    code, tail = dev.run_step(pip_like(tmp_path, noise + error, 1), log, out=shown)
    assert code == 1 and shown.getvalue() == ""
    assert error in tail and len(tail) == dev.TAIL_LINES
    assert log.read_text().count("Collecting package-") == 100


def test_check_runs_the_linter_then_the_rule_tests_and_each_rule_test_exists():
    """``dev.py check`` (run by .ci/run before the suite): ruff's linter over the repository, its
    formatter as a check, then the rule tests (import graph, engine headless, room sizes,
    re-exports, mypy), in one process; every file it names is there, and ruff comes with the test
    extras."""
    dev = load_dev()
    lint, formatted, rules = dev.check_commands()
    assert lint[1:] == ["-m", "ruff", "check", "."]
    assert formatted[1:] == ["-m", "ruff", "format", "--check", "."]
    assert rules[1:5] == ["-m", "pytest", "-n", "0"]
    named = [arg for arg in rules if arg.startswith("tests/")]
    assert {
        "tests/test_import_graph.py",
        "tests/test_typing.py",
        "tests/test_room_sizes.py",
        "tests/test_engine_headless.py",
    } <= set(named)
    assert all((REPO / path).is_file() for path in named)
    assert '"ruff==' in (REPO / "pyproject.toml").read_text()
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert ci.index("python3 dev.py check") < ci.index("python3 dev.py test")
