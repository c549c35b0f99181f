"""Images on the local engine (issue 29): what one image costs a vision model here, measured in
one run on the bundled starter model with a projector (by default the tests' tiny random-weight
Gemma 3 projector, tests/projector.py: 32×32 pixels, 16 image tokens; ``--mmproj FILE`` for a
real one made for ``--model``).

* encode -- one picture through the projector alone (``mtmd_encode_chunk``), and encoded and
  evaluated into the KV cache (what a turn pays), with the image tokens it costs.
* first token -- the same one-line turn with the picture and without, from an empty KV cache
  (the whole prompt evaluated), in alternating rounds: the times to first token and their ratio.

    .venv/bin/python bench/bench_vision.py [--rounds 5] [--threads 2] [--model FILE --mmproj FILE]
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from _common import (
    add_common_args,
    alternating_rounds,
    calibration,
    describe_machine,
    disturbed_warning,
    greedy_reply,
    quiet_logs,
    save_samples,
    with_other_load,
)

TESTS = Path(__file__).resolve().parent.parent / "tests"
QUESTION = "What is in this picture?"


@dataclass
class Sample:
    mode: str  # "text" or "image"
    round: int
    ttft_ms: float
    prompt_tokens: int
    other_load: float | None = None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, rounds=5, tokens=8)
    parser.add_argument(
        "--model", type=Path, default=None, help="a GGUF model (default: the starter)"
    )
    parser.add_argument(
        "--mmproj", type=Path, default=None, help="its projector (default: the tiny test one)"
    )
    parser.add_argument(
        "--image", type=Path, default=None, help="a PNG or JPEG (default: a random 48×40 picture)"
    )
    parser.add_argument("--encodes", type=int, default=10, help="encodes timed (default 10)")
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=10.0,
        help="seconds to wait for a quiet machine before each sample (default 10)",
    )
    args = parser.parse_args(argv)
    threads = args.threads or 2
    quiet_logs()
    sys.path.insert(0, str(TESTS))
    from projector import model_width, write_projector, write_test_image
    from vibechat.engine.llama.llamacpp import LlamaCppBackend
    from vibechat.engine.llama.prompt_eval import decode_all
    from vibechat.engine.models.starter import starter_model_path
    from vibechat.engine.settings.knobs import LlamaCppOptions
    from vibechat.engine.turns.attachments import Attachment
    from vibechat.engine.turns.backend import ChatMessage

    model = args.model or starter_model_path()
    with tempfile.TemporaryDirectory(prefix="vibechat-bench-vision-") as tmp:
        mmproj = args.mmproj or write_projector(Path(tmp) / "mmproj-test.gguf", model_width(model))
        image_path = args.image or write_test_image(Path(tmp) / "picture.png")
        from PIL import Image

        with Image.open(image_path) as img:
            width, height = img.size
        picture = Attachment(
            kind="image",
            name=image_path.name,
            digest="b" * 64,
            mime="image/png",
            size=image_path.stat().st_size,
            path=str(image_path),
            width=width,
            height=height,
        )
        backend = LlamaCppBackend(
            LlamaCppOptions(
                model_path=model,
                mmproj_path=mmproj,
                context_size=4096,
                threads=threads,
                repack="off",
            )
        )
        info = backend.load()
        print(calibration(), file=sys.stderr)
        print(
            f"machine: {describe_machine()}\nmodel: {model.name}, projector "
            f"{info.projector}, {threads} threads",
            file=sys.stderr,
        )
        try:
            vision = backend._vision
            assert vision is not None
            pieces = vision.layout(picture)
            image_tokens = sum(len(run) for run in pieces if run and run[0] < 0)
            markers = sum(len(run) for run in pieces if run and run[0] >= 0)
            head = next(run[0] for run in pieces if run and run[0] < 0)

            encode_ms, evaluate_ms = [], []
            mt = vision._mt
            for _ in range(args.encodes):  # the projector alone
                chunks, bitmap = vision._tokenize(picture)
                try:
                    chunk = next(
                        mt.mtmd_input_chunks_get(chunks, i)
                        for i in range(mt.mtmd_input_chunks_size(chunks))
                        if mt.mtmd_input_chunk_get_type(
                            chunk := mt.mtmd_input_chunks_get(chunks, i)
                        )
                        == mt.MTMD_INPUT_CHUNK_TYPE_IMAGE
                    )
                    t0 = time.perf_counter()
                    rc = mt.mtmd_encode_chunk(vision._ctx, ctypes.c_void_p(chunk))
                    encode_ms.append((time.perf_counter() - t0) * 1000)
                    assert rc == 0, rc
                finally:
                    vision._free(chunks, bitmap)
            for _ in range(args.encodes):  # encoded and evaluated into the KV cache, as a turn does
                backend.reset()
                decode_all(backend._reading(list(pieces[0])))
                t0 = time.perf_counter()
                rc = vision.evaluate(backend._ctx, head, len(backend._kv.tokens), 2048)
                evaluate_ms.append((time.perf_counter() - t0) * 1000)
                assert rc == 0, rc

            turns = {
                "text": [ChatMessage("user", QUESTION)],
                "image": [ChatMessage("user", QUESTION, attachments=(picture,))],
            }

            def sample(mode: str) -> Sample:
                def run() -> Sample:
                    done = greedy_reply(backend, turns[mode], args.tokens)
                    return Sample(mode, 0, done.stats.ttft_ms, done.stats.prompt_tokens)

                return with_other_load(run)

            samples = alternating_rounds(
                args.rounds,
                ("text", "image"),
                sample,
                lambda mode, s: (
                    f"{mode}: first token {s.ttft_ms:.0f} ms ({s.prompt_tokens} prompt tokens)"
                ),
                retries=args.retries,
                quiet_wait_s=args.quiet_wait,
                swap_odd_rounds=True,
            )
        finally:
            backend.close()

    def median(mode: str) -> float:
        return statistics.median(s.ttft_ms for s in samples if s.mode == mode)

    prompt = {s.mode: s.prompt_tokens for s in samples}
    print(f"\n| one {width}×{height} image ({info.projector}) | median of {args.encodes} |")
    print("|---|---|")
    print(f"| image tokens | {image_tokens} (+{markers} marker tokens) |")
    print(f"| encode (projector only) | {statistics.median(encode_ms):.1f} ms |")
    print(f"| encode + evaluate into the KV cache | {statistics.median(evaluate_ms):.1f} ms |")
    print(f"\n| same turn, empty cache (median of {args.rounds}) | prompt tokens | first token |")
    print("|---|---|---|")
    print(f"| text only | {prompt['text']} | {median('text'):.0f} ms |")
    print(f"| with the image | {prompt['image']} | {median('image'):.0f} ms |")
    print(f"ratio with/without: {median('image') / median('text'):.2f}")
    warning = disturbed_warning(samples)
    if warning:
        print(warning)
    save_samples(
        args.json, samples, encode_ms=encode_ms, evaluate_ms=evaluate_ms, image_tokens=image_tokens
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
