"""``python -m hoststate`` and the ``hoststate`` command: the GPU section and the host's other sections started
ahead in child processes (hoststate.ahead) before click and the command are imported, then the command line
(hoststate.cli)."""


def _gpu_section() -> object:
    from hoststate import ahead

    ahead.start_nvml()  # the driver starts while the collector's modules are imported
    from hoststate.collectors import gpu_section  # in the child only: the collector's modules, not the command's

    return gpu_section()


def _host_sections() -> object:
    from hoststate.collectors import host_sections  # in the child only

    return host_sections()


def _baseline() -> object:
    import sys

    from hoststate import ahead
    from hoststate.snapshot import read_parsed  # in the child only: the TOML reader

    path = ahead.baseline_path(sys.argv[1:])
    return read_parsed(path) if path is not None else None


#: Allocations between two collections of the youngest generation in the command's process (CPython's default is
#: 700): a snap allocates its modules, its 2,000 rules and their matchers, and ran 60 young collections for them
#: (about 10 ms on the project's VM, docs/performance.md); mypy sets 200,000 before a build for the same reason.
YOUNG = 50_000


def main() -> None:
    """The ``hoststate`` command: the last thing its process runs. The collector settings below last for the rest of
    the process, and the process ends without the interpreter's teardown (:func:`leave`), so a program that wants
    hoststate in its own interpreter calls ``hoststate.cli.main`` (or the library), never this."""
    import gc
    import sys

    tuned = sys.implementation.name == "cpython"  # the generations and freeze are CPython's collector
    if tuned:
        gc.set_threshold(YOUNG, *gc.get_threshold()[1:])
    from hoststate import ahead

    ahead.start({ahead.NAME: _gpu_section, ahead.HOST: _host_sections, ahead.BASELINE: _baseline})
    from hoststate.cli import main as cli_main

    code = 0
    try:
        cli_main()
    except SystemExit as end:
        if not isinstance(end.code, int):  # hoststate.cli.main exits with a number; anything else as Python would
            raise
        code = end.code
    finally:
        # Every object alive now is left out of the collections the interpreter would run as it exits: they look
        # for reference cycles among objects the exit frees anyway (17 of a snap's 170 ms on the project's VM).
        if tuned:
            gc.freeze()
    leave(code)


def leave(code: int) -> None:
    """End the process with ``code`` as the interpreter's exit would, less its teardown: the atexit handlers run
    and the standard streams are flushed, then ``os._exit`` skips freeing every module and object one by one
    (4-10 ms of a snap: docs/performance.md), as mypy's default ``--fast-exit`` does. Every file hoststate writes
    is closed by then (written through ``with``, then renamed into place; tests/test_perf_shortcuts.py runs each
    command that writes one and finds none open). Where the teardown still has work, the process exits the usual
    way: a thread that is not a daemon (the exit would wait for it), no ``atexit`` runner (not CPython), or a
    stream that cannot be flushed (a closed pipe: the interpreter reports it and exits 120)."""
    import atexit
    import os
    import sys

    threading = sys.modules.get("threading")
    waiting = threading is not None and any(
        t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread())
    run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)
    if waiting or run_exitfuncs is None:
        sys.exit(code)
    run_exitfuncs()
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except Exception:
        sys.exit(code)
    os._exit(code)


if __name__ == "__main__":
    main()
