"""The wheel's `kvtier` and `kvtierd` commands: console entry points that
run the programs the wheel carries in kvtier/bin (built by CMake, linked to
the libkvtier.so beside this file).  exec, not a child: the program keeps
the process id, its signals and its exit status."""

import os
import sys

from ._lib import package_dirs


def program(name):
    """The path of one of the wheel's programs (kvtier, kvtierd), in the
    package's folders (an editable install has two)."""
    for d in package_dirs():
        exe = os.path.join(d, "bin", name)
        if os.access(exe, os.X_OK):
            return exe
    return os.path.join(package_dirs()[0], "bin", name)


def _exec(name):
    exe = program(name)
    if not os.access(exe, os.X_OK):
        sys.exit("%s: %s is missing from this installation of kvtier (reinstall the wheel)"
                 % (name, exe))
    os.execv(exe, [name] + sys.argv[1:])


def kvtier():
    _exec("kvtier")


def kvtierd():
    _exec("kvtierd")
