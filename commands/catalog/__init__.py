"""The catalogue: how each command is spelled (words, positionals, flags, role), one
``CommandSpec`` per command model. It drives the parser, the help text and the router's
authorization.

It is one source of truth, kept in one module per command family (``queue.py``,
``incident.py``, their shared flags in ``flags.py``), assembled in ``index.py``: a
command added to a family is parsed, listed in help, authorized and offered on Discord
with no other change.
"""

from commands.catalog.index import CATALOG, find_spec, group_specs, spec_for

__all__ = ["CATALOG", "find_spec", "group_specs", "spec_for"]
