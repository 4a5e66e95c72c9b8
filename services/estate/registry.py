"""The queue profiles queuebot knows, by name: the one place a profile is chosen.

The shipped profiles are those the configuration accepts (``PROFILE_NAMES``,
services/config/sections.py, which ``shipped_profiles`` checks against the packages it
ships); the presets (a job-queue system's own tables, ``preset = "..."``) are their
packages' own names, checked here when the estate is built. A registry is a value the
wiring builds and passes to the ``Estate``; tests add profiles of their own to one.
"""

from __future__ import annotations

from collections.abc import Iterable

from services.config import PROFILE_NAMES
from services.errors import ConfigError
from services.estate.profile import QueueProfile


class ProfileRegistry:
    def __init__(self, profiles: Iterable[type[QueueProfile]] = ()) -> None:
        self._profiles: dict[str, type[QueueProfile]] = {}
        for profile in profiles:
            self.add(profile)

    def add(self, profile: type[QueueProfile]) -> None:
        if profile.name in self._profiles:
            raise ValueError(f"a queue profile named {profile.name!r} is already registered")
        self._profiles[profile.name] = profile

    def get(self, name: str, *, preset: bool = False) -> type[QueueProfile]:
        """The profile (or, with ``preset``, the preset) named ``name``."""
        found = self._profiles.get(name)
        if found is None or found.preset != preset:
            what, names = ("preset", self.presets) if preset else ("queue profile", self.names)
            raise ConfigError(f"unknown {what} {name!r}; expected one of {', '.join(names)}")
        return found

    @property
    def names(self) -> list[str]:
        """The profiles' names (not the presets')."""
        return [name for name, p in self._profiles.items() if not p.preset]

    @property
    def presets(self) -> list[str]:
        return [name for name, p in self._profiles.items() if p.preset]


def shipped_profiles() -> ProfileRegistry:
    """The profiles queuebot ships with."""
    from services.estate.good_job import GoodJobProfile
    from services.estate.graphile_worker import GraphileWorkerProfile
    from services.estate.message_job import MessageJobProfile
    from services.estate.oban import ObanProfile
    from services.estate.pg_boss import PgBossProfile
    from services.estate.procrastinate import ProcrastinateProfile
    from services.estate.que import QueProfile
    from services.estate.river import RiverProfile
    from services.estate.solid_queue import SolidQueueProfile
    from services.estate.worker_queue import WorkerQueueProfile

    shipped = ProfileRegistry(
        [
            WorkerQueueProfile,
            MessageJobProfile,
            ProcrastinateProfile,
            PgBossProfile,
            RiverProfile,
            ObanProfile,
            GraphileWorkerProfile,
            QueProfile,
            GoodJobProfile,
            SolidQueueProfile,
        ]
    )
    if tuple(shipped.names) != PROFILE_NAMES:
        raise RuntimeError(
            f"the shipped profiles {shipped.names} are not the names the configuration "
            f"accepts {list(PROFILE_NAMES)}: add a new profile to ProfileName in "
            "services/config/sections.py too"
        )
    return shipped
