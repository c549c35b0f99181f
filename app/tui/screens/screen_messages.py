"""Messages a screen that opens on demand sends to its controller, apart from the screen.

A controller names the messages it answers at start-up (its ``handlers()``, host.py); the
screens themselves (the downloader: its data table, progress bar, the hub's client) are
imported when first opened, after the first frame. So the messages they send live here, and
the screen re-exports them under its own name (``DownloadScreen.Start``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.message import Message

if TYPE_CHECKING:
    from vibechat.engine.models.hub import RepoListing
    from vibechat.engine.settings.refs import QuantOption


class DownloadStart(Message):
    """Download ``option`` of ``listing`` (the downloader's ``DownloadScreen.Start``)."""

    def __init__(self, listing: RepoListing, option: QuantOption) -> None:
        super().__init__()
        self.listing = listing
        self.option = option


class DownloadCancel(Message):
    """Stop the running download (it resumes on the next attempt): ``DownloadScreen.Cancel``."""


# The handler names they had as the downloader's own classes (``on_download_screen_start``).
DownloadStart.handler_name = "on_download_screen_start"
DownloadCancel.handler_name = "on_download_screen_cancel"
