"""The queue profiles queuebot knows, by name: the one place a profile is chosen.

The shipped profiles are ``worker_queue`` and ``message_job``. A registry is a value the
wiring builds and passes to the ``Estate``; tests add profiles of their own to one.
"""

from __future__ import annotations

from collections.abc import Iterable

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

    def get(self, name: str) -> type[QueueProfile]:
        try:
            return self._profiles[name]
        except KeyError:
            raise ConfigError(
                f"unknown queue profile {name!r}; expected one of {', '.join(self.names)}"
            ) from None

    @property
    def names(self) -> list[str]:
        return list(self._profiles)


def shipped_profiles() -> ProfileRegistry:
    """The profiles queuebot ships with."""
    from services.estate.message_job import MessageJobProfile
    from services.estate.worker_queue import WorkerQueueProfile

    return ProfileRegistry([WorkerQueueProfile, MessageJobProfile])
