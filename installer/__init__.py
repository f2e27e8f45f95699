"""``hive setup`` and ``hive doctor``: wire each harness on this machine as its descriptor says, and check it.

Modules, one concept each: ``detect`` (which harnesses are here), ``documents`` (JSON and TOML
edited in place), ``ownership`` (hive's parts of a shared file: in, found again, out),
``fileops`` (atomic writes through symlinks), ``manifest`` (backups and the record of what hive
changed), ``commands`` (this machine's command lines), ``trust`` (approvals left to the person),
``setup``, ``service`` (the optional login service) and ``doctor``.
"""
