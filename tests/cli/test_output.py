"""Output helpers: the progress line appears only on a terminal; tables align."""

from __future__ import annotations

import io

from xds_client.cli._output import Progress, format_table


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_only_on_a_terminal() -> None:
    pipe = io.StringIO()
    quiet = Progress(pipe)
    quiet.update("listed 100 objects")
    quiet.done()
    assert pipe.getvalue() == ""

    tty = Terminal()
    shown = Progress(tty)
    shown.update("listed 100 objects")
    shown.update("listed 200 objects")
    shown.done()
    assert tty.getvalue() == ("\r\x1b[Klisted 100 objects\r\x1b[Klisted 200 objects\r\x1b[K")


def test_format_table_aligns_columns() -> None:
    assert format_table(("A", "LONGER"), [("xyz", 1), ("", "")]) == ("A    LONGER\nxyz  1\n\n")
