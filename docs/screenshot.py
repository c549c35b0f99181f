"""Make docs/screenshot.svg, the README's picture of the chat, with the app's own screenshot
action (Textual's ``screenshot``, also in the command palette).

The real chat on the bundled starter model, through its engine process, in a 100x30
terminal: three everyday prompts, answered for real (seeded, so a rerun on the same machine
gives the same picture), then the screenshot. Nothing of the user's is read or written: the
user folders point at a temporary directory.

    .venv/bin/python docs/screenshot.py [--out docs/screenshot.svg]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

PROMPTS = ("Hi there!", "What is the capital of France?", "Name three colours.")
SIZE = (100, 34)


async def shoot(out: Path) -> None:
    from vibechat.app.tui import create_app
    from vibechat.engine.llama.worker import WorkerBackend
    from vibechat.engine.models.starter import starter_model_path
    from vibechat.engine.settings.knobs import LlamaCppOptions
    from vibechat.engine.settings.params import SamplingParams

    backend = WorkerBackend(LlamaCppOptions(model_path=starter_model_path(), context_size=2048))
    app = create_app(backend, params=SamplingParams(seed=3), save=False, blink=False)
    try:
        async with app.run_test(size=SIZE) as pilot:
            while not app.model_ready:
                await pilot.pause(0.1)
            for prompt in PROMPTS:
                app.prompt_input.load_text(prompt)
                await pilot.press("enter")
                await pilot.pause(0.2)
                while app.generating:
                    await pilot.pause(0.1)
            await pilot.pause(0.5)
            app.action_screenshot(out.name, str(out.parent))  # the app's own screenshot action
            for _ in range(100):  # it is written by a worker
                if (
                    out.is_file()
                    and out.stat().st_size
                    and out.read_text().rstrip().endswith("</svg>")
                ):
                    break
                await pilot.pause(0.1)
            else:
                raise SystemExit(f"screenshot.py: no screenshot was written to {out}")
    finally:
        backend.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parent / "screenshot.svg"
    )
    args = parser.parse_args()
    out = args.out.resolve()
    out.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("CONFIG", "DATA", "CACHE", "STATE"):
            os.environ[f"VIBECHAT_{name}_DIR"] = str(Path(tmp) / name.lower())
        asyncio.run(shoot(out))
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
