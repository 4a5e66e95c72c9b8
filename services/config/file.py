"""Everything queuebot.toml may hold (``FileConfig``), checked as a whole: names, one
account per person, every route's channels and queue, every audience's channels."""

from __future__ import annotations

from pydantic import (
    Field,
    model_validator,
)

from services.config.alerts import AlertsConfig
from services.config.database import DatabaseConfig
from services.config.housekeeping import HousekeepingConfig
from services.config.incidents import IncidentsConfig
from services.config.sections import (
    NAME_PATTERN,
    AccessConfig,
    ApprovalConfig,
    ChannelConfig,
    DiscordConfig,
    HttpConfig,
    MetricsConfig,
    PersonConfig,
    QueueConfig,
    ReadsConfig,
    RedriveConfig,
    Role,
    RunbooksConfig,
    SlackConfig,
    Strict,
)


class FileConfig(Strict):
    """Everything the TOML file may hold."""

    queue: QueueConfig | None = None
    queues: dict[str, QueueConfig] = Field(default_factory=dict)
    channels: dict[str, ChannelConfig] = Field(default_factory=dict)
    people: dict[str, PersonConfig] = Field(default_factory=dict)
    roles: dict[str, Role] = Field(default_factory=dict)
    approval: ApprovalConfig = Field(default_factory=ApprovalConfig)
    redrive: RedriveConfig = Field(default_factory=RedriveConfig)
    reads: ReadsConfig = Field(default_factory=ReadsConfig)
    http: HttpConfig = Field(default_factory=HttpConfig)
    slack: SlackConfig = Field(default_factory=SlackConfig)
    discord: DiscordConfig = Field(default_factory=DiscordConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    access: AccessConfig = Field(default_factory=AccessConfig)
    runbooks: RunbooksConfig = Field(default_factory=RunbooksConfig)
    alerts: AlertsConfig = Field(default_factory=AlertsConfig)
    incidents: IncidentsConfig = Field(default_factory=IncidentsConfig)
    housekeeping: HousekeepingConfig = Field(default_factory=HousekeepingConfig)
    database: DatabaseConfig = Field(default_factory=DatabaseConfig)

    @model_validator(mode="after")
    def _consistent(self) -> FileConfig:
        if self.queue is not None and self.queues:
            raise ValueError("use either [queue] or [queues.NAME], not both")
        for name in [*self.queues, *self.people, *self.channels]:
            if not NAME_PATTERN.match(name):
                raise ValueError(
                    f"name {name!r} must be lower-case letters, digits, '-' or '_' "
                    "(starting with a letter, at most 32 characters)"
                )
        for platform in ("slack", "discord"):
            seen: dict[str, str] = {}
            for person, cfg in self.people.items():
                account = getattr(cfg, platform)
                if account is None:
                    continue
                if account in seen:
                    raise ValueError(
                        f"people.{person}.{platform} = {account!r} is already "
                        f"people.{seen[account]}.{platform}; one account belongs to one person"
                    )
                seen[account] = person
        self._check_routes()
        return self

    def _check_routes(self) -> None:
        """Every route names channels of [channels] and, if any, a configured queue."""
        queues = self.queue_map()
        names = {route.name for route in self.alerts.routes}
        for index, route in enumerate(self.alerts.routes):
            where = f"alerts.routes.{index} ({route.name})"
            for channel in route.channels:
                if channel not in self.channels:
                    known = ", ".join(sorted(self.channels)) or "none yet"
                    raise ValueError(
                        f"{where}: channel {channel!r} is not in [channels] (known: {known}); "
                        f"add [channels.{channel}] with its slack or discord id"
                    )
            if route.queue is not None and route.queue not in queues:
                raise ValueError(
                    f"{where}: queue {route.queue!r} is not configured "
                    f"(configured: {', '.join(queues)})"
                )
        for audience, channels in self.incidents.audiences.items():
            for channel in channels:
                if channel not in self.channels:
                    raise ValueError(
                        f"incidents.audiences.{audience}: channel {channel!r} is not in "
                        f"[channels]; add [channels.{channel}] with its slack or discord id"
                    )
        synthetic = self.incidents.synthetic_job
        if synthetic is not None and synthetic.queue not in queues:
            raise ValueError(
                f"incidents.synthetic_job.queue {synthetic.queue!r} is not configured "
                f"(configured: {', '.join(queues)})"
            )
        if len(names) != len(self.alerts.routes):
            raise ValueError("alerts.routes: two routes have the same name; names are unique")

    def queue_map(self) -> dict[str, QueueConfig]:
        """Configured queues by name, in file order; the first is the default."""
        if self.queue is not None:
            return {"main": self.queue}
        if self.queues:
            return dict(self.queues)
        return default_queues()


def default_queues() -> dict[str, QueueConfig]:
    """With no queue configured, the demo estate's two queues (the embedded default)."""
    return {
        "clips": QueueConfig(profile="message_job"),
        "workers": QueueConfig(profile="worker_queue"),
    }
