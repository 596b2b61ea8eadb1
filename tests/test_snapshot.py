"""The snapshot model: TOML round trip, determinism, schema checks, atomic writes, the digest."""

from __future__ import annotations

import datetime as dt
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hoststate.capture import assemble, collect
from hoststate.collectors import Context, Section
from hoststate.digest import digest
from hoststate.errors import InputError, WriteError
from hoststate.snapshot import loads, to_toml, write
from tests.conftest import FIXTURES, HOSTS

KEYS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_.-\"' ", min_size=1, max_size=12)
SCALARS = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=True),
    st.booleans(),
    st.text(max_size=30),
    st.datetimes(timezones=st.just(dt.timezone.utc)).map(lambda d: d.replace(microsecond=0)),
)
LEAVES = st.one_of(SCALARS, st.lists(st.one_of(st.integers(), st.text(max_size=8)), max_size=5))
TABLES = st.recursive(
    st.dictionaries(KEYS, LEAVES, max_size=5),
    lambda inner: st.dictionaries(KEYS, st.one_of(LEAVES, inner), max_size=4),
    max_leaves=25,
)


def meta() -> dict:
    return {"schema": 1, "version": "0.1.0", "taken_at": dt.datetime(2026, 6, 2, tzinfo=dt.timezone.utc),
            "hostname": "h", "root": "/"}


@settings(max_examples=150, deadline=None)
@given(system=TABLES, dsa=TABLES)
def test_toml_round_trip_is_lossless(system: dict, dsa: dict) -> None:
    sections = {"system": Section(data=system), "dsa": Section(status="partial", data=dsa, unreadable={"a/b": "EIO"})}
    snap = assemble(sections, meta())
    text = to_toml(snap)
    back = loads(text)
    assert back == snap
    assert to_toml(back) == text  # and the writer is deterministic


def test_same_state_gives_byte_identical_file_apart_from_times() -> None:
    root = str(HOSTS / "xeon-2s")
    a = collect(Context(root=root), ("system",))
    b = collect(Context(root=root), ("system",))
    for s in (a, b):
        s["hoststate"]["taken_at"] = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
        for entry in s["collectors"].values():
            entry["took_ms"] = 0.0
    assert to_toml(a) == to_toml(b)
    assert a["hoststate"]["digest"] == b["hoststate"]["digest"]


def test_meta_and_collector_tables() -> None:
    snap = collect(Context(root=str(HOSTS / "vm-nocpufreq")), ("system",), label="nightly")
    m = snap["hoststate"]
    assert m["schema"] == 1 and m["label"] == "nightly" and m["hostname"] == "bench-vm-3"
    assert m["root"] == str(HOSTS / "vm-nocpufreq")
    assert m["digest"].startswith("sha256:") and len(m["digest"]) == 71
    assert snap["collectors"]["system"]["status"] == "ok"  # no cpufreq on a VM is recorded as a value
    assert snap["collectors"]["gpu"] == {"status": "skipped", "took_ms": 0.0, "reason": "not selected"}


def test_digest_follows_invalidating_values_only() -> None:
    base = assemble({"system": Section(data={"kernel": {"release": "5.15"}})}, meta())
    hostname_changed = assemble({"system": Section(data={"kernel": {"release": "5.15"}})}, {**meta(), "hostname": "x"})
    kernel_changed = assemble({"system": Section(data={"kernel": {"release": "6.8"}})}, meta())
    assert base["hoststate"]["digest"] == hostname_changed["hoststate"]["digest"]
    assert base["hoststate"]["digest"] != kernel_changed["hoststate"]["digest"]
    assert digest(base) == base["hoststate"]["digest"]


def test_collector_errors_and_timeouts_never_cost_the_snapshot(monkeypatch) -> None:
    import threading

    import hoststate.collectors as collectors

    release = threading.Event()

    def boom(ctx):
        raise RuntimeError("bug in a collector")

    def hang(ctx):
        release.wait(30)
        return Section()

    real_load = collectors._load
    monkeypatch.setattr(collectors, "_load", lambda info: {"dsa": boom, "gpu": hang}.get(info.name) or real_load(info))
    try:
        snap = collect(Context(root=str(HOSTS / "vm-nocpufreq"), timeout=0.5), ("system", "dsa", "gpu"))
    finally:
        release.set()
    assert snap["collectors"]["dsa"]["status"] == "error"
    assert "bug in a collector" in snap["collectors"]["dsa"]["reason"]
    assert snap["collectors"]["gpu"]["status"] == "timeout"
    assert snap["system"]["kernel"]["release"] == "6.1.0-28-cloud-amd64"
    loads(to_toml(snap))  # still a valid file


BAD = {
    "empty": (b"", "empty file"),
    "whitespace": (b"  \n\n", "empty file"),
    "binary": (b"\x00\xff\xfe\x01garbage", "not UTF-8"),
    "truncated": (b'[hoststate]\nschema = 1\nversion = "0.1', "not valid TOML"),
    "not-toml": (b"this is not toml at all\n", "not valid TOML"),
    "other-tool": (b'[tool.poetry]\nname = "x"\n', "not a hoststate snapshot"),
    "schema-99": (b'[hoststate]\nschema = 99\n', "unsupported snapshot schema 99"),
    "schema-string": (b'[hoststate]\nschema = "1"\n', "schema must be an integer"),
    "schema-bool": (b'[hoststate]\nschema = true\n', "schema must be an integer"),
    "bom": (b'\xef\xbb\xbf[hoststate]\nschema = 1\n', "byte-order mark"),
    "missing-digest": (b'[hoststate]\nschema = 1\nversion = "0.1.0"\ntaken_at = 2026-01-01T00:00:00Z\n', "digest"),
    "taken-at-string": (
        b'[hoststate]\nschema = 1\nversion = "0.1.0"\ntaken_at = "yesterday"\ndigest = "sha256:0"\n', "taken_at"),
    "system-not-table": (
        b'system = 3\n[hoststate]\nschema = 1\nversion = "0.1.0"\ntaken_at = 2026-01-01T00:00:00Z\n'
        b'digest = "sha256:0"\n', "[system] must be a table"),
    "bad-status": (
        b'[hoststate]\nschema = 1\nversion = "0.1.0"\ntaken_at = 2026-01-01T00:00:00Z\ndigest = "sha256:0"\n'
        b'[collectors.gpu]\nstatus = "fine"\n', "not a known status"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_snapshot_text_is_one_clear_error(name: str) -> None:
    data, message = BAD[name]
    with pytest.raises(InputError) as info:
        loads(data, f"{name}.toml")
    text = str(info.value)
    assert message in text and "\n" not in text and text.startswith(f"{name}.toml: ")


def test_write_refuses_existing_file_and_keeps_it(tmp_path) -> None:
    target = tmp_path / "baseline.toml"
    target.write_bytes(b"precious")
    with pytest.raises(WriteError, match="exists"):
        write(str(target), "new", force=False)
    assert target.read_bytes() == b"precious"
    write(str(target), "new", force=True)
    assert target.read_text() == "new"
    assert sorted(os.listdir(tmp_path)) == ["baseline.toml"]  # no temp file left behind


@pytest.mark.parametrize("path", sorted(str(p.relative_to(FIXTURES)) for p in FIXTURES.glob("*/*.toml")
                                        if p.read_text().startswith("[hoststate]")))
def test_bundled_snapshots_carry_the_digest_this_version_computes(path) -> None:
    """The README's and docs' examples run on these files: a stale stored digest would make ``digest`` and
    ``fleet`` warn on them. Refresh with ``python scripts/refresh_fixture_digests.py``."""
    snap = loads((FIXTURES / path).read_text())
    assert snap["hoststate"]["digest"] == digest(snap)
