//! The command line: flags exactly as the product page writes them (`-target engine`, single dash), with
//! `--target engine` and `--target=engine` accepted too, an environment variable for each, and the checks that
//! refuse a configuration before anything starts.

use crate::coord::DataDir;
use crate::nats::NatsAuth;
use crate::sink::store::{StoreUrl, DEFAULT_STORE, OLDEST_SCHEMA_VERSION, SCHEMA_VERSION};

/// The sink's SQLite file inside `-data-dir` when no `-sink-store` is given.
const DATA_DIR_STORE: &str = "jaque-sink.db";
use clap::{CommandFactory, Parser};
use jaque_core::compact::SnapshotConfig;
use jaque_core::ui::SubmitTimeouts;
use jaque_core::{CheckBatching, MemberId};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

/// This build: the crate's version and the git commit it was built from (`unknown` outside a git checkout).
pub const BUILD: &str = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("JAQUE_COMMIT"), ")");

/// What `jaque --version` (`-version`, `-V`) prints after the name: the build, then the version of everything
/// it writes and which it reads (`docs/upgrading.md` says which may meet which, and how to roll back).
pub fn version_text() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        format!(
            "{BUILD}\n{}\ndata-dir version {} (reads {}..={})\n\
             sink schema version {SCHEMA_VERSION} (reads {OLDEST_SCHEMA_VERSION}..={SCHEMA_VERSION})",
            jaque_core::format::describe(),
            DataDir::VERSION,
            DataDir::OLDEST_VERSION,
            DataDir::VERSION,
        )
    })
}

#[derive(Parser, Debug, Clone)]
#[command(
    name = "jaque",
    version = version_text(),
    about = "jaque: checks on objects, every state transition in a shared ordered log.",
    after_help = "Flags take one dash or two: -target engine, --target engine and --target=engine are the same.\n\
                  The client of a running cluster: jaque get objects, jaque pause ID, ... (jaque get --help)."
)]
pub struct Args {
    /// Roles this process runs, comma-separated: engine, worker, sink, notifier, ui.
    #[arg(long, env = "JAQUE_TARGET", value_name = "ROLES")]
    pub target: Option<String>,

    /// Where engines send check work and workers take it: memory (engine and worker in this process) or
    /// nats://host:port. Required for engine and worker.
    #[arg(long, env = "JAQUE_QUEUE", value_name = "memory|nats://host:port")]
    pub queue: Option<String>,

    /// Where members announce themselves and the log lives: memory (one process) or nats://host:port.
    #[arg(long, env = "JAQUE_COORDINATION", default_value = "memory", value_name = "memory|nats://host:port")]
    pub coordination: String,

    /// How long a missed heartbeat is tolerated before a member counts as dead (whole seconds).
    #[arg(long = "heartbeat-ttl", env = "JAQUE_HEARTBEAT_TTL", default_value = "10s", value_name = "DURATION")]
    pub heartbeat_ttl: String,

    /// This process's member id (letters, digits, _ and -; unique per live process). Default: host-pid.
    #[arg(long, env = "JAQUE_ID")]
    pub id: Option<String>,

    /// The sink's store, and where a ui reads history from: sqlite://PATH or
    /// postgres://user:password@host:port/database (with sslmode, sslrootcert, sslcert, sslkey as libpq takes
    /// them). Default for a sink: sqlite://jaque-sink.db.
    #[arg(long = "sink-store", env = "JAQUE_SINK_STORE", value_name = "URL", hide_env_values = true)]
    pub sink_store: Option<String>,

    /// Makes -coordination memory durable: the log, its snapshots and the notifiers' progress in DIR (made if
    /// missing), fsync'd before a write is answered, read back at start. One process per DIR. With a sink and
    /// no -sink-store, the sink's SQLite file goes there too.
    #[arg(long = "data-dir", env = "JAQUE_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// HTTP address for the ui API, /metrics and /healthz.
    #[arg(long, env = "JAQUE_LISTEN", default_value = "127.0.0.1:8080", value_name = "ADDR")]
    pub listen: String,

    /// Directory of exec probe plugins; an exec probe may only run a file found here. It must be owned by root
    /// or the worker's user and writable by its owner only.
    #[arg(long = "plugin-dir", env = "JAQUE_PLUGIN_DIR", value_name = "DIR")]
    pub plugin_dir: Option<PathBuf>,

    /// When set, ui writes must carry `Authorization: Bearer <token>` (it grants reads too).
    #[arg(long = "write-token", env = "JAQUE_WRITE_TOKEN", hide_env_values = true)]
    pub write_token: Option<String>,

    /// The write token read from a file (kept out of `ps` and shell history).
    #[arg(long = "write-token-file", env = "JAQUE_WRITE_TOKEN_FILE", value_name = "FILE")]
    pub write_token_file: Option<PathBuf>,

    /// When set, every read of the ui (`/api/*`, the status page) must carry `Authorization: Bearer <token>`.
    #[arg(long = "read-token", env = "JAQUE_READ_TOKEN", hide_env_values = true)]
    pub read_token: Option<String>,

    /// The read token read from a file.
    #[arg(long = "read-token-file", env = "JAQUE_READ_TOKEN_FILE", value_name = "FILE")]
    pub read_token_file: Option<PathBuf>,

    /// When set, `/metrics` and `/healthz` need `Authorization: Bearer <token>`.
    #[arg(long = "metrics-token", env = "JAQUE_METRICS_TOKEN", hide_env_values = true)]
    pub metrics_token: Option<String>,

    /// The metrics token read from a file.
    #[arg(long = "metrics-token-file", env = "JAQUE_METRICS_TOKEN_FILE", value_name = "FILE")]
    pub metrics_token_file: Option<PathBuf>,

    /// Serve HTTPS on -listen with this certificate chain (PEM); needs -tls-key.
    #[arg(long = "tls-cert", env = "JAQUE_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,

    /// The private key of -tls-cert (PEM).
    #[arg(long = "tls-key", env = "JAQUE_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,

    /// How long (in log time) a retried command id is answered with its first outcome; older ids are forgotten.
    #[arg(
        long = "idempotency-window",
        env = "JAQUE_IDEMPOTENCY_WINDOW",
        default_value = "24h",
        value_name = "DURATION"
    )]
    pub idempotency_window: String,

    /// An engine raises the cluster's format (docs/upgrading.md) no higher than this, so a rollback to the
    /// release that speaks it stays possible. Default: this build's.
    #[arg(long = "hold-format", env = "JAQUE_HOLD_FORMAT", value_name = "N")]
    pub hold_format: Option<u32>,

    /// An engine writes a snapshot of the log's state at most this many entries after the last one.
    #[arg(long = "snapshot-every", env = "JAQUE_SNAPSHOT_EVERY", default_value_t = 10_000, value_name = "N")]
    pub snapshot_every: u64,

    /// ... and at most this long after the last one, when the log moved.
    #[arg(long = "snapshot-interval", env = "JAQUE_SNAPSHOT_INTERVAL", default_value = "5m", value_name = "DURATION")]
    pub snapshot_interval: String,

    /// Events stay in the log this long (log time) behind the newest snapshot, for readers that lag and sinks;
    /// older ones are purged once a snapshot past them is stored.
    #[arg(long = "log-retention", env = "JAQUE_LOG_RETENTION", default_value = "7d", value_name = "DURATION")]
    pub log_retention: String,

    /// Replicas of the log stream and the membership bucket when jaque creates them (a NATS cluster: 3).
    #[arg(long = "log-replicas", env = "JAQUE_LOG_REPLICAS", default_value_t = 1, value_name = "N")]
    pub log_replicas: usize,

    /// Where a ui without an engine submits writes: ingress (the page's path) or owner (straight to the owner it
    /// reads from the log; needs publish permission on jaque.cmd.*).
    #[arg(long = "ui-writes", env = "JAQUE_UI_WRITES", default_value = "ingress", value_name = "ingress|owner")]
    pub ui_writes: String,

    /// How long a ui without an engine waits for an engine to claim a write before it sends it again through
    /// ingress (a member of the queue group may be hung). Whole milliseconds, 10ms to 5s; 0ms: no claims (one
    /// request a write, as before).
    #[arg(long = "claim-timeout", env = "JAQUE_CLAIM_TIMEOUT", default_value = "200ms", value_name = "DURATION")]
    pub claim_timeout: String,

    /// The longest an engine holds a check due to send it with others: it sends the checks due together as
    /// soon as -check-batch of them are due, or when the first has waited this long. Fewer wake-ups of the
    /// engine and the workers at low rates; no check leaves later than this past its slot on the engine's
    /// account. Whole milliseconds, 0ms (each check at its own time) to 1s.
    #[arg(long = "check-linger", env = "JAQUE_CHECK_LINGER", default_value = "50ms", value_name = "DURATION")]
    pub check_linger: String,

    /// How many checks due make an engine send them before -check-linger is up.
    #[arg(long = "check-batch", env = "JAQUE_CHECK_BATCH", default_value_t = 128, value_name = "N")]
    pub check_batch: usize,

    /// How many checks a worker runs at once.
    #[arg(long = "worker-concurrency", env = "JAQUE_WORKER_CONCURRENCY", default_value_t = 64)]
    pub worker_concurrency: usize,

    /// NATS credentials file (JWT + nkey).
    #[arg(long = "nats-creds", env = "JAQUE_NATS_CREDS", value_name = "FILE")]
    pub nats_creds: Option<PathBuf>,
    /// NATS user (with -nats-password).
    #[arg(long = "nats-user", env = "JAQUE_NATS_USER")]
    pub nats_user: Option<String>,
    #[arg(long = "nats-password", env = "JAQUE_NATS_PASSWORD", hide_env_values = true)]
    pub nats_password: Option<String>,
    /// NATS token.
    #[arg(long = "nats-token", env = "JAQUE_NATS_TOKEN", hide_env_values = true)]
    pub nats_token: Option<String>,
    /// CA certificate (PEM) to verify the NATS server; turns TLS on.
    #[arg(long = "nats-tls-ca", env = "JAQUE_NATS_TLS_CA", value_name = "FILE")]
    pub nats_tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) for NATS mutual TLS (with -nats-tls-key).
    #[arg(long = "nats-tls-cert", env = "JAQUE_NATS_TLS_CERT", value_name = "FILE")]
    pub nats_tls_cert: Option<PathBuf>,
    #[arg(long = "nats-tls-key", env = "JAQUE_NATS_TLS_KEY", value_name = "FILE")]
    pub nats_tls_key: Option<PathBuf>,

    /// A webhook URL every accepted transition is sent to (-target notifier); repeat the flag for several
    /// endpoints, each gets every transition. The environment variable holds one URL.
    #[arg(long = "notify-webhook", env = "JAQUE_NOTIFY_WEBHOOK", value_name = "URL")]
    pub notify_webhook: Vec<String>,
    /// Standard Webhooks signing secret, whsec_<base64 of 24-64 random bytes>. Without it deliveries are
    /// unsigned.
    #[arg(long = "notify-secret", env = "JAQUE_NOTIFY_SECRET", hide_env_values = true, value_name = "whsec_...")]
    pub notify_secret: Option<String>,
    /// How long after its first attempt a failing delivery is retried before it is counted failed.
    #[arg(long = "notify-give-up", env = "JAQUE_NOTIFY_GIVE_UP", default_value = "24h", value_name = "DURATION")]
    pub notify_give_up: String,

    /// Log level: error, warn, info, debug, trace.
    #[arg(long = "log-level", env = "JAQUE_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    /// Log format: text or json.
    #[arg(long = "log-format", env = "JAQUE_LOG_FORMAT", default_value = "text")]
    pub log_format: String,
}

/// Rewrites `-flag` and `-flag=value` to `--flag…` for the long flag names clap knows, so the page's
/// single-dash spelling works. Everything after `--` is left alone, and so are short flags (`-h`, `-V`).
pub fn normalize_args(args: impl IntoIterator<Item = String>) -> Vec<String> {
    let longs: Vec<String> = Args::command().get_arguments().filter_map(|a| a.get_long().map(str::to_string)).collect();
    let mut out = Vec::new();
    let mut rest = false;
    for (i, arg) in args.into_iter().enumerate() {
        if i == 0 || rest {
            out.push(arg);
            continue;
        }
        if arg == "--" {
            rest = true;
            out.push(arg);
            continue;
        }
        let single = arg.strip_prefix('-').filter(|s| !s.starts_with('-'));
        let name = single.map(|s| s.split('=').next().unwrap_or_default());
        match name {
            Some(n) if longs.iter().any(|l| l == n) || n == "help" || n == "version" => out.push(format!("-{arg}")),
            // An unknown word after one dash is reported as the unknown long flag it looks like, not as a
            // cluster of short flags.
            Some(n) if n.len() > 1 && n.starts_with(|c: char| c.is_ascii_alphabetic()) => out.push(format!("-{arg}")),
            _ => out.push(arg),
        }
    }
    out
}

/// Where `-queue` or `-coordination` is: in this process, or on NATS (its servers, comma-separated).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    Memory,
    Nats(String),
}

impl Address {
    pub fn is_nats(&self) -> bool {
        matches!(self, Address::Nats(_))
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Roles {
    pub engine: bool,
    pub worker: bool,
    pub ui: bool,
    pub notifier: bool,
    pub sink: bool,
}

/// What `-target notifier` sends where.
#[derive(Clone, Debug)]
pub struct Notify {
    pub urls: Vec<String>,
    pub secret: Option<crate::notifier::Secret>,
    pub give_up: Duration,
}

/// A configuration that passed every check.
#[derive(Clone, Debug)]
pub struct Config {
    pub roles: Roles,
    pub queue: Option<Address>,
    pub coordination: Address,
    pub ttl: Duration,
    pub id: MemberId,
    pub listen: SocketAddr,
    pub plugin_dir: Option<PathBuf>,
    /// `-read-token`, `-write-token`, `-metrics-token` (or their files).
    pub tokens: crate::http::guard::Tokens,
    /// `-tls-cert` and `-tls-key`, loaded.
    pub tls: Option<std::sync::Arc<rustls::ServerConfig>>,
    pub worker_concurrency: usize,
    /// `-check-linger`, `-check-batch`: how an engine gathers the checks due into one dispatch.
    pub check_batching: CheckBatching,
    pub idempotency_window: Duration,
    /// `-hold-format`: the highest cluster format an engine raises the cluster to.
    pub hold_format: u32,
    /// `-snapshot-every`, `-snapshot-interval`, `-log-retention`.
    pub snapshots: SnapshotConfig,
    pub log_replicas: usize,
    /// `-ui-writes owner`: a ui without an engine sends writes straight to their owner first.
    pub ui_writes_to_owner: bool,
    /// `-claim-timeout`: how a ui without an engine waits for the engines to take its writes.
    pub submit: SubmitTimeouts,
    /// The store of a sink, and of a ui's history: `-sink-store`, or the default when this process runs a sink.
    pub sink_store: Option<StoreUrl>,
    /// `-data-dir`: where `-coordination memory` keeps the log (opened, locked and read in `main`).
    pub data_dir: Option<PathBuf>,
    pub nats: NatsAuth,
    pub notify: Option<Notify>,
    pub log_level: tracing::Level,
    pub log_json: bool,
}

/// A configuration error: the message says what was wrong and what to do.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// A flag's duration (`humantime`: 90s, 5m, 7d), or an error naming the flag and an example.
fn duration(flag: &str, value: &str, example: &str) -> Result<Duration, ConfigError> {
    humantime::parse_duration(value)
        .map_err(|e| ConfigError(format!("{flag}: {value:?} is not a duration ({e}); write e.g. {example}")))
}

fn err<T>(msg: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError(msg.into()))
}

fn parse_address(flag: &str, s: &str) -> Result<Address, ConfigError> {
    if s == "memory" {
        return Ok(Address::Memory);
    }
    // A list of servers of one cluster, as NATS clients take it: the client picks one and fails over.
    let mut servers = Vec::new();
    for server in s.split(',').map(str::trim) {
        let bad = || {
            err(format!(
                "-{flag}: expected memory or nats://host:port (a comma-separated list for a cluster), got {s:?}"
            ))
        };
        let Some(rest) = server.strip_prefix("nats://").or_else(|| server.strip_prefix("tls://")) else {
            return bad();
        };
        let Some((host, port)) = rest.rsplit_once(':') else { return bad() };
        let host_ok = !host.is_empty()
            && host.chars().all(|c| c.is_ascii_alphanumeric() || ".-_[]:".contains(c))
            && !host.contains('/');
        if !host_ok || port.parse::<u16>().map_or(true, |p| p == 0) {
            return bad();
        }
        servers.push(server);
    }
    Ok(Address::Nats(servers.join(",")))
}

fn default_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host: String =
        host.trim().chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '-' }).take(40).collect();
    let host = if host.is_empty() { "jaque".to_string() } else { host };
    format!("{host}-{}", std::process::id())
}

/// The notifier's flags: at least one well-formed http(s) URL, each once; a secret that is a Standard Webhooks
/// key; a give-up duration; and something to read (an engine in this process, or NATS coordination).
fn parse_notify(
    roles: &Roles,
    coordination: &Address,
    webhooks: Vec<String>,
    secret: Option<String>,
    give_up: &str,
) -> Result<Option<Notify>, ConfigError> {
    if !roles.notifier {
        if !webhooks.is_empty() || secret.is_some() {
            return err("-notify-webhook and -notify-secret are for -target notifier; add notifier to -target");
        }
        return Ok(None);
    }
    if webhooks.is_empty() {
        return err("-target notifier needs at least one -notify-webhook URL to send transitions to");
    }
    let mut urls: Vec<String> = Vec::new();
    for w in webhooks {
        // A webhook URL may carry credentials (`https://user:password@…`): refusals show it redacted.
        let shown = jaque_core::secret::redact_url(&w);
        let url = reqwest::Url::parse(&w).map_err(|e| {
            ConfigError(format!("-notify-webhook: {shown:?} is not a URL ({e}); write e.g. https://example.com/hook"))
        })?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none_or(str::is_empty) {
            return err(format!("-notify-webhook: {shown:?} is not an http:// or https:// URL with a host"));
        }
        if urls.contains(&w) {
            return err(format!("-notify-webhook: {shown:?} is given twice"));
        }
        urls.push(w);
    }
    let secret = secret
        .filter(|s| !s.is_empty())
        .map(|s| crate::notifier::Secret::parse(&s))
        .transpose()
        .map_err(ConfigError)?;
    let give_up = duration("-notify-give-up", give_up, "24h")?;
    if give_up.is_zero() {
        return err("-notify-give-up must be longer than 0s");
    }
    if *coordination == Address::Memory && !roles.engine {
        return err(
            "-target notifier reads the log: with -coordination memory it needs an engine in this same process \
             (-target engine,worker,notifier -queue memory); otherwise use -coordination nats://host:port",
        );
    }
    Ok(Some(Notify { urls, secret, give_up }))
}

impl Config {
    pub fn from_args(a: Args) -> Result<Config, ConfigError> {
        let Some(target) = a.target.as_deref().filter(|t| !t.trim().is_empty()) else {
            return err("-target is required: say which roles to run, e.g. -target engine,worker,ui");
        };
        let mut roles = Roles::default();
        for role in target.split(',').map(str::trim) {
            match role {
                "engine" => roles.engine = true,
                "worker" => roles.worker = true,
                "ui" => roles.ui = true,
                "notifier" => roles.notifier = true,
                "sink" => roles.sink = true,
                other => {
                    return err(format!(
                    "-target: unknown role {other:?}; roles are engine, worker, sink, notifier, ui (comma-separated)"
                ))
                }
            }
        }
        let queue = a.queue.as_deref().map(|q| parse_address("queue", q)).transpose()?;
        if (roles.engine || roles.worker) && queue.is_none() {
            let role = if roles.engine { "engine" } else { "worker" };
            return err(format!(
                "-target {role} needs -queue: memory (engine and worker in this one process) or nats://host:port"
            ));
        }
        if queue == Some(Address::Memory) && (roles.engine || roles.worker) && !(roles.engine && roles.worker) {
            return err(
                "-queue memory only works when engine and worker run in the same process (-target engine,worker); \
                 use -queue nats://host:port to run them apart",
            );
        }
        let coordination = parse_address("coordination", &a.coordination)?;
        let notify = parse_notify(&roles, &coordination, a.notify_webhook, a.notify_secret, &a.notify_give_up)?;
        if roles.sink && coordination == Address::Memory && !roles.engine {
            return err("-target sink with -coordination memory has no log to read: run it in the engine's process \
                 (-target engine,worker,sink -queue memory), or give it -coordination nats://host:port");
        }
        if a.sink_store.is_some() && !roles.sink && !roles.ui {
            return err("-sink-store is for -target sink (where it writes) or -target ui (its history API); \
                 this process runs neither");
        }
        let data_dir = a.data_dir.filter(|d| !d.as_os_str().is_empty());
        if let Some(dir) = &data_dir {
            if coordination.is_nats() {
                return err(format!(
                    "-data-dir {} is for -coordination memory: with nats:// the log and snapshots live in JetStream;                      leave -data-dir out",
                    dir.display()
                ));
            }
            if !roles.engine {
                return err(format!(
                    "-data-dir {} keeps the log of the engine in this process; add engine to -target                      (e.g. -target engine,worker,ui -queue memory)",
                    dir.display()
                ));
            }
        }
        let sink_store = match (a.sink_store.as_deref(), &data_dir) {
            (Some(url), _) => Some(StoreUrl::parse(url).map_err(ConfigError)?),
            // What a single-process install keeps lives in one place. The directory is made at start, so the
            // path is not checked here as a given -sink-store's is.
            (None, Some(dir)) if roles.sink => Some(StoreUrl::Sqlite { path: dir.join(DATA_DIR_STORE) }),
            (None, None) if roles.sink => Some(StoreUrl::parse(DEFAULT_STORE).map_err(ConfigError)?),
            (None, _) => None,
        };
        let ttl = duration("-heartbeat-ttl", &a.heartbeat_ttl, "10s")?;
        if ttl.subsec_nanos() != 0 || ttl < Duration::from_secs(1) {
            return err(format!(
                "-heartbeat-ttl: {:?} cannot be held by NATS, whose per-key TTLs are whole seconds; use e.g. 10s",
                a.heartbeat_ttl
            ));
        }
        let id = match a.id {
            Some(id) => MemberId::new(id).map_err(|e| ConfigError(format!("-id: {e}")))?,
            None => MemberId::new(default_id()).map_err(|e| ConfigError(format!("default id: {e}; set -id")))?,
        };
        let listen: SocketAddr = a.listen.parse().map_err(|_| {
            ConfigError(format!("-listen: expected an address like 127.0.0.1:8080, got {:?}", a.listen))
        })?;
        if let Some(dir) = &a.plugin_dir {
            if !dir.is_dir() {
                return err(format!("-plugin-dir: {} is not a directory", dir.display()));
            }
            // Only a worker runs plugins: another role given the flag (a shared environment file) ignores it.
            if roles.worker {
                crate::worker::check_dir(dir).map_err(ConfigError)?;
            }
        }
        let idempotency_window = duration("-idempotency-window", &a.idempotency_window, "24h")?;
        if idempotency_window < Duration::from_secs(1) {
            return err(format!(
                "-idempotency-window: {:?} is shorter than a client's retries take; use at least 1s (default 24h)",
                a.idempotency_window
            ));
        }
        if a.snapshot_every == 0 {
            return err("-snapshot-every: 0 entries; use at least 1 (default 10000)");
        }
        let (oldest, newest) = (jaque_core::format::OLDEST_CLUSTER_FORMAT, jaque_core::format::CLUSTER_FORMAT);
        let hold_format = a.hold_format.unwrap_or(newest);
        if !(oldest..=newest).contains(&hold_format) {
            return err(format!(
                "-hold-format: {hold_format} is not a cluster format this build speaks ({oldest} to {newest}); see \
                 docs/upgrading.md"
            ));
        }
        let snapshot_interval = duration("-snapshot-interval", &a.snapshot_interval, "5m")?;
        if snapshot_interval < Duration::from_secs(1) {
            return err(format!(
                "-snapshot-interval: {:?} would snapshot without pause; use at least 1s (default 5m)",
                a.snapshot_interval
            ));
        }
        let snapshots = SnapshotConfig {
            every: a.snapshot_every,
            interval: snapshot_interval,
            retention: duration("-log-retention", &a.log_retention, "7d")?,
        };
        if !(1..=5).contains(&a.log_replicas) {
            return err(format!(
                "-log-replicas: {} is not one JetStream allows; use 1 to 5 (3 on a 3-node cluster)",
                a.log_replicas
            ));
        }
        let ui_writes_to_owner = match a.ui_writes.as_str() {
            "ingress" => false,
            "owner" => true,
            other => return err(format!("-ui-writes: {other:?} is not ingress or owner")),
        };
        let claim = duration("-claim-timeout", &a.claim_timeout, "200ms")?;
        let whole_ms = claim.subsec_nanos() % 1_000_000 == 0;
        if !(claim.is_zero() || whole_ms && (Duration::from_millis(10)..=Duration::from_secs(5)).contains(&claim)) {
            return err(format!(
                "-claim-timeout: {:?} is not 0ms or a whole number of milliseconds from 10ms to 5s; write e.g. 200ms",
                a.claim_timeout
            ));
        }
        let submit = SubmitTimeouts { claim, ..SubmitTimeouts::SHIPPED };
        if a.worker_concurrency == 0 {
            return err("-worker-concurrency must be at least 1");
        }
        let linger = duration("-check-linger", &a.check_linger, "50ms")?;
        if linger > Duration::from_secs(1) || linger.subsec_nanos() % 1_000_000 != 0 {
            return err(format!(
                "-check-linger: {:?} is not a whole number of milliseconds from 0ms to 1s; write e.g. 50ms",
                a.check_linger
            ));
        }
        if a.check_batch == 0 {
            return err("-check-batch must be at least 1");
        }
        let check_batching = CheckBatching { linger, batch: a.check_batch };
        let user = match (a.nats_user, a.nats_password) {
            (Some(u), Some(p)) => Some((u, p)),
            (None, None) => None,
            _ => return err("-nats-user and -nats-password go together"),
        };
        let tls_client = match (a.nats_tls_cert, a.nats_tls_key) {
            (Some(c), Some(k)) => Some((c, k)),
            (None, None) => None,
            _ => return err("-nats-tls-cert and -nats-tls-key go together"),
        };
        let tokens = crate::http::guard::Tokens {
            read: token("-read-token", a.read_token, a.read_token_file)?,
            write: token("-write-token", a.write_token, a.write_token_file)?,
            metrics: token("-metrics-token", a.metrics_token, a.metrics_token_file)?,
        };
        let tls = match (a.tls_cert, a.tls_key) {
            (Some(c), Some(k)) => Some(crate::http::serve::load_tls(&c, &k).map_err(ConfigError)?),
            (None, None) => None,
            _ => return err("-tls-cert and -tls-key go together"),
        };
        let log_level = a.log_level.parse::<tracing::Level>().map_err(|_| {
            ConfigError(format!("-log-level: {:?} is not one of error, warn, info, debug, trace", a.log_level))
        })?;
        let log_json = match a.log_format.as_str() {
            "text" => false,
            "json" => true,
            other => return err(format!("-log-format: {other:?} is not text or json")),
        };
        Ok(Config {
            roles,
            queue,
            coordination,
            ttl,
            id,
            listen,
            plugin_dir: a.plugin_dir,
            tokens,
            tls,
            worker_concurrency: a.worker_concurrency,
            check_batching,
            idempotency_window,
            hold_format,
            snapshots,
            log_replicas: a.log_replicas,
            ui_writes_to_owner,
            submit,
            sink_store,
            data_dir,
            nats: NatsAuth { creds: a.nats_creds, user, token: a.nats_token, tls_ca: a.nats_tls_ca, tls_client },
            notify,
            log_level,
            log_json,
        })
    }
}

/// A token given on the command line (or in the environment) or in a file (its content less a trailing
/// newline); not both. An empty one is no token on the command line (as before) but an error from a file,
/// where it is surely a mistake.
fn token(flag: &str, given: Option<String>, file: Option<PathBuf>) -> Result<Option<String>, ConfigError> {
    match (given.filter(|t| !t.is_empty()), file) {
        (Some(_), Some(_)) => Err(ConfigError(format!("{flag} and {flag}-file: give one of them"))),
        (Some(t), None) => Ok(Some(t)),
        (None, None) => Ok(None),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| ConfigError(format!("{flag}-file {}: {e}", path.display())))?;
            let t = text.strip_suffix('\n').unwrap_or(&text);
            let t = t.strip_suffix('\r').unwrap_or(t);
            if t.is_empty() || t.chars().any(|c| c.is_control() || c == ' ') {
                return Err(ConfigError(format!(
                    "{flag}-file {}: the token must be one line of printable characters without spaces",
                    path.display()
                )));
            }
            Ok(Some(t.to_string()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Config, String> {
        let argv = normalize_args(std::iter::once("jaque").chain(args.iter().copied()).map(String::from));
        let a = Args::try_parse_from(argv).map_err(|e| e.to_string())?;
        Config::from_args(a).map_err(|e| e.to_string())
    }

    #[test]
    fn the_version_in_every_spelling_names_the_build_and_every_format_it_reads_and_writes() {
        for flag in ["-version", "--version", "-V"] {
            let argv = normalize_args(["jaque", flag].map(String::from));
            let e = Args::try_parse_from(argv).unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::DisplayVersion, "{flag}");
            assert_eq!(e.to_string(), format!("jaque {}\n", version_text()), "{flag}");
        }
        let lines: Vec<&str> = version_text().lines().collect();
        assert_eq!(lines[0], BUILD);
        assert!(lines[0].starts_with(concat!(env!("CARGO_PKG_VERSION"), " (commit ")), "{}", lines[0]);
        assert_eq!(lines[1..3].join("\n"), jaque_core::format::describe());
        assert_eq!(lines[3], format!("data-dir version {} (reads 1..={})", DataDir::VERSION, DataDir::VERSION));
        assert_eq!(lines[4], format!("sink schema version {SCHEMA_VERSION} (reads 1..={SCHEMA_VERSION})"));
    }

    #[test]
    fn single_dash_double_dash_and_equals_are_the_same() {
        for args in [
            &["-target", "engine,worker", "-queue", "memory"][..],
            &["--target", "engine,worker", "--queue", "memory"],
            &["--target=engine,worker", "-queue=memory"],
        ] {
            let c = parse(args).unwrap();
            assert!(c.roles.engine && c.roles.worker && !c.roles.ui);
            assert_eq!(c.queue, Some(Address::Memory));
        }
        let c = parse(&["-target", "ui", "-heartbeat-ttl", "3s"]).unwrap();
        assert_eq!(c.ttl, Duration::from_secs(3));
    }

    #[test]
    fn engine_or_worker_without_queue_is_refused() {
        assert!(parse(&["-target", "engine"]).unwrap_err().contains("needs -queue"));
        assert!(parse(&["-target", "worker"]).unwrap_err().contains("needs -queue"));
    }

    #[test]
    fn memory_queue_needs_engine_and_worker_together() {
        assert!(parse(&["-target", "engine", "-queue", "memory"]).unwrap_err().contains("same process"));
        assert!(parse(&["-target", "worker,ui", "-queue", "memory"]).unwrap_err().contains("same process"));
    }

    #[test]
    fn malformed_urls_durations_and_ttls_are_refused() {
        assert!(parse(&["-target", "ui", "-coordination", "nats//x:1"]).unwrap_err().contains("nats://host:port"));
        assert!(parse(&["-target", "ui", "-coordination", "nats://x"]).unwrap_err().contains("nats://host:port"));
        assert!(parse(&["-target", "ui", "-heartbeat-ttl", "ten"]).unwrap_err().contains("not a duration"));
        assert!(parse(&["-target", "ui", "-heartbeat-ttl", "1500ms"]).unwrap_err().contains("whole seconds"));
        assert!(parse(&["-target", "ui", "-id", "a.b"]).unwrap_err().contains("-id"));
        assert!(parse(&["-target", "nope"]).unwrap_err().contains("unknown role"));
        assert!(parse(&["-target", "ui", "-coordination", "nats://a:1,nats//b:2"]).unwrap_err().contains("list"));
        assert!(parse(&["-target", "ui", "-coordination", "nats://a:1,"]).unwrap_err().contains("list"));
        let c = parse(&["-target", "ui", "-coordination", "nats://a:1, nats://b:2"]).unwrap();
        assert_eq!(c.coordination, Address::Nats("nats://a:1,nats://b:2".into()));
        assert!(parse(&["-target", "ui", "-log-replicas", "0"]).unwrap_err().contains("-log-replicas"));
        assert!(parse(&["-target", "ui", "-log-replicas", "6"]).unwrap_err().contains("1 to 5"));
        assert_eq!(parse(&["-target", "ui", "-log-replicas", "3"]).unwrap().log_replicas, 3);
        assert!(parse(&["-target", "ui", "-ui-writes", "direct"]).unwrap_err().contains("ingress or owner"));
        assert!(!parse(&["-target", "ui"]).unwrap().ui_writes_to_owner, "the page's path is the default");
        assert!(parse(&["-target", "ui", "-ui-writes", "owner"]).unwrap().ui_writes_to_owner);
        let store = ["-sink-store", "sqlite://x.db"];
        let engine = [&["-target", "engine,worker", "-queue", "memory"][..], &store].concat();
        assert!(parse(&engine).unwrap_err().contains("-sink-store is for -target sink"));
        assert!(parse(&["-target", "ui", "-idempotency-window", "1d2"]).unwrap_err().contains("-idempotency-window"));
        assert!(parse(&["-target", "ui", "-idempotency-window", "10ms"]).unwrap_err().contains("at least 1s"));
        let engine = |extra: &[&str]| parse(&[&["-target", "ui"], extra].concat());
        assert!(engine(&["-hold-format", "0"]).unwrap_err().contains("-hold-format: 0 is not a cluster format"));
        assert!(engine(&["-hold-format", "99"]).unwrap_err().contains("docs/upgrading.md"));
        assert_eq!(engine(&["-hold-format", "1"]).unwrap().hold_format, 1);
        assert_eq!(engine(&[]).unwrap().hold_format, jaque_core::format::CLUSTER_FORMAT);
        let c = parse(&["-target", "ui", "-idempotency-window", "2h"]).unwrap();
        assert_eq!(c.idempotency_window, Duration::from_secs(7200));
        assert_eq!(parse(&["-target", "ui"]).unwrap().idempotency_window, Duration::from_secs(24 * 3600));
    }

    #[test]
    fn a_claim_timeout_is_0ms_or_whole_milliseconds_from_10ms_to_5s() {
        let claim = |t: &str| parse(&["-target", "ui", "-claim-timeout", t]).map(|c| c.submit.claim);
        assert_eq!(parse(&["-target", "ui"]).unwrap().submit, SubmitTimeouts::SHIPPED, "the default");
        assert_eq!(claim("0ms").unwrap(), Duration::ZERO);
        assert_eq!(claim("10ms").unwrap(), Duration::from_millis(10));
        assert_eq!(claim("5s").unwrap(), Duration::from_secs(5));
        for bad in ["5ms", "1500us", "6s"] {
            let e = claim(bad).unwrap_err();
            assert!(e.contains("-claim-timeout") && e.contains("from 10ms to 5s"), "{bad}: {e}");
        }
        assert!(claim("soon").unwrap_err().contains("not a duration"));
    }

    #[test]
    fn a_check_linger_is_whole_milliseconds_up_to_1s_and_a_batch_at_least_one() {
        let engine = ["-target", "engine,worker", "-queue", "memory"];
        let with = |flags: &[&str]| parse(&[&engine[..], flags].concat());
        assert_eq!(parse(&engine).unwrap().check_batching, CheckBatching::SHIPPED, "the default");
        let linger = |l: &str| with(&["-check-linger", l]).map(|c| c.check_batching.linger);
        assert_eq!(linger("0ms").unwrap(), Duration::ZERO);
        assert_eq!(linger("20ms").unwrap(), Duration::from_millis(20));
        assert_eq!(linger("1s").unwrap(), Duration::from_secs(1));
        for bad in ["500us", "1500us", "2s"] {
            let e = linger(bad).unwrap_err();
            assert!(e.contains("-check-linger") && e.contains("from 0ms to 1s"), "{bad}: {e}");
        }
        assert!(linger("soon").unwrap_err().contains("not a duration"));
        assert_eq!(with(&["-check-batch", "1"]).unwrap().check_batching.batch, 1);
        assert!(with(&["-check-batch", "0"]).unwrap_err().contains("-check-batch must be at least 1"));
    }

    const HOOK: &str = "http://127.0.0.1:9/hook";

    #[test]
    fn a_notifier_takes_webhooks_a_secret_and_a_give_up() {
        let c = parse(&[
            "-target",
            "notifier",
            "-coordination",
            "nats://127.0.0.1:4222",
            "-notify-webhook",
            HOOK,
            "-notify-webhook",
            "https://example.com/b",
            "-notify-secret",
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "-notify-give-up",
            "1h",
        ])
        .unwrap();
        assert!(c.roles.notifier && !c.roles.engine);
        let n = c.notify.unwrap();
        assert_eq!(n.urls, vec![HOOK.to_string(), "https://example.com/b".to_string()]);
        assert!(n.secret.is_some());
        assert_eq!(n.give_up, Duration::from_secs(3600));
        let c = parse(&["-target", "engine,worker,notifier", "-queue", "memory", "-notify-webhook", HOOK]).unwrap();
        let n = c.notify.unwrap();
        assert!(n.secret.is_none());
        assert_eq!(n.give_up, Duration::from_secs(24 * 3600), "the default is a day");
    }

    #[test]
    fn notifier_misconfigurations_are_refused() {
        let nats = ["-coordination", "nats://127.0.0.1:4222"];
        let with = |extra: &[&str]| {
            let mut v = vec!["-target", "notifier"];
            v.extend_from_slice(&nats);
            v.extend_from_slice(extra);
            parse(&v).unwrap_err()
        };
        assert!(with(&[]).contains("needs at least one -notify-webhook"));
        assert!(with(&["-notify-webhook", "not a url"]).contains("is not a URL"));
        assert!(with(&["-notify-webhook", "ftp://x/y"]).contains("http:// or https://"));
        assert!(with(&["-notify-webhook", HOOK, "-notify-webhook", HOOK]).contains("given twice"));
        assert!(with(&["-notify-webhook", HOOK, "-notify-secret", "hunter2"]).contains("whsec_"));
        assert!(with(&["-notify-webhook", HOOK, "-notify-give-up", "forever"]).contains("not a duration"));
        assert!(with(&["-notify-webhook", HOOK, "-notify-give-up", "0s"]).contains("longer than 0s"));
        let e = parse(&["-target", "notifier", "-notify-webhook", HOOK]).unwrap_err();
        assert!(e.contains("needs an engine in this same process"), "{e}");
        let e = parse(&["-target", "ui", "-notify-webhook", HOOK]).unwrap_err();
        assert!(e.contains("for -target notifier"), "{e}");
    }

    #[test]
    fn a_data_dir_is_for_an_engine_on_memory_coordination_and_holds_the_sinks_default_store() {
        let one = ["-target", "engine,worker,ui,sink", "-queue", "memory"];
        let c = parse(&[&one[..], &["-data-dir", "/var/lib/jaque"]].concat()).unwrap();
        assert_eq!(c.data_dir, Some(PathBuf::from("/var/lib/jaque")));
        assert_eq!(c.sink_store.unwrap().redacted(), "sqlite:///var/lib/jaque/jaque-sink.db");
        let c = parse(&[&one[..], &["-data-dir", "d", "-sink-store", "sqlite://x.db"]].concat()).unwrap();
        assert_eq!(c.sink_store.unwrap().redacted(), "sqlite://x.db", "a given -sink-store wins");
        let nats = ["-target", "engine,worker", "-queue", "nats://h:1", "-coordination", "nats://h:1"];
        let e = parse(&[&nats[..], &["-data-dir", "d"]].concat()).unwrap_err();
        assert!(e.contains("-data-dir d is for -coordination memory"), "{e}");
        let e = parse(&["-target", "ui", "-data-dir", "d"]).unwrap_err();
        assert!(e.contains("add engine to -target"), "{e}");
    }

    #[test]
    fn a_sink_needs_a_log_to_read_and_a_store_it_can_parse() {
        assert!(parse(&["-target", "sink"]).unwrap_err().contains("no log to read"));
        let c = parse(&["-target", "engine,worker,ui,sink", "-queue", "memory"]).unwrap();
        assert!(c.roles.sink && c.roles.engine);
        assert_eq!(c.sink_store.unwrap().redacted(), DEFAULT_STORE);
        let c = parse(&["-target", "sink", "-coordination", "nats://127.0.0.1:4222"]).unwrap();
        assert!(c.roles.sink && !c.roles.engine);
        let e =
            parse(&["-target", "sink", "-coordination", "nats://h:1", "-sink-store", "pg://u:pw@h/db"]).unwrap_err();
        assert!(e.contains("-sink-store") && !e.contains("pw@"), "{e}");
        assert!(parse(&["-target", "ui"]).unwrap().sink_store.is_none(), "a ui has no store unless given one");
    }
}
