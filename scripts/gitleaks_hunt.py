"""Search for secrets that survive a snapshot: many gitleaks values per rule, random seeds, two alphabets.

Usage: python scripts/gitleaks_hunt.py [--per-rule N] [--seeds 1,2,3] [--alphabet utf8,ascii] [--rules REGEX]
                                       [--free N] [--no-snap] [--json OUT]
       python scripts/gitleaks_hunt.py --replay STDOUT_OF_AN_EARLIER_RUN

tests/test_gitleaks_rules.py draws a few derandomised values per rule; this draws ``--per-rule`` values of every
rule hoststate runs (hoststate.gitleaks.rows()) for each seed and alphabet (the test's: any UTF-8 character but
NUL; and printable ASCII), with the same method (hypothesis' ``from_regex`` on the rule's published regex,
translated; a value counts only where gitleaks would report it, and only where its secret could show a leak),
and plants them as that test does: the values of eight rules at a time in every channel of an in-process
snapshot (``--vllm-cmd`` option values and a JSON option, the command's ``VAR=value`` prefix, the operator's
environment, a ``non-default args:`` log line, ``--label``), in the test's groups of rules and again mixed at
random. Each value is also redacted alone through the functions a real server's argv and environment go
through. ``--free N`` also draws N passwords per seed and plants them in the
free-text forms (``mysql -pSECRET``, ``-p"..."``, ``user:pw@host``, ``key%3Dvalue``, ``'key' => 'value'``) in
argv, environment values and log text. Every (rule, channel, value) whose secret survives is printed, one JSON
object a line (``--replay`` plants them again, as they were); the exit status is 1 when one does. At 50 values
per rule, a seed and alphabet takes about two minutes on a 2-core VM.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hoststate import gitleaks  # noqa: E402
from hoststate.redact import REDACTED, redact_argv, redact_command_line, redact_env, redact_text  # noqa: E402
from tests import test_gitleaks_rules as T  # noqa: E402

ALPHABETS = {
    "utf8": T.ALPHABET,
    "ascii": st.characters(min_codepoint=0x20, max_codepoint=0x7E),
}


def draw(strategy: st.SearchStrategy[Any], count: int, at: int) -> list[Any]:
    """``count`` values of ``strategy`` with random seed ``at`` (not derandomised, no example database)."""
    found: list[Any] = []

    @seed(at)
    @settings(max_examples=count, deadline=None, database=None, derandomize=False, phases=T.PHASES,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def one(value):
        found.append(value)

    one()
    return found


def rule_values(row: dict[str, Any], count: int, at: int, alphabet: str) -> list[str]:
    return draw(st.from_regex(T._faithful(row), fullmatch=True, alphabet=ALPHABETS[alphabet]), count, at)


def paths(value: Any, where: str = "") -> list[tuple[str, str]]:
    """(path, string) of every string of a nested value, keys included."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in ((f"{where}/{k}", str(k)), *paths(v, f"{where}/{k}"))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in paths(v, f"{where}[{i}]")]
    return [(where, value)] if isinstance(value, str) else []


def channel(path: str, text: str) -> str:
    """The channel a snapshot string came from (see tests/test_gitleaks_rules.py's _snap)."""
    if path.startswith("/env/"):
        return "operator env"
    if path.startswith("/vllm/env/"):
        return "command prefix"
    if "/log" in path:
        return "log line"
    if "label" in path:
        return "label"
    if path.startswith("/vllm/"):
        return "json option" if "note_" in path or "note_" in text else "option value"
    return path


def survivors(strings: list[tuple[str, str]], secret: str) -> list[tuple[str, str]]:
    return [(p, s) for p, s in strings if any(f in s for f in T._forms(secret))]


def snap_hunt(batches: list[dict[str, str]], log: str) -> tuple[int, list[dict[str, Any]]]:
    """Each batch (key -> value) planted together in one snapshot; (values planted, survivors)."""
    baseline = list(T._baseline(log))
    planted_count, found = 0, []
    for batch in batches:
        planted = T._planted(batch, baseline)
        planted_count += len(planted)
        if not planted:
            continue
        try:
            snap = T._snap([v for v, _s in planted.values()], log)
        except Exception as e:  # noqa: BLE001 - a crash is a finding too
            found.append({"rule": "<snapshot raised>", "error": repr(e), "values": list(batch.values())})
            continue
        strings = paths(snap)
        for key, (value, secret) in planted.items():
            where = survivors(strings, secret)
            if where:
                found.append({"rule": key.split(" #")[0], "value": value, "secret": secret,
                              "channels": sorted({channel(p, s) for p, s in where}),
                              "with": {k: v for k, (v, _s) in planted.items() if k != key},
                              "at": list(planted).index(key),
                              "seen": [s[:200] for _p, s in where[:3]]})
    return planted_count, found


def alone(value: str) -> dict[str, str]:
    """One value through each function a channel uses, alone (a real server's argv and environment)."""
    return {
        "text": redact_text(value),
        "env value": redact_env({"VLLM_NOTE": value})["VLLM_NOTE"],
        "argv option=value": " ".join(redact_argv(["vllm", "serve", "m", f"--served-model-name={value}"])),
        "argv option value": " ".join(redact_argv(["vllm", "serve", "m", "--served-model-name", value])),
        "argv positional": " ".join(redact_argv(["vllm", "serve", value])),
        "command line": redact_command_line(shlex.join(["vllm", "serve", "m", f"--served-model-name={value}"])),
        "log repr": redact_text(f"INFO non-default args: {{'note': {value!r}}}"),
        "json": redact_text(json.dumps({"note": value})),
    }


def alone_hunt(values: dict[str, tuple[str, str]]) -> list[dict[str, Any]]:
    found = []
    for key, (value, secret) in values.items():
        outs = alone(value)
        where = [c for c, out in outs.items() if any(f in out for f in T._forms(secret))]
        if where:
            found.append({"rule": key.split(" #")[0], "value": value, "secret": secret, "channels": where,
                          "alone": True, "seen": [outs[c][:200] for c in where[:3]]})
    return found


# -- free-text forms ------------------------------------------------------------------------------------------

#: Password alphabets: any character but white space and NUL, or printable ASCII but the space.
PASSWORD_ALPHABETS = {
    "utf8": st.characters(codec="utf-8", exclude_characters="\x00", exclude_categories=("Zs", "Zl", "Zp", "Cc")),
    "ascii": st.characters(min_codepoint=0x21, max_codepoint=0x7E),
}
#: What a password may hold unquoted in ``user:pw@host`` (RFC 3986 userinfo: unreserved, sub-delims, ':', and
#: the '@' and '/' real DSNs hold) and glued to a short option in free text (no quote, no backslash).
USERINFO = set("-._~!$&'()*+,;=:@/")
GLUED_NOT = set("\"'\\`")


def free_forms(password: str, user: str) -> list[tuple[str, str]]:
    """(text, secret) for ``password`` in each free-text form it can stand in (the secret must not survive)."""
    enc = quote(password, safe="")
    quoted = [
        (f"mysql -p{shlex.quote(password)} -h db", password),
        (f"/usr/bin/mysqldump -p{json.dumps(password)} --all-databases", password),
        (f"redis-cli -h cache -a {shlex.quote(password)} ping", password),
        (f"curl -s -u {user}:{shlex.quote(password)} https://x.example/", password),
        (f"sshpass -p {shlex.quote(password)} ssh host", password),
        (f"'db_password' => {json.dumps(password)}", password),
        (f"password := {json.dumps(password)}", password),
        (f"$cfg['db_password'] = {json.dumps(password)};", password),
        (json.dumps({"cmd": f"mysql -p{shlex.quote(password)} db"}), password),
    ]
    if not any(c in GLUED_NOT for c in password):
        quoted.append((f"mysql -u{user} -p{password} db", password))
    if all(c.isalnum() or c in USERINFO for c in password):
        quoted += [(f"{user}:{password}@db.example.com:5432/app", password),
                   (f"dsn {user}:{password}@db.example.com/app", password),
                   (f"postgres://{user}:{password}@db.example.com/app", password)]
    if password.lstrip(")]}")[:1] not in ",;&#":  # a value that starts with its separator is empty to a parser
        quoted += [
            (f"AccountName%3Dacct%3BAccountKey%3D{enc}%3BEndpointSuffix%3Dcore.windows.net", enc),
            (f"https://h.example/cb?next=%2Fx%3Fpassword%3D{enc}%26a%3D1", enc),
            (f"state=token%253D{quote(enc, safe='')}%2526x%253D1", quote(enc, safe="")),
        ]
    return quoted


def free_hunt(count: int, at: int, alphabet: str) -> tuple[int, list[dict[str, Any]]]:
    """Passwords of 8-24 characters (not starting with a quote, '-' or '<') in every free-text form."""
    strategy = st.tuples(
        st.text(PASSWORD_ALPHABETS[alphabet], min_size=8, max_size=24).filter(
            lambda p: p[0] not in "\"'-<" and REDACTED not in p),
        st.from_regex(r"[a-z][a-z0-9_]{1,10}", fullmatch=True))
    found, planted, seen = [], 0, set()
    for password, user in draw(strategy, count, at):
        if password in seen:
            continue
        seen.add(password)
        for text, secret in free_forms(password, user):
            if len(secret) < 6 or secret in text.replace(secret, "\x00", 1) or secret in user:
                continue
            planted += 1
            outs = alone(text)
            if not any(op in text for op in ("=>", ":=", "] =")):  # a program's text, not a command line
                outs["argv words"] = " ".join(redact_argv(shlex.split(text) if _splits(text) else text.split()))
            outs["log line"] = redact_text(f"INFO 01-01 [launcher.py:1] starting {text} (pid 7)")
            where = [c for c, out in outs.items() if any(f in out for f in T._forms(secret))]
            if where:
                found.append({"rule": "free-text", "value": text, "secret": secret, "channels": where,
                              "seen": [outs[c][:200] for c in where[:3]]})
    return planted, found


def _splits(text: str) -> bool:
    try:
        shlex.split(text)
    except ValueError:
        return False
    return True


def replay(path: str) -> int:
    """Each survivor of an earlier run planted again as it was (alone, or with the values it was planted with)."""
    log = str(Path(tempfile.mkdtemp()) / "server.log")
    left = []
    for line in Path(path).read_text().splitlines():
        leak = json.loads(line)
        if "value" not in leak:
            continue
        if leak.get("alone"):
            found = alone_hunt(T._planted({leak["rule"]: leak["value"]}, list(T._baseline(log))))
        else:
            others = list(leak["with"].items())
            at = leak.get("at", 0)
            batch = dict([*others[:at], (f"{leak['rule']} #0", leak["value"]), *others[at:]])
            found = [f for f in snap_hunt([batch], log)[1] if f["rule"] == leak["rule"]]
        left += found
        print(("SURVIVES " if found else "gone     ") + leak["rule"] + " " + ascii(leak["value"])[:100])
    return 1 if left else 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-rule", type=int, default=40)
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--alphabet", default="utf8,ascii")
    ap.add_argument("--rules", default="")
    ap.add_argument("--free", type=int, default=0, help="passwords per seed and alphabet in the free-text forms")
    ap.add_argument("--no-snap", action="store_true", help="only the per-value checks (faster)")
    ap.add_argument("--json", default="")
    ap.add_argument("--replay", default="", help="check again the survivors an earlier run printed (its stdout)")
    args = ap.parse_args()
    if args.replay:
        return replay(args.replay)
    rows = [r for r in gitleaks.rows() if re.search(args.rules, r["id"])]
    groups = [rows[i:i + T.GROUP] for i in range(0, len(rows), T.GROUP)]
    log = str(Path(tempfile.mkdtemp()) / "server.log")
    drawn = counted = planted = free_planted = 0
    leaks: list[dict[str, Any]] = []
    started = time.monotonic()
    for alphabet in args.alphabet.split(","):
        for at in (int(s) for s in args.seeds.split(",")):
            values = {row["id"]: rule_values(row, args.per_rule, at, alphabet) for row in rows}
            drawn += sum(map(len, values.values()))
            findings = {f"{rid} #{alphabet}.{at}.{i}": (v, s[0]) for rid, vs in values.items()
                        for i, v in enumerate(vs) if (s := T._secret(T._row(rid), v))}
            counted += len(findings)
            kept = T._planted({k: v for k, (v, _s) in findings.items()}, list(T._baseline(log)))
            found = alone_hunt(kept)
            if not args.no_snap:
                # as the test plants them: the i-th value of each rule of a group of eight, in one snapshot
                rng = random.Random(at)
                batches = [{f"{r['id']} #{alphabet}.{at}.{i}": values[r["id"]][i] for r in group
                            if i < len(values[r["id"]])}
                           for group in groups for i in range(max(len(values[r["id"]]) for r in group))]
                mixed = list(findings)
                rng.shuffle(mixed)  # and mixed: eight values of any rules
                batches += [{k: findings[k][0] for k in mixed[i:i + T.GROUP]} for i in range(0, len(mixed), T.GROUP)]
                n, more = snap_hunt(batches, log)
                planted += n
                found += more
            if args.free:
                n, more = free_hunt(args.free, at, alphabet)
                free_planted += n
                found += more
            leaks += found
            print(f"{alphabet} seed {at}: {len(findings)} findings, {len(found)} survive"
                  f" ({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
    for leak in leaks:
        print(json.dumps(leak, ensure_ascii=True))
    by_rule: dict[str, int] = {}
    for leak in leaks:
        by_rule[leak["rule"]] = by_rule.get(leak["rule"], 0) + 1
    print(f"rules {len(rows)}, values drawn {drawn}, gitleaks findings {counted}, planted in snapshots {planted}, "
          f"free-text forms {free_planted}, surviving {len(leaks)}: {by_rule}", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(leaks, indent=1, ensure_ascii=False))
    return 1 if leaks else 0


if __name__ == "__main__":
    sys.exit(main())
