"""Stop strings on a text stream.

Text that could be the start of a stop string is held back until the next piece
shows whether it is; text after a stop string is never emitted.
"""

from __future__ import annotations

from collections.abc import Sequence


class StopMatcher:
    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self.pending = ""
        self.stopped = False

    def feed(self, text: str) -> str:
        """Add ``text``; return what can be emitted now. Sets ``stopped`` on a match."""
        if not self.stops:
            return text
        if self.stopped:
            return ""
        self.pending += text
        first = -1
        for stop in self.stops:
            at = self.pending.find(stop)
            if at != -1 and (first == -1 or at < first):
                first = at
        if first != -1:
            out, self.pending, self.stopped = self.pending[:first], "", True
            return out
        hold = 0
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(self.pending)), 0, -1):
                if self.pending.endswith(stop[:n]):
                    hold = max(hold, n)
                    break
        cut = len(self.pending) - hold
        out, self.pending = self.pending[:cut], self.pending[cut:]
        return out

    def flush(self) -> str:
        """The held-back text once the stream ends without a match."""
        out, self.pending = self.pending, ""
        return "" if self.stopped else out
