"""Fixtures of the broker tests that read through synclib/kafka/reader.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from synclib.kafka import fetch_path, reader


@pytest.fixture
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This worker process as if it had not read yet: no cached consumer, no self-check result."""
    monkeypatch.setattr(reader, "_consumers", {})
    fetch_path.fast_path_problem.cache_clear()
    fetch_path._warned.clear()
    yield
    fetch_path.fast_path_problem.cache_clear()
    fetch_path._warned.clear()
