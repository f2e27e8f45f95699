"""The hive sidecar: one small daemon per user state folder, and the client library to reach it."""

__version__ = "0.1.0"
