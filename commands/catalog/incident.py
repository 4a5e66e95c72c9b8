"""The ``/incident`` commands: what is declared, under which runbook; who is told; the
restore order, validation and resolution; the postmortem."""

from __future__ import annotations

from commands.catalog.flags import INCIDENT_FLAG, QUEUE_FLAG, SHARE_FLAG
from commands.model import (
    Declare,
    Export,
    HandLead,
    Help,
    IncidentStatus,
    IncidentTimeline,
    Notify,
    Resolve,
    Runbooks,
    StepDone,
    Validate,
    Whois,
)
from commands.spec import CommandSpec, Flag, Positional

INCIDENT: tuple[CommandSpec, ...] = (
    CommandSpec(
        "incident",
        "help",
        Help,
        "list the commands, or explain one",
        positionals=(Positional("topic", "COMMAND", kind="word", required=False),),
        example="/incident help runbooks",
    ),
    CommandSpec(
        "incident",
        "runbooks",
        Runbooks,
        "the runbooks: who may declare each scenario, who is told what within how long, "
        "the restore order; name a scenario to see one in full",
        positionals=(Positional("scenario", "SCENARIO", kind="word", required=False),),
        flags=(SHARE_FLAG,),
        example="/incident runbooks gd:queue-loss",
    ),
    CommandSpec(
        "incident",
        "whois",
        Whois,
        "who holds each rota now, from its source (a Slack user group, a Discord role or a "
        "schedule, with until when and who is next); name a rota to see one",
        positionals=(Positional("rota", '"ROTA"', kind="text", required=False),),
        flags=(SHARE_FLAG,),
        note='a rota\'s name with spaces goes in double quotes: /incident whois "duty officer"',
        example="/incident whois rota:prod-ops",
    ),
    CommandSpec(
        "incident",
        "declare",
        Declare,
        "declare an incident: open its thread, post the runbook's checklist, start the "
        "clocks of its communications",
        positionals=(
            Positional("scenario", "SCENARIO", kind="word"),
            Positional("summary", '"SUMMARY"', kind="text"),
        ),
        flags=(
            QUEUE_FLAG,
            Flag(
                "from-alert",
                "alert_group",
                kind="int",
                metavar="N",
                minimum=1,
                maximum=999_999_999_999,
                help="the alert group it comes from: its thread and the time it started "
                "(an alert's Declare incident form sets it)",
            ),
        ),
        example='/incident declare gd:queue-loss "jobs stopped finishing" --queue workers',
        note="only people holding the runbook's declaration authority may declare "
        "(/incident runbooks shows who)",
        changes=True,
    ),
    CommandSpec(
        "incident",
        "lead",
        HandLead,
        "hand the incident's lead to PERSON: reminders and escalations call them from now on",
        positionals=(Positional("person", "PERSON", kind="person"),),
        flags=(INCIDENT_FLAG,),
        example="/incident lead bob --incident INC-3",
        note="PERSON is a name of [people] or a mention (@bob on Slack or Discord); the lead "
        "hands it over, or PERSON takes it, and PERSON must hold the runbook's declaration "
        "authority (with no known lead, anyone who holds it may hand it)",
        changes=True,
    ),
    CommandSpec(
        "incident",
        "notify",
        Notify,
        "tell an audience (posts to its channels; with no text, the runbook's draft); its "
        "communication is met once the message is delivered",
        role="operator",
        positionals=(
            Positional("audience", "AUDIENCE", kind="word"),
            Positional("text", '"MESSAGE"', kind="text", required=False),
        ),
        flags=(INCIDENT_FLAG,),
        example='/incident notify actors "your jobs are safe; do not resubmit"',
    ),
    CommandSpec(
        "incident",
        "status",
        IncidentStatus,
        "the incident's communications, restore steps and validation (default: the open one)",
        positionals=(Positional("incident", "INC-N", kind="word", required=False),),
        flags=(SHARE_FLAG,),
        example="/incident status INC-3",
    ),
    CommandSpec(
        "incident",
        "timeline",
        IncidentTimeline,
        "everything that happened in the incident, in order",
        positionals=(Positional("incident", "INC-N", kind="word", required=False),),
        flags=(SHARE_FLAG,),
        example="/incident timeline INC-3",
    ),
    CommandSpec(
        "incident",
        "step",
        StepDone,
        "mark a restore step done (in the runbook's order) or a validation item confirmed",
        role="operator",
        positionals=(
            Positional("step", "STEP", kind="word"),
            Positional("done", "done", kind="word"),
        ),
        flags=(
            INCIDENT_FLAG,
            Flag("result", "result", metavar='"WHAT WAS SEEN"', help="what you checked"),
        ),
        example="/incident step 1 done",
        note="STEP is its number in /incident status (1, 2, ... a restore step; v1, v2, ... "
        "a validation item) or its name (dep:job-queue)",
    ),
    CommandSpec(
        "incident",
        "validate",
        Validate,
        "measure the validation items queuebot can (the count before the fault against "
        "now, the backlog falling); each that passes is done",
        role="operator",
        positionals=(Positional("incident", "INC-N", kind="word", required=False),),
        example="/incident validate INC-3",
    ),
    CommandSpec(
        "incident",
        "resolve",
        Resolve,
        "resolve the incident: every validation item must be done, or --override asks "
        "another person to approve resolving it without them",
        role="operator",
        positionals=(Positional("incident", "INC-N", kind="word", required=False),),
        flags=(
            Flag(
                "override",
                "override",
                kind="bool",
                help="a change request: resolved once another person approves",
            ),
            Flag(
                "reason",
                "reason",
                metavar='"WHY"',
                help="with --override: why it is over without those validations",
                example='--reason "checked by hand with the tenant; counts match"',
            ),
        ),
        example="/incident resolve INC-3",
    ),
    CommandSpec(
        "incident",
        "export",
        Export,
        "the incident as a Markdown postmortem: timeline, fault to recovery, "
        "communications, changes and their approvers, validation",
        positionals=(Positional("incident", "INC-N", kind="word", required=False),),
        flags=(SHARE_FLAG,),
        example="/incident export INC-3",
    ),
)
