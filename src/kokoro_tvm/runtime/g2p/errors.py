"""What the text front end raises and warns, apart from the modules that may not import."""

from __future__ import annotations

from ...errors import KokoroTVMError


class G2PUnavailable(KokoroTVMError, RuntimeError):
    """A language's G2P is not installed (or its data is missing); the message names the pip
    extra that installs it."""


class DroppedTextWarning(UserWarning):
    """Text the language's G2P cannot read (another script, emoji) was left out."""
