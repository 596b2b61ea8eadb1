"""A vLLM server command line as vLLM's own parser reads it, by version: split, locate, normalise.

Follows FlexibleArgumentParser: ``--model`` vs the positional model, dashes/underscores, aliases,
``-O`` by version, dotted keys merged into one JSON value appended last (so they win over a full JSON
value given anywhere), ``--config`` below the command line, booleans and ``--no-``, last one wins.
Pure functions, no I/O except reading a ``--config`` file through a loader the caller may replace.
Nothing raises: what vLLM's parser would refuse is recorded in ``Normalised.refusals``.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hoststate.collectors.vllm.configfile import ConfigError, check_path, config_tokens, parse_config_text
from hoststate.collectors.vllm.defaults import choices_for, defaults_for, drop_defaults, none_is_unset
from hoststate.collectors.vllm.fields import unknown_keys
from hoststate.collectors.vllm.modes import COMP_NAMES, parse_cg_mode, parse_comp_mode
from hoststate.collectors.vllm.options import (
    BOOL,
    CHOICES,
    FALSE_BY_DEFAULT,
    FLOAT,
    INT,
    INTLIST,
    JSON,
    LIST,
    MAXLEN,
    OPTIONS,
    STR,
    convert,
    loose_value,
)
from hoststate.collectors.vllm.versions import Rules, rules_for

# --------------------------------------------------------------------------------------------
# Commands: find the vLLM part of a command line

#: Module entry points that run the OpenAI server (``python -m <module> ...``).
SERVER_MODULES: dict[str, str] = {
    "vllm.entrypoints.openai.api_server": "api_server",
    "vllm.entrypoints.cli.main": "cli",
    "vllm": "cli",
}
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)


@dataclass
class Command:
    """A command line split into its ``VAR=value`` prefixes, the launcher, and vLLM's own arguments."""

    env: dict[str, str]
    launcher: list[str]
    program: str | None  # "vllm serve", "api_server" or None when it is not a vLLM server command
    args: list[str]


def split_command(text: str) -> list[str]:
    """shlex split as a shell would; ValueError on unbalanced quotes (the message says so)."""
    try:
        return shlex.split(text, posix=True)
    except ValueError as err:
        raise ValueError(f"cannot split the command: {err}") from None


def _prefix_env(argv: list[str]) -> tuple[dict[str, str], int]:
    """``env VAR=value ...`` / ``VAR=value ...`` prefixes, through the TRANSPARENT wrappers between them
    (``VAR=1 nohup env OTHER=2 vllm serve``), and the index after them: the server's environment, and where
    what runs it starts."""
    env: dict[str, str] = {}
    i = 0
    while True:
        start = i
        i = len(argv) - len(unwrapped(argv[i:]))
        if i < len(argv) and argv[i] == "env":
            i += 1
        while i < len(argv) and (m := _ASSIGN.match(argv[i])):
            env[m.group(1)] = m.group(2)
            i += 1
        if i == start:
            return env, i


def locate(argv: list[str]) -> Command:
    """Find ``vllm serve`` / ``python -m vllm.entrypoints.openai.api_server`` in argv (after env/wrappers)."""
    env, i = _prefix_env(argv)
    for j in range(i, len(argv)):
        tok, nxt = argv[j], argv[j + 1] if j + 1 < len(argv) else None
        if tok.rsplit("/", 1)[-1] == "vllm" and nxt == "serve":
            return Command(env, argv[i:j + 2], "vllm serve", argv[j + 2:])
        if tok != "-m" or nxt not in SERVER_MODULES:
            continue
        if SERVER_MODULES[nxt] == "api_server":
            return Command(env, argv[i:j + 2], "api_server", argv[j + 2:])
        if j + 2 < len(argv) and argv[j + 2] == "serve":
            return Command(env, argv[i:j + 3], "vllm serve", argv[j + 3:])
    return Command(env, argv[i:], None, [])


#: Wrappers that change neither where nor how the server runs, by name: nohup(1) (hangups ignored, output to a
#: file), time(1) and the shell's ``time`` (a report at exit), stdbuf(1) (C stdio buffering), timeout(1) (a time
#: limit) and the shell's ``exec``; each with its options that take a value and the operands it reads before the
#: command (timeout's DURATION). numactl, taskset, chrt, nice, nsys, perf, sudo, a container or scheduler command
#: do change placement, priority, the user or what runs, and stay in the launcher.
TRANSPARENT: dict[str, tuple[tuple[str, ...], int]] = {
    "nohup": ((), 0),
    "time": (("-f", "--format", "-o", "--output"), 0),
    "stdbuf": (("-i", "-o", "-e"), 0),
    "timeout": (("-s", "--signal", "-k", "--kill-after"), 1),
    "exec": (("-a",), 0),
}


def unwrapped(prefix: list[str]) -> list[str]:
    """``prefix`` (what runs before the server's interpreter) less the TRANSPARENT wrappers it starts with."""
    rest = list(prefix)
    while rest and rest[0].rsplit("/", 1)[-1] in TRANSPARENT:
        valued, operands = TRANSPARENT[rest[0].rsplit("/", 1)[-1]]
        n = 1
        while n < len(rest) and rest[n].startswith("-") and rest[n] != "--":
            n += 2 if rest[n] in valued else 1
        n += (n < len(rest) and rest[n] == "--") + operands
        rest = rest[n:]
    return rest


# --------------------------------------------------------------------------------------------
# The normaliser


@dataclass
class Normalised:
    """vLLM's view of a command's arguments: ``args`` by dest name, what vLLM's parser would refuse
    (``refusals``), what hoststate could not read (``errors``), and notes."""

    args: dict[str, Any] = field(default_factory=dict)
    refusals: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Where the parser defaults used to leave out arguments spelled at their default come from (defaults.py).
    defaults_source: str = ""
    #: Dests given at exactly their version's parser default, left out as vLLM's non-default args leave them.
    at_default: list[str] = field(default_factory=list)

    @property
    def model(self) -> str | None:
        model = self.args.get("model")
        return model if isinstance(model, str) else None


ConfigLoader = Callable[[str], Mapping[str, Any]]

#: Largest ``--config`` file read.
MAX_CONFIG_BYTES = 1 << 20


def load_yaml_config(path: str) -> Mapping[str, Any]:
    """A ``--config`` YAML file as a mapping (configfile.parse_config_text), at most MAX_CONFIG_BYTES."""
    with open(path, "rb") as fh:
        data = fh.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"larger than {MAX_CONFIG_BYTES} bytes: not read", vllm_refuses=False)
    return parse_config_text(data.decode("utf-8", "replace"))


def _dash_key(token: str) -> str:
    """``--tensor_parallel_size=2`` -> ``--tensor-parallel-size=2``: underscores become dashes up to '.'/'='."""
    key, eq, value = token.partition("=")
    head, dot, rest = key.partition(".")
    return head[:2] + head[2:].replace("_", "-") + dot + rest + eq + value


def _is_option(token: str) -> bool:
    return token.startswith("-") and not re.fullmatch(r"-\d+(\.\d+)?", token)


def _merge(original: dict[str, Any], update: dict[str, Any], prefix: str, dups: list[str]) -> None:
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(original.get(k), dict):
            _merge(original[k], v, f"{prefix}{k}.", dups)
        elif isinstance(v, list) and isinstance(original.get(k), list):
            original[k] = original[k] + v
        else:
            if k in original:
                dups.append(prefix + k)
            original[k] = v


def _dest_of(option: str, rules: Rules) -> tuple[str | None, bool]:
    """(dest, negated) for an option string of any version, or (None, False) when unknown."""
    if option in rules.aliases:
        return rules.aliases[option], False
    if option in rules.disable_flags:
        return rules.disable_flags[option], True
    if option.startswith("--"):
        name = option[2:].replace("-", "_")
        if name in OPTIONS:
            return name, False
        if name.startswith("no_") and OPTIONS.get(name[3:]) == BOOL and name[3:] not in rules.no_negation:
            return name[3:], True
    return None, False


#: argparse's own options, which take part in abbreviation matching like any other.
_HELP = {"-h": ("help", False), "--help": ("help", False)}
_OPTION_TABLES: dict[str, dict[str, tuple[str, bool]]] = {}


def option_table(rules: Rules) -> dict[str, tuple[str, bool]]:
    """Every option string this version's parser has -> (dest, negated): what argparse matches an abbreviation
    against (tests/test_vllm_options_oracle.py holds it equal to each recorded parser's table)."""
    table = _OPTION_TABLES.get(rules.version)
    if table is None:
        strings = [*rules.aliases, *rules.disable_flags]
        for dest, kind in OPTIONS.items():
            strings.append("--" + dest.replace("_", "-"))
            if kind == BOOL:
                strings.append("--no-" + dest.replace("_", "-"))
        table = dict(_HELP)
        for option in strings:
            dest, negated = _dest_of(option, rules)
            if dest is not None and dest not in rules.missing_options and not (option == "-O" and
                                                                               rules.o_number == "optimization_level"):
                table[option] = (dest, negated)
        _OPTION_TABLES[rules.version] = table
    return table


@dataclass(frozen=True)
class _Match:
    """One option token as argparse reads it: the dest, the option string matched, and an attached value."""

    dest: str | None
    negated: bool = False
    option: str = ""
    eq: str = ""
    inline: str = ""
    #: argparse's refusal ("ambiguous option: ..."), when the token matches more than one option.
    refused: str | None = None


def _match(tok: str, rules: Rules) -> _Match:
    """argparse's ``_parse_optional`` with ``allow_abbrev=True`` (vLLM keeps it): an exact option string (or one
    before ``=``); else a ``--`` prefix of exactly one option string (more is ambiguous, refused); else a ``-x``
    prefix, or a one-letter short option with its value attached (``-n2``)."""
    table = option_table(rules)
    option, eq, inline = tok.partition("=")
    if tok in table or option in table:
        exact = tok if tok in table else option
        dest, negated = table[exact]
        return _Match(dest, negated, exact, "" if tok in table else eq, "" if tok in table else inline)
    if tok.startswith("--"):
        found = sorted(s for s in table if s.startswith(option))
        prefix, attached = option, (eq, inline)
    else:
        found = sorted(s for s in table if s.startswith(tok) or (len(s) == 2 and s == tok[:2]))
        prefix, attached = tok, ("=", tok[2:]) if len(found) == 1 and found[0] == tok[:2] else ("", "")
    if len(found) > 1:
        return _Match(None, refused=f"ambiguous option: {prefix} could match {', '.join(found)}")
    if found:
        dest, negated = table[found[0]]
        return _Match(dest, negated, found[0], *attached)
    dest, negated = _dest_of(option, rules)  # another version's option: named as such in the refusal
    return _Match(dest, negated, option, eq, inline)


def _config_file(tokens: list[str], program: str, rules: Rules, loader: ConfigLoader, out: Normalised) -> list[str]:
    """``--config FILE`` as vLLM pulls it (configfile.py): only the exact token, one file, its options right after
    a positional model (so the command line wins); ``--config=FILE`` is stored and never read."""
    if "--config" not in tokens:
        if any(tok.startswith("--config=") for tok in tokens):
            out.notes.append("--config=FILE: vLLM reads a config file only when written `--config FILE`; "
                             "this one is not read")
        return tokens
    if tokens.count("--config") > 1:
        out.refusals.append("--config: More than one config file specified!")
        return tokens
    idx = tokens.index("--config")
    if idx == len(tokens) - 1:
        out.refusals.append("--config: No config file specified! Please check your command-line arguments.")
        return tokens
    path = tokens[idx + 1]
    out.args["config"] = path
    if (refused := check_path(path)) is not None:
        out.refusals.append(refused)
        return tokens[:idx] + tokens[idx + 2:]
    # the parser that pulls the file: the api_server's own, or for ``vllm serve`` the top-level ``vllm`` parser,
    # which has none of serve's options (so 0.33's ``--no-<key>`` for a false key never applies there)
    pulled = _pulled(path, rules, option_table(rules) if program == "api_server" else {}, loader, out)
    model_in_cli = bool(tokens) and not _is_option(tokens[0]) and idx > 0
    if program == "vllm serve" and pulled is not None and not model_in_cli and "--model" not in pulled:
        out.refusals.append("--config: No model specified! Please specify model either as a positional argument "
                            "or in a config file.")
    head = 1 if program == "vllm serve" and model_in_cli else 0
    return tokens[:head] + (pulled or []) + tokens[head:idx] + tokens[idx + 2:]


def _pulled(path: str, rules: Rules, parser_options: Mapping[str, Any], loader: ConfigLoader,
            out: Normalised) -> list[str] | None:
    """The file's options as this version writes them; None when it could not be used (recorded)."""
    try:
        return config_tokens(loader(path), rules.config_file_style, parser_options)
    except ConfigError as err:
        (out.refusals if err.vllm_refuses else out.errors).append(f"--config {path}: {err}")
    except OSError as err:
        out.errors.append(f"--config {path}: not read ({err.strerror or type(err).__name__})")
    except ValueError as err:
        out.errors.append(f"--config {path}: {err}")
    return None


def _o_number(value: str, rules: Rules, out: Normalised) -> list[str]:
    """``-O<n>`` as the tokens this version rewrites it to; a value it refuses is recorded (no tokens)."""
    if rules.o_number == "optimization_level":
        return ["--optimization-level", value]  # the value is checked at config time
    if value not in rules.o_values and not (rules.o_any_int and value.isdigit()):
        choices = ", ".join(sorted(rules.o_values))
        out.refusals.append(f"-O{value}: unknown -O value {value!r} (vLLM {rules.version} accepts {choices})")
        return []
    if rules.o_number == "full":
        return ["--compilation-config", json.dumps({"level": int(value)})]
    key = "level" if rules.o_number == "dotted-level" else "mode"
    return [f"-O.{key}={value}"]


def _o_spelling(tokens: list[str], i: int, rules: Rules) -> int:
    """How many tokens at ``i`` are an ``-O<n>`` / ``-O n`` spelling (0 when none)."""
    tok = tokens[i]
    if tok.startswith("-O") and len(tok) > 2 and (tok[2] != "." or rules.o_dotted == "error"):
        return 1  # 0.33 reads ``-O.x=y`` as ``--optimization-level .x=y``: refused only if no later -O replaces it
    if tok != "-O" or i + 1 >= len(tokens):
        return 0
    if tokens[i + 1] in rules.o_values and rules.o_number != "full":
        return 2
    return 0


def _o_dotted(tok: str, rules: Rules, out: Normalised) -> str:
    """``-O.x=y`` where ``-O`` is the compilation config: as given, or (deprecated, 0.12) read as ``-cc.x=y``."""
    if rules.o_dotted == "deprecated":
        out.notes.append(f"{tok.split('=', 1)[0]}: -O.<key> is deprecated in vLLM {rules.version}, read as -cc.<key>")
        return "-cc" + tok[2:]
    return tok


@dataclass
class _Pass1:
    """FlexibleArgumentParser's pre-pass: rewritten tokens and the dotted keys merged by root."""

    processed: list[str] = field(default_factory=list)
    dotted: dict[str, dict[str, Any]] = field(default_factory=dict)
    dups: list[str] = field(default_factory=list)


def _dotted(tokens: list[str], i: int, tok: str, state: _Pass1, out: Normalised, rules: Rules) -> int:
    """One ``--x.a.b v`` / ``-cc.a=v`` / ``key+ a,b`` token merged into its root; the next index. A value that is not
    JSON is a human int only where the version tries one (dotted_human_ints), else the string."""
    key_part, eq, value_str = tok.partition("=")
    nxt = i + 1
    if not eq:
        if i + 1 >= len(tokens):
            out.refusals.append(f"{key_part}: expected a value")
            return nxt
        value_str, nxt = tokens[i + 1], i + 2
    value: Any
    if key_part.endswith("+"):
        key_part = key_part[:-1]
        value = [loose_value(v, human=False) for v in value_str.split(",")]
    else:
        value = loose_value(value_str, human=rules.dotted_human_ints, tera=rules.human_int_tera)
    root, *keys = key_part.split(".")
    for k in reversed(keys):
        value = {k: value}
    _merge(state.dotted.setdefault(root, {}), value, root + ".", state.dups)
    return nxt


def _pass1(tokens: list[str], rules: Rules, out: Normalised) -> list[str]:
    """Spellings, ``-O`` and dotted keys; the dotted roots are appended last, as vLLM does."""
    state = _Pass1()
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        taken = _o_spelling(tokens, i, rules)
        if taken:
            value = tok[3:] if tok.startswith("-O=") else tok[2:] if taken == 1 else tokens[i + 1]
            tokens[i:i + taken] = _o_number(value, rules, out)  # re-read: the result may be a dotted key
            continue
        if tok.startswith("--") and len(tok) > 2:
            tok = _dash_key(tok)
        elif tok.startswith("-O."):
            tok = _o_dotted(tok, rules, out)
        if _is_option(tok) and "." in tok.split("=", 1)[0]:
            i = _dotted(tokens, i, tok, state, out, rules)
            continue
        state.processed.append(tok)
        i += 1
    if state.dups:
        out.notes.append("duplicate dotted keys, the last one wins: " + ", ".join(state.dups))
    for root, value in state.dotted.items():
        state.processed += [root, json.dumps(value)]
    return state.processed


def _kind(dest: str) -> str:
    return OPTIONS.get(dest, JSON if dest.endswith("_config") else STR)


def _take_bool(dest: str, option: str, negated: bool, eq: str, inline: str, out: Normalised, rules: Rules) -> None:
    """``--flag`` / ``--no-flag``; vLLM's store_true flags take no value (``--flag=true`` is refused)."""
    if eq:
        out.refusals.append(f"{option}: ignored explicit argument {inline!r} (the flag takes no value)")
        return
    out.args[dest] = not negated
    if negated and dest in FALSE_BY_DEFAULT and dest not in rules.none_default_flags:
        del out.args[dest]  # back at the parser default: not a non-default argument


def _take_list(tokens: list[str], i: int, dest: str, option: str, eq: str, inline: str, out: Normalised) -> int:
    values = [inline] if eq else []
    j = i + 1
    if not eq:
        while j < len(tokens) and not _is_option(tokens[j]):
            values.append(tokens[j])
            j += 1
    if not values:
        out.refusals.append(f"{option}: expected at least one argument")
    elif _kind(dest) == INTLIST:
        try:
            # argparse ``type=int, nargs="+"`` (optional_type(int) where the field admits None) in every
            # recorded version: each token is Python's int(), so neither "1k" nor "1,2" is read
            out.args[dest] = [int(v) for v in values]
        except ValueError as err:
            out.refusals.append(f"{option}: invalid int value: {str(err).rpartition(': ')[2]}")
    else:
        out.args[dest] = values
    return j


def _take_value(tokens: list[str], i: int, dest: str, option: str, eq: str, inline: str, out: Normalised,
                rules: Rules, unset: frozenset[str] = frozenset()) -> int:
    """One option's value converted by its kind as ``rules``' version reads it; ``unset``: the dests whose "None" / ""
    vLLM reads as None, their parser default (defaults.none_is_unset of exactly the version whose defaults
    drop_defaults applies)."""
    kind = _kind(dest)
    if eq:
        text, nxt = inline, i + 1
    elif i + 1 < len(tokens) and (not _is_option(tokens[i + 1]) or kind in (INT, MAXLEN, FLOAT)):
        text, nxt = tokens[i + 1], i + 2
    else:
        out.refusals.append(f"{option}: expected one argument")
        return i + 1
    if (text in ("None", "") or (dest == "speculative_config" and text.strip() == "null")) \
            and dest in unset:
        # vLLM's optional_type reads "None" and "" as None (speculative_config's json.loads also reads null): the
        # parser default, which drop_defaults then leaves out as vLLM's non-default args do
        out.args[dest] = None
        return nxt
    try:
        out.args[dest] = convert(dest, kind, text, human_ints=rules.human_int_options, tera=rules.human_int_tera,
                                 json_human=rules.json_human_ints)
    except ValueError as err:
        out.refusals.append(str(err))
    return nxt


def _unknown_option(tokens: list[str], i: int, option: str, eq: str, inline: str, out: Normalised) -> int:
    """An option vLLM's parser does not have: refused ("unrecognized arguments"), recorded by name."""
    name = option.lstrip("-").replace("-", "_")
    out.refusals.append(f"unrecognized arguments: {option}")
    if eq:
        out.args[name] = loose_value(inline)
        return i + 1
    if i + 1 < len(tokens) and not _is_option(tokens[i + 1]):
        out.args[name] = loose_value(tokens[i + 1])
        return i + 2
    out.args[name] = True
    return i + 1


def _pass2(tokens: list[str], rules: Rules, out: Normalised, unset: frozenset[str] = frozenset()) -> list[str]:
    """argparse: options to dests (abbreviations included), last one wins; returns the positionals. ``unset``:
    _take_value's."""
    positionals: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if not _is_option(tok) or tok == "-":
            positionals.append(tok)
            i += 1
            continue
        m = _match(tok, rules)
        if m.refused is not None:
            out.refusals.append(m.refused)
            i += 1
            continue
        if m.dest is None or m.dest == "help":
            i = _unknown_option(tokens, i, m.option, m.eq, m.inline, out)
            continue
        if m.option != tok.partition("=")[0] and m.option not in (tok, tok[:2]):
            out.notes.append(f"{tok.partition('=')[0]}: an abbreviation of {m.option}, as vLLM's parser reads it")
        if m.dest in rules.missing_options:
            out.refusals.append(f"unrecognized arguments: {m.option} (not an option of vLLM {rules.version})")
        if _kind(m.dest) == BOOL:
            _take_bool(m.dest, m.option, m.negated, m.eq, m.inline, out, rules)
            i += 1
        elif _kind(m.dest) in (LIST, INTLIST):
            i = _take_list(tokens, i, m.dest, m.option, m.eq, m.inline, out)
        else:
            i = _take_value(tokens, i, m.dest, m.option, m.eq, m.inline, out, rules, unset)
    return positionals


def _serve_model_option(tokens: list[str], program: str, rules: Rules, out: Normalised) -> list[str]:
    """``vllm serve ... --model M``: an ordinary option up to 0.10; refused by 0.11.0; 0.11.1-0.12 and 0.33
    move M to the front as the positional model (so a second positional is refused)."""
    if program != "vllm serve" or rules.serve_model_option == "option":
        return tokens
    for idx, tok in enumerate(tokens):
        if tok == "--model" and rules.serve_model_option == "refused":  # ``--model=M`` passes that check
            out.refusals.append(f"--model: with `vllm serve`, vLLM {rules.version} takes the model as a positional "
                                "argument or in a config file")
            return tokens
        if rules.serve_model_option == "moved" and (tok == "--model" or tok.startswith("--model=")):
            if "=" in tok:
                return [tok.split("=", 1)[1], *tokens[:idx], *tokens[idx + 1:]]
            return [*tokens[idx + 1:idx + 2], *tokens[:idx], *tokens[idx + 2:]]
    return tokens


def _model(positionals: list[str], program: str, out: Normalised) -> None:
    """The positional model of ``vllm serve`` wins over ``--model``; other positionals are refused."""
    if program == "vllm serve" and positionals:
        option = out.args.get("model")
        if option is not None and option != positionals[0]:
            out.notes.append(f"both a positional model and --model were given; vLLM uses {positionals[0]!r}")
        out.args["model"] = positionals[0]
        positionals = positionals[1:]
    if positionals:
        out.refusals.append("unrecognized arguments: " + " ".join(positionals))
    if "model" not in out.args and program == "api_server":
        out.notes.append("no --model: the api_server default (facebook/opt-125m) applies")


def _derived_choices(out: Normalised, rules: Rules, version: str | None) -> bool:
    """Every option with argparse ``choices`` in exactly ``version`` (defaults.choices_for, derived from vLLM's
    source by scripts/vllm_choices.py): argparse refuses a value outside them (each item of a list option); an
    optional option's "None" / "" is optional_type's None, accepted only where None itself is a choice (0.33). A dest
    already refused by a check of its own is left to it. False where the version's choices are not recorded."""
    table = choices_for(version)
    for dest, choices in table.items():
        if dest not in out.args or out.args[dest] is None:
            continue
        option = f"--{dest.replace('_', '-')}"
        if any(r.startswith(option + ":") for r in out.refusals):
            continue
        optional = bool(choices) and choices[-1] in (None, "None")
        value = out.args[dest]
        for item in value if isinstance(value, list) else [value]:
            if optional and item in ("None", ""):
                item = None
            if item not in choices:
                shown = ", ".join(str(c) for c in choices)
                out.refusals.append(f"{option}: invalid choice: {item!r} (choose from {shown})")
                break
    return bool(table)


def _all2all_choice(out: Normalised, rules: Rules) -> None:
    """``--all2all-backend`` outside the version's choices (all2all_backends) is refused by argparse; where the field
    admits None its type reads "None" and "" as None, which is no choice either (so neither is kept as a setting)."""
    backend = out.args.get("all2all_backend")
    if rules.all2all_backends and backend is not None and backend not in rules.all2all_backends:
        out.refusals.append(f"--all2all-backend: invalid choice: {backend!r} (choose from "
                            f"{', '.join(sorted(rules.all2all_backends))})")


def _version_values(out: Normalised, rules: Rules, version: str | None = None) -> None:
    """Values this version's parser refuses although the option exists."""
    if out.args.get("max_model_len") == "auto" and not rules.max_model_len_auto:
        out.refusals.append(f"--max-model-len: invalid human_readable_int value: 'auto' (vLLM {rules.version})")
    elif out.args.get("max_model_len") == "auto":
        out.args["max_model_len"] = -1  # vLLM's human_readable_int_or_auto
    mode = out.args.get("tokenizer_mode")
    if rules.tokenizer_modes and mode is not None and mode not in rules.tokenizer_modes:
        out.refusals.append(f"--tokenizer-mode: invalid choice: {mode!r} (choose from "
                            f"{', '.join(sorted(rules.tokenizer_modes))})")
    kv = out.args.get("kv_cache_dtype")
    if rules.kv_cache_dtypes and kv is not None and kv not in rules.kv_cache_dtypes:
        out.refusals.append(f"--kv-cache-dtype: invalid choice: {kv!r} (choose from "
                            f"{', '.join(sorted(rules.kv_cache_dtypes))})")
    quant = out.args.get("quantization")
    if rules.quantization_methods and quant is not None and quant not in rules.quantization_methods:
        out.refusals.append(f"--quantization: Unknown quantization method: {quant!r} (vLLM {rules.version})")
    if not _derived_choices(out, rules, version):
        _all2all_choice(out, rules)  # a version whose choices are not recorded: the rule's own list
    for dest, allowed in CHOICES.items():
        if dest in out.args and out.args[dest] not in allowed:
            out.refusals.append(f"--{dest.replace('_', '-')}: invalid choice: {out.args[dest]!r} "
                                f"(choose from {', '.join(allowed)})")


#: compilation_config keys that only convert to a graph mode while ``legacy_graph_flags`` holds.
LEGACY_GRAPH_KEYS = ("full_cuda_graph", "use_cudagraph")
#: pass_config keys 0.12 renamed: the old spelling sets the new field.
PASS_RENAMES = {"enable_attn_fusion": "fuse_attn_quant", "enable_noop": "eliminate_noops",
                "enable_sequence_parallelism": "enable_sp", "enable_async_tp": "fuse_gemm_comms",
                "enable_fi_allreduce_fusion": "fuse_allreduce_rms", "enable_fusion": "fuse_norm_quant"}


def ignored_compilation_keys(rules: Rules, cc: Mapping[str, Any] | None = None) -> tuple[str, ...]:
    """compilation_config keys (dotted below pass_config) that are not fields of this version's
    CompilationConfig: accepted and ignored, or refused where ``unknown_compilation_keys`` says so. With ``cc``,
    also each key of it that is no field of the version's CompilationConfig (fields.unknown_keys: a misspelt or
    foreign key such as ``cudagraph-mode`` is never a setting)."""
    keys: tuple[str, ...] = () if rules.legacy_graph_flags else LEGACY_GRAPH_KEYS
    if rules.mode_key == "level":
        keys += ("mode",)
    if not rules.pass_config_renamed:
        keys += tuple(f"pass_config.{new}" for new in PASS_RENAMES.values())
    elif rules.pass_old_spellings_dropped:
        keys += tuple(f"pass_config.{old}" for old in PASS_RENAMES)
    if not rules.inductor_partition:
        keys += ("use_inductor_graph_partition",)  # a field from 0.11.0
    if "max_cudagraph_capture_size" in rules.missing_options:
        keys += ("max_cudagraph_capture_size",)  # the option and the field came together (0.11.1)
    if cc is not None:
        own = ("level",) if not rules.level_accepted else ()  # refused in its own words (_compilation_keys)
        keys += tuple(key for key in unknown_keys(cc, rules.version, "compilation_config") if key not in keys + own)
    return keys


def compilation_config_view(cc: Mapping[str, Any], rules: Rules) -> dict[str, Any]:
    """``compilation_config`` as the version's CompilationConfig holds it after parsing: ignored keys
    dropped, ``level`` also setting ``mode`` (0.11.1+), mode names as numbers, the legacy flags converted
    (up to 0.11.0), old pass_config spellings renamed (0.12+), graph modes by name. This is what vLLM's "non-default
    args" show, so it is what tests/test_vllm_oracle.py compares."""
    ignored = ignored_compilation_keys(rules, cc)
    out = {k: v for k, v in cc.items() if k not in ignored}
    if isinstance(out.get("pass_config"), Mapping):
        passes = {k: v for k, v in out["pass_config"].items() if f"pass_config.{k}" not in ignored}
        if rules.pass_config_renamed:
            passes = {PASS_RENAMES.get(k, k): v for k, v in passes.items()}
        out["pass_config"] = passes
        if not passes:
            del out["pass_config"]  # nothing vLLM reads: the defaults stand
    if "level" in out and rules.mode_key == "mode" and "mode" not in out:
        out["mode"] = out["level"]
    if rules.mode_key == "mode" and parse_comp_mode(out.get("mode")) is not None:
        out["mode"] = parse_comp_mode(out["mode"])  # a mode name (``VLLM_COMPILE``) is held as its number
    if rules.legacy_graph_flags and rules.legacy_flags_in_config and "cudagraph_mode" not in out:
        if out.get("use_cudagraph") is False:
            out["cudagraph_mode"] = "NONE"
        elif out.get("full_cuda_graph") is True:
            out["cudagraph_mode"] = "FULL"
    if "cudagraph_mode" in out:
        out["cudagraph_mode"] = parse_cg_mode(out["cudagraph_mode"])
    if isinstance(out.get(rules.mode_key), str) and parse_comp_mode(out[rules.mode_key]) is not None:
        out[rules.mode_key] = parse_comp_mode(out[rules.mode_key])  # a mode name is held as its number
    return out


#: Flags that set a compilation_config key, which they are refused beside (capture_options_exclusive; so are the
#: two older spellings of the sizes beside each other).
CAPTURE_FLAGS = {"cudagraph_capture_sizes": "cudagraph_capture_sizes", "cuda_graph_sizes": "cudagraph_capture_sizes",
                 "max_cudagraph_capture_size": "max_cudagraph_capture_size"}


def compilation_held(args: Mapping[str, Any], rules: Rules) -> tuple[dict[str, Any], str | None]:
    """``args`` with compilation_config as the version's CompilationConfig holds it, left out when nothing remains,
    and why where that changed what was given: the capture-size flags moved into the keys they set (from 0.11.1,
    where vLLM refuses them beside those keys), then argv.compilation_config_view (ignored keys dropped, renamed
    pass_config keys, mode names as numbers, the legacy graph flags converted), and the legacy flags, once
    converted, left to the mode they set (their only reader is CompilationConfig.__post_init__, 0.10-0.11.0)."""
    given = args.get("compilation_config")
    cc: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
    moved: dict[str, Any] = {}
    if rules.capture_options_exclusive and (given is None or isinstance(given, Mapping)) \
            and args.get("enforce_eager") is not True:  # under it the flags are left out (defaults._engine_unused)
        moved = {flag: args[flag] for flag, key in CAPTURE_FLAGS.items() if flag in args and key not in cc}
    if not moved and not cc:
        return dict(args), None
    whole = {**cc, **{CAPTURE_FLAGS[flag]: value for flag, value in moved.items()}}
    view = compilation_config_view(whole, rules)
    if "cudagraph_mode" in view:
        view = {k: v for k, v in view.items() if k not in LEGACY_GRAPH_KEYS}
    if view == cc and not moved:
        return dict(args), None
    out = {k: v for k, v in args.items() if k != "compilation_config" and k not in moved}
    if view:
        out["compilation_config"] = view
    return out, (f"as vLLM {rules.version}'s CompilationConfig holds it, "
                 + (f"{', '.join('--' + f.replace('_', '-') for f in moved)} moved into it, " if moved else "")
                 + "(hoststate/collectors/vllm/argv.py compilation_config_view, checked against vLLM's own "
                   "non-default args in fixtures/vllm/oracle)")


#: What pydantic's lax int parsing takes from a string: ASCII digits, underscores between them, a zero fraction.
_INT_TEXT = re.compile(r"\s*[+-]?\d+(?:_\d+)*(?:\.0*)?\s*", re.ASCII)


def _integer(value: Any) -> bool:
    """Whether pydantic reads ``value`` as an int: an int, an integral float, or a string of _INT_TEXT."""
    if isinstance(value, float):
        return value.is_integer()
    return not isinstance(value, str) or _INT_TEXT.fullmatch(value) is not None


def _compilation_mode_refusals(cc: Mapping[str, Any], rules: Rules) -> list[str]:
    """vLLM's refusals of a compilation mode or level given as a string it does not take (compilation_mode_checked):
    CompilationConfig.validate_mode_before upper-cases a ``mode`` string and requires a CompilationMode member name
    (vllm/config/compilation.py of 0.11.1, 0.12.0, 0.33.0), so ``"3"`` or PIECEWISE is refused while the number 3 is
    the member's value; ``level`` is ``int | None`` (0.10.2-0.12.0), so pydantic refuses a float with a fraction and
    a string that is no integer (lax parsing takes ASCII digits with an optional zero fraction: _INT_TEXT)."""
    refusals = []
    mode, level = cc.get("mode"), cc.get("level")
    if rules.mode_key == "mode" and isinstance(mode, str) and mode.upper() not in COMP_NAMES.values():
        refusals.append(f"compilation_config.mode: Invalid compilation mode: {mode}. Valid modes are: "
                        f"{', '.join(COMP_NAMES.values())}")
    if rules.level_accepted and level is not None and not isinstance(level, bool) and not _integer(level):
        refusals.append(f"compilation_config.level: Input should be a valid integer, not {level!r} "
                        f"(vLLM {rules.version})")
    return refusals


def _as_int(item: Any) -> Any:
    """An integral float or _INT_TEXT string as the int pydantic's lax mode makes of it; anything else as it is."""
    if isinstance(item, float) and item.is_integer():
        return int(item)
    if isinstance(item, str) and _INT_TEXT.fullmatch(item):
        return int(re.sub(r"\.0*$", "", item.strip()))
    return item


def _compilation_ints(cc: dict[str, Any], rules: Rules) -> list[str]:
    """The version's CompilationConfig int fields (compilation_int_keys) as pydantic's lax int reads them: an int, an
    integral float or a string of _INT_TEXT (a list field, each item) is the int, so ``"1000"`` is held as 1000;
    anything else is refused (returned), so a dotted ``"1k"`` that stayed a string (up to 0.12.0) is no integer."""
    refusals = []
    for key in sorted(rules.compilation_int_keys):
        head, _, sub = key.partition(".")
        here = cc.get(head) if sub else cc
        if not isinstance(here, dict) or (value := here.get(sub or head)) is None:
            continue
        items = value if isinstance(value, list) else [value]
        bad = [item for item in items if isinstance(item, (str, float)) and not _integer(item)]
        if bad:
            refusals.append(f"compilation_config.{key}: Input should be a valid integer, unable to parse "
                            f"{bad[0]!r} as an integer (vLLM {rules.version})")
        else:
            here[sub or head] = [_as_int(i) for i in value] if isinstance(value, list) else _as_int(value)
    return refusals


def _compilation_keys(out: Normalised, rules: Rules) -> None:
    cc = out.args.get("compilation_config")
    if not isinstance(cc, dict):
        return
    for key in ignored_compilation_keys(rules, cc):
        head, _, sub = key.partition(".")
        here = cc.get(head) if sub else cc
        if not (isinstance(here, Mapping) and (sub or head) in here):
            continue
        if rules.unknown_compilation_keys == "refused":
            out.refusals.append(f"compilation_config.{key}: extra inputs are not permitted (vLLM {rules.version})")
        else:
            out.notes.append(f"compilation_config.{key} is not a field in vLLM {rules.version}; vLLM ignores it")
    if "level" in cc and not rules.level_accepted:
        out.refusals.append(f"compilation_config.level is not accepted by vLLM {rules.version} (use mode)")
    if "cudagraph_mode" in cc and parse_cg_mode(cc["cudagraph_mode"]) is None:
        out.refusals.append(f"compilation_config.cudagraph_mode: unknown mode {cc['cudagraph_mode']!r}")
    if rules.compilation_mode_checked:
        out.refusals.extend(_compilation_mode_refusals(cc, rules))
    out.refusals.extend(_compilation_ints(cc, rules))
    if "cudagraph_mode" in cc and rules.family == "v10.0":
        out.notes.append(f"compilation_config.cudagraph_mode does not exist in vLLM {rules.version}; ignored")


def normalise(
    argv: list[str],
    version: str | None = None,
    *,
    program: str = "vllm serve",
    config_loader: ConfigLoader = load_yaml_config,
) -> Normalised:
    """vLLM's arguments (after ``vllm serve`` or the api_server module) as ``{dest: value}``."""
    rules, _ = rules_for(version)
    out = Normalised()
    tokens = _serve_model_option(list(argv), program, rules, out)
    tokens = _config_file(tokens, program, rules, config_loader, out)
    tokens = _pass1(tokens, rules, out)
    _model(_pass2(tokens, rules, out, none_is_unset(version)), program, out)
    _version_values(out, rules, version)
    _compilation_keys(out, rules)
    known = defaults_for(version)
    out.defaults_source = known.source
    out.at_default = drop_defaults(out.args, known.defaults)
    return out


__all__ = ["BOOL", "FLOAT", "INT", "JSON", "LIST", "STR", "Command", "ConfigLoader", "Normalised", "load_yaml_config",
           "locate", "normalise", "split_command"]
