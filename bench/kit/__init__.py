"""What the benches share, one module a concern:

* ``cli``: a bench's arguments: the admin URL, ``--smoke`` and the sizes it shrinks;
* ``figures``: percentiles and their lines, the load average, the machine's busy time,
  a process's CPU and resident memory, and the PASS/FAIL marks (none at ``--smoke`` size);
* ``scratch``: a PostgreSQL database of one run's own, named for it and dropped after;
* ``serve``: the real ``queuebot serve`` (or a bare app, the harness floor) as a
  subprocess on a free port, its demo database, its log read at the end;
* ``estate``: the triage estates, filled server-side (worker_queue and message_job);
* ``changes``: the services wired as the bot wires them, and a message_job estate of
  dead letters for a redrive;
* ``statements``: every SQL statement an engine sends, timed;
* ``alertmanager``: Alertmanager's notifications of one alert group.
"""
