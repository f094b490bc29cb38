"""The one duration grammar (`idleTTL`, `reclaim --idle-older-than`, `sim clock --advance`) and
RFC 3339 times, as operators write them and as hamimig prints them."""

from __future__ import annotations

import pytest

from hamimig.durations import (
    MAX_SECONDS,
    DurationError,
    exact_duration,
    format_duration,
    parse_duration,
    parse_time,
    to_rfc3339,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("30m", 1800),
        ("2h", 7200),
        ("1h30m", 5400),
        ("1h30m15s", 5415),
        ("1h15s", 3615),
        ("90m", 5400),  # Go allows a unit past its carry, so does this
        ("0", 0),
        ("0s", 0),
        ("3600", 3600),
        (" 45m ", 2700),
    ],
)
def test_durations_read_as_whole_seconds(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "text",
    [
        "",
        "  ",
        "h",
        "1.5h",
        "-1h",
        "+1h",
        "1h-30m",
        "30m1h",
        "1H",
        "1d",
        "10ms",
        "\uff11h",  # a fullwidth digit one: only ASCII digits count
        "1 h",
        "1hh",
    ],
)
def test_anything_else_is_refused_with_the_grammar(text: str) -> None:
    with pytest.raises(DurationError, match="duration like 90s"):
        parse_duration(text)


@pytest.mark.parametrize("text", ["88000h", "9" * 40, "9" * 40 + "h", str(MAX_SECONDS + 1)])
def test_more_than_ten_years_is_a_typo(text: str) -> None:
    with pytest.raises(DurationError, match="ten years"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (9.9, "9s"), (61, "1m1s"), (3600, "1h"), (11520, "3h12m"), (11529, "3h12m")],
)
def test_ages_print_in_their_two_largest_units_rounded_down(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert format_duration(2 * 86400 + 3 * 3600 + 5) == "2d3h"


@pytest.mark.parametrize("seconds", [0, 1, 59, 60, 3600, 5415, 86400 + 7])
def test_exact_durations_read_back_to_the_same_value(seconds: int) -> None:
    assert parse_duration(exact_duration(seconds)) == seconds


def test_times_need_a_zone_and_round_trip() -> None:
    assert parse_time("2026-12-01T10:00:00Z") == parse_time("2026-12-01T10:00:00.000+00:00")
    assert parse_time("2026-12-01T11:00:00+01:00") == parse_time("2026-12-01T10:00:00Z")
    for bad in ("2026-12-01T10:00:00", "2026-12-01", "yesterday", "", "2026-13-01T00:00:00Z"):
        assert parse_time(bad) is None, bad
    moment = parse_time("2026-12-01T10:00:00.250Z")
    assert moment is not None
    assert to_rfc3339(moment) == "2026-12-01T10:00:00.250+00:00"
