"""Configuration: one optional TOML file plus fixed environment variables.

Secrets (tokens, the signing secret, database URLs that may carry passwords) come only
from the environment (``env.py``) or from the files their ``NAME_FILE`` variables name
(``secret_files.py``), are held as ``SecretStr`` and never logged. Everything
else lives in the TOML file (``file.py`` and its sections), validated strictly: an unknown
key or a bad value is refused with the key, the value and what was expected (``load.py``).

The file is validated as a whole, so its models sit here, in the bottom layer, below
every domain that reads them: the sections of the alerts, incidents and housekeeping
domains are ``alerts.py``, ``incidents.py`` and ``housekeeping.py``, and worker_queue's own
settings (kept in the file's ``[housekeeping]`` table) are ``worker_queue.py``
(docs/architecture.md).
"""

from services.config.access import GroupsConfig, RotaConfig, ScheduleConfig, rota_key
from services.config.database import DatabaseConfig
from services.config.env import (
    ALERT_TOKEN_MIN_LENGTH,
    AUDIT_KEY_MIN_LENGTH,
    DEFAULT_DATABASE_URL,
    MIN_CLAIM_STALE_SECONDS,
    EnvSettings,
)
from services.config.file import FileConfig, default_queues
from services.config.load import Config, load_config, parse_file_config
from services.config.sections import (
    CANONICAL_STATE_NAMES,
    PROFILE_NAMES,
    ROLES,
    AccessConfig,
    ApprovalConfig,
    CanonicalStateName,
    ChannelConfig,
    DiscordConfig,
    HttpConfig,
    MetricsConfig,
    PersonConfig,
    ProfileName,
    QueueConfig,
    ReadsConfig,
    RedriveConfig,
    Role,
    RunbooksConfig,
    SlackConfig,
)

__all__ = [
    "ALERT_TOKEN_MIN_LENGTH",
    "AUDIT_KEY_MIN_LENGTH",
    "CANONICAL_STATE_NAMES",
    "DEFAULT_DATABASE_URL",
    "MIN_CLAIM_STALE_SECONDS",
    "PROFILE_NAMES",
    "ROLES",
    "AccessConfig",
    "ApprovalConfig",
    "CanonicalStateName",
    "ChannelConfig",
    "Config",
    "DatabaseConfig",
    "DiscordConfig",
    "EnvSettings",
    "FileConfig",
    "GroupsConfig",
    "HttpConfig",
    "MetricsConfig",
    "PersonConfig",
    "ProfileName",
    "QueueConfig",
    "ReadsConfig",
    "RedriveConfig",
    "Role",
    "RotaConfig",
    "RunbooksConfig",
    "ScheduleConfig",
    "SlackConfig",
    "default_queues",
    "load_config",
    "parse_file_config",
    "rota_key",
]
