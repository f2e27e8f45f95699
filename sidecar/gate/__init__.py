"""The attention gate: when a person is worth interrupting, and the preferences that decide it."""
