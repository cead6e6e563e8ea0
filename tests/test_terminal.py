"""Printed text as a terminal shows it (terminal.py)."""

from __future__ import annotations

from jupyter_disttrain.terminal import physical_lines, shown, terminal_lines


def test_a_line_shows_its_text_after_its_last_carriage_return() -> None:
    assert shown("plain") == "plain"
    assert shown("\r 1%\r 2%\r 3%|#") == " 3%|#"
    assert shown("loss 0.5\r") == "loss 0.5"  # a line ended \r\n
    assert shown("\r") == ""


def test_lines_split_at_newlines_only() -> None:
    assert physical_lines("a\r\n\rb\nc\n") == ["a\r", "\rb", "c"]
    assert physical_lines("a\n\n") == ["a", ""]
    assert physical_lines("") == []


def test_a_redraw_after_a_redraw_of_its_stream_takes_its_place() -> None:
    lines = [
        (0, "epoch 0"),
        (0, "\r10%|#"),
        (1, "\r5%|"),  # another stream's bar between two redraws
        (0, "\r20%|##"),
        (1, "\r9%|"),
        (0, "done"),  # a line of its own ends the bar
        (0, "\r0%|"),  # a new bar
    ]
    assert terminal_lines(lines) == [
        (0, "epoch 0"),
        (0, "20%|##"),
        (1, "9%|"),
        (0, "done"),
        (0, "0%|"),
    ]
