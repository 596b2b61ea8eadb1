"""hoststate: snapshot, diff and guard the host state that LLM inference benchmarks depend on."""

__version__ = "0.1.0"
SCHEMA = 1
#: True only in the `hoststate` command's own process (set by cli.main): lets it take start-up shortcuts
#: that would be wrong inside a caller's process (see diff._deepdiff_class).
IN_CLI = False
