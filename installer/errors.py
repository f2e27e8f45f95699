"""Why hive could not wire a file, worded for the person who has to fix it.

InstallError            a problem with one file; ``.path`` names it, ``str()`` says what to do
├── ConfigParseError    the file does not parse; also carries ``.line`` and ``.column``
├── ConfigShapeError    it parses, but a key hive needs holds something else (a string where
│                       an object must be)
└── NotWritable         the file or its folder cannot be written (read-only, missing home)
"""

from __future__ import annotations

from pathlib import Path


def display(path: Path) -> str:
    """``path`` with the home folder shortened to ``~``, as people read it."""
    home = str(Path.home())
    text = str(path)
    return "~" + text[len(home) :] if home not in ("", "/") and (text == home or text.startswith(home + "/")) else text


class InstallError(Exception):
    def __init__(self, path: Path, problem: str, fix: str) -> None:
        super().__init__(f"{display(path)}: {problem}; {fix}")
        self.path = path
        self.problem = problem
        self.fix = fix


class ConfigParseError(InstallError):
    def __init__(self, path: Path, line: int, column: int, problem: str, fix: str) -> None:
        super().__init__(path, f"line {line}, column {column}: {problem}", fix)
        self.line = line
        self.column = column


class ConfigShapeError(InstallError):
    pass


class NotWritable(InstallError):
    pass
