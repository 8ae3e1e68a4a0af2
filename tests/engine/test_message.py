"""Message ids: UUIDv7, so that the history's message-id index grows at its end."""

from __future__ import annotations

import time
import uuid

from ase_engine.message import new_id


def test_message_ids_are_uuid7_carrying_their_creation_time() -> None:
    before = time.time_ns() // 1_000_000
    value = uuid.UUID(new_id())
    after = time.time_ns() // 1_000_000

    assert value.version == 7 and value.variant == uuid.RFC_4122
    assert before <= value.int >> 80 <= after


def test_message_ids_made_one_after_another_sort_in_creation_order() -> None:
    ids = [new_id() for _ in range(10_000)]

    assert sorted(ids) == ids
    assert len(set(ids)) == len(ids)
