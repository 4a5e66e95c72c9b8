"""The people of the tests, as the demo configuration knows them (bot/demo.py): alice and
bob, operators and approvers; dora, the operations duty officer; and a stranger no
configuration names. Here in each form a test meets them: their chat accounts, the actor
the audit trail names, the person a configuration makes of them, and their lines of a
configuration file."""

from __future__ import annotations

from services.audit import Actor
from services.config import Role
from services.people import Person

# -- their chat accounts ------------------------------------------------------------------

SLACK_ALICE, SLACK_BOB, SLACK_DORA = "U0ALICE", "U0BOB", "U0DORA"
SLACK_STRANGER = "U0NOBODY"  # in no configuration
DISCORD_ALICE = "100000000000000001"
DISCORD_BOB = "100000000000000002"
DISCORD_DORA = "100000000000000003"

# -- who acted, as the audit trail names them: at the console unless said -----------------

ALICE = Actor("alice", "console", "alice")
BOB = Actor("bob", "console", "bob")
DORA = Actor("dora", "console", "dora")
ALICE_ON_SLACK = Actor("alice", "slack", SLACK_ALICE)
BOB_ON_SLACK = Actor("bob", "slack", SLACK_BOB)
ALICE_ON_DISCORD = Actor("alice", "discord", DISCORD_ALICE)
BOB_ON_DISCORD = Actor("bob", "discord", DISCORD_BOB)

# -- the people a configuration makes of them ---------------------------------------------

APPROVER: frozenset[Role] = frozenset({"operator", "approver"})
DUTY_OFFICER: frozenset[Role] = frozenset({"duty-officer", "operator"})

# known by name only (a console's people), each an operator and approver
ALICE_APPROVER = Person("alice", APPROVER)
BOB_APPROVER = Person("bob", APPROVER)
DORA_APPROVER = Person("dora", APPROVER)
# known by their Slack accounts too
ALICE_APPROVER_ON_SLACK = Person("alice", APPROVER, slack=SLACK_ALICE)
DORA_DUTY_ON_SLACK = Person("dora", DUTY_OFFICER, slack=SLACK_DORA)
# bob with no role but a viewer's, on Slack and Discord
BOB_VIEWER = Person("bob", frozenset(), slack=SLACK_BOB, discord=DISCORD_BOB)

# -- their lines of a configuration file ---------------------------------------------------

ALICE_TOML = f"""
[people.alice]
slack = "{SLACK_ALICE}"
roles = ["operator", "approver"]
"""
BOB_TOML = f"""
[people.bob]
slack = "{SLACK_BOB}"
roles = ["operator", "approver"]
"""
# dora, the operations duty officer, declares incidents; as DORA_APPROVER_TOML she may
# approve changes too
DORA_TOML = f"""
[people.dora]
slack = "{SLACK_DORA}"
roles = ["duty-officer", "operator"]
"""
DORA_APPROVER_TOML = f"""
[people.dora]
slack = "{SLACK_DORA}"
roles = ["duty-officer", "operator", "approver"]
"""
# the team's name for the duty officer's role, as the demo configuration has it
DUTY_OFFICER_TOML = """
[roles]
"operations duty officer" = "duty-officer"
"""
