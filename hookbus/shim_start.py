"""The file an installed hook command runs: ``PYTHON -I -S /abs/path/hookbus/shim_start.py hook ARGS``.

Start-up is the whole cost of a command hook, so the installers do not start the ``hookbus``
console script (``site``, every ``.pth`` file of the environment, the package's ``__init__``)
but the interpreter with ``-I -S`` on this file, both by absolute path: no ``site``, no
``PYTHON*`` variables, no current folder on ``sys.path``. It loads :mod:`hookbus.shim`, which
needs only the standard library, from its own folder (from the byte-code cache, where a script
run by path is compiled again on every start) and runs it as ``hookbus hook ARGS`` would.

Arguments the shim does not parse (``--help``, a typo) get a one-line message and exit 2: the
argparse help needs the whole command line, ``hookbus hook --help``.
"""

import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds on every hook
if TYPE_CHECKING:
    from hookbus import shim
else:
    # The package folder on sys.path only for this import: its ``platform`` package would
    # otherwise shadow the standard library's for every later import.
    sys.path.insert(0, __file__.rpartition("/")[0])
    try:
        import shim
    finally:
        del sys.path[0]

USAGE = "usage: shim_start.py hook [--url URL] [--timeout S] [--fail-closed] [--agent AGENT]"


def main(argv: list[str]) -> int:
    """Run ``hookbus hook`` with ``argv`` (which starts with ``hook``); the exit code."""
    code = shim.main(argv[1:]) if argv[:1] == ["hook"] else None
    if code is None:
        sys.stderr.write(f"hookbus: cannot run the hook with arguments {argv!r}\n{USAGE}\n")
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
