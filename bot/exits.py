"""The exit codes of ``queuebot`` (README.md, "Exit codes"; the same table is in
``queuebot --help``): every failure ends in one line on stderr and a code naming its kind."""

from __future__ import annotations

EXIT_PROBLEM = 1  # a check found a problem (the audit trail does not hold, config check)
EXIT_USAGE = 2  # the command line, the configuration file or the environment is wrong
EXIT_AUDIT_KEY = 3  # the trail is keyed and no key was given
EXIT_GRANT_REFUSED = 4
EXIT_UNAVAILABLE = 5  # a database cannot be reached
EXIT_NOT_MIGRATED = 6  # queuebot's tables are missing or at another revision
EXIT_BUG = 70  # an error queuebot did not expect (sysexits' EX_SOFTWARE)
EXIT_INTERRUPTED = 130
