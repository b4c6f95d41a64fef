"""The settings object: defaults, the config file, the environment, and their documentation."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from registry.config import ConfigError, Settings, describe, load_settings

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTED = ROOT / "config" / "registry.toml"


def test_defaults_without_any_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no ./config/registry.toml here
    s = load_settings(env={})
    assert s == Settings()
    assert s.hub.first_window == 2 * 1024 * 1024
    assert s.database_url == "sqlite+aiosqlite:///data/registry.db"


def test_env_overrides_file(tmp_path: Path) -> None:
    cfg = tmp_path / "r.toml"
    cfg.write_text('[hub]\nfirst_window = 4096\nendpoint = "http://file"\n[database]\necho = true\n')
    s = load_settings(cfg, env={"REGISTRY_HUB_ENDPOINT": "http://env", "REGISTRY_PARSER_MAX_KV_COUNT": "17"})
    assert s.hub.first_window == 4096  # from the file
    assert s.hub.endpoint == "http://env"  # the environment wins over the file
    assert s.database.echo is True
    assert s.parser.max_kv_count == 17  # coerced from the string
    assert s.parser.max_tensor_count == Settings().parser.max_tensor_count  # untouched default


@pytest.mark.parametrize(
    ("raw", "value"), [("1", True), ("yes", True), ("ON", True), ("0", False), ("off", False)]
)
def test_env_booleans(raw: str, value: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert load_settings(env={"REGISTRY_DATABASE_ECHO": raw}).database.echo is value


def test_config_file_from_env_var(tmp_path: Path) -> None:
    cfg = tmp_path / "r.toml"
    cfg.write_text('[general]\ndata_dir = "/var/lib/registry"\n')
    s = load_settings(env={"REGISTRY_CONFIG": str(cfg)})
    assert s.data_dir == Path("/var/lib/registry")
    assert s.database_url == "sqlite+aiosqlite:////var/lib/registry/registry.db"


def test_default_file_in_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "registry.toml").write_text('[database]\nurl = "postgresql+asyncpg://db/x"\n')
    monkeypatch.chdir(tmp_path)
    assert load_settings(env={}).database_url == "postgresql+asyncpg://db/x"


@pytest.mark.parametrize(
    ("text", "env", "needle"),
    [
        ("[hub]\nfirst_window = 'big'\n", {}, "hub.first_window"),
        ("[hub]\nfirst_window = true\n", {}, "hub.first_window"),
        ("[hub]\nno_such_key = 1\n", {}, "unknown setting hub.no_such_key"),
        ("[nosection]\nx = 1\n", {}, "unknown setting nosection.x"),
        ("hub = 3\n", {}, "[hub] must be a table"),
        ("[hub\n", {}, "r.toml"),
        ("[database]\nurl = ['a']\n", {}, "database.url"),
        ("", {"REGISTRY_DATABASE_ECHO": "maybe"}, "REGISTRY_DATABASE_ECHO"),
        ("", {"REGISTRY_HUB_MAX_HEADER_BYTES": "64MiB"}, "REGISTRY_HUB_MAX_HEADER_BYTES"),
        # No page could be served: every list answered 400 or 500.
        ("[api]\nmax_limit = 0\n", {}, "api.max_limit"),
        ("", {"REGISTRY_API_MAX_LIMIT": "-5"}, "api.max_limit"),
        ("", {"REGISTRY_API_PORT": "65536"}, "api.port"),
        ("[api]\nport = -1\n", {}, "api.port"),
        ("[api]\nmax_limit = 1.5\n", {}, "api.max_limit"),  # not silently 1
        ("[api]\nmax_limit = inf\n", {}, "api.max_limit"),
        # A semaphore of 0 waits forever (the crawl, or a worker that never takes a job),
        # one of -1 raises ValueError.
        ("[hub]\ncrawl_concurrency = 0\n", {}, "hub.crawl_concurrency must be at least 1"),
        ("[hub]\nper_host_concurrency = 0\n", {}, "hub.per_host_concurrency must be at least 1"),
        ("", {"REGISTRY_JOBS_CONCURRENCY": "0"}, "jobs.concurrency must be at least 1"),
        ("[verify]\nconcurrency = 0\n", {}, "verify.concurrency must be at least 1"),
        ("[hub]\nmax_attempts = 0\n", {}, "hub.max_attempts must be at least 1"),
        ("[jobs]\nmax_attempts = 0\n", {}, "jobs.max_attempts must be at least 1"),
        ("[jobs]\nretry_wait = -1\n", {}, "jobs.retry_wait must be at least 0"),
        ("[verify]\ncache_max_bytes = -1\n", {}, "verify.cache_max_bytes must be at least 0"),
        # A raw secret where its digest belongs: `registry serve` ended in a traceback.
        ("[api]\ntokens = \"my-token\"\n", {}, "api.tokens must hold sha256 hex digests"),
        ("", {"REGISTRY_API_WEBHOOK_SECRETS": "a" * 64 + ",hub-secret"}, "api.webhook_secrets must hold sha256"),
        # -1 tokens failed every verification as invalid_model; a cap of -1 set none.
        ("", {"REGISTRY_VERIFY_N_GENERATE": "-1"}, "verify.n_generate must be at least 0"),
        ("[verify]\nmemory_cap_bytes = -1\n", {}, "verify.memory_cap_bytes must be at least 0"),
        # These failed every header read as an internal error.
        ("", {"REGISTRY_HUB_FIRST_WINDOW": "0"}, "hub.first_window must be at least 1"),
        ("[hub]\nshard_window = -1\n", {}, "hub.shard_window must be at least 1"),
        ("[parser]\nmax_kv_count = -1\n", {}, "parser.max_kv_count must be at least 0"),
        # inf overflowed aiohttp's clock, nan never timed out or never waited, a negative
        # read timeout raised out of the crawl.
        ("[hub]\nconnect_timeout = nan\n", {}, "hub.connect_timeout must be finite seconds above 0"),
        ("[hub]\nconnect_timeout = inf\n", {}, "hub.connect_timeout"),
        ("", {"REGISTRY_HUB_READ_TIMEOUT": "-1"}, "hub.read_timeout"),
        ("[hub]\nread_timeout = 0.0\n", {}, "hub.read_timeout"),
        ("[hub]\nbackoff_max = nan\n", {}, "hub.backoff_max must be finite seconds, 0 or more"),
        ("[hub]\nbackoff_base = -0.5\n", {}, "hub.backoff_base"),
        ("[hub]\nmax_retry_wait = nan\n", {}, "hub.max_retry_wait"),
        ("[verify]\ntimeout_seconds = nan\n", {}, "verify.timeout_seconds"),
        ("[verify]\nperplexity_threshold = nan\n", {}, "verify.perplexity_threshold"),
        ("[jobs]\nheartbeat_seconds = 0.0\n", {}, "jobs.heartbeat_seconds"),
        ("[jobs]\nstalled_seconds = inf\n", {}, "jobs.stalled_seconds"),
        ("", {"REGISTRY_JOBS_SWEEP_SECONDS": "nan"}, "jobs.sweep_seconds"),
        ("[jobs]\nmode = 'sideways'\n", {}, "jobs.mode must be one of embedded, distributed"),
        ("[database]\nsqlite_inline_read_ms = -1.0\n", {}, "database.sqlite_inline_read_ms"),
        ("[database]\nsqlite_inline_read_ms = inf\n", {}, "database.sqlite_inline_read_ms"),
    ],
)
def test_bad_values(tmp_path: Path, text: str, env: dict[str, str], needle: str) -> None:
    cfg = tmp_path / "r.toml"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_settings(cfg, env=env)
    assert needle in str(exc.value)


@pytest.mark.parametrize(
    "text",
    [
        # Edges of the allowed ranges: each works.
        "[hub]\nbackoff_base = 0.0\nbackoff_max = 0.0\nmax_retry_wait = 0.0\nmax_attempts = 1\n",
        "[jobs]\nretry_wait = 0\nconcurrency = 1\nmax_attempts = 1\nmode = 'distributed'\n",
        "[database]\nsqlite_inline_read_ms = 0.0\n",
        "[verify]\ncache_max_bytes = 0\nperplexity_threshold = inf\n",
        "[verify]\nn_generate = 0\nmemory_cap_bytes = 0\n",
    ],
)
def test_values_at_the_edge_of_their_range_load(tmp_path: Path, text: str) -> None:
    cfg = tmp_path / "r.toml"
    cfg.write_text(text)
    assert load_settings(cfg, env={}) != Settings()


def test_explicit_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_settings(tmp_path / "nope.toml", env={})
    with pytest.raises(ConfigError, match="config file not found"):
        load_settings(env={"REGISTRY_CONFIG": str(tmp_path / "nope.toml")})


def _registry(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    return subprocess.run(
        [sys.executable, "-m", "registry.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**base, **(env or {})},
        timeout=120,
    )


def test_cli_config_option_is_used(tmp_path: Path, smollm2_path: Path) -> None:
    # A parser limit set in the file given with --config rejects the 49,152-token vocabulary.
    cfg = tmp_path / "small.toml"
    cfg.write_text("[parser]\nmax_array_length = 1000\n")
    r = _registry("--config", cfg, "inspect", smollm2_path)
    assert r.returncode == 1
    assert "limit_exceeded" in r.stderr and "Traceback" not in r.stderr
    # ...and the same limit from the environment.
    r = _registry("inspect", smollm2_path, env={"REGISTRY_PARSER_MAX_ARRAY_LENGTH": "1000"})
    assert r.returncode == 1 and "limit_exceeded" in r.stderr
    # Without it, the file is fine.
    assert _registry("inspect", smollm2_path).returncode == 0


def test_cli_bad_config_is_a_usage_error(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[hub]\nfirst_window = 'x'\n")
    r = _registry("--config", cfg, "inspect", "whatever.gguf")
    assert r.returncode == 2
    assert r.stderr.startswith("registry: configuration error:") and "hub.first_window" in r.stderr
    assert "Traceback" not in r.stderr


def test_every_setting_is_documented_with_its_default() -> None:
    text = DOCUMENTED.read_text(encoding="utf-8")
    data = tomllib.loads(text)
    infos = list(describe())
    assert infos, "no settings described"
    for info in infos:
        assert info.section in data, f"[{info.section}] missing from {DOCUMENTED}"
        assert info.key in data[info.section], f"{info.section}.{info.key} undocumented"
        assert data[info.section][info.key] == info.default, f"{info.section}.{info.key} default differs"
        assert type(data[info.section][info.key]) is info.type
        # the comment above it is the setting's help, naming the environment variable
        assert f"# {info.help} ({info.env_var})\n" in text, f"{info.section}.{info.key}: comment differs from its help"
    documented = {(s, k) for s, table in data.items() for k in table}
    assert documented == {(i.section, i.key) for i in infos}, "the file documents settings that do not exist"
    # The documented file itself loads to exactly the defaults.
    assert load_settings(DOCUMENTED, env={}) == Settings()
