"""hive.integrations: the harness descriptor table and the native files generated from it.

Kept empty on purpose: the hook client (``hook_client.py``) runs on every tool call of every
hooked harness and must not pay for importing anything it does not need.
"""
