"""Everything queuebot.toml may hold (``FileConfig``), checked as a whole: names, one
account per person, every route's channels and queue, every audience's channels."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    Discriminator,
    Field,
    Tag,
    model_validator,
)

from services.config.access import GroupsConfig, RotaConfig, RotaName, rota_key
from services.config.alerts import AlertsConfig
from services.config.database import DatabaseConfig
from services.config.housekeeping import HousekeepingConfig
from services.config.incidents import IncidentsConfig
from services.config.sections import (
    NAME_PATTERN,
    ROLES,
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


def _entry_kind(value: Any) -> str:
    return "grant" if isinstance(value, dict | GroupsConfig) else "role"


# a [roles] entry: "authority name" = "role", or a table granting a role to groups; told
# apart by its shape, so a mistake in either is said in that one's words
RoleEntry = Annotated[
    Annotated[Role, Tag("role")] | Annotated[GroupsConfig, Tag("grant")],
    Discriminator(_entry_kind),
]


class FileConfig(Strict):
    """Everything the TOML file may hold."""

    queue: QueueConfig | None = None
    queues: dict[str, QueueConfig] = Field(default_factory=dict)
    channels: dict[str, ChannelConfig] = Field(default_factory=dict)
    people: dict[str, PersonConfig] = Field(default_factory=dict)
    # "authority name" = "role" (what a runbook's authority maps to), or [roles.ROLE]
    # with the groups that hold a queuebot role (``role_grants``)
    roles: dict[str, RoleEntry] = Field(default_factory=dict)
    rotas: dict[RotaName, RotaConfig] = Field(default_factory=dict)
    teams: dict[str, GroupsConfig] = Field(default_factory=dict)
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
        for name in [*self.queues, *self.people, *self.channels, *self.teams]:
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
        self._check_groups()
        return self

    def authority_roles(self) -> dict[str, Role]:
        """``[roles]``' string entries: a runbook authority's name -> a queuebot role."""
        return {name: role for name, role in self.roles.items() if isinstance(role, str)}

    def role_grants(self) -> dict[Role, GroupsConfig]:
        """``[roles.ROLE]`` tables: the groups that hold each queuebot role."""
        return {
            name: grant  # type: ignore[misc]  # checked to be a role by ``_check_groups``
            for name, grant in self.roles.items()
            if isinstance(grant, GroupsConfig)
        }

    def _check_groups(self) -> None:
        """Role grants name roles; every person, rota and team named exists."""
        rotas = {rota_key(name) for name in self.rotas}
        if len(rotas) != len(self.rotas):
            raise ValueError("rotas: two rotas have the same name (case does not count)")
        groups: list[tuple[str, GroupsConfig]] = []
        for name, value in self.roles.items():
            if isinstance(value, GroupsConfig):
                if name not in ROLES:
                    raise ValueError(
                        f"roles.{name}: a table under [roles] grants a queuebot role, one of "
                        f"{', '.join(ROLES)}; a runbook authority maps to a role as "
                        f'"{name}" = "duty-officer"'
                    )
                groups.append((f"roles.{name}", value))
        groups += [(f"teams.{name}", team) for name, team in self.teams.items()]
        for where, grant in groups:
            for person in grant.people:
                if person not in self.people:
                    raise ValueError(
                        f"{where}.people: {person!r} is not under [people]; add "
                        f"[people.{person}] with their slack or discord id"
                    )
            for named in grant.rotas:
                if rota_key(named) not in rotas:
                    known = ", ".join(self.rotas) or "none yet"
                    raise ValueError(
                        f"{where}.rotas: {named!r} is not under [rotas] (known: {known})"
                    )
        for rota_name, rota in self.rotas.items():
            for person in rota.schedule.people if rota.schedule else []:
                if person not in self.people:
                    raise ValueError(
                        f"rotas.{rota_name}.schedule.people: {person!r} is not under "
                        f"[people]; add [people.{person}] with their slack or discord id"
                    )
        for queue, cfg in self.queue_map().items():
            for team in cfg.owners:
                if team not in self.teams:
                    known = ", ".join(self.teams) or "none yet"
                    raise ValueError(
                        f"queues.{queue}.owners: team {team!r} is not under [teams] (known: "
                        f"{known}); add [teams.{team}] with its people, slack_usergroups, "
                        "discord_roles or rotas"
                    )

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
