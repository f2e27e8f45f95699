"""hive's hook command, as harness configs name it: ``<python> -I -S <dir>/hive_hook.py <harness> <Event>``.

A script is compiled at every run, a module's bytecode is cached, so this file stays a few lines
and the work lives in ``hook_client.py`` next to it (see there). Standard library only. Whatever
happens it answers: the no-opinion reply (argv[3], "" when absent) and exit 0, except the push
watcher (``<harness> watch``), which exits 2 to wake its session.
"""

import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing

if __name__ == "__main__":
    import posix

    code = 0
    try:
        # -I leaves this folder off sys.path; only our module is imported from it.
        sys.path.insert(0, __file__.rpartition("/")[0] or ".")
        try:
            if TYPE_CHECKING:  # a type checker knows the module by its package name
                from .hook_client import run
            else:
                from hook_client import run
        finally:
            del sys.path[0]
        code = run(sys.argv)
    except BaseException:
        try:
            posix.write(1, (sys.argv[3] if len(sys.argv) > 3 else "").encode())
        except BaseException:
            pass
    # Nothing is buffered (all output went through posix.write): skip interpreter teardown.
    posix._exit(code)
