//! `jaque get|history|delete|ack|unack|pause|resume|check|cluster|completion|apply|diff|schema|silence`: the
//! command-line client of a running cluster's HTTP API (issue 36), in the same binary as the server, beside its
//! flags (which keep working: a first argument that is one of these words is a client command, anything else the
//! server's flags).
//!
//! It speaks only the documented API (`/api/openapi.json`), with `--server` / `JAQUE_SERVER`, a bearer token from
//! `--token` / `JAQUE_TOKEN` or `--token-file` / `JAQUE_TOKEN_FILE`, and `--ca` for an HTTPS server whose
//! certificate a private authority signed. Exit codes (also in the README):
//!
//! | code | meaning |
//! |---|---|
//! | 0 | done |
//! | 1 | the server refused or could not do something asked (not found, rejected, unavailable); the rest was done |
//! | 2 | the command line is wrong (nothing was sent) |
//! | 3 | the server could not be talked to: connection, TLS, or the token refused (401, 403) |

mod apply;
mod files;
mod policy;
mod silence;
mod yaml;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// The first words that make a client command.
const COMMANDS: [&str; 14] = [
    "get",
    "history",
    "delete",
    "ack",
    "unack",
    "pause",
    "resume",
    "check",
    "cluster",
    "completion",
    "apply",
    "diff",
    "schema",
    "silence",
];

/// The client's own flags, which may come before its command word (the server has none of these names).
const GLOBAL_FLAGS: [&str; 5] = ["--server", "--token", "--token-file", "--ca", "--timeout"];

/// Whether `argv` (the program first) is a client command: a command word first, or after the client's own
/// flags (`jaque --server URL get objects`).
pub fn is_client_command(argv: &[String]) -> bool {
    let mut args = argv.iter().skip(1);
    while let Some(a) = args.next() {
        if COMMANDS.contains(&a.as_str()) {
            return true;
        }
        match GLOBAL_FLAGS.iter().find(|f| a == *f || a.strip_prefix(*f).is_some_and(|v| v.starts_with('='))) {
            Some(f) if a == f => {
                args.next();
            }
            Some(_) => {}
            None => return false,
        }
    }
    false
}

#[derive(Parser, Debug)]
#[command(
    name = "jaque",
    about = "The client of a jaque cluster's HTTP API (the server: `jaque -target ...`, see `jaque -help`).",
    after_help = "Exit codes: 0 done; 1 the server refused or could not do something asked; 2 the command line is wrong; \
                  3 the server could not be talked to (connection, TLS, token refused)."
)]
pub struct ClientArgs {
    /// The ui's address.
    #[arg(long, env = "JAQUE_SERVER", default_value = "http://127.0.0.1:8080", global = true, value_name = "URL")]
    server: String,
    /// A bearer token (`-read-token` for reads, `-write-token` for writes).
    #[arg(long, env = "JAQUE_TOKEN", hide_env_values = true, global = true, conflicts_with = "token_file")]
    token: Option<String>,
    /// A file whose first line is the token.
    #[arg(long = "token-file", env = "JAQUE_TOKEN_FILE", global = true, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// A PEM file of the authority that signed an HTTPS server's certificate (besides the system's).
    #[arg(long, global = true, value_name = "FILE")]
    ca: Option<PathBuf>,
    /// How long one request may take.
    #[arg(long, global = true, default_value = "30s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    timeout: Duration,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Output {
    /// Aligned columns.
    Table,
    /// Aligned columns, more of them.
    Wide,
    /// What the API answered, as JSON.
    Json,
}

/// The outputs of `get objects` and `get object`: those of every read, and YAML.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum GetOutput {
    /// Aligned columns.
    Table,
    /// Aligned columns, more of them.
    Wide,
    /// What the API answered, as JSON.
    Json,
    /// The definitions as a file `jaque apply -f` reads (`objects:`, id to definition); no state.
    Yaml,
}

/// Which objects an action takes: ids, or every object a label selector picks.
#[derive(clap::Args, Debug)]
struct Which {
    /// Object ids.
    ids: Vec<String>,
    /// A label selector (`env=prod,team!=db,tier in (web,api),!canary`): every object it picks.
    #[arg(short = 'l', long = "selector", value_name = "SELECTOR")]
    selector: Option<String>,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Read objects.
    Get {
        #[command(subcommand)]
        what: Get,
    },
    /// An object's history (needs a sink: `-target sink`).
    History {
        id: String,
        /// The newest this many events.
        #[arg(long, default_value_t = 50)]
        limit: u32,
        #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Delete objects.
    Delete(Which),
    /// Acknowledge the problem of objects.
    Ack(Which),
    /// Withdraw an acknowledgement.
    Unack(Which),
    /// Stop checking objects.
    Pause(Which),
    /// Check paused objects again.
    Resume(Which),
    /// Check objects now.
    Check(Which),
    /// The cluster: members of each role, the epoch, objects per engine.
    Cluster {
        #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// A shell completion script, on stdout (e.g. `jaque completion bash > /etc/bash_completion.d/jaque`).
    Completion { shell: clap_complete::Shell },
    /// Bring the objects to what files say, writing only the differences (exit 1 if a write failed).
    Apply(Files),
    /// What `apply` would write: `+` create, `~` change, `-` prune (exit 1 when something would change).
    Diff(Files),
    /// The JSON Schema of the files `apply` and `diff` read, on stdout (for editors).
    Schema,
    /// Silences: objects whose problems are not notified for a while (needs cluster format 4).
    Silence {
        #[command(subcommand)]
        what: silence::Silence,
    },
}

/// The files of `apply` and `diff`, and whose objects they are.
#[derive(clap::Args, Debug)]
struct Files {
    /// YAML or JSON files, or directories of them (read below, in name order).
    #[arg(short = 'f', long = "filename", required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// The name of this source, recorded on its objects (label `jaque/source`): a prune deletes only objects of
    /// this source. A label value: 1 to 63 of A-Z a-z 0-9 - _ . starting and ending with a letter or digit.
    #[arg(long, default_value = "default")]
    source: String,
    /// Also delete the objects of this source the files no longer list.
    #[arg(long)]
    prune: bool,
    /// Say what would be written, write nothing (`apply` only).
    #[arg(long = "dry-run")]
    dry_run: bool,
}

#[derive(Subcommand, Debug)]
enum Get {
    /// Every object, or those a selector picks.
    Objects {
        #[arg(short = 'l', long = "selector", value_name = "SELECTOR")]
        selector: Option<String>,
        #[arg(short = 'o', long, value_enum, default_value_t = GetOutput::Table)]
        output: GetOutput,
    },
    /// One object.
    Object {
        id: String,
        #[arg(short = 'o', long, value_enum, default_value_t = GetOutput::Table)]
        output: GetOutput,
    },
}

/// Why a command stopped: its exit code and what to say.
struct Failure {
    code: u8,
    message: String,
}

fn usage(message: impl Into<String>) -> Failure {
    Failure { code: 2, message: message.into() }
}

fn unreachable(message: impl Into<String>) -> Failure {
    Failure { code: 3, message: message.into() }
}

/// The client: `argv` is the whole command line (program first).
pub fn main(argv: Vec<String>) -> ExitCode {
    let args = match ClientArgs::try_parse_from(argv) {
        Ok(a) => a,
        Err(e) => e.exit(),
    };
    if let Cmd::Completion { shell } = args.cmd {
        clap_complete::generate(shell, &mut ClientArgs::command(), "jaque", &mut std::io::stdout());
        return ExitCode::SUCCESS;
    }
    if let Cmd::Schema = args.cmd {
        println!("{}", serde_json::to_string_pretty(&files::json_schema()).unwrap_or_default());
        return ExitCode::SUCCESS;
    }
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("jaque: error: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(args)) {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            eprintln!("jaque: error: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}

struct Api {
    http: reqwest::Client,
    base: url::Url,
    token: Option<String>,
}

/// An answer: its status, its body as JSON (`Null` when it had none or not JSON).
struct Answer {
    status: u16,
    body: Value,
}

impl Api {
    fn new(args: &ClientArgs) -> Result<Api, Failure> {
        let base = url::Url::parse(&args.server)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
            .ok_or_else(|| usage(format!("--server {:?} must be an http:// or https:// URL", args.server)))?;
        let token = match (&args.token, &args.token_file) {
            (Some(t), _) => Some(t.trim().to_string()),
            (None, Some(f)) => {
                let text =
                    std::fs::read_to_string(f).map_err(|e| usage(format!("--token-file {}: {e}", f.display())))?;
                Some(text.lines().next().unwrap_or_default().trim().to_string())
            }
            (None, None) => None,
        };
        let mut http =
            reqwest::Client::builder().timeout(args.timeout).user_agent(concat!("jaque/", env!("CARGO_PKG_VERSION")));
        if let Some(ca) = &args.ca {
            let pem = std::fs::read(ca).map_err(|e| usage(format!("--ca {}: {e}", ca.display())))?;
            let cert = reqwest::Certificate::from_pem(&pem)
                .map_err(|e| usage(format!("--ca {}: not a PEM certificate: {e}", ca.display())))?;
            http = http.add_root_certificate(cert);
        }
        let http = http.build().map_err(|e| unreachable(format!("the HTTP client: {e}")))?;
        Ok(Api { http, base, token })
    }

    fn url(&self, path_and_query: &str) -> Result<url::Url, Failure> {
        self.base.join(path_and_query).map_err(|e| usage(format!("{path_and_query}: {e}")))
    }

    async fn send(&self, method: reqwest::Method, path_and_query: &str) -> Result<Answer, Failure> {
        self.send_body(method, path_and_query, None, "").await
    }

    /// A request with a JSON `body` if any, and an `Idempotency-Key` unless it is empty.
    async fn send_body(
        &self,
        method: reqwest::Method,
        path_and_query: &str,
        body: Option<&Value>,
        idempotency_key: &str,
    ) -> Result<Answer, Failure> {
        let (status, _, text) = self.request(method, path_and_query, body, idempotency_key).await?;
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Ok(Answer { status, body })
    }

    /// `send_body`'s request: the status, the `Link` to the next page, the body's text.
    async fn request(
        &self,
        method: reqwest::Method,
        path_and_query: &str,
        body: Option<&Value>,
        idempotency_key: &str,
    ) -> Result<(u16, Option<String>, String), Failure> {
        let url = self.url(path_and_query)?;
        let mut req = self.http.request(method, url.clone());
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.header("content-type", "application/json").body(b.to_string());
        }
        if !idempotency_key.is_empty() {
            req = req.header("idempotency-key", idempotency_key);
        }
        let resp = req.send().await.map_err(|e| unreachable(format!("{url}: {}", error_chain(&e.without_url()))))?;
        let status = resp.status().as_u16();
        if status == 401 || status == 403 {
            return Err(unreachable(format!(
                "{url}: {status}: the server refused the token (--token, --token-file, JAQUE_TOKEN)"
            )));
        }
        let next = resp
            .headers()
            .get("link")
            .and_then(|l| l.to_str().ok())
            .and_then(|l| l.strip_prefix('<')?.split_once(">; rel=\"next\"").map(|(p, _)| p.to_string()));
        let text = resp.text().await.map_err(|e| unreachable(format!("{url}: {}", error_chain(&e.without_url()))))?;
        Ok((status, next, text))
    }

    /// Every object the selector picks (all with none), page by page.
    async fn objects(&self, selector: Option<&str>) -> Result<Vec<Value>, Failure> {
        self.list(selector).await
    }

    /// `objects`, each read as a `T` (`apply` reads only what it needs of them, not a tree of every field).
    async fn list<T: serde::de::DeserializeOwned>(&self, selector: Option<&str>) -> Result<Vec<T>, Failure> {
        let mut path = "/api/objects?limit=10000".to_string();
        if let Some(s) = selector {
            path.push_str("&selector=");
            path.push_str(&percent_encoding::utf8_percent_encode(s, UNRESERVED).to_string());
        }
        let mut out = Vec::new();
        let mut next = Some(path);
        while let Some(p) = next {
            let (status, link, text) = self.request(reqwest::Method::GET, &p, None, "").await?;
            match serde_json::from_str::<Vec<T>>(&text) {
                Ok(page) if status == 200 => out.extend(page),
                _ => {
                    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
                    return Err(Failure { code: if status == 400 { 2 } else { 1 }, message: reason(status, &body) });
                }
            }
            next = link;
        }
        Ok(out)
    }
}

/// The causes of an error, outermost first (reqwest's own message says little: "error sending request").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(c) = cur {
        parts.push(c.to_string());
        cur = c.source();
    }
    parts.dedup();
    parts.join(": ")
}

/// What an error answer says: its `reason` or `error`, else its `outcome`, else the body.
fn reason(status: u16, body: &Value) -> String {
    match ["reason", "error", "outcome"].iter().find_map(|k| body[*k].as_str()) {
        Some(r) => format!("{status}: {}", r.replace('_', " ")),
        None => format!("{status}: {body}"),
    }
}

/// What a path segment or query value leaves as it is: RFC 3986's unreserved characters.
const UNRESERVED: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

fn id_path(id: &str) -> String {
    percent_encoding::utf8_percent_encode(id, UNRESERVED).to_string()
}

async fn run(args: ClientArgs) -> Result<u8, Failure> {
    let api = Api::new(&args)?;
    let mut out = std::io::stdout().lock();
    match args.cmd {
        Cmd::Get { what: Get::Objects { selector, output } } => {
            let objects = api.objects(selector.as_deref()).await?;
            print_objects(&mut out, &objects, output);
            Ok(0)
        }
        Cmd::Get { what: Get::Object { id, output } } => {
            let a = api.send(reqwest::Method::GET, &format!("/api/objects/{}", id_path(&id))).await?;
            if a.status != 200 {
                return Err(Failure { code: 1, message: format!("object {id}: {}", reason(a.status, &a.body)) });
            }
            if output == GetOutput::Json {
                json(&mut out, &a.body);
            } else {
                print_objects(&mut out, std::slice::from_ref(&a.body), output);
            }
            Ok(0)
        }
        Cmd::History { id, limit, output } => {
            let a =
                api.send(reqwest::Method::GET, &format!("/api/objects/{}/history?limit={limit}", id_path(&id))).await?;
            if a.status != 200 {
                return Err(Failure { code: 1, message: format!("history of {id}: {}", reason(a.status, &a.body)) });
            }
            print_history(&mut out, &a.body, output);
            Ok(0)
        }
        Cmd::Cluster { output } => {
            let a = api.send(reqwest::Method::GET, "/api/cluster").await?;
            if a.status != 200 {
                return Err(Failure { code: 1, message: format!("cluster: {}", reason(a.status, &a.body)) });
            }
            print_cluster(&mut out, &a.body, output);
            Ok(0)
        }
        Cmd::Delete(which) => act(&api, &mut out, which, None).await,
        Cmd::Ack(which) => act(&api, &mut out, which, Some("ack")).await,
        Cmd::Unack(which) => act(&api, &mut out, which, Some("unack")).await,
        Cmd::Pause(which) => act(&api, &mut out, which, Some("pause")).await,
        Cmd::Resume(which) => act(&api, &mut out, which, Some("resume")).await,
        Cmd::Check(which) => act(&api, &mut out, which, Some("check")).await,
        Cmd::Completion { .. } | Cmd::Schema => unreachable!("answered before the runtime"),
        Cmd::Apply(f) => apply_files(&api, &mut out, f, false).await,
        Cmd::Diff(f) => apply_files(&api, &mut out, f, true).await,
        Cmd::Silence { what } => silence::run(&api, &mut out, what).await,
    }
}

/// `apply` (`diff_only`: `diff`): the files, then the objects the server has, then the plan, carried out or
/// shown. Errors in the files: each said, code 2, nothing sent.
async fn apply_files(api: &Api, out: &mut impl Write, f: Files, diff_only: bool) -> Result<u8, Failure> {
    if jaque_core::labels::check_value(&f.source).is_err() || f.source.is_empty() {
        return Err(usage(format!(
            "--source {:?}: a label value: 1 to 63 of A-Z a-z 0-9 - _ . starting and ending with a letter or digit",
            f.source
        )));
    }
    let in_files = |errors: Vec<files::FileError>| {
        for e in &errors {
            eprintln!("jaque: {e}");
        }
        usage(format!("{} error(s) in the files; nothing was sent", errors.len()))
    };
    let loaded = files::load(&f.paths, &|name| std::env::var(name).ok()).map_err(in_files)?;
    let foreign = policy::foreign(&loaded.policy, &f.source);
    if !foreign.is_empty() {
        return Err(in_files(foreign));
    }
    // Where the log stands before the objects are read: what a new object's write is planned against.
    let summary = api.send(reqwest::Method::GET, "/api/summary").await?;
    let position = summary.body["log_position"].as_u64().unwrap_or(0);
    let current: Vec<apply::Listed> = api.list(None).await?;
    // The policy is read only when the files define some or a prune may remove some (so files of objects alone
    // apply to a cluster older than the policy's API too).
    let now = crate::clock::now();
    let cluster_policy = if loaded.policy.is_empty() && !f.prune {
        policy::Current::none()
    } else {
        let a = api.send(reqwest::Method::GET, "/api/policy").await?;
        match a.status {
            200 => policy::Current::read(&a.body, now),
            404 if loaded.policy.is_empty() => policy::Current::none(),
            _ => {
                let why = "the files define a notification policy; the server needs 0.3.0 or later";
                return Err(Failure {
                    code: 1,
                    message: format!("GET /api/policy: {} ({why})", reason(a.status, &a.body)),
                });
            }
        }
    };
    let policy_plan = policy::plan(&loaded.policy, &cluster_policy, &f.source, f.prune, now).map_err(in_files)?;
    let mut plan = apply::plan(loaded.objects, &current, &f.source, f.prune, position);
    plan.policy = policy_plan;
    if diff_only || f.dry_run {
        apply::print_diff(out, &plan);
        return Ok(u8::from(diff_only && plan.changes() > 0));
    }
    let unchanged = plan.unchanged + plan.policy.unchanged;
    let failed = apply::execute(api, out, plan).await?;
    let _ = writeln!(out, "{unchanged} unchanged, {failed} failed");
    Ok(u8::from(failed > 0))
}

/// An action (`None`: delete) on the objects named or selected, one line each; code 1 if any failed.
async fn act(api: &Api, out: &mut impl Write, which: Which, action: Option<&str>) -> Result<u8, Failure> {
    let mut ids = which.ids;
    match (&which.selector, ids.is_empty()) {
        (Some(_), false) => return Err(usage("name objects by id or by -l SELECTOR, not both")),
        (None, true) => return Err(usage("name at least one object id, or -l SELECTOR")),
        (Some(s), true) => {
            let picked = api.objects(Some(s)).await?;
            ids = picked.iter().filter_map(|o| o["id"].as_str().map(str::to_string)).collect();
            if ids.is_empty() {
                let _ = writeln!(out, "no object matches {s:?}");
                return Ok(0);
            }
        }
        (None, false) => {}
    }
    let verb = action.unwrap_or("delete");
    let mut failed = 0;
    for id in &ids {
        let (method, path) = match action {
            Some(a) => (reqwest::Method::POST, format!("/api/objects/{}/actions/{a}", id_path(id))),
            None => (reqwest::Method::DELETE, format!("/api/objects/{}", id_path(id))),
        };
        let a = api.send(method, &path).await?;
        if a.status == 200 {
            let _ = writeln!(out, "{id}: {verb}: done");
        } else {
            failed += 1;
            eprintln!("jaque: {id}: {verb}: {}", reason(a.status, &a.body));
        }
    }
    Ok(u8::from(failed > 0))
}

/// Columns padded to their widest cell, two spaces apart.
fn table(out: &mut impl Write, header: &[&str], rows: &[Vec<String>]) {
    let mut width: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len() - 1;
        let mut s = String::new();
        for (i, c) in cells.into_iter().enumerate() {
            s.push_str(c);
            if i < last {
                s.push_str(&" ".repeat(width[i] - c.chars().count() + 2));
            }
        }
        s
    };
    let _ = writeln!(out, "{}", line(header.to_vec()));
    for r in rows {
        let _ = writeln!(out, "{}", line(r.iter().map(String::as_str).collect()));
    }
}

fn json(out: &mut impl Write, v: &Value) {
    let _ = writeln!(out, "{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

/// How long ago `ms` (unix milliseconds) was, as kubectl's AGE column writes it.
fn age(ms: Option<u64>) -> String {
    let Some(ms) = ms else { return "-".into() };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    let s = now.saturating_sub(ms) / 1000;
    match s {
        0..120 => format!("{s}s"),
        120..7_200 => format!("{}m", s / 60),
        7_200..172_800 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// The state as the page shows it: the hard state, a soft one beside it ("ok, critical 2/3"), flapping, paused.
fn state_cell(o: &Value) -> String {
    let mut s = o["state"].as_str().unwrap_or("?").to_string();
    if let Some(soft) = o["soft"].as_object() {
        s.push_str(&format!(
            ", {} {}/{}",
            soft.get("state").and_then(Value::as_str).unwrap_or("?"),
            soft.get("attempt").and_then(Value::as_u64).unwrap_or(0),
            soft.get("of").and_then(Value::as_u64).unwrap_or(0)
        ));
    }
    for (flag, word) in [("flapping", "flapping"), ("paused", "paused"), ("acknowledged", "acked")] {
        if o[flag] == true {
            s.push_str(&format!(" ({word})"));
        }
    }
    s
}

fn probe_cell(p: &Value) -> String {
    let kind = p["type"].as_str().unwrap_or("?");
    let target = ["url", "addr", "command", "plugin"].iter().find_map(|k| p[*k].as_str()).unwrap_or("");
    format!("{kind} {target}")
}

fn labels_cell(l: &Value) -> String {
    let pairs: Vec<String> = l
        .as_object()
        .map_or_else(Vec::new, |m| m.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())).collect());
    if pairs.is_empty() {
        "-".into()
    } else {
        pairs.join(",")
    }
}

fn print_objects(out: &mut impl Write, objects: &[Value], output: GetOutput) {
    let rows = |wide: bool| -> Vec<Vec<String>> {
        objects
            .iter()
            .map(|o| {
                let d = &o["definition"];
                let mut row = vec![
                    o["id"].as_str().unwrap_or("?").to_string(),
                    state_cell(o),
                    age(o["state_since_ms"].as_u64()),
                    probe_cell(&d["probe"]),
                    d["interval"].as_str().unwrap_or("?").to_string(),
                ];
                if wide {
                    row.push(o["owner"].as_str().unwrap_or("-").to_string());
                    row.push(labels_cell(&d["labels"]));
                    row.push(format!(
                        "{} every {}",
                        d["max_attempts"].as_u64().unwrap_or(1),
                        d["retry_interval"].as_str().unwrap_or("?")
                    ));
                }
                row
            })
            .collect()
    };
    match output {
        // Always a list, however many matched: a script reads one shape.
        GetOutput::Json => json(out, &Value::Array(objects.to_vec())),
        GetOutput::Yaml => {
            let _ = out.write_all(yaml::objects_file(objects).as_bytes());
        }
        GetOutput::Table => table(out, &["ID", "STATE", "SINCE", "PROBE", "INTERVAL"], &rows(false)),
        GetOutput::Wide => {
            table(out, &["ID", "STATE", "SINCE", "PROBE", "INTERVAL", "OWNER", "LABELS", "ATTEMPTS"], &rows(true))
        }
    }
}

fn print_history(out: &mut impl Write, body: &Value, output: Output) {
    let events = body["events"].as_array().cloned().unwrap_or_default();
    if output == Output::Json {
        return json(out, body);
    }
    let rows: Vec<Vec<String>> = events
        .iter()
        .map(|e| {
            let mut change = match (e["from_state"].as_str(), e["to_state"].as_str()) {
                (Some(f), Some(t)) => format!("{f} -> {t}"),
                (None, Some(t)) => t.to_string(),
                _ => "-".into(),
            };
            if let (Some(a), Some(n)) = (e["attempt"].as_u64(), e["attempts_needed"].as_u64()) {
                change.push_str(&format!(" {a}/{n}"));
            }
            let mut row = vec![
                e["seq"].as_u64().map_or("?".into(), |s| s.to_string()),
                e["at"].as_str().unwrap_or("?").to_string(),
                e["type"].as_str().unwrap_or("?").to_string(),
                change,
            ];
            if output == Output::Wide {
                row.push(e["output"].as_str().unwrap_or("").replace('\n', " "));
            }
            row
        })
        .collect();
    let mut header = vec!["SEQ", "AT", "TYPE", "CHANGE"];
    if output == Output::Wide {
        header.push("OUTPUT");
    }
    table(out, &header, &rows);
}

fn print_cluster(out: &mut impl Write, body: &Value, output: Output) {
    if output == Output::Json {
        return json(out, body);
    }
    let buckets = body["buckets"].as_array().cloned().unwrap_or_default();
    // The engines' bucket is the one with an epoch; the others are named by their prefix (`sink/…`, `notifier/…`).
    let rows: Vec<Vec<String>> = buckets
        .iter()
        .flat_map(|b| {
            let engines = b["epoch"].is_u64();
            let prefix = b["bucket"].as_str().unwrap_or("?");
            let role = if engines { "engine" } else { prefix.split('/').next().unwrap_or(prefix) }.to_string();
            let per_owner = b["objects_per_owner"].clone();
            b["live_members"].as_array().cloned().unwrap_or_default().into_iter().map(move |m| {
                let id = m["id"].as_str().unwrap_or("?").to_string();
                let objects = per_owner[&id].as_u64().map_or("-".into(), |n| n.to_string());
                vec![role.clone(), id, objects]
            })
        })
        .collect();
    let _ = writeln!(
        out,
        "epoch {}, log position {}, cluster format {} (this build {})",
        buckets.iter().find_map(|b| b["epoch"].as_u64()).unwrap_or(0),
        body["log_position"].as_u64().unwrap_or(0),
        body["cluster_format"]["active"].as_u64().unwrap_or(0),
        body["cluster_format"]["this_build"].as_u64().unwrap_or(0),
    );
    table(out, &["ROLE", "MEMBER", "OBJECTS"], &rows);
}
