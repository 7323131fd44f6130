"""Ray's `ActorPool`: spreads calls over a fixed set of actors, one call per actor at a
time, and hands back the results in submission order or as they finish."""

from __future__ import annotations

from collections import deque
from typing import Any, Callable, Iterable, Iterator


class ActorPool:
    """`fn(actor, value)` must return the ObjectRef (or list of refs) of one call on `actor`.

    Example::

        pool = ActorPool([Doubler.remote(), Doubler.remote()])
        list(pool.map(lambda a, v: a.double.remote(v), [1, 2, 3]))  # [2, 4, 6]
    """

    def __init__(self, actors: Iterable):
        self._idle = list(actors)
        # Calls in flight: the key of each call's ref(s) -> (its submission number, the actor).
        self._in_flight: dict = {}
        # Submission number -> ref(s), for handing results back in order.
        self._by_number: dict = {}
        self._submitted = 0
        self._returned = 0
        # Submissions waiting for an actor to come free.
        self._pending_submits: deque = deque()

    # Submitting

    def submit(self, fn: Callable, value: Any) -> None:
        """Calls `fn(actor, value)` on a free actor, or queues it until one is free."""
        if not self._idle:
            self._pending_submits.append((fn, value))
            return
        actor = self._idle.pop()
        refs = fn(actor, value)
        self._in_flight[_key(refs)] = (self._submitted, actor)
        self._by_number[self._submitted] = refs
        self._submitted += 1

    def map(self, fn: Callable, values: Iterable) -> Iterator:
        """Results of `fn` over `values`, in the order of `values`. Results of earlier
        submissions not yet collected are dropped first."""
        self._drop_uncollected()
        for value in values:
            self.submit(fn, value)
        return self._drain(self.get_next)

    def map_unordered(self, fn: Callable, values: Iterable) -> Iterator:
        """Like `map`, but each result as soon as it is ready."""
        self._drop_uncollected()
        for value in values:
            self.submit(fn, value)
        return self._drain(self.get_next_unordered)

    def _drain(self, next_result: Callable) -> Iterator:
        while self.has_next():
            yield next_result()

    def _drop_uncollected(self) -> None:
        # Their results are not waited for; waiting submissions still run (on the actors
        # freed here), and are dropped in turn.
        while self.has_next():
            for refs in list(self._by_number.values()):
                self._collected(refs)
        self._submitted = self._returned = 0

    # Collecting

    def has_next(self) -> bool:
        """Whether any submitted call's result has not been collected."""
        return bool(self._in_flight)

    def get_next(self, timeout: float | None = None, ignore_if_timedout: bool = False):
        """The next result in submission order. With `timeout`, raises TimeoutError if it
        is not ready in time; with `ignore_if_timedout` too, that call is given up on."""
        import oxray

        if not self.has_next():
            raise StopIteration("No more results to get")
        if self._returned >= self._submitted:
            raise ValueError("It is not allowed to call get_next() after get_next_unordered().")
        refs = self._by_number[self._returned]
        if timeout is not None:
            ready, _ = oxray.wait(_as_list(refs), num_returns=len(_as_list(refs)), timeout=timeout)
            if len(ready) < len(_as_list(refs)):
                if not ignore_if_timedout:
                    raise TimeoutError(f"Timed out waiting for result after {timeout} s")
                self._collected(refs)
                self._returned += 1
                raise TimeoutError(f"Timed out waiting for result after {timeout} s. The task {refs} was ignored.")
        self._collected(refs)
        self._returned += 1
        return oxray.get(refs)

    def get_next_unordered(self, timeout: float | None = None, ignore_if_timedout: bool = False):
        """Whichever result is ready first. Once used, `get_next()` is no longer allowed
        until every result has been collected."""
        import oxray

        if not self.has_next():
            raise StopIteration("No more results to get")
        firsts = {_as_list(refs)[0]: refs for refs in self._by_number.values()}
        ready, _ = oxray.wait(list(firsts), num_returns=1, timeout=timeout)
        if not ready:
            if ignore_if_timedout:
                # The oldest call is given up on, as `get_next` would.
                self._collected(self._by_number[min(self._by_number)])
            raise TimeoutError(f"Timed out waiting for result after {timeout} s")
        refs = firsts[ready[0]]
        number = self._collected(refs)
        # In-order collection resumes only after it: get_next() refuses once nothing later is left.
        self._returned = max(self._returned, number + 1)
        return oxray.get(refs)

    def _collected(self, refs) -> int:
        """Forgets a call (its result is being handed back or dropped) and frees its actor."""
        number, actor = self._in_flight.pop(_key(refs))
        del self._by_number[number]
        self._free(actor)
        return number

    # The actors

    def has_free(self) -> bool:
        """Whether an actor is idle and no submission is waiting for one."""
        return bool(self._idle) and not self._pending_submits

    def pop_idle(self):
        """Takes an idle actor out of the pool (None if none is free)."""
        return self._idle.pop() if self.has_free() else None

    def push(self, actor) -> None:
        """Adds an actor to the pool (it then takes the oldest waiting submission)."""
        busy = [a for _, a in self._in_flight.values()]
        if actor in self._idle or actor in busy:
            raise ValueError("Actor already belongs to current ActorPool")
        self._free(actor)

    def _free(self, actor) -> None:
        self._idle.append(actor)
        if self._pending_submits:
            self.submit(*self._pending_submits.popleft())


def _as_list(refs) -> list:
    return list(refs) if isinstance(refs, list) else [refs]


def _key(refs):
    return tuple(refs) if isinstance(refs, list) else refs
