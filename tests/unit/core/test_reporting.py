"""pipeline.core.reporting: stages report progress and events to the reporter they are given: silent by
default, rendered through an output sink by the CLI, recorded for tests."""

from __future__ import annotations

import io

from rich.console import Console

from pipeline.core.output import Output
from pipeline.core.reporting import SILENT, OutputReporter, RecordingReporter, Reporter, SilentReporter


def _sink(**mode: bool) -> tuple[Output, io.StringIO]:
    err = io.StringIO()
    return Output(stdout=Console(file=io.StringIO()), stderr=Console(file=err, width=100), **mode), err


def _report(reporter: Reporter) -> None:
    reporter.info("hello")
    reporter.warn("careful")
    with reporter.progress() as progress:
        copy = progress.start("copy", total=4)
        progress.advance(copy, 2, description="copying")
        score = progress.start("score", total=3)
        assert score != copy
        progress.advance(score)
        progress.finish(score)
        tool = progress.start("tool", total=None)  # a child process of unknown length
        progress.advance(tool, 0, description="tool: linking")
        progress.finish(tool)


def test_silent_reporter_says_nothing(capsys) -> None:
    assert isinstance(SILENT, SilentReporter) and not SILENT.shows_progress
    _report(SILENT)
    assert capsys.readouterr() == ("", "")


def test_output_reporter_renders_events_and_bars_on_stderr() -> None:
    out, err = _sink()
    reporter = OutputReporter(out)
    assert reporter.shows_progress
    _report(reporter)
    text = err.getvalue()
    assert text.startswith("hello\nwarning: careful\n")
    assert "copying" in text and "2/4" in text and "3/3" in text  # advanced with a new description; finished
    assert "tool: linking" in text and "1/1" in text  # a task without a total shows as done when finished


def test_output_reporter_under_json_or_quiet_shows_no_progress() -> None:
    out, err = _sink(json_mode=True)
    reporter = OutputReporter(out)
    assert not reporter.shows_progress
    _report(reporter)
    assert err.getvalue() == "hello\nwarning: careful\n"  # events still go to stderr; no bars
    out, err = _sink(quiet=True)
    _report(OutputReporter(out))
    assert err.getvalue() == "warning: careful\n"  # --quiet keeps warnings only


def test_output_reporter_follows_the_process_wide_sink(monkeypatch) -> None:
    from pipeline.core.output import OUT

    monkeypatch.setattr(OUT, "json_mode", True)
    assert OutputReporter().out is OUT and not OutputReporter().shows_progress


def test_recording_reporter_keeps_the_events() -> None:
    heard = RecordingReporter()
    _report(heard)
    assert heard.events == [("info", "hello"), ("warn", "careful")] and not heard.shows_progress
