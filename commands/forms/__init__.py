"""Forms, not flags: a command typed without what it needs opens a form asking for it.

At 3 a.m. on a phone nobody types ``--reason "..." --incident INC-2 --evidence URL``
right. A command of ``FORMS`` typed without its reason (a declaration without its
summary) is not refused: ``form_for_text`` (Slack's text) and ``form_for_options``
(Discord's options) authorize the person as the command would (the normal refusal, never
a form, for one who may not run it) and build a ``Form``: its fields, what was typed
already filled in, its choices (open incidents, the runbooks the person may declare, the
queues) read through the services. The platforms render and read it
(bot/slack/forms.py, bot/discord/forms.py).

What is typed in the form is checked as flags are, by the parser's own converters, and
``submitted`` turns it into the command as it would have been typed (the same text, the
same change request, the same audit) or into errors, one per field, in words saying what
is right. A form carries nothing but its kind and one number (``target``: the change
request, plan or incident it acts on, or the alert group a declaration comes from); a
redrive's selection is a field of its own, so nothing typed waits in a process's memory.
"""

from commands.forms.build import (
    declare_form,
    form_again,
    form_fills,
    form_for_options,
    form_for_text,
    selection_of,
)
from commands.forms.model import (
    FORMS,
    Choice,
    Form,
    FormField,
    Submitted,
    not_opened,
    spec_of,
    typed_instead,
)
from commands.forms.submit import submitted

__all__ = [
    "FORMS",
    "Choice",
    "Form",
    "FormField",
    "Submitted",
    "declare_form",
    "form_again",
    "form_fills",
    "form_for_options",
    "form_for_text",
    "not_opened",
    "selection_of",
    "spec_of",
    "submitted",
    "typed_instead",
]
