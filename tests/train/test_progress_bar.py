"""train/progress_bar.py's time-based progress lines (the loop's bar and plain lines are
tested through the command line)."""

from __future__ import annotations

from train.progress_bar import progress_lines


def test_progress_lines_say_how_far_and_how_long_is_left(capsys):
    """A line at most every `every` seconds, with the time left at that pace, and the last
    line once any was written; a render faster than `every` writes none."""
    now = [0.0]
    report = progress_lines("rendered", "views", every=10.0, clock=lambda: now[0])
    for done, t in ((1, 5.0), (2, 12.0), (3, 15.0), (4, 16.0)):
        now[0] = t
        report(done, 4)
    assert capsys.readouterr().err.splitlines() == [
        "  rendered 2 of 4 views in 12 s, about 12 s left",
        "  rendered 4 of 4 views in 16 s",
    ]
    now[0] = 0.0
    quick = progress_lines("rendered", "views", every=10.0, clock=lambda: now[0])
    for done in range(1, 5):
        now[0] = done
        quick(done, 4)
    assert capsys.readouterr().err == ""
