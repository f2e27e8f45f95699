"""The person at this machine: desktop dialogs, the one confirmation every change needs, and ``ask``."""
