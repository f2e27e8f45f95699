"""The package list, computed from the tree so that no module or data file can be left out.

Each top folder ships as ``hive.<folder>``, with every folder below it as a subpackage (data-only
folders such as ``generated/`` too) and every file in those folders. Everything else about the
distribution is in pyproject.toml.
"""

from setuptools import find_namespace_packages, setup

FOLDERS = {
    "hive.sidecar": "sidecar",
    "hive.integrations": "integrations",
    "hive.installer": "installer",
    "hive.skills": "skills",
}
# What a working tree may hold beside the tracked files; never part of the package.
NOT_PACKAGES = [
    f"{prefix}{junk}{suffix}"
    for junk in ("__pycache__", "node_modules")
    for prefix in ("", "*.")
    for suffix in ("", ".*")
]
NOT_DATA = ["*.pyc", "*.pyo", ".*", "*~"]

packages = []
for name, folder in FOLDERS.items():
    packages.append(name)
    packages += [f"{name}.{sub}" for sub in find_namespace_packages(where=folder, exclude=NOT_PACKAGES)]

setup(
    packages=packages,
    package_dir=FOLDERS,
    package_data={"": ["*"]},
    include_package_data=False,  # only the folders' own files, never a stale egg-info's list
    exclude_package_data={"": NOT_DATA},
)
