//! The command line: flags exactly as the product page writes them (`-target engine`, single dash), with
//! `--target engine` and `--target=engine` accepted too, an environment variable for each, and the checks that
//! refuse a configuration before anything starts.

use crate::store::{StoreUrl, DEFAULT_STORE};
use clap::{CommandFactory, Parser};
use jaque_core::MemberId;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "jaque",
    version,
    about = "jaque: checks on objects, every state transition in a shared ordered log.",
    after_help = "Flags take one dash or two: -target engine, --target engine and --target=engine are the same."
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

    /// HTTP address for the ui API, /metrics and /healthz.
    #[arg(long, env = "JAQUE_LISTEN", default_value = "127.0.0.1:8080", value_name = "ADDR")]
    pub listen: String,

    /// Directory of exec probe plugins; an exec probe may only run a file found here.
    #[arg(long = "plugin-dir", env = "JAQUE_PLUGIN_DIR", value_name = "DIR")]
    pub plugin_dir: Option<PathBuf>,

    /// When set, ui writes must carry `Authorization: Bearer <token>`.
    #[arg(long = "write-token", env = "JAQUE_WRITE_TOKEN", hide_env_values = true)]
    pub write_token: Option<String>,

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

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Memory,
    Nats(String),
}

impl Endpoint {
    pub fn is_nats(&self) -> bool {
        matches!(self, Endpoint::Nats(_))
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Roles {
    pub engine: bool,
    pub worker: bool,
    pub ui: bool,
    pub sink: bool,
}

/// NATS connection options shared by the queue and coordination clients.
#[derive(Clone, Debug, Default)]
pub struct NatsAuth {
    pub creds: Option<PathBuf>,
    pub user: Option<(String, String)>,
    pub token: Option<String>,
    pub tls_ca: Option<PathBuf>,
    pub tls_client: Option<(PathBuf, PathBuf)>,
}

/// A configuration that passed every check.
#[derive(Clone, Debug)]
pub struct Config {
    pub roles: Roles,
    pub queue: Option<Endpoint>,
    pub coordination: Endpoint,
    pub ttl: Duration,
    pub id: MemberId,
    pub listen: SocketAddr,
    pub plugin_dir: Option<PathBuf>,
    pub write_token: Option<String>,
    pub worker_concurrency: usize,
    /// The store of a sink, and of a ui's history: `-sink-store`, or the default when this process runs a sink.
    pub sink_store: Option<StoreUrl>,
    pub nats: NatsAuth,
    pub log_level: tracing::Level,
    pub log_json: bool,
}

/// A configuration error: the message says what was wrong and what to do.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

fn err<T>(msg: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError(msg.into()))
}

fn parse_endpoint(flag: &str, s: &str) -> Result<Endpoint, ConfigError> {
    if s == "memory" {
        return Ok(Endpoint::Memory);
    }
    let bad = || err(format!("-{flag}: expected memory or nats://host:port, got {s:?}"));
    let Some(rest) = s.strip_prefix("nats://").or_else(|| s.strip_prefix("tls://")) else { return bad() };
    let Some((host, port)) = rest.rsplit_once(':') else { return bad() };
    let host_ok = !host.is_empty()
        && host.chars().all(|c| c.is_ascii_alphanumeric() || ".-_[]:".contains(c))
        && !host.contains('/');
    if !host_ok || port.parse::<u16>().map_or(true, |p| p == 0) {
        return bad();
    }
    Ok(Endpoint::Nats(s.to_string()))
}

fn default_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host: String =
        host.trim().chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '-' }).take(40).collect();
    let host = if host.is_empty() { "jaque".to_string() } else { host };
    format!("{host}-{}", std::process::id())
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
                "sink" => roles.sink = true,
                "notifier" => {
                    return err(format!("-target {role}: this build of jaque does not include the {role} role yet"))
                }
                other => {
                    return err(format!(
                    "-target: unknown role {other:?}; roles are engine, worker, sink, notifier, ui (comma-separated)"
                ))
                }
            }
        }
        let queue = a.queue.as_deref().map(|q| parse_endpoint("queue", q)).transpose()?;
        if (roles.engine || roles.worker) && queue.is_none() {
            let role = if roles.engine { "engine" } else { "worker" };
            return err(format!(
                "-target {role} needs -queue: memory (engine and worker in this one process) or nats://host:port"
            ));
        }
        if queue == Some(Endpoint::Memory) && (roles.engine || roles.worker) && !(roles.engine && roles.worker) {
            return err(
                "-queue memory only works when engine and worker run in the same process (-target engine,worker); \
                 use -queue nats://host:port to run them apart",
            );
        }
        let coordination = parse_endpoint("coordination", &a.coordination)?;
        if roles.sink && coordination == Endpoint::Memory && !roles.engine {
            return err("-target sink with -coordination memory has no log to read: run it in the engine's process \
                 (-target engine,worker,sink -queue memory), or give it -coordination nats://host:port");
        }
        let sink_store = match a.sink_store.as_deref() {
            Some(url) => Some(StoreUrl::parse(url).map_err(ConfigError)?),
            None if roles.sink => Some(StoreUrl::parse(DEFAULT_STORE).map_err(ConfigError)?),
            None => None,
        };
        let ttl = humantime::parse_duration(&a.heartbeat_ttl).map_err(|e| {
            ConfigError(format!("-heartbeat-ttl: {:?} is not a duration ({e}); write e.g. 10s", a.heartbeat_ttl))
        })?;
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
        }
        if a.worker_concurrency == 0 {
            return err("-worker-concurrency must be at least 1");
        }
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
            write_token: a.write_token.filter(|t| !t.is_empty()),
            worker_concurrency: a.worker_concurrency,
            sink_store,
            nats: NatsAuth { creds: a.nats_creds, user, token: a.nats_token, tls_ca: a.nats_tls_ca, tls_client },
            log_level,
            log_json,
        })
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
    fn single_dash_double_dash_and_equals_are_the_same() {
        for args in [
            &["-target", "engine,worker", "-queue", "memory"][..],
            &["--target", "engine,worker", "--queue", "memory"],
            &["--target=engine,worker", "-queue=memory"],
        ] {
            let c = parse(args).unwrap();
            assert!(c.roles.engine && c.roles.worker && !c.roles.ui);
            assert_eq!(c.queue, Some(Endpoint::Memory));
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
