"""Background work that fails alone (hive.sidecar.base.supervise): a task started through Supervised that
raises anything is logged with its traceback, and the task group it runs in, the sidecar's main
one, goes on serving."""

from __future__ import annotations

import logging

import anyio
import pytest

from hive.sidecar.base.supervise import Supervised

pytestmark = pytest.mark.anyio


async def test_a_background_task_raising_any_exception_is_logged_with_its_traceback_and_the_group_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    served = anyio.Event()
    failed = anyio.Event()

    async def broken_notification() -> None:
        failed.set()
        raise TypeError("unhashable type: 'list'")  # what a malformed D-Bus answer once raised

    async def serving() -> None:
        await failed.wait()
        served.set()

    with caplog.at_level(logging.ERROR, logger="hive.sidecar"), anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            tasks = Supervised(group)
            tasks.start_soon(broken_notification)
            tasks.start_soon(serving)
            await served.wait()
    assert not group.cancel_scope.cancel_called
    failures = [r for r in caplog.records if r.exc_info and r.exc_info[0] is TypeError]
    assert len(failures) == 1 and "broken_notification" in failures[0].getMessage()
