"""hoststate: snapshot, diff and guard the host state that LLM inference benchmarks depend on."""

__version__ = "0.1.0"
SCHEMA = 1
