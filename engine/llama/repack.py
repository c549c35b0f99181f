"""llama.cpp's CPU weight repacking, and when it is safe.

When it loads a model, llama.cpp's CPU backend can copy the weights into layouts its fastest
kernels read ("extra buffer types", ``llama_model_params.use_extra_bufts``): interleaved
Q4_0/IQ4_NL/Q4_K blocks (``CPU_REPACK``) and, on Intel CPUs with AMX, tiles for the AMX unit
(``AMX``). On the starter model that is worth about 30 % of decode speed.

The AMX path has a bug in llama-cpp-python 0.3.36's llama.cpp: on many Intel Xeon VMs
(Sapphire/Emerald/Granite Rapids: AWS m7i, GCP C3/C4) its tile kernel, which
``ggml_backend_amx_mul_mat`` uses for every batch of two tokens or more, kills the process
(SIGSEGV) on the first prompt. Single-token batches take a VNNI kernel and work
(llama.cpp #20824, ollama #17205 / #17249).

``repack`` (config key, ``VIBECHAT_REPACK``, ``--repack``) chooses:

* ``on``: extra buffer types on (llama.cpp's default);
* ``off``: off (always safe; the plain CPU kernels);
* ``auto`` (default): on, unless this llama.cpp build has the AMX kernel (its system info
  says ``AMX_INT8 = 1``) and the CPU has AMX. Then a one-time probe decides: a child
  process loads a small model with repacking on and evaluates a multi-token batch; if it
  survives, repacking stays on, if it dies it is off. The verdict is cached per llama.cpp
  build, CPU and kernel, so the probe runs once per machine (and again after an upgrade).

Headless and light: llama_cpp is imported only by the probe's child process and by
``system_info()``.

Imports inside functions are deliberate: ctypes and llama-cpp-python load only when the repack
setting is checked against the CPU (start-up time).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ..errors import LoadCancelled
from ..files import UnreadableFile, read_file
from ..json_bounds import bounded_loads

# The setting (its modes, default and check) lives with the other choices.
from ..settings.choices import check_repack

log = logging.getLogger("vibechat.repack")


# The starter model loads and evaluates its batch in under a second.
PROBE_TIMEOUT_S = 60.0
VERDICT_FILE = "cpu-probe.json"
# Entries kept in the verdict file (one per build x CPU x kernel seen).
MAX_VERDICTS = 32
AMX_FLAGS = frozenset({"amx_int8", "amx_tile", "amx_bf16"})


# ------------------------------------------------------------------ machine facts
@functools.cache
def _read_cpuinfo() -> str | None:
    """/proc/cpuinfo's first MiB (the first CPU's lines are at the top), read once a process;
    None where there is none (macOS, Windows)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            return fh.read(1 << 20)
    except OSError:
        return None


def _cpuinfo_field(cpuinfo: str | None, name: str) -> str | None:
    for line in (cpuinfo if cpuinfo is not None else _read_cpuinfo() or "").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == name:
            return value
    return None


def cpu_flags(cpuinfo: str | None = None) -> frozenset[str] | None:
    """The CPU's feature flags from /proc/cpuinfo (None where there is none: macOS, Windows)."""
    value = _cpuinfo_field(cpuinfo, "flags")
    return None if value is None else frozenset(value.split())


def cpu_model_name(cpuinfo: str | None = None) -> str:
    value = _cpuinfo_field(cpuinfo, "model name")
    return (
        " ".join(value.split())[:200]
        if value is not None
        else platform.processor() or platform.machine()
    )


def system_info() -> str:
    """llama.cpp's ``llama_print_system_info()``: the backends and CPU features it was built
    with ("CPU : SSE3 = 1 | ... | AMX_INT8 = 1 | ..."). '' when llama_cpp cannot load."""
    try:
        import llama_cpp

        info = llama_cpp.llama_print_system_info()
    except Exception:  # noqa: BLE001 - not installed, or a build that does not load
        return ""
    return info.decode("utf-8", "replace") if isinstance(info, bytes) else str(info)


def build_has_amx(info: str) -> bool:
    """Whether this llama.cpp build runs the AMX kernels (its system info says AMX_INT8 = 1)."""
    return re.search(r"\bAMX_INT8\s*=\s*1\b", info) is not None


def amx_at_risk(info: str, flags: frozenset[str] | None) -> bool:
    """The configuration that crashes: a build with the AMX kernel on a CPU with AMX (or one
    whose flags cannot be read: the build's word is then all we have)."""
    return build_has_amx(info) and (flags is None or bool(flags & AMX_FLAGS))


# ------------------------------------------------------------------ the decision
@dataclass(frozen=True)
class ProbeVerdict:
    """What the probe saw: ``ok`` (a multi-token batch with repacking on worked) or not,
    and how it ended ("exit 0", "SIGSEGV", "timed out after 120 s", ...)."""

    ok: bool
    detail: str
    # False: it could not tell (it could not start, the model did not load); not cached.
    conclusive: bool = True


@dataclass(frozen=True)
class RepackChoice:
    """How the model is loaded: ``setting`` as asked (auto/on/off), ``extra_buffers`` as
    applied, and ``reason`` in a few words (``--version``, ``--stats``, ``--json``)."""

    setting: str
    extra_buffers: bool
    reason: str
    # The probe ran for this load (the first on this machine).
    probed_now: bool = False

    @property
    def state(self) -> str:
        return "on" if self.extra_buffers else "off"

    def describe(self) -> str:
        """``off (auto: Intel AMX: ...)``, ``on (set to on)``."""
        if self.setting == "auto":
            return f"{self.state} (auto: {self.reason})"
        return f"{self.state} (set to {self.setting}" + (
            f"; {self.reason})" if self.reason else ")"
        )


AMX_CRASH = "llama.cpp's AMX kernel crashes on multi-token batches on many AMX machines"


def decide_repack(
    setting: str,
    info: str,
    flags: frozenset[str] | None,
    verdict: Callable[[], tuple[ProbeVerdict | None, bool]] | None = None,
) -> RepackChoice:
    """The repack choice for ``setting`` on a machine whose llama.cpp system info is ``info``
    and CPU flags ``flags``. ``verdict()`` returns the probe's verdict (None: none to be had)
    and whether it was probed just now; it is called only when the answer depends on it."""
    setting = check_repack(setting)
    risky = amx_at_risk(info, flags)
    if setting == "off":
        return RepackChoice("off", False, "")
    if setting == "on":
        return RepackChoice("on", True, f"Intel AMX: {AMX_CRASH}" if risky else "")
    if not risky:
        why = "no AMX on this CPU" if build_has_amx(info) else "no AMX kernel in this build"
        return RepackChoice("auto", True, why)
    found, probed_now = verdict() if verdict is not None else (None, False)
    if found is None or not found.conclusive:
        detail = f"; probe: {found.detail}" if found is not None else ""
        return RepackChoice("auto", False, f"Intel AMX: {AMX_CRASH}{detail}", probed_now)
    if found.ok:
        return RepackChoice(
            "auto", True, "Intel AMX: a probe on this machine found its kernel works", probed_now
        )
    return RepackChoice(
        "auto",
        False,
        f"Intel AMX: its kernel crashed in a probe on this machine ({found.detail})",
        probed_now,
    )


# ------------------------------------------------------------------ the probe and its cache
def probe_key(info: str, llama_version: str, cpuinfo: str | None = None) -> str:
    """What a verdict depends on: the llama.cpp build, the CPU and the kernel."""
    text = "\n".join(
        (llama_version, info, cpu_model_name(cpuinfo), platform.release(), platform.machine())
    )
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:32]


def _read_verdicts(path: Path) -> dict[str, dict]:
    try:
        data = bounded_loads(read_file(path, 1 << 16))
    except (OSError, ValueError, UnreadableFile):
        # Larger than ours ever is: not ours, start over.
        return {}
    return data if isinstance(data, dict) else {}


def cached_verdict(path: Path, key: str) -> ProbeVerdict | None:
    entry = _read_verdicts(path).get(key)
    if not isinstance(entry, dict) or not isinstance(entry.get("ok"), bool):
        return None
    detail = entry.get("detail")
    return ProbeVerdict(entry["ok"], detail[:200] if isinstance(detail, str) else "")


def save_verdict(path: Path, key: str, verdict: ProbeVerdict) -> None:
    """Add ``verdict`` to the file (atomically; a failure to write only costs a probe later)."""
    data = _read_verdicts(path)
    data.pop(key, None)
    data[key] = {"ok": verdict.ok, "detail": verdict.detail, "at": int(time.time())}
    while len(data) > MAX_VERDICTS:
        data.pop(next(iter(data)))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".cpu-probe-", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1)
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("could not save the CPU probe's verdict to %s: %s", path, exc)
        with contextlib.suppress(OSError, UnboundLocalError):
            os.unlink(tmp)


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def run_probe(
    model: Path,
    *,
    timeout: float = PROBE_TIMEOUT_S,
    cancelled: Callable[[], bool] = lambda: False,
    command: list[str] | None = None,
) -> ProbeVerdict:
    """Load ``model`` with repacking on in a child process and evaluate a 32-token batch and a
    few single tokens there. ``command``: the child to run instead (tests). Ctrl-C
    (``cancelled()``) kills the child and raises LoadCancelled."""
    argv = command or [
        sys.executable,
        "-c",
        "from vibechat.engine.llama.repack import probe_main; probe_main()",
        str(model),
    ]
    # llama.cpp's own lines, for the log: never the terminal.
    with tempfile.TemporaryFile() as output:
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                # A Ctrl-C in the terminal is ours to pass on.
                start_new_session=True,
            )
        except OSError as exc:
            return ProbeVerdict(False, f"could not start ({exc})", conclusive=False)
        deadline = time.monotonic() + timeout
        while True:
            try:
                code = proc.wait(0.05)
                break
            except subprocess.TimeoutExpired:
                pass
            if cancelled() or time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                if cancelled():
                    raise LoadCancelled(
                        "the load was cancelled while llama.cpp's CPU kernels were checked."
                    )
                # A kernel that hangs is as unusable as one that crashes (a busy machine does not
                # turn a one-second check into a minute).
                return ProbeVerdict(False, f"timed out after {timeout:g} s")
        output.seek(0)
        tail = output.read()[-4000:].decode("utf-8", "replace")
    for line in tail.splitlines()[-20:]:
        log.debug("probe: %s", line)
    if code == 0 and "probe: ok" in tail:
        return ProbeVerdict(True, "exit 0")
    if code < 0:
        return ProbeVerdict(False, _signal_name(code))
    if code >= 128:
        # A shell's status for a signal (a wrapper script).
        return ProbeVerdict(False, f"exit {code}")
    last = next((line.strip() for line in reversed(tail.splitlines()) if line.strip()), "")
    return ProbeVerdict(False, f"exit {code}: {last[:120]}", conclusive=False)


def probe_verdict(
    model: Path | None, cache: Path, key: str, *, cancelled: Callable[[], bool] = lambda: False
) -> tuple[ProbeVerdict | None, bool]:
    """The cached verdict for ``key``, else a probe's on ``model`` (cached when conclusive).
    Returns (verdict or None, whether it probed now)."""
    found = cached_verdict(cache, key)
    if found is not None:
        return found, False
    if model is None:
        return None, False
    log.info("checking once whether llama.cpp's AMX kernel works on this CPU (%s)", model.name)
    verdict = run_probe(model, cancelled=cancelled)
    log.info("AMX probe: %s (%s)", "works" if verdict.ok else "fails", verdict.detail)
    if verdict.conclusive:
        save_verdict(cache, key, verdict)
    return verdict, True


def setting_summary(
    setting: str, info: str, flags: frozenset[str] | None, cache: Path, key: str
) -> str:
    """One line for ``vibechat --version``: what ``setting`` means on this machine, from the
    cached verdict only (it never probes)."""
    setting = check_repack(setting)
    found = cached_verdict(cache, key)
    if setting == "auto" and amx_at_risk(info, flags) and found is None:
        return (
            "CPU weight repacking: auto: this CPU has Intel AMX, whose kernel in this llama.cpp "
            "crashes on many machines; a one-time check at the first model load decides "
            "(--repack on|off overrides it)"
        )
    choice = decide_repack(setting, info, flags, lambda: (found, False))
    return f"CPU weight repacking: {choice.describe()}"


def probe_main(argv: Iterable[str] | None = None) -> None:
    """The probe's child process: exit 0 printing 'probe: ok', or die trying."""
    args = list(sys.argv[1:] if argv is None else argv)
    import ctypes

    import llama_cpp as ll

    from ..system import default_threads

    def quiet(_level: int, text: bytes, _user: ctypes.c_void_p) -> None:
        return None

    callback = ll.llama_log_callback(quiet)
    ll.llama_log_set(callback, ctypes.c_void_p(0))
    ll.llama_backend_init()
    mparams = ll.llama_model_default_params()
    # The CPU's kernels are the question.
    mparams.n_gpu_layers = 0
    mparams.use_extra_bufts = True
    model = ll.llama_model_load_from_file(args[0].encode("utf-8"), mparams)
    if not model:
        print("probe: the model did not load", flush=True)
        raise SystemExit(3)
    cparams = ll.llama_context_default_params()
    cparams.n_ctx = 256
    cparams.n_batch = cparams.n_ubatch = 64
    cparams.n_threads = cparams.n_threads_batch = default_threads()
    ctx = ll.llama_init_from_model(model, cparams)
    if not ctx:
        print("probe: no context", flush=True)
        raise SystemExit(3)
    vocab = ll.llama_model_get_vocab(model)
    text = b"The quick brown fox jumps over the lazy dog. " * 8
    buf = (ll.llama_token * 256)()
    n = ll.llama_tokenize(vocab, text, len(text), buf, 256, True, False)
    n = max(2, min(n, 32))
    # The batch that crashes.
    if ll.llama_decode(ctx, ll.llama_batch_get_one(buf, n)) != 0:
        print("probe: llama_decode failed", flush=True)
        raise SystemExit(3)
    one = (ll.llama_token * 1)()
    # And single tokens after it.
    for i in range(4):
        one[0] = buf[i]
        if ll.llama_decode(ctx, ll.llama_batch_get_one(one, 1)) != 0:
            print("probe: llama_decode failed", flush=True)
            raise SystemExit(3)
    print("probe: ok", flush=True)
    # No teardown: nothing more to learn, and nothing that could crash late.
    os._exit(0)
