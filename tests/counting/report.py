"""Sum a ``VIBECHAT_TEST_COUNTS`` file per test file: tests seen, loads, engine processes,
``vibechat`` processes and tokens decoded (prompt and reply), sorted by loads.
Usage: python tests/counting/report.py COUNTS [IDS] (IDS: a file of test ids, one a line,
e.g. from ``pytest --co -q``, for the test column)."""

from __future__ import annotations

import collections
import sys


def main(counts_path: str, ids_path: str | None = None) -> None:
    """Print the table."""
    counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in open(counts_path, encoding="utf-8"):
        event, _, rest = line.rstrip("\n").partition("\t")
        test, _, count = rest.partition("\t")
        counts[test.split("::")[0]][event] += int(count or 1)
    tests: collections.Counter[str] = collections.Counter()
    if ids_path:
        for line in open(ids_path, encoding="utf-8"):
            if "::" in line:
                tests[line.split("::")[0]] += 1
    rows = sorted(set(counts) | set(tests), key=lambda f: (-counts[f]["load"], f))
    print(f"{'file':58} {'tests':>5} {'loads':>5} {'engine':>6} {'vibechat':>8} {'tokens':>7}")
    for f in rows:
        c = counts[f]
        print(
            f"{f:58} {tests[f]:5} {c['load']:5} {c['engine']:6} {c['vibechat']:8} {c['tokens']:7}"
        )


if __name__ == "__main__":
    main(*sys.argv[1:3])
