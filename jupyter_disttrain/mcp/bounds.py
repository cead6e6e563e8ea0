"""Every tool answer cut to a size an agent can take, saying when and how it was cut."""

from __future__ import annotations

#: Most lines and bytes (UTF-8) a tool answer carries.
MAX_LINES = 400
MAX_BYTES = 64 * 1024


def bounded(
    text: str, max_lines: int = MAX_LINES, max_bytes: int = MAX_BYTES, keep: str = "tail"
) -> str:
    """``text`` cut to ``max_lines`` lines and ``max_bytes`` bytes, keeping its ``keep``
    ("tail" or "head") end; a cut answer starts (tail) or ends (head) with a note saying so."""
    lines = text.splitlines()
    total_lines, total_bytes = len(lines), len(text.encode())
    if total_lines <= max_lines and total_bytes <= max_bytes:
        return text
    lines = lines[-max_lines:] if keep == "tail" else lines[:max_lines]
    kept: list[str] = []
    size = 0
    for line in reversed(lines) if keep == "tail" else lines:
        cost = len(line.encode()) + 1
        if size + cost > max_bytes:
            break
        kept.append(line)
        size += cost
    if keep == "tail":
        kept.reverse()
    note = (
        f"[cut: {len(kept)} of {total_lines} lines, {size} of {total_bytes} bytes shown "
        f"({'last' if keep == 'tail' else 'first'} ones); ask for less with tail or grep]"
    )
    body = "\n".join(kept)
    return f"{note}\n{body}" if keep == "tail" else f"{body}\n{note}"
