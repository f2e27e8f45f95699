"""Screening of text that crosses between teammates' agents: pure functions over a string.

- :func:`hive.sidecar.screening.inbound.screen` reports what in an inbound message looks like an
  attack on the agent that will read it (prompt injection, requests for secrets, coercion to run
  commands, hidden text, look-alike hive frames). Its rules are data, one YAML file per family
  under ``rules/``.
- :mod:`hive.sidecar.screening.outbound` finds secrets in text about to leave this machine.

Of the sidecar, this package imports only :mod:`hive.sidecar.base`.
"""
