"""The ``hive`` command: one module per command group, heavy imports only inside the commands that use them."""
