"""The built-in hardware profiles a process keeps for a while, so that planning on one reads no row."""

from __future__ import annotations

import time
from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from service.data.models import HardwareProfile

# Built-in profiles change only when `flask setup` loads a catalog (the API refuses to change them), so a
# process keeps what it read of them, prices included, for BUILT_IN_SECONDS: a plan on one reads no row of
# it. A catalog loaded into a running deployment is in use everywhere within that time. Custom profiles are
# read afresh: their owners change them through the API and expect the next plan to see it at once.
BUILT_IN_SECONDS = 60.0
# Where a session finds the built-in profiles of its database (Database gives its sessions one; sessions
# without it read every profile from the database).
BUILT_IN_HARDWARE = "built_in_hardware"


class BuiltInHardware:
    """The built-in profiles of one database as last read, shared by the sessions of a process."""

    def __init__(
        self,
        read_apart: Callable[[], Session],
        seconds: float = BUILT_IN_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ):
        # A session that reads without waiting for the writing one asking (on SQLite, a DEFERRED one).
        self._read_apart = read_apart
        self._seconds, self._clock = seconds, clock
        self._kept: dict[str, tuple[float, HardwareProfile]] = {}  # slug: (read at, detached profile)

    def get(self, session: Session, slug: str, *, shared: bool = False) -> HardwareProfile | None:
        """The profile `slug` names in `session` (no SQL), if it is built in and was read lately. `shared`:
        the kept profile itself, detached and shared by every request of the process, for a caller that only
        reads it and puts it into no session."""
        kept = self._kept.get(slug)
        if kept is None or self._clock() - kept[0] > self._seconds:
            return None
        if shared:
            return kept[1]
        # A copy in the session, its state taken as the database's (load=False: SQLAlchemy's way to put
        # cached objects back into a session); the kept one is only ever read.
        return session.merge(kept[1], load=False)

    def keep(self, slug: str) -> None:
        """Read `slug` apart (a session of its own, closed at once, leaves it detached) and keep it."""
        read_at = self._clock()
        with self._read_apart() as apart:
            profile = read_profile(apart, slug)
        if profile is not None and profile.built_in:
            self._kept[slug] = (read_at, profile)

    def forget(self) -> None:
        self._kept.clear()


def read_profile(session: Session, slug: str) -> HardwareProfile | None:
    return session.scalars(
        select(HardwareProfile)
        .where(HardwareProfile.slug == slug)
        .options(selectinload(HardwareProfile.prices))
    ).first()
