"""``python -m hoststate`` and the ``hoststate`` command: the GPU section started ahead in a child process
(hoststate.ahead) before click and the command are imported, then the command line (hoststate.cli)."""


def _gpu_section() -> object:
    from hoststate import ahead

    ahead.start_nvml()  # the driver starts while the collector's modules are imported
    from hoststate.collectors import gpu_section  # in the child only: the collector's modules, not the command's

    return gpu_section()


#: Allocations between two collections of the youngest generation in the command's process (CPython's default is
#: 700): a snap allocates its modules, its 2,000 rules and their matchers, and ran 60 young collections for them
#: (about 10 ms on the project's VM, docs/performance.md); mypy sets 200,000 before a build for the same reason.
YOUNG = 50_000


def main() -> None:
    """The ``hoststate`` command: the last thing its process runs. The collector settings below last for the rest of
    the process, so a program that wants hoststate in its own interpreter calls ``hoststate.cli.main`` (or the
    library), never this."""
    import gc
    import sys

    tuned = sys.implementation.name == "cpython"  # the generations and freeze are CPython's collector
    if tuned:
        gc.set_threshold(YOUNG, *gc.get_threshold()[1:])
    from hoststate import ahead

    ahead.start(_gpu_section)
    from hoststate.cli import main as cli_main

    try:
        cli_main()
    finally:
        # Every object alive now is left out of the collections the interpreter runs as it exits: they look for
        # reference cycles among objects the exit frees anyway (17 of a snap's 170 ms on the project's VM). The
        # exit still runs atexit handlers, flushes the standard streams and frees each module by reference count.
        if tuned:
            gc.freeze()


if __name__ == "__main__":
    main()
