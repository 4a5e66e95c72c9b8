"""A team whose roles, rota and owners come from Slack user groups, as the group tests
configure it: alice, bob, carol and dora are operators under [people] and nothing more;
the approver role is whoever is in user group S0APPROVE, queue clips is owned by team
clips-team (user group S0CLIPS), and the operations duty officer on shift (who may
declare the shipped runbooks' incidents) is whoever is in user group S0PRODOPS."""

from __future__ import annotations

from tests.helpers.config import DETECTORS_OFF

SLACK_CAROL = "U0CAROL"
APPROVERS, CLIPS_TEAM, PROD_OPS = "S0APPROVE", "S0CLIPS", "S0PRODOPS"
# the shipped runbooks' declaration authority, by its name
DUTY_ROTA = "operations duty officer on shift"

# who holds it: whoever is in user group S0PRODOPS (or, in a test that says so, a schedule)
DUTY_BY_GROUP = f"""
[rotas."{DUTY_ROTA}"]
slack_usergroup = "{PROD_OPS}"
"""

GROUPS_CONFIG = (
    f"""
[queues.clips]
profile = "message_job"
owners = ["clips-team"]

[queues.workers]
profile = "worker_queue"

[channels.alerts]
slack = "C0ALERTS"
[channels.operators]
slack = "C0OPS"
[channels.actors]
slack = "C0ACTORS"

[people.alice]
slack = "U0ALICE"
roles = ["operator"]

[people.bob]
slack = "U0BOB"
roles = ["operator"]

[people.carol]
slack = "{SLACK_CAROL}"
roles = ["operator"]

[people.dora]
slack = "U0DORA"
roles = ["operator"]

[roles]
"operations duty officer" = "duty-officer"
"service on-call" = "operator"

[roles.approver]
slack_usergroups = ["{APPROVERS}"]

[teams.clips-team]
slack_usergroups = ["{CLIPS_TEAM}"]

[approval]
expiry_minutes = 30
"""
    # only what the tests do is posted: the demo's failed jobs would fire detectors
    + DETECTORS_OFF
)


def groups_config(duty: str = DUTY_BY_GROUP) -> str:
    """The team's configuration, its duty officer on shift held as ``duty`` says."""
    return GROUPS_CONFIG + duty
