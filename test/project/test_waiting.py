"""support.waiting.wait_for, the suite's one polling wait: the value it returns and what a timeout says."""

from __future__ import annotations

import itertools

import pytest

from support.waiting import wait_for


def test_returns_the_conditions_first_truthy_value():
    calls = itertools.count()
    assert wait_for(lambda: [n] if (n := next(calls)) >= 3 else [], 5.0, "the third poll", step=0.001) == [3]


def test_a_timeout_names_what_it_waited_for_and_shows_the_logs():
    with pytest.raises(AssertionError, match=r"(?s)timed out after 0.05 s waiting for the answer\nlog line"):
        wait_for(lambda: None, 0.05, "the answer", lambda: "log line", step=0.01)


def test_without_words_a_timeout_shows_the_condition_as_written():
    with pytest.raises(AssertionError, match="waiting for .*lambda: 1 > 2"):
        wait_for(lambda: 1 > 2, 0.02, step=0.01)


def test_the_condition_is_asked_once_more_at_the_deadline():
    polls: list[int] = []
    assert wait_for(lambda: polls.append(0) or len(polls) >= 2, 0.05, "a second poll", step=10.0)
    assert len(polls) == 2  # the step is cut short at the deadline, where the condition is asked again
