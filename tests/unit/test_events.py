"""The planner's log records (synclib/source/events.py), relayed through the status file and logged again by the job."""

from __future__ import annotations

import logging

from synclib.source.events import EVENTS_KEPT, EventLog, EventReplay
from synclib.source.status import PlannerEvent


def test_the_event_log_keeps_info_and_above_numbered_and_not_passed_on(caplog):
    name = "synclib.test_events_origin"
    log = EventLog.install(name)
    try:
        logger = logging.getLogger(name)
        with caplog.at_level(logging.DEBUG):
            logger.debug("not kept")
            logger.info("events[%d]: %s -> %s", 0, "UNKNOWN", "LOCAL_BEHIND")
            logger.warning("stale")
        events = log.events()
        assert [(e.seq, e.level, e.logger, e.message) for e in events] == [
            (1, "INFO", name, "events[0]: UNKNOWN -> LOCAL_BEHIND"), (2, "WARNING", name, "stale")]
        assert not [r for r in caplog.records if r.name == name]  # kept for the job, not printed here too
        for i in range(EVENTS_KEPT + 5):
            logger.info("line %d", i)
        assert len(log.events()) == EVENTS_KEPT and log.events()[-1].seq == EVENTS_KEPT + 7
    finally:
        logging.getLogger(name).removeHandler(log)
        logging.getLogger(name).propagate = True


def test_replay_logs_each_event_once_with_its_own_time_logger_and_level(caplog):
    replay = EventReplay()
    first = PlannerEvent(1, 1767261600.25, "INFO", "synclib.source.datasource", "events[0]: UNKNOWN -> LOCAL_BEHIND")
    second = PlannerEvent(2, 1767261601.0, "WARNING", "synclib.source.datasource", "events[0]: leader stale")
    with caplog.at_level(logging.INFO, logger="synclib"):
        replay.replay([first])
        replay.replay([first, second])
        replay.replay([first, second])
        replay.replay([PlannerEvent(1, 1767261700.0, "INFO", "synclib.source.datasource", "a new planner")])

    relayed = [(r.levelname, r.name, r.getMessage(), r.created) for r in caplog.records]
    assert relayed == [
        ("INFO", "synclib.source.datasource", first.message, first.at),
        ("WARNING", "synclib.source.datasource", second.message, second.at),
        ("INFO", "synclib.source.datasource", "a new planner", 1767261700.0),
    ]
