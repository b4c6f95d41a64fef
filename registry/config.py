"""One frozen settings object for the whole product.

Each setting is a dataclass field with a default and a help text; that one declaration
drives the TOML file (`config/registry.toml` documents every default), the environment
overrides (`REGISTRY_<SECTION>_<KEY>`) and the docs. Precedence, lowest first: built-in
defaults, the config file, the environment. Nothing here runs at import time.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENV_PREFIX = "REGISTRY_"
DEFAULT_CONFIG_FILE = Path("config/registry.toml")
JOB_MODES = ("embedded", "distributed")


def _setting(default: Any, help: str) -> Any:
    return field(default=default, metadata={"help": help})


def _at_least(section: str, values: object, minimum: int, *keys: str) -> None:
    """Counts below `minimum` cannot work: a semaphore of 0 waits forever, of -1 raises."""
    for key in keys:
        value = getattr(values, key)
        if value < minimum:
            raise ConfigError(f"{section}.{key} must be at least {minimum}, got {value}")


def _digests(section: str, values: object, *keys: str) -> None:
    """Secrets are configured as sha256 hex digests: a raw token pasted in their place would
    never match, and the server would refuse every request it was meant to let in."""
    for key in keys:
        for digest in (d.strip() for d in getattr(values, key).split(",") if d.strip()):
            if len(digest) != 64 or not all(c in "0123456789abcdefABCDEF" for c in digest):
                raise ConfigError(
                    f"{section}.{key} must hold sha256 hex digests (64 hex characters), comma-separated: "
                    "put `printf %s SECRET | sha256sum` there, not the secret"
                )


def _seconds(section: str, values: object, *keys: str, zero: bool = False) -> None:
    """Durations must be finite: nan compares false with everything (a wait never ends, a cap
    never applies) and inf overflows the event loop's and aiohttp's clocks."""
    for key in keys:
        value = getattr(values, key)
        if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
            allowed = "finite seconds, 0 or more" if zero else "finite seconds above 0"
            raise ConfigError(f"{section}.{key} must be {allowed}, got {value}")


@dataclass(frozen=True)
class GeneralSettings:
    data_dir: str = _setting("data", "Folder for the embedded database, download cache and other state.")


@dataclass(frozen=True)
class DatabaseSettings:
    url: str = _setting(
        "",
        "SQLAlchemy async URL. Empty means a SQLite file `registry.db` in data_dir. "
        "PostgreSQL: postgresql+asyncpg://user@host/db",
    )
    echo: bool = _setting(False, "Log every SQL statement.")
    sqlite_inline_read_ms: float = _setting(
        5.0,
        "SQLite: an API read runs on the event loop's thread, without a trip to another thread; one that "
        "takes longer than this many milliseconds is stopped and run again on a reader thread. 0 runs every "
        "API read on a reader thread. Finite, 0 or more.",
    )

    def __post_init__(self) -> None:
        ms = self.sqlite_inline_read_ms
        if not math.isfinite(ms) or ms < 0:
            # inf would never stop a long read that holds the event loop; nan and -1 acted as 0.
            raise ConfigError(f"database.sqlite_inline_read_ms must be a finite number, 0 or more, got {ms}")


@dataclass(frozen=True)
class HubSettings:
    endpoint: str = _setting("https://huggingface.co", "Base URL of the hub API (any server speaking it).")
    token: str = _setting("", "Access token for the hub; sent only to the endpoint host, never to a CDN.")
    first_window: int = _setting(
        2 * 1024 * 1024,
        "Bytes fetched by the first range request of a file header. At least 1.",
    )
    max_header_bytes: int = _setting(
        64 * 1024 * 1024, "Largest header fetched per file before giving up. At least 1."
    )
    shard_window: int = _setting(
        256 * 1024,
        "Bytes fetched by the first range request of files without a vocabulary: shards 2..N of a split "
        "model, projectors (mmproj) and LoRA adapters, told by their file names. At least 1.",
    )
    per_host_concurrency: int = _setting(
        16,
        "Most requests in flight to one host (the hub, the CDN) at a time. Every file costs one request "
        "to the hub (its redirect) and about one to the CDN, so this bounds a crawl at this many files "
        "per request latency (docs/performance.md); a server's 429 and Retry-After are honoured at any "
        "value. Lower it for a small server. At least 1.",
    )
    connect_timeout: float = _setting(10.0, "Seconds to wait for a connection to a host. Finite, above 0.")
    read_timeout: float = _setting(30.0, "Seconds to wait for the next bytes of a response. Finite, above 0.")
    max_attempts: int = _setting(
        5,
        "Attempts per request (the first included) on 429, 5xx, resets and timeouts. At least 1.",
    )
    backoff_base: float = _setting(
        0.5,
        "Seconds before the first retry; doubles each retry, with jitter. Finite, 0 or more.",
    )
    backoff_max: float = _setting(
        30.0,
        "Longest single backoff wait in seconds (a server's Retry-After may be longer). Finite, 0 or "
        "more.",
    )
    max_retry_wait: float = _setting(
        120.0,
        "Most seconds spent waiting between retries for one file before giving up. Finite, 0 or more.",
    )
    crawl_concurrency: int = _setting(
        24,
        "Repos a crawl reads at once. Each holds at most one whole header in memory (a 262k-token "
        "vocabulary is ~9 MB) and the few siblings read against it; requests per host stay capped by "
        "per_host_concurrency. At least 1.",
    )

    sibling_reuse: bool = _setting(
        True,
        "Read the shared header bytes of a repo's sibling quantizations of one model once: each sibling's "
        "layout is proven against the first one read, its vocabulary bytes sampled, and any disagreement "
        "falls back to a full read (see docs/crawling.md).",
    )
    sibling_samples: int = _setting(
        16,
        "Sampled ranges of 1 KiB per large array (vocabulary tokens, scores, types, merges) when a sibling's "
        "header reuses the first one's bytes, besides its start and end. More samples catch a same-length "
        "change with higher probability for more bytes. At least 1.",
    )

    def __post_init__(self) -> None:
        _at_least("hub", self, 1, "per_host_concurrency", "crawl_concurrency", "max_attempts", "sibling_samples")
        # 0 or less failed every read as an internal error instead of refusing the setting.
        _at_least("hub", self, 1, "first_window", "shard_window", "max_header_bytes")
        _seconds("hub", self, "connect_timeout", "read_timeout")
        _seconds("hub", self, "backoff_base", "backoff_max", "max_retry_wait", zero=True)


@dataclass(frozen=True)
class ScheduleSettings:
    crawl: str = _setting(
        "",
        "When to crawl the hub (`registry serve` in the embedded mode, the workers in the distributed one): "
        "`every 6h` (units s, m, h, d; at least 60 s), a 5-field cron expression in UTC such as `0 */6 * * *`, "
        "or empty for no scheduled crawls.",
    )
    search: str = _setting("", "Search term of the scheduled crawl (empty: every GGUF repo).")
    author: str = _setting("", "Only repos of this user or organization in the scheduled crawl (empty: any).")
    limit: int = _setting(0, "Most repos the scheduled crawl looks at (0: no limit).")


@dataclass(frozen=True)
class LocalSettings:
    folders: str = _setting(
        "",
        "Folders of GGUF files that `registry serve` keeps in the catalog, as `registry index` does, separated "
        "by the path separator (`:` on Linux and macOS): the `local` source of POST /v1/crawls and of "
        "local.schedule. The embedded mode only. Empty: no local source.",
    )
    schedule: str = _setting(
        "",
        "When to index local.folders again, written as schedule.crawl (`every 10m`, a cron expression). "
        "Empty: only when asked.",
    )

    @property
    def paths(self) -> tuple[str, ...]:
        """The configured folders, in order, each once."""
        return tuple(dict.fromkeys(p.strip() for p in self.folders.split(os.pathsep) if p.strip()))


@dataclass(frozen=True)
class ParserSettings:
    max_string_length: int = _setting(16 * 1024 * 1024, "Longest metadata string accepted. 0 or more.")
    max_array_length: int = _setting(16 * 1024 * 1024, "Most elements in one metadata array. 0 or more.")
    max_kv_count: int = _setting(1_000_000, "Most metadata keys in one file. 0 or more.")
    max_tensor_count: int = _setting(1_000_000, "Most tensors in one file. 0 or more.")

    def __post_init__(self) -> None:
        # A negative limit failed every read as an internal error instead of refusing the setting.
        _at_least("parser", self, 0, "max_string_length", "max_array_length", "max_kv_count", "max_tensor_count")


@dataclass(frozen=True)
class ApiSettings:
    host: str = _setting("127.0.0.1", "Address `registry serve` listens on.")
    port: int = _setting(8080, "TCP port `registry serve` listens on.")
    tokens: str = _setting(
        "",
        "Comma-separated sha256 hex digests of the bearer tokens allowed to write "
        "(start crawls and verifications). Empty means no writes are allowed.",
    )
    private_reads: bool = _setting(False, "Require a bearer token for reads too (health probes stay open).")
    webhook_secrets: str = _setting(
        "",
        "Comma-separated sha256 hex digests of the secrets hub webhooks send in X-Webhook-Secret to "
        "POST /v1/hooks/hub, which then crawls the repo the event names. Empty means that route answers 403.",
    )
    max_limit: int = _setting(
        100, "Largest page size a client may ask for with `limit` (artifact search stops at 200). At least 1."
    )

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"api.port must be from 0 to 65535, got {self.port}")
        if self.max_limit < 1:
            # No page could be served: every list would answer 400 or fail.
            raise ConfigError(f"api.max_limit must be at least 1, got {self.max_limit}")
        _digests("api", self, "tokens", "webhook_secrets")


@dataclass(frozen=True)
class VerifySettings:
    cache_dir: str = _setting("", "Folder of the download cache. Empty means `cache` in data_dir.")
    cache_max_bytes: int = _setting(
        20 * 1024**3,
        "Most bytes the download cache keeps; least recently used files are evicted first. 0 or more.",
    )
    timeout_seconds: float = _setting(
        900.0,
        "Wall-clock limit in seconds for the checks and smoke inference of one verification. Finite, "
        "above 0.",
    )
    memory_cap_bytes: int = _setting(
        8 * 1024**3,
        "Address-space limit (RLIMIT_AS) of the child process that dequantizes and runs a model. "
        "Memory maps count against it. The smoke run holds weight matrices as float32 within the cap less the "
        "file size and a quarter of the cap (at least 1 GiB), and dequantizes the rest at each use: slower, "
        "but a model larger than the cap as float32 still runs in its file size plus about 0.5 GB. "
        "0 sets no cap (physical memory bounds the float32 weights then). 0 or more.",
    )
    perplexity_threshold: float = _setting(
        100.0, "A model whose perplexity on the built-in English paragraph is above this fails."
    )
    n_generate: int = _setting(8, "Tokens generated greedily from the built-in prompt. 0 or more.")
    chunk_bytes: int = _setting(
        64 * 1024 * 1024,
        "Most float32 bytes held at once while computing weight statistics, shared by the threads "
        "(tensors are dequantized in pieces of an eighth of this).",
    )
    threads: int = _setting(
        0, "Threads dequantizing a model's tensors during a verification; 0 means one per CPU (at most 8)."
    )
    concurrency: int = _setting(
        1,
        "Verifications the embedded job pool of `registry serve` runs at once, within jobs.concurrency; "
        "each needs a model's memory. In the distributed mode, size `registry worker --queues verify "
        "--concurrency N` instead. At least 1.",
    )

    def __post_init__(self) -> None:
        if self.threads < 0:
            raise ConfigError(f"verify.threads must be 0 (one per CPU) or positive, got {self.threads}")
        if self.chunk_bytes <= 0:
            raise ConfigError(f"verify.chunk_bytes must be positive, got {self.chunk_bytes}")
        _at_least("verify", self, 1, "concurrency")
        # A negative n_generate failed every model as invalid_model; a negative cap meant no cap.
        _at_least("verify", self, 0, "cache_max_bytes", "n_generate", "memory_cap_bytes")
        _seconds("verify", self, "timeout_seconds")
        if math.isnan(self.perplexity_threshold):  # no perplexity is above nan: every model passed
            raise ConfigError("verify.perplexity_threshold must be a number, got nan")


@dataclass(frozen=True)
class JobsSettings:
    mode: str = _setting(
        "embedded",
        "`embedded`: jobs run inside `registry serve` (a bounded pool, jobs kept in the catalog's `jobs` "
        "table). `distributed`: jobs go to procrastinate's PostgreSQL queue and `registry worker` processes "
        "run them; needs a PostgreSQL database.url.",
    )
    concurrency: int = _setting(
        4,
        "Jobs one process runs at once (`registry serve` embedded, or each `registry worker`). At least "
        "1.",
    )
    queues: str = _setting(
        "crawl,index,verify", "Comma-separated queues a `registry worker` takes jobs from (--queues overrides)."
    )
    max_attempts: int = _setting(
        5,
        "Attempts of a job (the first included) that fails with a transient hub error. At least 1.",
    )
    retry_wait: int = _setting(
        2,
        "Seconds before a job's first retry after a transient error; each further wait is twice as long. "
        "0 or more.",
    )
    stalled_seconds: float = _setting(
        30.0,
        "A distributed job whose worker sent no heartbeat for this long is retried by another worker "
        "(a killed machine loses no job). Finite, above 0.",
    )
    heartbeat_seconds: float = _setting(
        5.0,
        "Seconds between a `registry worker`'s heartbeats. Finite, above 0.",
    )
    sweep_seconds: float = _setting(
        60.0,
        "How often each runner releases the repos of running crawls whose job ended without reporting, and "
        "queues again the listing of crawls that have none; only crawls quiet for this long are looked at. "
        "Finite, above 0.",
    )

    def __post_init__(self) -> None:
        if self.mode not in JOB_MODES:
            raise ConfigError(f"jobs.mode must be one of {', '.join(JOB_MODES)}, got {self.mode!r}")
        _at_least("jobs", self, 1, "concurrency", "max_attempts")
        _at_least("jobs", self, 0, "retry_wait")
        _seconds("jobs", self, "stalled_seconds", "heartbeat_seconds", "sweep_seconds")


@dataclass(frozen=True)
class Settings:
    general: GeneralSettings = field(default_factory=GeneralSettings)
    database: DatabaseSettings = field(default_factory=DatabaseSettings)
    hub: HubSettings = field(default_factory=HubSettings)
    schedule: ScheduleSettings = field(default_factory=ScheduleSettings)
    local: LocalSettings = field(default_factory=LocalSettings)
    parser: ParserSettings = field(default_factory=ParserSettings)
    api: ApiSettings = field(default_factory=ApiSettings)
    verify: VerifySettings = field(default_factory=VerifySettings)
    jobs: JobsSettings = field(default_factory=JobsSettings)

    @property
    def data_dir(self) -> Path:
        return Path(self.general.data_dir)

    @property
    def cache_dir(self) -> Path:
        return Path(self.verify.cache_dir) if self.verify.cache_dir else self.data_dir / "cache"

    @property
    def database_url(self) -> str:
        if self.database.url:
            return self.database.url
        return f"sqlite+aiosqlite:///{(self.data_dir / 'registry.db').as_posix()}"


class ConfigError(Exception):
    """A configuration file or environment variable that cannot be used."""


@dataclass(frozen=True)
class SettingInfo:
    section: str
    key: str
    type: type
    default: Any
    help: str

    @property
    def env_var(self) -> str:
        return f"{ENV_PREFIX}{self.section.upper()}_{self.key.upper()}"


def describe() -> Iterator[SettingInfo]:
    """Every setting with its type, default and help: the source of the docs."""
    hints = typing.get_type_hints(Settings)
    for section in dataclasses.fields(Settings):
        section_type = hints[section.name]
        section_hints = typing.get_type_hints(section_type)
        for f in dataclasses.fields(section_type):
            yield SettingInfo(section.name, f.name, section_hints[f.name], f.default, f.metadata["help"])


def _coerce(info: SettingInfo, raw: Any, source: str) -> Any:
    target = info.type
    if isinstance(target, types.UnionType):  # pragma: no cover - no optional settings yet
        target = next(t for t in typing.get_args(target) if t is not type(None))
    try:
        if target is bool:
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in {"1", "true", "yes", "on"}:
                return True
            if text in {"0", "false", "no", "off"}:
                return False
            raise ValueError(f"not a boolean: {raw!r}")
        if target is int:
            # int() would truncate a TOML float (1.5 -> 1) and overflow on inf.
            if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
                raise ValueError(f"expected an integer, got {raw!r}")
            return int(raw)
        if target is float:
            return float(raw)
        if target is str:
            if not isinstance(raw, str | int | float):
                raise ValueError(f"expected a string, got {type(raw).__name__}")
            return str(raw)
    except ValueError as exc:
        raise ConfigError(f"{source}: {info.section}.{info.key}: {exc}") from None
    raise ConfigError(f"{source}: {info.section}.{info.key}: unsupported type {target}")  # pragma: no cover


def load_settings(
    config_file: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Defaults, then the config file (explicit, $REGISTRY_CONFIG, or ./config/registry.toml), then env."""
    env = os.environ if env is None else env
    values: dict[str, dict[str, Any]] = {}
    known = {(i.section, i.key): i for i in describe()}

    path = Path(config_file) if config_file else None
    if path is None and env.get(f"{ENV_PREFIX}CONFIG"):
        path = Path(env[f"{ENV_PREFIX}CONFIG"])
    explicit = path is not None
    if path is None and DEFAULT_CONFIG_FILE.is_file():
        path = DEFAULT_CONFIG_FILE
    if path is not None:
        if not path.is_file():
            if explicit:
                raise ConfigError(f"config file not found: {path}")
        else:
            try:
                data = tomllib.loads(path.read_text(encoding="utf-8"))
            except (OSError, tomllib.TOMLDecodeError) as exc:
                raise ConfigError(f"{path}: {exc}") from None
            for section, table in data.items():
                if not isinstance(table, dict):
                    raise ConfigError(f"{path}: [{section}] must be a table")
                for key, raw in table.items():
                    info = known.get((section, key))
                    if info is None:
                        raise ConfigError(f"{path}: unknown setting {section}.{key}")
                    values.setdefault(section, {})[key] = _coerce(info, raw, str(path))

    by_env = {i.env_var: i for i in known.values()}
    for name, raw in env.items():
        info = by_env.get(name)
        if info is not None:
            values.setdefault(info.section, {})[info.key] = _coerce(info, raw, name)

    hints = typing.get_type_hints(Settings)
    sections = {s.name: hints[s.name](**values.get(s.name, {})) for s in dataclasses.fields(Settings)}
    return Settings(**sections)
