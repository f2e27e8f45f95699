"""The composition root: the daemon's lifecycle, the local socket, and the list of features it runs.
Nothing imports it but the entry point (``python -m hive.sidecar``).
"""
