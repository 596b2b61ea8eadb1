"""``python -m hoststate`` and the ``hoststate`` command: the GPU section started ahead in a child process
(hoststate.ahead) before click and the command are imported, then the command line (hoststate.cli)."""


def _gpu_section() -> object:
    from hoststate import ahead

    ahead.start_nvml()  # the driver starts while the collector's modules are imported
    from hoststate.capture import gpu_section  # in the child only

    return gpu_section()


def main() -> None:
    from hoststate import ahead

    ahead.start(_gpu_section)
    from hoststate.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
