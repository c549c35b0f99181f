"""app/logfile.py: what libraries log goes to the log file, never the terminal (issue 40,
point 6). The conftest puts the loggers back after each test."""

from __future__ import annotations

import logging
import os
import stat
import sys

from vibechat.app.logfile import log_path, route_logs_to_file


def test_library_records_go_to_a_private_log_file_not_stderr(capsys):
    library = logging.getLogger("httpx")
    library.addHandler(logging.StreamHandler(sys.stderr))  # as some libraries do on import
    route_logs_to_file()
    assert not log_path().exists()  # opened at the first record only
    library.warning("connection reset \x1b]52;c;aGk=\x07by peer")
    logging.getLogger("asyncio").error("Task exception was never retrieved")
    logging.getLogger("some.other.library").warning("no handler of its own")
    for handler in logging.getLogger().handlers:
        handler.flush()
    assert capsys.readouterr().err == ""
    text = log_path().read_text()
    assert "httpx: connection reset by peer" in text and "\x1b" not in text
    assert "Task exception was never retrieved" in text and "no handler of its own" in text
    assert stat.S_IMODE(os.stat(log_path()).st_mode) == 0o600
