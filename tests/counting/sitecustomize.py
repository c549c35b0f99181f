"""Opt-in counts of the suite's fixed costs (``VIBECHAT_TEST_COUNTS=path``, which
tests/conftest.py passes on as ``TESTS_COUNTS_FILE``): every Python
process the tests start (this folder is then on ``PYTHONPATH``) and the test process itself
append one line per event to ``path``: ``<event>\t<test id>``, where the event is ``vibechat``
(a ``vibechat`` command started), ``engine`` (an engine process, worker_child, started) or
``load`` (a GGUF loaded through ``llama_model_load_from_file``), and the test id is pytest's
``PYTEST_CURRENT_TEST`` inherited through the environment; ``tokens`` lines carry a third
field, the tokens one ``llama_decode`` evaluated (prompt and reply tokens alike: the work a
test's replies cost, whatever the machine's load). Never imported by the product;
without the variable this module does nothing. tests/counting/report.py sums the lines."""

from __future__ import annotations

import os
import sys


def record(event: str, count: int | None = None) -> None:
    """Append ``event`` with the current test's id, and ``count`` when given (one short write:
    O_APPEND keeps lines whole when several processes write at once)."""
    path = os.environ.get("TESTS_COUNTS_FILE")
    if not path:
        return
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]
    extra = "" if count is None else f"\t{count}"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{event}\t{test}{extra}\n".encode())
    finally:
        os.close(fd)


def _wrap_load(module) -> None:
    """Count each call of the module's ``llama_model_load_from_file``, and the tokens each
    ``llama_decode`` evaluates (wrapped once per module)."""
    real = getattr(module, "llama_model_load_from_file", None)
    if real is not None and not getattr(real, "_counted", False):

        def counted(*args, **kwargs):
            record("load")
            return real(*args, **kwargs)

        counted._counted = True  # type: ignore[attr-defined]
        module.llama_model_load_from_file = counted
    decode = getattr(module, "llama_decode", None)
    if decode is not None and not getattr(decode, "_counted", False):

        def decoded(ctx, batch):
            record("tokens", int(batch.n_tokens))
            return decode(ctx, batch)

        decoded._counted = True  # type: ignore[attr-defined]
        module.llama_decode = decoded


# The bindings module and the package: the engine process builds its package from the bindings
# alone (worker_child.py), a plain ``import llama_cpp`` copies the bindings' names into it.
HOOKED = ("llama_cpp", "llama_cpp.llama_cpp")


class _Hook:
    """A meta-path finder that wraps llama_cpp's loader once either module is imported."""

    def find_spec(self, name, path=None, target=None):
        if name not in HOOKED:
            return None
        sys.meta_path.remove(self)
        try:
            import importlib.util

            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        real_exec = spec.loader.exec_module

        def exec_module(module):
            real_exec(module)
            _wrap_load(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Record this process's kind and hook llama_cpp's loader (only with the variable set)."""
    if not os.environ.get("TESTS_COUNTS_FILE"):
        return
    try:
        with open("/proc/self/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        argv = list(sys.argv)
    if "vibechat.engine.llama.worker_child" in argv:
        record("engine")
    elif any(os.path.basename(a) == "vibechat" for a in argv[:2]) or (
        "-m" in argv and argv[argv.index("-m") + 1 : argv.index("-m") + 2] == ["vibechat"]
    ):
        record("vibechat")
    if "llama_cpp" in sys.modules:
        _wrap_load(sys.modules["llama_cpp"])
        _wrap_load(sys.modules.get("llama_cpp.llama_cpp"))
    else:
        sys.meta_path.insert(0, _Hook())


install()
