"""The CLI's bad-input promise, checked the same way by the tests (imported, not collected)."""

from __future__ import annotations

from moelab.cli import main


def refused_on_one_line(capsys, args: list[str], *expected: str) -> str:
    """``moelab ARGS`` exits 2 with one stderr line, no traceback, containing every ``expected``;
    returns that line."""
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for text in expected:
        assert text in err, err
    return err
