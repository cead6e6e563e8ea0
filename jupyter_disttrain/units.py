"""How sizes and durations are written for people, everywhere in the package."""

from __future__ import annotations


def format_bytes(n: int) -> str:
    """``1536`` -> ``1.5 KB``."""
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def duration(seconds: float) -> str:
    """``4.2s``, ``3m05s`` or ``2h07m``."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
