"""Where the scheduler's work runs besides its scheduling loop.

- ``Tasks``: tasks on the event loop that outlive the cycle that started them
  (binding cycles, preemptions, status patches), as upstream starts a goroutine
  for each (schedule_one.go ScheduleOne's ``go func()`` for bindingCycle,
  framework/preemption/executor.go prepareCandidateAsync); cancelled at stop.
- ``ApiWorkers``: a thread pool for the blocking ``KubeApi`` calls (status
  patches, deletions, reads, plugins' writes; bindings when they are not sent
  from the event loop), so the event loop never waits on the network.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any


class Tasks:
    """The running tasks; each leaves the set when it ends."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def __iter__(self) -> Iterator[asyncio.Task[Any]]:
        return iter(list(self._tasks))

    def __len__(self) -> int:
        return len(self._tasks)

    async def cancel_all(self) -> None:
        """Cancels every task and waits until each has ended."""
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class ApiWorkers:
    """Blocking API calls on ``workers`` threads."""

    def __init__(self, workers: int) -> None:
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="berth-api")

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn, *args)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


__all__ = ["ApiWorkers", "Tasks"]
