"""dev.py, the README's set-up and test runner: ``test --quick`` is the inner loop without the
real model, and every test that runs the real model carries the marker that leaves it out."""

from __future__ import annotations

import importlib.util

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
    assert dev.pytest_args(["--quick", "-k", "cli", "-x"]) == ["-m", "not model", *n, "-k", "cli", "-x"]
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


def test_check_runs_the_linter_then_the_rule_tests_and_each_rule_test_exists():
    """``dev.py check`` (run by .ci/run before the suite): ruff's linter over the repository,
    then the rule tests (import graph, engine headless, room sizes, re-exports, mypy), in one
    process; every file it names is there, and ruff comes with the test extras."""
    dev = load_dev()
    lint, rules = dev.check_commands()
    assert lint[1:] == ["-m", "ruff", "check", "."]
    assert rules[1:5] == ["-m", "pytest", "-n", "0"]
    named = [arg for arg in rules if arg.startswith("tests/")]
    assert {"tests/test_import_graph.py", "tests/test_typing.py", "tests/test_room_sizes.py",
            "tests/test_engine_headless.py"} <= set(named)
    assert all((REPO / path).is_file() for path in named)
    assert '"ruff==' in (REPO / "pyproject.toml").read_text()
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert ci.index("python3 dev.py check") < ci.index("python3 dev.py test")
