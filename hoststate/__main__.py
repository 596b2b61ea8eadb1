"""``python -m hoststate`` and the ``hoststate`` command: the GPU section started ahead in a child process
(hoststate.ahead) before click and the command are imported, then the command line (hoststate.cli)."""


def main() -> None:
    from hoststate import ahead

    ahead.start()
    from hoststate.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
