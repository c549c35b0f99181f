"""CPU weight repacking (engine/llama/repack.py): the decision on every kind of machine, with
llama.cpp's system info faked where this CPU is not the kind in question; the one-time probe
in a real child process (one that really dies by a signal for the crash); and the setting
applied end to end on the starter model."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import VIBECHAT_BIN, collect, worker_threads
from vibechat.engine.errors import InvalidParameterError, LoadCancelled
from vibechat.engine.llama import repack
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import ChatMessage

# What llama_print_system_info() says on the two kinds of machine (abridged from real ones).
AMX_BUILD = (
    "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX_VNNI = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 "
    "| BMI2 = 1 | "
    "AVX512 = 1 | AVX512_VBMI = 1 | AVX512_VNNI = 1 | AVX512_BF16 = 1 | AMX_INT8 = 1 | "
    "LLAMAFILE = 1 | "
    "OPENMP = 1 | REPACK = 1 | "
)
PLAIN_BUILD = AMX_BUILD.replace("AMX_INT8 = 1 | ", "")
AMX_FLAGS = frozenset({"avx512f", "avx512_vnni", "amx_bf16", "amx_tile", "amx_int8"})
EPYC_FLAGS = frozenset({"avx512f", "avx512_vnni", "avx512_bf16"})
CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8488C
flags\t\t: fpu vme sse2 avx512f amx_bf16 amx_tile amx_int8
"""
SEGFAULT = [
    sys.executable,
    "-c",
    "import ctypes; ctypes.string_at(0)",
]  # a child that dies by SIGSEGV


def never(*_args, **_kwargs):
    raise AssertionError("the probe ran, but its verdict was cached")


# ------------------------------------------------------------ the decision (no model)
def test_setting_names_and_a_bad_one():
    from vibechat.engine.settings.choices import check_repack  # the setting lives with the knobs

    assert [check_repack(v) for v in ("auto", " ON ", "off", "true", "0", "no")] == [
        "auto",
        "on",
        "off",
        "on",
        "off",
        "off",
    ]
    with pytest.raises(
        InvalidParameterError, match=r"^repack must be one of auto, on, off \(got 'amx'\)\.$"
    ):
        check_repack("amx")
    with pytest.raises(InvalidParameterError):
        check_repack(3)


def test_cpu_facts_are_read_from_cpuinfo():
    assert repack.cpu_flags(CPUINFO) >= {"amx_int8", "amx_tile", "avx512f"}
    assert repack.cpu_flags("processor : 0\n") is None
    assert repack.cpu_model_name(CPUINFO) == "Intel(R) Xeon(R) Platinum 8488C"
    assert repack.build_has_amx(AMX_BUILD) and not repack.build_has_amx(PLAIN_BUILD)
    assert not repack.build_has_amx(AMX_BUILD.replace("AMX_INT8 = 1", "AMX_INT8 = 0"))


@pytest.mark.parametrize(
    "info, flags, at_risk",
    [
        (AMX_BUILD, AMX_FLAGS, True),  # the machine class that crashes (AWS m7i, GCP C3/C4)
        (AMX_BUILD, None, True),  # flags unreadable: the build's word counts
        (AMX_BUILD, EPYC_FLAGS, False),  # no AMX on this CPU: the kernel is never used
        (PLAIN_BUILD, AMX_FLAGS, False),  # a build without the AMX kernel (a generic wheel)
        (PLAIN_BUILD, EPYC_FLAGS, False),
        ("", None, False),  # llama_cpp could not say
    ],
)
def test_which_machines_are_at_risk(info, flags, at_risk):
    assert repack.amx_at_risk(info, flags) is at_risk


def test_auto_keeps_repacking_where_the_amx_kernel_is_not_used_and_never_probes():
    for info, flags, why in (
        (PLAIN_BUILD, AMX_FLAGS, "no AMX kernel in this build"),
        (AMX_BUILD, EPYC_FLAGS, "no AMX on this CPU"),
    ):
        choice = repack.decide_repack("auto", info, flags, never)
        assert (choice.extra_buffers, choice.reason, choice.probed_now) == (True, why, False)
        assert choice.describe() == f"on (auto: {why})"


def test_auto_on_an_amx_machine_follows_the_probe():
    crashed = repack.decide_repack(
        "auto", AMX_BUILD, AMX_FLAGS, lambda: (repack.ProbeVerdict(False, "SIGSEGV"), True)
    )
    assert not crashed.extra_buffers and crashed.probed_now
    assert (
        crashed.describe()
        == "off (auto: Intel AMX: its kernel crashed in a probe on this machine (SIGSEGV))"
    )
    works = repack.decide_repack(
        "auto", AMX_BUILD, AMX_FLAGS, lambda: (repack.ProbeVerdict(True, "exit 0"), False)
    )
    assert works.extra_buffers and not works.probed_now and "found its kernel works" in works.reason
    # No verdict to be had (timed out, no model): the safe choice
    unsure = repack.decide_repack(
        "auto",
        AMX_BUILD,
        AMX_FLAGS,
        lambda: (repack.ProbeVerdict(False, "exit 3: no model", conclusive=False), True),
    )
    assert not unsure.extra_buffers and "exit 3" in unsure.reason
    assert not repack.decide_repack(
        "auto", AMX_BUILD, AMX_FLAGS, lambda: (None, False)
    ).extra_buffers


def test_on_and_off_are_obeyed_everywhere_without_a_probe():
    for info, flags in ((AMX_BUILD, AMX_FLAGS), (PLAIN_BUILD, EPYC_FLAGS)):
        assert repack.decide_repack("on", info, flags, never).extra_buffers
        assert not repack.decide_repack("off", info, flags, never).extra_buffers
    assert repack.decide_repack("off", AMX_BUILD, AMX_FLAGS).describe() == "off (set to off)"
    forced = repack.decide_repack("on", AMX_BUILD, AMX_FLAGS).describe()
    assert forced.startswith("on (set to on; Intel AMX: ") and "crashes" in forced


def test_version_line_says_what_auto_means_here_without_probing(tmp_path):
    cache = tmp_path / repack.VERDICT_FILE
    key = repack.probe_key(AMX_BUILD, "0.3.36", CPUINFO)
    line = repack.setting_summary("auto", AMX_BUILD, AMX_FLAGS, cache, key)
    assert (
        line.startswith("CPU weight repacking: auto: this CPU has Intel AMX")
        and "one-time check" in line
    )
    repack.save_verdict(cache, key, repack.ProbeVerdict(False, "SIGSEGV"))
    assert repack.setting_summary("auto", AMX_BUILD, AMX_FLAGS, cache, key) == (
        "CPU weight repacking: off (auto: Intel AMX: its kernel crashed in a probe on "
        "this machine (SIGSEGV))"
    )
    assert (
        repack.setting_summary("on", PLAIN_BUILD, EPYC_FLAGS, cache, key)
        == "CPU weight repacking: on (set to on)"
    )


# ------------------------------------------------------------ the verdict cache
def test_verdicts_are_kept_per_build_and_cpu_and_a_broken_file_is_ignored(tmp_path):
    cache = tmp_path / "cache" / repack.VERDICT_FILE
    key = repack.probe_key(AMX_BUILD, "0.3.36", CPUINFO)
    assert key != repack.probe_key(AMX_BUILD, "0.3.37", CPUINFO)  # an upgrade probes again
    assert key != repack.probe_key(AMX_BUILD, "0.3.36", CPUINFO.replace("8488C", "8580"))
    assert repack.cached_verdict(cache, key) is None
    repack.save_verdict(cache, key, repack.ProbeVerdict(True, "exit 0"))
    assert repack.cached_verdict(cache, key) == repack.ProbeVerdict(True, "exit 0")
    for junk in ("{not json", "[1, 2]", json.dumps({key: {"ok": "yes"}}), "x" * 100_000):
        cache.write_text(junk)
        assert repack.cached_verdict(cache, key) is None
    repack.save_verdict(
        cache, key, repack.ProbeVerdict(False, "SIGSEGV")
    )  # a broken file is replaced
    assert repack.cached_verdict(cache, key) == repack.ProbeVerdict(False, "SIGSEGV")
    for i in range(repack.MAX_VERDICTS + 5):  # bounded
        repack.save_verdict(cache, f"k{i}", repack.ProbeVerdict(True, "exit 0"))
    assert len(json.loads(cache.read_text())) == repack.MAX_VERDICTS


# ------------------------------------------------------------ the probe, in real child processes
def test_a_probe_child_killed_by_a_signal_is_a_conclusive_crash(tmp_path):
    verdict = repack.run_probe(tmp_path / "unused.gguf", command=SEGFAULT)
    assert verdict == repack.ProbeVerdict(False, "SIGSEGV")
    abort = repack.run_probe(tmp_path / "unused.gguf", command=["sh", "-c", "kill -ABRT $$"])
    assert abort == repack.ProbeVerdict(False, "SIGABRT")


def test_a_probe_that_hangs_fails_and_one_that_cannot_tell_is_not_cached(tmp_path):
    slow = repack.run_probe(
        tmp_path / "x.gguf",
        command=[sys.executable, "-c", "import time; time.sleep(60)"],
        timeout=0.5,
    )
    assert slow == repack.ProbeVerdict(
        False, "timed out after 0.5 s"
    )  # killed, and as bad as a crash
    failed = repack.run_probe(
        tmp_path / "x.gguf", command=[sys.executable, "-c", "print('no'); raise SystemExit(3)"]
    )
    assert not failed.conclusive and failed.detail == "exit 3: no"


def test_ctrl_c_during_the_probe_kills_it_and_cancels_the_load(tmp_path):
    started = time.monotonic()
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    with pytest.raises(LoadCancelled):
        repack.run_probe(
            tmp_path / "x.gguf",
            command=[sys.executable, "-c", "import time; time.sleep(60)"],
            cancelled=stop.is_set,
        )
    assert time.monotonic() - started < 30  # (a bound, not a timing: the child sleeps 60 s)


@pytest.mark.model
def test_the_real_probe_on_the_starter_model_reaches_a_verdict(starter_path, tmp_path):
    verdict = repack.run_probe(starter_path)
    assert verdict.conclusive
    # Where this llama.cpp build's AMX kernel works (every CPU without AMX, this one included
    # unless it has AMX), the child evaluates its batch and exits 0; where it crashes, it dies
    # by a signal: either way the answer is definite.
    info, flags = repack.system_info(), repack.cpu_flags()
    if not repack.amx_at_risk(info, flags):
        assert verdict == repack.ProbeVerdict(True, "exit 0")
    else:
        assert verdict.ok or verdict.detail.startswith("SIG")


# ------------------------------------------------------------ the backend, on the starter model
def fake_amx_machine(monkeypatch, probe_command=None):
    """This machine as an AMX Xeon would describe itself; the probe runs ``probe_command``
    (a real child process) instead of the starter when given."""
    monkeypatch.setattr(repack, "system_info", lambda: AMX_BUILD)
    monkeypatch.setattr(repack, "cpu_flags", lambda cpuinfo=None: AMX_FLAGS)
    if probe_command is not None:
        real = repack.run_probe
        monkeypatch.setattr(
            repack, "run_probe", lambda model, **kw: real(model, command=probe_command, **kw)
        )


def starter_backend(path: Path, setting: str):
    from vibechat.engine.llama.llamacpp import LlamaCppBackend
    from vibechat.engine.settings.knobs import LlamaCppOptions

    return LlamaCppBackend(
        LlamaCppOptions(
            threads=worker_threads(), model_path=path, context_size=1024, repack=setting
        )
    )


@pytest.mark.model
def test_an_amx_machine_whose_probe_crashes_loads_without_repacking_and_remembers(
    starter_installed, user_dirs, monkeypatch
):
    fake_amx_machine(monkeypatch, probe_command=SEGFAULT)
    backend = starter_backend(starter_installed, "auto")
    try:
        info = backend.load()
        assert (info.repack, info.repack_setting) == (
            "off",
            "auto",
        ) and "SIGSEGV" in info.repack_reason
        assert any(
            "CPU weight repacking is off" in n and "checked this once" in n for n in info.notices
        )
        _, done = collect(
            backend,
            [ChatMessage("user", "Name three fruits.")],
            SamplingParams(temperature=0, max_tokens=8),
        )
        assert done.stats.completion_tokens > 0 and done.stats.finish_reason in ("length", "stop")
    finally:
        backend.close()
    saved = json.loads((user_dirs["cache"] / "vibechat" / repack.VERDICT_FILE).read_text())
    assert [v["ok"] for v in saved.values()] == [False]
    # The next load (another process, the model picker, the GPU-layers reload) asks no probe.
    monkeypatch.setattr(repack, "run_probe", never)
    again = starter_backend(starter_installed, "auto")
    try:
        info = again.load()
        assert info.repack == "off" and not info.notices
    finally:
        again.close()
    forced = starter_backend(starter_installed, "off")
    try:
        assert forced.load().repack == "off"
    finally:
        forced.close()


@pytest.mark.model
def test_an_amx_machine_whose_probe_passes_keeps_repacking(starter_installed, monkeypatch):
    # The real probe on the starter, as on a machine where the AMX kernel works (the verdict is
    # this CPU's own: without AMX the batch runs; with it, it runs or the child dies).
    fake_amx_machine(monkeypatch)
    backend = starter_backend(starter_installed, "auto")
    try:
        info = backend.load()
    finally:
        backend.close()
    verdict = repack.cached_verdict(repack_cache(starter_installed), only_key(starter_installed))
    assert verdict is not None and info.repack == ("on" if verdict.ok else "off")


def repack_cache(starter: Path) -> Path:
    # the starter sits in <cache>/vibechat/starter/: the verdicts beside it, in <cache>/vibechat
    return starter.parent.parent / repack.VERDICT_FILE


def only_key(starter: Path) -> str:
    keys = list(json.loads(repack_cache(starter).read_text()))
    assert len(keys) == 1
    return keys[0]


# ------------------------------------------------------------ the setting, end to end
def vibechat(*args: str, env_repack: str | None = None) -> subprocess.CompletedProcess:
    import os

    env = dict(os.environ)
    env.pop("VIBECHAT_REPACK", None)
    if env_repack is not None:
        env["VIBECHAT_REPACK"] = env_repack
    return subprocess.run(
        [str(VIBECHAT_BIN), *args],
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
        env=env,
    )


@pytest.mark.model
def test_run_reports_the_choice_and_auto_is_the_default(starter_installed):
    out = vibechat("run", "-p", "Hi", "-n", "4", "--json", "--stats")
    assert out.returncode == 0, out.stderr
    engine = json.loads(out.stdout)["engine"]
    assert engine["repack_setting"] == "auto"
    if not repack.amx_at_risk(repack.system_info(), repack.cpu_flags()):
        # CPUs without AMX: nothing changes (llama.cpp's default, repacking on)
        assert (engine["repack"], engine["repack_reason"]) == (
            "on",
            "no AMX kernel in this build",
        ) or (engine["repack"], engine["repack_reason"]) == ("on", "no AMX on this CPU")
        assert "· repack on (auto) ·" in out.stderr
    forced = vibechat("run", "-p", "Hi", "-n", "4", "--json", "--repack", "off", env_repack="on")
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout)["engine"]["repack"] == "off"  # the flag wins over the variable
    env = vibechat("run", "-p", "Hi", "-n", "4", "--json", env_repack="off")
    assert json.loads(env.stdout)["engine"]["repack"] == "off"


def test_a_bad_variable_is_one_line_naming_it(starter_installed):
    out = vibechat("run", "-p", "Hi", "-n", "4", env_repack="sometimes")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "VIBECHAT_REPACK" in out.stderr and "auto, on, off" in out.stderr
    assert out.stderr.count("\n") == 1


def test_version_shows_the_choice():
    out = vibechat("--version", env_repack="off")
    assert out.returncode == 0
    assert out.stdout.splitlines()[-1] == "CPU weight repacking: off (set to off)"
    auto = vibechat("--version").stdout.splitlines()[-1]
    assert auto.startswith("CPU weight repacking: ")


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.mark.model
def test_the_setting_reaches_llama_cpp(starter_path):
    """llama.cpp's own load log names the buffers it made: no repacked ones with "off".
    (A handler on vibechat's llama.cpp logger itself: other tests may stop propagation.)"""

    def extra_buffers(setting: str) -> list[str]:
        logger = logging.getLogger("vibechat.llama_cpp")
        handler, level = Lines(), logger.level
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        try:
            backend = starter_backend(starter_path, setting)
            try:
                info = backend.load()
            finally:
                backend.close()
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)
        assert info.repack == ("off" if setting == "off" else "on")
        return [
            line
            for line in handler.lines
            if "model buffer size" in line and ("REPACK" in line or "AMX" in line)
        ]

    assert extra_buffers("off") == []
    info = repack.system_info()
    if repack.amx_at_risk(info, repack.cpu_flags()):
        return  # "on" is the configuration that crashes here
    if "AVX2 = 1" in info and "REPACK = 1" in info:  # x86 with AVX2: Q4_K weights are repacked
        assert extra_buffers("on"), "repacking on made no repacked buffer"


def test_every_way_the_app_builds_a_local_backend_carries_the_setting(starter_path):
    """run and --prompts-file (in process), the chat, its model picker and its GPU-layers reload
    (a worker, built from the same EngineSettings with other fields replaced) all go through
    make_backend: the setting reaches the options the engine loads with."""
    from dataclasses import replace

    from vibechat.app.backends import make_backend
    from vibechat.engine.settings.knobs import EngineSettings

    engine = EngineSettings(model=str(starter_path), repack="off")
    for worker in (False, True):
        for choice in (
            engine,
            replace(engine, gpu_layers=0),
            replace(engine, model=str(starter_path)),
        ):
            backend = make_backend(choice, worker=worker)
            try:
                assert backend.options.repack == "off"  # type: ignore[attr-defined]
            finally:
                backend.close()
    backend = make_backend(EngineSettings(model=str(starter_path)))
    assert backend.options.repack == "auto"  # type: ignore[attr-defined]
