"""accel-config: is it installed, does its view agree with sysfs, and is the live DSA configuration saved.

A WQ configuration enabled by hand and never written with ``accel-config save-config`` is lost at
the next reboot (the seed's pitfall 5): the saved file is compared with the live enabled
configuration of the ``dsa`` section, which works on a captured tree too. The binary itself reads the
live /sys, so under ``--root`` it is never run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from hoststate import coverage
from hoststate.collectors import Context, Section
from hoststate.coverage import source
from hoststate.io import Reader, run, which

SAVED_PATH = "etc/accel-config/accel-config.conf"
#: Where a captured tree may hold the binary (live hosts use PATH).
BIN_PATHS = ("usr/bin/accel-config", "usr/local/bin/accel-config", "usr/sbin/accel-config", "bin/accel-config")
DPKG_STATUS = "var/lib/dpkg/status"
#: What this collector reads -> where it lands in the ``accel_config`` table; first match names it.
SOURCES = (
    source(r"etc/accel-config/accel-config\.conf", "saved.**", absent=("ENOENT",)),  # never saved: present = false
    source(r"var/lib/dpkg/status", "version"),
    source(r"(?:usr/bin|usr/local/bin|usr/sbin|bin)/accel-config", "available", "path", "version", "list.**",
           absent=("ENOENT",)),  # looked for in each place: not there is an answer
    # The DSA tree the cross-checks compare with (read by the dsa collector): what it could not read, they cannot
    # have compared.
    source(r"(?:sys|dev)/.*", "saved.matches_live", "saved.differences", "list.agrees_with_sysfs", "list.differences"),
)

#: accel-config's JSON key -> the kernel attribute it reports (util/json.c); others are named alike.
LIST_KEY_TO_ATTR = {"work_queue_size": "max_work_queues_size"}
#: Keys of accel-config's JSON that are structure, not attributes.
STRUCTURE_KEYS = frozenset({"dev", "groups", "grouped_workqueues", "grouped_engines", "ungrouped workqueues",
                            "ungrouped_engines"})
#: Four 64-bit words, least significant first, in accel-config's JSON.
WORD_ARRAYS = frozenset({"op_cap", "errors"})

#: What save-config records, by level (accfg/config.c; json.c with UTIL_JSON_SAVE).
SAVED_DEVICE_FIELDS = ("read_buffer_limit",)
SAVED_GROUP_FIELDS = ("read_buffers_reserved", "use_read_buffer_limit", "read_buffers_allowed", "traffic_class_a",
                      "traffic_class_b")
SAVED_WQ_FIELDS = ("mode", "size", "group_id", "priority", "block_on_fault", "max_batch_size", "max_transfer_size",
                   "type", "name", "driver_name", "threshold", "ats_disable")
SAVED_ENGINE_FIELDS = ("group_id",)
STRING_FIELDS = frozenset({"mode", "type", "name", "driver_name", "dev"})

# ---- lenient JSON ----------------------------------------------------------------------------------


def strip_trailing_commas(text: str) -> str:
    """Drop a ``,`` after a value that only whitespace separates from ``]`` or ``}``, outside strings.

    json-c (what accel-config parses with) accepts such commas and real configs have them
    (contrib/configs/net_profile.conf); Python's json does not.
    """
    out: list[str] = []
    i, n = 0, len(text)
    in_string = False
    while i < n:
        ch = text[i]
        if in_string:
            out.append(ch)
            if ch == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
            out.append(ch)
        elif ch == ",":
            j = i + 1
            while j < n and text[j] in " \t\r\n":
                j += 1
            prev = next((c for c in reversed(out) if c not in " \t\r\n"), "")
            # only a comma that follows a value: "[,]" and "[1,,]" stay errors
            if j >= n or text[j] not in "]}" or prev in ("", "[", "{", ","):
                out.append(ch)
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def loads_lenient(text: str) -> Any:
    """json.loads that also takes trailing commas; raises ValueError like json does."""
    return json.loads(strip_trailing_commas(text))


# ---- accel-config's device JSON (list and save-config share it) -------------------------------------


def walk_config(devices: Any, problems: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """accel-config device JSON flattened: ``{dev: {"device": {...}, "wqs": {...}, "groups": {...},
    "engines": {...}}}``. Each WQ/engine also gets ``_group`` (the group it was listed under, or None).

    Anything malformed is described in ``problems`` and skipped, never raised.
    """
    problems = [] if problems is None else problems
    out: dict[str, dict[str, Any]] = {}
    if not isinstance(devices, list):
        problems.append(f"top level is {_kind(devices)}, expected a list of devices")
        return out
    for i, dev in enumerate(devices):
        if not isinstance(dev, dict) or not isinstance(dev.get("dev"), str):
            problems.append(f"device #{i}: not an object with a \"dev\" name")
            continue
        name = dev["dev"]
        entry: dict[str, Any] = {"device": _fields(dev), "wqs": {}, "groups": {}, "engines": {}}
        out[name] = entry
        groups = dev.get("groups", [])
        if not isinstance(groups, list):
            problems.append(f"{name} groups: {_kind(groups)}, expected a list")
            groups = []
        for g in groups:
            if not isinstance(g, dict) or not isinstance(g.get("dev"), str):
                problems.append(f"{name}: a group without a \"dev\" name")
                continue
            entry["groups"][g["dev"]] = _fields(g)
            _members(g, "grouped_workqueues", entry["wqs"], g["dev"], name, problems)
            _members(g, "grouped_engines", entry["engines"], g["dev"], name, problems)
        _members(dev, "ungrouped workqueues", entry["wqs"], None, name, problems)
        _members(dev, "ungrouped_engines", entry["engines"], None, name, problems)
    return out


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")


def _fields(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in STRUCTURE_KEYS}


def _members(parent: dict, key: str, into: dict, group: str | None, dev: str, problems: list[str]) -> None:
    items = parent.get(key, [])
    if not isinstance(items, list):
        problems.append(f"{dev} {key}: {_kind(items)}, expected a list")
        return
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("dev"), str):
            problems.append(f"{dev} {key}: an entry without a \"dev\" name")
            continue
        into[item["dev"]] = {**_fields(item), "_group": group}


def parse_list_output(text: str) -> dict[str, dict[str, Any]]:
    """``accel-config list -i`` stdout, flattened by walk_config; ValueError when it is not JSON."""
    problems: list[str] = []
    flat = walk_config(loads_lenient(text), problems)
    if problems:
        raise ValueError("; ".join(problems))
    return flat


# ---- accel-config list vs the dsa section -----------------------------------------------------------


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value, 0)
        except ValueError:
            return None
    return None


def bitmap_value(value: Any) -> int | None:
    """A capability bitmap as one integer, from any of its spellings: accel-config's four 64-bit words
    (least significant first), a pre-6.3 sysfs "0xfb03ff 0x0 0x0 0x0", or a >= 6.3 sysfs
    "00000000,...,00fb03ff" (32-bit words, most significant first)."""
    try:
        if isinstance(value, list):
            return sum(int(str(w), 16) << (64 * i) for i, w in enumerate(value))
        if isinstance(value, str) and "," in value:
            return int(value.replace(",", ""), 16)
        if isinstance(value, str):
            return sum(int(w, 16) << (64 * i) for i, w in enumerate(value.split()))
    except ValueError:
        return None
    return None


def same_value(key: str, listed: Any, sysfs: Any) -> bool:
    """Equal after undoing presentation: hex strings vs ints, bitmap word orders."""
    if key in WORD_ARRAYS:
        return bitmap_value(listed) == bitmap_value(sysfs)
    a, b = _as_int(listed), _as_int(sysfs)
    if a is not None and b is not None:
        return a == b
    return listed == sysfs


def common_fields(listed: dict[str, dict], dsa_data: dict[str, Any]) -> Iterator[tuple[str, str, Any, Any]]:
    """Every (where, key, accel-config value, sysfs value) that both report."""
    devices = dsa_data.get("devices", {})
    for dev, entry in listed.items():
        sysdev = devices.get(dev)
        if sysdev is None:
            continue
        for key, value in entry["device"].items():
            attr = LIST_KEY_TO_ATTR.get(key, key)
            if attr in sysdev:
                yield dev, key, value, sysdev[attr]
        for table in ("wqs", "groups", "engines"):
            for child, fields in entry[table].items():
                sysobj = sysdev.get(table, {}).get(child)
                if sysobj is None:
                    continue
                for key, value in fields.items():
                    if key == "_group":
                        continue
                    if key in sysobj:
                        yield f"{dev}/{child}", key, value, sysobj[key]
                if table in ("wqs", "engines") and "group_id" in sysobj:
                    # Where accel-config files it (under a group or ungrouped) is a report of group_id too.
                    group = fields["_group"]
                    where = int(group.rsplit(".", 1)[1]) if group else -1
                    yield f"{dev}/{child}", "placement", where, sysobj["group_id"]


def compare_list_with_sysfs(listed: dict[str, dict], dsa_data: dict[str, Any]) -> list[str]:
    """Differences between ``accel-config list -i`` (flattened) and the dsa section, one line each."""
    diffs = []
    devices = dsa_data.get("devices", {})
    for dev in sorted(set(devices) | set(listed)):
        if dev not in listed:
            diffs.append(f"{dev}: in sysfs, not listed by accel-config")
            continue
        if dev not in devices:
            diffs.append(f"{dev}: listed by accel-config, not in sysfs")
            continue
        for table in ("wqs", "groups", "engines"):
            sysnames = set(devices[dev].get(table, {}))
            listnames = set(listed[dev][table])
            diffs += [f"{dev}/{c}: in sysfs, not listed by accel-config" for c in sorted(sysnames - listnames)]
            diffs += [f"{dev}/{c}: listed by accel-config, not in sysfs" for c in sorted(listnames - sysnames)]
    for where, key, lval, sval in common_fields(listed, dsa_data):
        if not same_value(key, lval, sval):
            diffs.append(f"{where} {key}: accel-config {lval!r}, sysfs {sval!r}")
    return diffs


# ---- saved configuration vs live ---------------------------------------------------------------------


def load_saved(text: str) -> tuple[dict[str, dict[str, Any]] | None, list[str], str | None]:
    """A saved config: (flattened config, problems, error). ``error`` is set when it is not JSON at all;
    ``problems`` lists what is malformed (wrong types, missing names) in a config that is."""
    try:
        raw = loads_lenient(text)
    except ValueError as err:
        return None, [], f"not valid JSON: {err}"
    problems: list[str] = []
    flat = walk_config(raw, problems)
    for dev, entry in flat.items():
        checks = [(dev, entry["device"], SAVED_DEVICE_FIELDS)]
        checks += [(f"{dev}/{g}", f, SAVED_GROUP_FIELDS) for g, f in entry["groups"].items()]
        checks += [(f"{dev}/{w}", f, SAVED_WQ_FIELDS) for w, f in entry["wqs"].items()]
        checks += [(f"{dev}/{e}", f, SAVED_ENGINE_FIELDS) for e, f in entry["engines"].items()]
        for where, fields, names in checks:
            for key in names:
                if key not in fields:
                    continue
                value = fields[key]
                want_str = key in STRING_FIELDS
                if want_str and not isinstance(value, str):
                    problems.append(f"{where} {key}: saved {_kind(value)} {value!r}, expected a string")
                elif not want_str and (isinstance(value, bool) or not isinstance(value, int)):
                    problems.append(f"{where} {key}: saved {_kind(value)} {value!r}, expected an integer")
    return flat, problems, None


def live_config(dsa_data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The part of the dsa section that save-config would write: enabled devices, their groups and
    grouped engines, and their enabled WQs, with the saved fields only."""
    out: dict[str, dict[str, Any]] = {}
    for dev, sysdev in dsa_data.get("devices", {}).items():
        if sysdev.get("state") != "enabled":
            continue
        out[dev] = {
            "device": {k: sysdev[k] for k in SAVED_DEVICE_FIELDS if k in sysdev},
            "groups": {g: {k: v[k] for k in SAVED_GROUP_FIELDS if k in v} for g, v in sysdev.get("groups", {}).items()},
            "wqs": {w: {k: v[k] for k in SAVED_WQ_FIELDS if k in v} for w, v in sysdev.get("wqs", {}).items()
                    if v.get("state") in ("enabled", "locked")},
            "engines": {e: {k: v[k] for k in SAVED_ENGINE_FIELDS if k in v}
                        for e, v in sysdev.get("engines", {}).items() if v.get("group_id", -1) >= 0},
        }
    return out


def compare_saved(saved: dict[str, dict[str, Any]], dsa_data: dict[str, Any]) -> list[str]:
    """What loading ``saved`` at boot would not reproduce of the live enabled configuration."""
    live = live_config(dsa_data)
    present = dsa_data.get("devices", {})
    diffs: list[str] = []
    for dev in sorted(set(saved) | set(live)):
        if dev not in saved:
            diffs.append(f"{dev}: enabled live, not in saved config")
            diffs += [f"{dev}/{w}: enabled live, not in saved config" for w in sorted(live[dev]["wqs"])]
            continue
        if dev not in live:
            state = present.get(dev, {}).get("state")
            diffs.append(f"{dev}: in saved config, " + (f"live state {state}" if state else "no such device live"))
            continue
        s, v = saved[dev], live[dev]
        diffs += _field_diffs(dev, s["device"], v["device"])
        for table, noun in (("groups", "group"), ("engines", "engine")):
            for child in sorted(s[table]):
                if child not in present[dev].get(table, {}):
                    diffs.append(f"{dev}/{child}: in saved config, no such {noun} live")
                elif child not in v[table]:
                    diffs.append(f"{dev}/{child}: in saved config, ungrouped live")
                else:
                    diffs += _field_diffs(f"{dev}/{child}", s[table][child], v[table][child])
            if table == "engines":
                missing = sorted(set(v[table]) - set(s[table]))
                diffs += [f"{dev}/{e}: grouped live, not in saved config" for e in missing]
        for wq in sorted(set(s["wqs"]) | set(v["wqs"])):
            if wq not in s["wqs"]:
                diffs.append(f"{dev}/{wq}: enabled live, not in saved config")
            elif wq not in v["wqs"]:
                state = present[dev].get("wqs", {}).get(wq, {}).get("state")
                diffs.append(f"{dev}/{wq}: in saved config, " + (f"live state {state}" if state else "no such WQ live"))
            else:
                diffs += _field_diffs(f"{dev}/{wq}", s["wqs"][wq], v["wqs"][wq])
    return diffs


def _field_diffs(where: str, saved: dict[str, Any], live: dict[str, Any]) -> list[str]:
    out = []
    for key in sorted(saved):
        if key.startswith("_") or key not in live:
            continue
        if saved[key] != live[key] or isinstance(saved[key], bool) != isinstance(live[key], bool):
            out.append(f"{where} {key}: saved {saved[key]!r}, live {live[key]!r}")
    return out


# ---- installed version --------------------------------------------------------------------------------


def parse_dpkg_status(text: str, package: str = "accel-config") -> str | None:
    """The installed version of ``package`` from /var/lib/dpkg/status, or None."""
    start = text.find(f"Package: {package}\n")  # the file lists every package: parse only that stanza
    if start < 0:
        return None
    end = text.find("\n\n", start)
    for stanza in (text[start:] if end < 0 else text[start:end]).split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t") or ":" not in line:
                continue
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
        if fields.get("Package") == package and fields.get("Status", "").endswith(" installed"):
            return fields.get("Version")
    return None


def _dpkg_version(reader: Reader) -> str | None:
    data = reader.read_bytes(DPKG_STATUS, record=False, max_bytes=64 << 20)
    return parse_dpkg_status(data.decode("utf-8", "replace")) if data else None


# ---- the collector ----------------------------------------------------------------------------------------


def _dsa_failures(section: Section) -> dict[str, str]:
    """What the dsa collector could not read (not its observed absences), by file: the cross-checks with it
    cannot be known either."""
    from hoststate.collectors import dsa

    settled = coverage.settle(dsa.SOURCES, coverage.failures(section.unreadable))
    unknown = {k: v for k, v in settled.items() if coverage.parse_entry(v)[0] in coverage.UNKNOWN}
    return coverage.failures(unknown)


def _dsa_data(ctx: Context, unreadable: dict[str, str]) -> tuple[dict[str, Any] | None, str | None]:
    """The dsa section's data (collecting it here when it was not selected), or why there is none; what it could
    not read is added to ``unreadable``."""
    section = ctx.sections.get("dsa")
    if section is None or section.status == "skipped":
        from hoststate.collectors import dsa

        section = dsa.collect(ctx)
    unreadable.update(_dsa_failures(section))
    if section.status in ("ok", "partial"):
        return section.data, None
    if section.status == "absent":
        return {}, None
    return None, f"dsa section is {section.status}" + (f": {section.reason}" if section.reason else "")


def collect(ctx: Context) -> Section:
    section = Section()
    reader = Reader(ctx.root, section.unreadable)
    data: dict[str, Any] = {}
    dsa_data, dsa_problem = _dsa_data(ctx, section.unreadable)

    binary = which("accel-config") if ctx.live else next(("/" + p for p in BIN_PATHS if reader.exists(p)), None)
    data["available"] = binary is not None
    if binary:
        data["path"] = binary
        version = None
        if ctx.live and (dsa_data or {}).get("devices"):
            # accel-config refuses every command, --version included, without the idxd module: on a
            # host with no DSA device the package database answers without a subprocess.
            done = run([binary, "--version"], timeout=ctx.command_timeout)
            if done.ok and done.stdout.strip():
                version = done.stdout.strip().splitlines()[0]
        version = version or _dpkg_version(reader)
        if version:
            data["version"] = version

    listing: dict[str, Any] = {"ran": False}
    if not binary:
        listing["reason"] = "accel-config not installed"
    elif not ctx.live:
        listing["reason"] = "not run under --root: accel-config reads the live /sys"
    elif not (dsa_data or {}).get("devices"):
        listing["reason"] = "no DSA/IAA device"
    else:
        done = run([binary, "list", "-i"], timeout=ctx.command_timeout)
        if not done.ok:
            listing["reason"] = f"accel-config list -i: {done.describe()}"
            section.reason = listing["reason"]
            section.status = "partial"
        else:
            listing["ran"] = True
            try:
                listed = parse_list_output(done.stdout)
            except ValueError as err:
                listing["reason"] = f"unparsable output: {str(err)[:200]}"
                section.reason = listing["reason"]
                section.status = "partial"
            else:
                diffs = compare_list_with_sysfs(listed, dsa_data or {})
                listing["agrees_with_sysfs"] = not diffs
                listing["differences"] = diffs
    data["list"] = listing

    saved: dict[str, Any] = {"path": "/" + SAVED_PATH, "present": reader.exists(SAVED_PATH)}
    config = None
    problems: list[str] = []
    if saved["present"]:
        text = reader.read(SAVED_PATH, strip=False)
        if text is None:
            saved["error"] = f"unreadable: {section.unreadable.get(SAVED_PATH, 'unknown')}"
        else:
            config, problems, error = load_saved(text)
            if error:
                saved["error"] = error
    if dsa_data is None:
        saved["reason"] = f"live configuration unknown: {dsa_problem}"
    elif saved.get("error"):
        saved["matches_live"] = False
        saved["differences"] = []
    else:
        diffs = problems + compare_saved(config or {}, dsa_data)
        saved["matches_live"] = not diffs
        saved["differences"] = diffs
    data["saved"] = saved

    section.data = data
    if not binary and not saved["present"] and not (dsa_data or {}).get("devices"):
        section.status = "absent"
        section.reason = "accel-config not installed, no saved configuration, no DSA/IAA device"
    return section.settle()
