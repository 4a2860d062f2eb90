//! The sink's store (`-sink-store`): SQLite (a file, the default) or PostgreSQL, through sqlx without macros.
//! It owns the schema — a public contract, documented in the README — and the statements the core's `Batch`
//! and `QueryProgress` become, each written once over a `Dialect` (what the two databases write differently),
//! and it sorts database failures into the core's two kinds: `Unavailable` (the same again after a backoff) and
//! `Refused` (the data; the core narrows the batch down). It also answers the ui's history queries. Passwords
//! never reach a log line or an error: every message goes through `scrub`.

use jaque_core::secret::redact_urls_in;
use jaque_core::sink::{Batch, EventRow, ObjectRow};
use jaque_core::time::rfc3339_millis;
use jaque_core::IoError;
use jaque_core::{ObjectId, Time};
use serde::Serialize;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow};
use sqlx::{
    ColumnIndex, Database, Decode, Encode, FromRow, PgPool, Pool, Postgres, QueryBuilder, Row, Sqlite, SqlitePool,
    Transaction, Type,
};
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, UNIX_EPOCH};

/// The schema version this build writes and reads: 2 adds the alert columns (`MIGRATIONS`). A store with a
/// newer one is refused.
pub const SCHEMA_VERSION: i32 = 2;

/// The oldest schema version this build reads (and brings up to `SCHEMA_VERSION` when it opens the store): the
/// first one.
pub const OLDEST_SCHEMA_VERSION: i32 = 1;

/// `-sink-store` when a sink runs and none is given.
pub const DEFAULT_STORE: &str = "sqlite://jaque-sink.db";

/// Key of the advisory lock that serializes schema creation and migration among sinks starting together
/// (PostgreSQL). Every version takes the same key, so a sink of an older build that starts during a migration
/// waits for it, then finds the newer version and refuses it.
const SCHEMA_LOCK: i64 = 0x6a61_7175_655f_7331; // "jaque_s1"

/// Rows per multi-row INSERT (the core batches at most 1000 rows, so one statement a batch): 16 parameters an
/// event row (12 an objects row), 16,000 in all, under SQLite's 32766 and PostgreSQL's 65535.
const EVENTS_PER_STATEMENT: usize = 1000;
const OBJECTS_PER_STATEMENT: usize = 1000;

/// Whether a multi-row statement is worth keeping prepared: only the full-size one recurs (a storm writes it
/// again and again); every other row count is a different statement, and caching those (up to sqlx's 100 per
/// connection, the large ones hundreds of kilobytes each) made a sink's memory grow for hours.
fn is_full<T>(chunk: &[T], per_statement: usize) -> bool {
    chunk.len() == per_statement
}
/// Objects per progress query (an `IN` list).
const OBJECTS_PER_QUERY: usize = 1000;

/// A parsed `-sink-store`. Its `Debug` and `redacted()` never show a password.
#[derive(Clone)]
pub enum StoreUrl {
    Sqlite { path: PathBuf },
    Postgres { options: Box<PgConnectOptions>, redacted: String, password: Option<String> },
}

impl fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

/// The libpq URL parameters jaque takes (the TLS ones as PostgreSQL users write them).
const PG_PARAMS: [&str; 5] = ["sslmode", "sslrootcert", "sslcert", "sslkey", "application_name"];
const SSLMODES: [&str; 6] = ["disable", "allow", "prefer", "require", "verify-ca", "verify-full"];

impl StoreUrl {
    /// Parses `sqlite://PATH` or `postgres://user:pass@host:port/db?sslmode=...&sslrootcert=...`; the error says
    /// what is wrong (with the password redacted).
    pub fn parse(s: &str) -> Result<StoreUrl, String> {
        if let Some(path) = s.strip_prefix("sqlite://") {
            if path.is_empty() || path.contains('?') {
                return Err(format!("-sink-store: expected sqlite://PATH (a file), got {s:?}"));
            }
            let path = PathBuf::from(path);
            let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
            if !dir.is_dir() {
                return Err(format!("-sink-store: the directory of {} does not exist", path.display()));
            }
            return Ok(StoreUrl::Sqlite { path });
        }
        if !(s.starts_with("postgres://") || s.starts_with("postgresql://")) {
            return Err(format!(
                "-sink-store: expected sqlite://PATH or postgres://user:password@host:port/database, got {:?}",
                redact_text(s)
            ));
        }
        let url = url::Url::parse(s).map_err(|e| format!("-sink-store: {:?} is not a URL: {e}", redact_text(s)))?;
        let mut shown = url.clone();
        if url.password().is_some() {
            let _ = shown.set_password(Some("***"));
        }
        let redacted = shown.to_string();
        let bad = |why: String| Err(format!("-sink-store {redacted}: {why}"));
        if url.host_str().is_none_or(str::is_empty) {
            return bad("no host; write postgres://user:password@host:port/database".into());
        }
        let mut files = Vec::new();
        let (mut cert, mut key) = (false, false);
        for (k, v) in url.query_pairs() {
            match &*k {
                "sslmode" if !SSLMODES.contains(&&*v) => {
                    return bad(format!("sslmode={v} is not one of {}", SSLMODES.join(", ")))
                }
                "sslrootcert" | "sslcert" | "sslkey" => {
                    cert |= k == "sslcert";
                    key |= k == "sslkey";
                    files.push((k.to_string(), v.to_string()));
                }
                k if PG_PARAMS.contains(&k) => {}
                other => return bad(format!("unknown parameter {other:?}; jaque takes {}", PG_PARAMS.join(", "))),
            }
        }
        if cert != key {
            return bad("sslcert and sslkey go together".into());
        }
        for (k, file) in files {
            if !Path::new(&file).is_file() {
                return bad(format!("{k}={file}: no such file"));
            }
        }
        let password = url.password().map(|p| percent_encoding::percent_decode_str(p).decode_utf8_lossy().into_owned());
        let options = PgConnectOptions::from_str(s).map_err(|e| format!("-sink-store {redacted}: {e}"))?;
        Ok(StoreUrl::Postgres { options: Box::new(options), redacted, password })
    }

    pub fn redacted(&self) -> String {
        match self {
            StoreUrl::Sqlite { path } => format!("sqlite://{}", path.display()),
            StoreUrl::Postgres { redacted, .. } => redacted.clone(),
        }
    }
}

/// `s` with anything between `://user:` and `@` replaced, for echoing a URL that did not even parse.
fn redact_text(s: &str) -> String {
    let Some((scheme, rest)) = s.split_once("://") else { return s.to_string() };
    match rest.split_once('@') {
        Some((userinfo, host)) if userinfo.contains(':') => {
            let user = userinfo.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:***@{host}")
        }
        _ => s.to_string(),
    }
}

enum Db {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// Why the schema could not be made ready.
#[derive(Debug)]
pub enum SchemaError {
    /// The store is away: try again later.
    Unavailable(IoError),
    /// The store cannot be used by this build (a newer schema, a migration the database refuses): the process
    /// stops.
    Fatal(String),
}

/// How `Statements::schema` failed: the database's error, and the version it was migrating the store to when
/// it did (`None`: before or after every migration), which tells a migration the database refuses (a user that
/// may not alter the tables) from a store that is away.
struct SchemaFailure {
    migrating_to: Option<i32>,
    error: sqlx::Error,
}

impl From<sqlx::Error> for SchemaFailure {
    fn from(error: sqlx::Error) -> SchemaFailure {
        SchemaFailure { migrating_to: None, error }
    }
}

/// One event as the history API shows it.
#[derive(Debug, Serialize)]
pub struct HistoryEvent {
    pub seq: u64,
    /// RFC 3339, UTC, milliseconds.
    pub at: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub epoch: u64,
    pub writer: String,
    pub writer_incarnation: u64,
    pub from_state: Option<String>,
    pub to_state: Option<String>,
    pub output: Option<String>,
    pub command_id: Option<String>,
    pub definition: Option<serde_json::Value>,
    /// The alert columns (schema version 2), each left out where the row has none: a row of another kind, or
    /// one written before version 2.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hard: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts_needed: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flapping: Option<bool>,
}

/// A history query: events of `object` with `since <= at < until` (Unix ms) and `seq < before`, newest
/// first, at most `limit`.
#[derive(Debug, Clone)]
pub struct HistoryQuery {
    pub object: ObjectId,
    pub since_ms: Option<u64>,
    pub until_ms: Option<u64>,
    pub before: Option<u64>,
    pub limit: usize,
}

pub struct Store {
    db: Db,
    what: String,
    password: Option<String>,
    schema_ready: AtomicBool,
}

fn i64_of(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn u64_of(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// An RFC 3339 timestamp as Unix milliseconds, rounded up (so `at >= since` in milliseconds is exact).
pub fn parse_rfc3339_ms(s: &str) -> Result<u64, String> {
    let t = humantime::parse_rfc3339(s)
        .map_err(|e| format!("{s:?} is not an RFC 3339 UTC timestamp like 2025-01-31T12:00:00Z ({e})"))?;
    let d = t.duration_since(UNIX_EPOCH).map_err(|_| format!("{s:?} is before 1970"))?;
    Ok(d.as_millis() as u64 + u64::from(d.subsec_nanos() % 1_000_000 != 0))
}

/// The tables of schema version 1, as 0.1.0 made them. A new store is made by these and then every migration, so
/// a new store and a migrated one have the same tables.
const DDL_V1: [&str; 4] = [
    "CREATE TABLE IF NOT EXISTS events (seq BIGINT PRIMARY KEY, object TEXT NOT NULL, epoch BIGINT NOT NULL, \
     writer TEXT NOT NULL, writer_incarnation BIGINT NOT NULL, at {TS} NOT NULL, type TEXT NOT NULL, \
     from_state TEXT, to_state TEXT, output TEXT, command_id TEXT, definition TEXT)",
    "CREATE INDEX IF NOT EXISTS events_object_seq ON events (object, seq)",
    "CREATE TABLE IF NOT EXISTS objects (object TEXT PRIMARY KEY, state TEXT, definition TEXT, paused BOOLEAN, \
     acknowledged BOOLEAN, deleted BOOLEAN, last_seq BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS sink_progress (sink TEXT PRIMARY KEY, position BIGINT NOT NULL, updated_at {TS})",
];

/// What brings a store from the version before each to it: the statements, run once, in the transaction that
/// records the version, under the lock sinks starting together take. Only nullable columns added, so a
/// migration rewrites no row (instant at any size in both databases), and a sink of the previous version still
/// running goes on writing (its statements name their columns; its rows have NULL in the new ones).
const MIGRATIONS: [(i32, &[&str]); 1] = [(
    2,
    &[
        // How a check result stands to the hard state (`jaque_core::sink::AlertColumns`).
        "ALTER TABLE events ADD COLUMN hard BOOLEAN",
        "ALTER TABLE events ADD COLUMN attempt INTEGER",
        "ALTER TABLE events ADD COLUMN attempts_needed INTEGER",
        "ALTER TABLE events ADD COLUMN flapping BOOLEAN",
        // The object's labels and alert state (`jaque_core::sink::ObjectRow`).
        "ALTER TABLE objects ADD COLUMN labels TEXT",
        "ALTER TABLE objects ADD COLUMN soft_state TEXT",
        "ALTER TABLE objects ADD COLUMN soft_attempt INTEGER",
        "ALTER TABLE objects ADD COLUMN soft_attempts_needed INTEGER",
        "ALTER TABLE objects ADD COLUMN flapping BOOLEAN",
    ],
)];

const HISTORY_COLUMNS: &str = "seq, type, epoch, writer, writer_incarnation, from_state, to_state, output, \
                               command_id, definition, hard, attempt, attempts_needed, flapping";

/// The objects columns an upsert sets (all but the key).
const OBJECT_COLUMNS: [&str; 11] = [
    "state",
    "definition",
    "paused",
    "acknowledged",
    "deleted",
    "last_seq",
    "labels",
    "soft_state",
    "soft_attempt",
    "soft_attempts_needed",
    "flapping",
];

/// A count as an `INTEGER` column holds it (attempts are at most `jaque_core::alert::MAX_ATTEMPTS`).
fn i32_of(v: u32) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

/// What the two databases write differently, so that each statement below is written once: the type of a
/// timestamp column and how a time goes into one and comes out, how a transaction that writes begins, how
/// sinks starting together create the schema once, and which error codes are the data's fault. (An upsert is
/// `ON CONFLICT ... DO UPDATE` in both: `upsert`.)
trait Dialect: Database {
    /// The type of the timestamp columns (`at`, `updated_at`).
    const TIMESTAMP: &'static str;
    /// A time in a statement: `TIME.0`, the bound `time(ms)`, `TIME.1`.
    const TIME: (&'static str, &'static str);
    type Time: for<'q> Encode<'q, Self> + Type<Self> + Send + 'static;
    fn time(ms: u64) -> Self::Time;
    /// The current time, as a timestamp column holds it.
    const NOW: &'static str;
    /// The `at` column as a history query selects it, and `at_of`: what it selected, as RFC 3339 (UTC, ms).
    const AT: &'static str;
    fn at_of(row: &Self::Row) -> Result<String, sqlx::Error>;
    /// The statement that begins a transaction that writes (`None`: the driver's own `BEGIN`).
    const BEGIN: Option<&'static str>;
    /// What the transaction that creates the schema runs first, so that sinks starting together create it once.
    fn schema_lock() -> Vec<String>;
    /// Whether a database error's code says the data was refused (rather than the store being unavailable).
    fn refused(code: &str) -> bool;
    /// Whether an error's code, met while migrating, says the database will not take the migration however
    /// often it is tried (a user that may not alter the tables, a column already there), rather than that it is
    /// away.
    fn refuses_migration(code: &str) -> bool;
    /// Runs the statement `qb` built on `conn` (`persistent`: kept prepared for the next time).
    fn execute<'a>(
        qb: QueryBuilder<'a, Self>,
        persistent: bool,
        conn: &'a mut Self::Connection,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'a;
    /// The rows the query `qb` built selects, read on `conn`.
    fn fetch_all<'a>(
        qb: QueryBuilder<'a, Self>,
        conn: &'a mut Self::Connection,
    ) -> impl Future<Output = Result<Vec<Self::Row>, sqlx::Error>> + Send + 'a;
}

/// How a built statement runs: the same text for both drivers, compiled for each, because a builder may be
/// dropped only once its arguments are no longer borrowed, which the compiler can see of each driver's
/// arguments and not of any `Database`'s.
macro_rules! run_statements {
    () => {
        async fn execute<'a>(
            mut qb: QueryBuilder<'a, Self>,
            persistent: bool,
            conn: &'a mut Self::Connection,
        ) -> Result<(), sqlx::Error> {
            qb.build().persistent(persistent).execute(conn).await.map(drop)
        }

        async fn fetch_all<'a>(
            mut qb: QueryBuilder<'a, Self>,
            conn: &'a mut Self::Connection,
        ) -> Result<Vec<Self::Row>, sqlx::Error> {
            qb.build().fetch_all(conn).await
        }
    };
}

/// PostgreSQL: timestamps are `TIMESTAMPTZ`, written from milliseconds and read back as milliseconds.
impl Dialect for Postgres {
    const TIMESTAMP: &'static str = "TIMESTAMPTZ";
    const TIME: (&'static str, &'static str) = ("to_timestamp(", "::float8 / 1000)");
    type Time = i64;
    fn time(ms: u64) -> i64 {
        i64_of(ms)
    }
    const NOW: &'static str = "now()";
    const AT: &'static str = "(extract(epoch FROM at) * 1000)::int8 AS at_ms";
    fn at_of(row: &PgRow) -> Result<String, sqlx::Error> {
        Ok(rfc3339_millis(Time(u64_of(row.try_get("at_ms")?))))
    }
    const BEGIN: Option<&'static str> = None;
    fn schema_lock() -> Vec<String> {
        // No "already exists, skipping" notice in the log at every start.
        vec![format!("SELECT pg_advisory_xact_lock({SCHEMA_LOCK})"), "SET LOCAL client_min_messages = warning".into()]
    }
    /// SQLSTATE classes 22 (data exception) and 23 (integrity constraint), and 54 (too big).
    fn refused(code: &str) -> bool {
        ["22", "23", "54"].iter().any(|class| code.starts_with(class))
    }
    /// SQLSTATE class 42 (syntax error or access rule violation: 42501 insufficient privilege, 42701 duplicate
    /// column, 42P01 undefined table).
    fn refuses_migration(code: &str) -> bool {
        code.starts_with("42")
    }
    run_statements!();
}

/// SQLite: timestamps are RFC 3339 text in UTC with milliseconds, which sorts as the times do.
impl Dialect for Sqlite {
    const TIMESTAMP: &'static str = "TEXT";
    const TIME: (&'static str, &'static str) = ("", "");
    type Time = String;
    fn time(ms: u64) -> String {
        rfc3339_millis(Time(ms))
    }
    const NOW: &'static str = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')";
    const AT: &'static str = "at";
    fn at_of(row: &SqliteRow) -> Result<String, sqlx::Error> {
        row.try_get("at")
    }
    /// IMMEDIATE takes the write lock at once: two processes on one file create the tables once, and a
    /// transaction never fails halfway for a lock it could not upgrade.
    const BEGIN: Option<&'static str> = Some("BEGIN IMMEDIATE");
    fn schema_lock() -> Vec<String> {
        vec![]
    }
    /// The extended result code's low byte, the primary code: too big, constraint, mismatch, range.
    fn refused(code: &str) -> bool {
        code.parse::<i32>().is_ok_and(|c| matches!(c & 0xff, 18 | 19 | 20 | 25))
    }
    /// The primary codes SQLITE_ERROR (a duplicate column, no such table), SQLITE_READONLY and SQLITE_AUTH.
    fn refuses_migration(code: &str) -> bool {
        code.parse::<i32>().is_ok_and(|c| matches!(c & 0xff, 1 | 8 | 23))
    }
    run_statements!();
}

/// ` ON CONFLICT (key) DO UPDATE SET` each of `columns` to the row being inserted, only `when` that holds of the
/// row already there.
fn upsert(key: &str, columns: &[&str], when: Option<&str>) -> String {
    let set: Vec<String> = columns.iter().map(|c| format!("{c} = excluded.{c}")).collect();
    let when = when.map(|w| format!(" WHERE {w}")).unwrap_or_default();
    format!(" ON CONFLICT ({key}) DO UPDATE SET {}{when}", set.join(", "))
}

/// Same-sequence rows once (a resume may hand a row out twice): a multi-row statement then stays simple.
fn unique_events(b: &Batch) -> Vec<&EventRow> {
    let mut seen = std::collections::BTreeSet::new();
    b.events.iter().filter(|r| seen.insert(r.seq)).collect()
}

/// The statements, each written once for either database.
struct Statements<DB>(PhantomData<DB>);

impl<DB: Dialect> Statements<DB>
where
    for<'q> DB::Arguments<'q>: Default,
    for<'q> i32: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB> + Type<DB>,
    for<'q> Option<bool>: Encode<'q, DB> + Type<DB>,
    for<'q> Option<i32>: Encode<'q, DB> + Type<DB>,
    for<'r> (Option<i32>,): FromRow<'r, DB::Row>,
    for<'r> (String, i64): FromRow<'r, DB::Row>,
    for<'a> &'a str: ColumnIndex<DB::Row>,
    for<'a> i64: Decode<'a, DB>,
    for<'a> String: Decode<'a, DB>,
    for<'a> Option<String>: Decode<'a, DB>,
    for<'a> Option<bool>: Decode<'a, DB>,
    for<'a> Option<i32>: Decode<'a, DB>,
{
    async fn begin(pool: &Pool<DB>) -> Result<Transaction<'static, DB>, sqlx::Error> {
        match DB::BEGIN {
            Some(statement) => pool.begin_with(statement).await,
            None => pool.begin().await,
        }
    }

    /// The version found (None: a new store). A new store is created at `SCHEMA_VERSION`, an older one migrated
    /// to it (its versions' rows kept, the new one's added), all in one transaction under the lock; the current
    /// version and newer ones are left alone. Idempotent: a second sink waits at the lock, then finds the
    /// version the first recorded.
    async fn schema(pool: &Pool<DB>) -> Result<Option<i32>, SchemaFailure> {
        let mut tx = Self::begin(pool).await?;
        for statement in DB::schema_lock() {
            DB::execute(QueryBuilder::new(statement), true, &mut tx).await?;
        }
        let create = "CREATE TABLE IF NOT EXISTS jaque_schema (version INTEGER NOT NULL)";
        DB::execute(QueryBuilder::new(create), true, &mut tx).await?;
        let rows = DB::fetch_all(QueryBuilder::new("SELECT max(version) FROM jaque_schema"), &mut tx).await?;
        let found = match rows.first() {
            Some(row) => <(Option<i32>,)>::from_row(row)?.0,
            None => None,
        };
        if found.is_some_and(|v| v >= SCHEMA_VERSION) {
            tx.commit().await?;
            return Ok(found);
        }
        let from = match found {
            Some(v) => v,
            None => {
                for ddl in DDL_V1 {
                    DB::execute(QueryBuilder::new(ddl.replace("{TS}", DB::TIMESTAMP)), false, &mut tx).await?;
                }
                1
            }
        };
        for (to, statements) in MIGRATIONS.iter().filter(|(to, _)| *to > from) {
            for statement in *statements {
                DB::execute(QueryBuilder::new(*statement), false, &mut tx)
                    .await
                    .map_err(|error| SchemaFailure { migrating_to: Some(*to), error })?;
            }
        }
        let mut insert = QueryBuilder::new("INSERT INTO jaque_schema (version) VALUES (");
        insert.push_bind(SCHEMA_VERSION).push(")");
        DB::execute(insert, false, &mut tx).await?;
        tx.commit().await?;
        Ok(found)
    }

    /// One transaction: the event rows, the object rows, the sink's progress.
    async fn write(pool: &Pool<DB>, b: &Batch) -> Result<(), sqlx::Error> {
        let mut tx = Self::begin(pool).await?;
        let events = unique_events(b);
        for chunk in events.chunks(EVENTS_PER_STATEMENT) {
            let mut qb = QueryBuilder::<DB>::new(
                "INSERT INTO events (seq, object, epoch, writer, writer_incarnation, at, type, from_state, to_state, \
                 output, command_id, definition, hard, attempt, attempts_needed, flapping) ",
            );
            qb.push_values(chunk.iter().copied(), |mut b, r: &EventRow| {
                b.push_bind(i64_of(r.seq))
                    .push_bind(r.object.to_string())
                    .push_bind(i64_of(r.epoch))
                    .push_bind(r.writer.to_string())
                    .push_bind(i64_of(r.writer_incarnation))
                    .push(DB::TIME.0)
                    .push_bind_unseparated(DB::time(r.at.as_millis()))
                    .push_unseparated(DB::TIME.1)
                    .push_bind(r.kind.to_string())
                    .push_bind(r.from_state.map(|s| s.as_str().to_string()))
                    .push_bind(r.to_state.map(|s| s.as_str().to_string()))
                    .push_bind(r.output.clone())
                    .push_bind(r.command_id.as_ref().map(|c| c.to_string()))
                    .push_bind(r.definition.clone())
                    .push_bind(r.alert.hard)
                    .push_bind(r.alert.attempt.map(i32_of))
                    .push_bind(r.alert.attempts_needed.map(i32_of))
                    .push_bind(r.alert.flapping);
            });
            qb.push(" ON CONFLICT (seq) DO NOTHING");
            DB::execute(qb, is_full(chunk, EVENTS_PER_STATEMENT), &mut tx).await?;
        }
        for chunk in b.objects.chunks(OBJECTS_PER_STATEMENT) {
            let mut qb =
                QueryBuilder::<DB>::new(format!("INSERT INTO objects (object, {}) ", OBJECT_COLUMNS.join(", ")));
            qb.push_values(chunk, |mut b, o: &ObjectRow| {
                b.push_bind(o.object.to_string())
                    .push_bind(o.state.map(|s| s.as_str().to_string()))
                    .push_bind(o.definition.clone())
                    .push_bind(o.paused)
                    .push_bind(o.acknowledged)
                    .push_bind(o.deleted)
                    .push_bind(i64_of(o.last_seq))
                    .push_bind(o.labels.clone())
                    .push_bind(o.soft_state.map(|s| s.as_str().to_string()))
                    .push_bind(o.soft_attempt.map(i32_of))
                    .push_bind(o.soft_attempts_needed.map(i32_of))
                    .push_bind(o.flapping);
            });
            qb.push(upsert("object", &OBJECT_COLUMNS, Some("objects.last_seq <= excluded.last_seq")));
            DB::execute(qb, is_full(chunk, OBJECTS_PER_STATEMENT), &mut tx).await?;
        }
        let mut progress = QueryBuilder::<DB>::new("INSERT INTO sink_progress (sink, position, updated_at) VALUES (");
        progress.push_bind(b.progress.sink.to_string()).push(", ").push_bind(i64_of(b.progress.position));
        progress.push(format!(", {})", DB::NOW)).push(upsert("sink", &["position", "updated_at"], None));
        DB::execute(progress, true, &mut tx).await?;
        tx.commit().await
    }

    /// Each object's last stored log position, for objects in one `IN` list.
    async fn last_seqs(pool: &Pool<DB>, objects: &[ObjectId]) -> Result<Vec<(String, i64)>, sqlx::Error> {
        let mut qb = QueryBuilder::<DB>::new("SELECT object, max(seq) FROM events WHERE object IN (");
        let mut list = qb.separated(", ");
        for o in objects {
            list.push_bind(o.to_string());
        }
        qb.push(") GROUP BY object");
        let rows = DB::fetch_all(qb, &mut *pool.acquire().await?).await?;
        rows.iter().map(<(String, i64)>::from_row).collect()
    }

    /// One page of an object's history, newest first: `q.limit` events and one more if there is more.
    async fn history(pool: &Pool<DB>, q: &HistoryQuery) -> Result<Vec<HistoryEvent>, sqlx::Error> {
        let mut qb =
            QueryBuilder::<DB>::new(format!("SELECT {HISTORY_COLUMNS}, {} FROM events WHERE object = ", DB::AT));
        qb.push_bind(q.object.to_string());
        if let Some(b) = q.before {
            qb.push(" AND seq < ").push_bind(i64_of(b));
        }
        if let Some(s) = q.since_ms {
            qb.push(" AND at >= ").push(DB::TIME.0).push_bind(DB::time(s)).push(DB::TIME.1);
        }
        if let Some(u) = q.until_ms {
            qb.push(" AND at < ").push(DB::TIME.0).push_bind(DB::time(u)).push(DB::TIME.1);
        }
        qb.push(" ORDER BY seq DESC LIMIT ").push_bind(i64::try_from(q.limit + 1).unwrap_or(i64::MAX));
        let rows = DB::fetch_all(qb, &mut *pool.acquire().await?).await?;
        rows.iter().map(|row| history_event(row, DB::at_of(row)?)).collect()
    }
}

/// A row of a history query as the API shows it; `at` already read as RFC 3339.
fn history_event<R: Row>(row: &R, at: String) -> Result<HistoryEvent, sqlx::Error>
where
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> Option<String>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> Option<bool>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> Option<i32>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    // Rows are written redacted (`sink::definition_json`, the engine's scrub of outputs); rows written by an
    // older jaque are redacted here, so the history API never shows a credential either way.
    let definition: Option<String> = row.try_get("definition")?;
    let definition = definition.map(|d| redact_urls_in(&d).into_owned());
    let output: Option<String> = row.try_get("output")?;
    let count = |column: &str| -> Result<Option<u32>, sqlx::Error> {
        Ok(row.try_get::<Option<i32>, _>(column)?.and_then(|n| u32::try_from(n).ok()))
    };
    Ok(HistoryEvent {
        seq: u64_of(row.try_get("seq")?),
        at,
        kind: row.try_get("type")?,
        epoch: u64_of(row.try_get("epoch")?),
        writer: row.try_get("writer")?,
        writer_incarnation: u64_of(row.try_get("writer_incarnation")?),
        from_state: row.try_get("from_state")?,
        to_state: row.try_get("to_state")?,
        output: output.map(|o| redact_urls_in(&o).into_owned()),
        command_id: row.try_get("command_id")?,
        definition: definition.map(|d| serde_json::from_str(&d).unwrap_or(serde_json::Value::String(d))),
        hard: row.try_get("hard")?,
        attempt: count("attempt")?,
        attempts_needed: count("attempts_needed")?,
        flapping: row.try_get("flapping")?,
    })
}

/// Runs `$body` with `$pool` the store's pool, whichever database it is: the one place the two part.
macro_rules! on_pool {
    ($db:expr, $pool:ident => $body:expr) => {
        match $db {
            Db::Postgres($pool) => $body,
            Db::Sqlite($pool) => $body,
        }
    };
}

impl Store {
    /// A store for `url`. Nothing is connected yet: connections are made when needed, so a database that is
    /// away at start is retried like one that goes away later.
    pub fn open(url: &StoreUrl) -> Store {
        let (db, password) = match url {
            StoreUrl::Sqlite { path } => {
                let opts = SqliteConnectOptions::new()
                    .filename(path)
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .busy_timeout(Duration::from_secs(5));
                let pool = SqlitePoolOptions::new()
                    .max_connections(4)
                    .acquire_timeout(Duration::from_secs(10))
                    .connect_lazy_with(opts);
                (Db::Sqlite(pool), None)
            }
            StoreUrl::Postgres { options, password, .. } => {
                let opts = (**options).clone().options([("statement_timeout", "30s")]);
                let pool = PgPoolOptions::new()
                    .max_connections(4)
                    .acquire_timeout(Duration::from_secs(5))
                    .connect_lazy_with(opts);
                (Db::Postgres(pool), password.clone())
            }
        };
        Store { db, what: url.redacted(), password, schema_ready: AtomicBool::new(false) }
    }

    /// The store's URL with its password redacted.
    pub fn what(&self) -> &str {
        &self.what
    }

    /// `msg` without the password.
    fn scrub(&self, msg: String) -> String {
        match &self.password {
            Some(p) if !p.is_empty() => msg.replace(p.as_str(), "***"),
            _ => msg,
        }
    }

    /// Sorts a database error into the core's kinds: the data (SQLSTATE classes 22 and 23, 54 "too big"; SQLite
    /// constraint, too big, mismatch, range) is refused; everything else (connections, timeouts, the pool,
    /// shutdowns 57P0x, serialization and deadlock 40001/40P01, SQLite busy or locked) is unavailable.
    fn classify(&self, e: sqlx::Error) -> IoError {
        let refused = match &e {
            sqlx::Error::Database(db) => {
                let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
                match self.db {
                    Db::Postgres(_) => Postgres::refused(&code),
                    Db::Sqlite(_) => Sqlite::refused(&code),
                }
            }
            sqlx::Error::Encode(_) => true,
            _ => false,
        };
        let code = match &e {
            sqlx::Error::Database(db) => db.code().map(|c| format!(" (code {c})")).unwrap_or_default(),
            _ => String::new(),
        };
        let msg = self.scrub(format!("{}: {e}{code}", self.what));
        if refused {
            IoError::Refused(msg)
        } else {
            IoError::Unavailable(msg)
        }
    }

    /// Creates the tables at this build's schema version, migrates an older store to it, or checks they are
    /// there, under a lock so sinks starting together do it once. A store with a newer version is refused, and
    /// so is a migration the database will not take (a user that may not alter the tables).
    pub async fn ensure_schema(&self) -> Result<(), SchemaError> {
        if self.schema_ready.load(Ordering::Acquire) {
            return Ok(());
        }
        let version = on_pool!(&self.db, pool => Statements::schema(pool).await).map_err(|f| self.schema_failed(f))?;
        match version {
            Some(v) if v > SCHEMA_VERSION => Err(SchemaError::Fatal(format!(
                "the store {} has schema version {v}, newer than this build of jaque knows ({SCHEMA_VERSION}): \
                 run a newer jaque, or point -sink-store at another database",
                self.what
            ))),
            found => {
                if let Some(v) = found.filter(|v| *v < SCHEMA_VERSION) {
                    tracing::info!(store = %self.what, from = v, to = SCHEMA_VERSION, "sink store: schema migrated");
                }
                self.schema_ready.store(true, Ordering::Release);
                Ok(())
            }
        }
    }

    /// A failed schema step as the caller acts on it: a migration the database refuses stops the process,
    /// saying what to do; anything else is retried.
    fn schema_failed(&self, f: SchemaFailure) -> SchemaError {
        let code = match &f.error {
            sqlx::Error::Database(db) => db.code().map(|c| c.into_owned()),
            _ => None,
        };
        let refuses = |code: &str| match self.db {
            Db::Postgres(_) => Postgres::refuses_migration(code),
            Db::Sqlite(_) => Sqlite::refuses_migration(code),
        };
        match (f.migrating_to, code) {
            (Some(to), Some(code)) if refuses(&code) => SchemaError::Fatal(self.scrub(format!(
                "the store {} cannot be migrated to schema version {to}: {} (code {code}). The sink's database \
                 user must be allowed to ALTER TABLE events and objects (their owner); nothing was changed, the \
                 store is still at its version (docs/upgrading.md, \"The sink schema version\")",
                self.what, f.error
            ))),
            _ => SchemaError::Unavailable(self.classify(f.error)),
        }
    }

    /// One transaction: the event rows (a `seq` already there is left alone), the object rows (only over an
    /// older one), and the sink's progress.
    pub async fn write(&self, b: &Batch) -> Result<(), IoError> {
        on_pool!(&self.db, pool => Statements::write(pool, b).await).map_err(|e| self.classify(e))
    }

    /// Each object's last stored log position (objects with none are absent).
    pub async fn last_seqs(&self, objects: &[ObjectId]) -> Result<Vec<(ObjectId, u64)>, IoError> {
        let mut out = Vec::new();
        for chunk in objects.chunks(OBJECTS_PER_QUERY) {
            let rows =
                on_pool!(&self.db, pool => Statements::last_seqs(pool, chunk).await).map_err(|e| self.classify(e))?;
            out.extend(rows.into_iter().filter_map(|(o, s)| Some((ObjectId::new(o).ok()?, u64_of(s)))));
        }
        Ok(out)
    }

    /// One page of an object's history, newest first, and whether there is more after it.
    pub async fn history(&self, q: &HistoryQuery) -> Result<(Vec<HistoryEvent>, bool), IoError> {
        if let Err(e) = self.ensure_schema().await {
            return Err(match e {
                SchemaError::Unavailable(e) => e,
                SchemaError::Fatal(m) => IoError::Unavailable(m),
            });
        }
        let mut events =
            on_pool!(&self.db, pool => Statements::history(pool, q).await).map_err(|e| self.classify(e))?;
        let more = events.len() > q.limit;
        events.truncate(q.limit);
        Ok((events, more))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jaque_core::sink::AlertColumns;

    #[test]
    fn urls_parse_or_say_what_is_wrong_without_the_password() {
        assert!(matches!(StoreUrl::parse("sqlite://jaque-sink.db"), Ok(StoreUrl::Sqlite { .. })));
        let pg = StoreUrl::parse("postgres://u:s3cret@127.0.0.1:5432/db?sslmode=require").unwrap();
        assert_eq!(pg.redacted(), "postgres://u:***@127.0.0.1:5432/db?sslmode=require");
        assert!(!format!("{pg:?}").contains("s3cret"));
        for (bad, want) in [
            ("mysql://x", "expected sqlite://PATH or postgres://"),
            ("sqlite://", "expected sqlite://PATH"),
            ("sqlite:///no/such/dir/x.db", "does not exist"),
            ("postgres://u:s3cret@127.0.0.1:5432/db?sslmode=sometimes", "sslmode=sometimes"),
            ("postgres://u:s3cret@127.0.0.1:5432/db?color=blue", "unknown parameter"),
            ("postgres://u:s3cret@127.0.0.1:5432/db?sslrootcert=/no/ca.pem", "no such file"),
            ("postgres://u:s3cret@127.0.0.1:99999/db", "not a URL"),
        ] {
            let e = StoreUrl::parse(bad).unwrap_err();
            assert!(e.contains(want), "{bad}: {e}");
            assert!(!e.contains("s3cret"), "{bad}: {e}");
        }
    }

    #[test]
    fn an_upsert_updates_every_column_given_and_only_when_asked() {
        let columns = ["state", "definition", "paused", "acknowledged", "deleted", "last_seq"];
        assert_eq!(
            upsert("object", &columns, Some("objects.last_seq <= excluded.last_seq")),
            " ON CONFLICT (object) DO UPDATE SET state = excluded.state, definition = excluded.definition, \
             paused = excluded.paused, acknowledged = excluded.acknowledged, deleted = excluded.deleted, \
             last_seq = excluded.last_seq WHERE objects.last_seq <= excluded.last_seq"
        );
        assert_eq!(
            upsert("sink", &["position", "updated_at"], None),
            " ON CONFLICT (sink) DO UPDATE SET position = excluded.position, updated_at = excluded.updated_at"
        );
    }

    /// A batch written to SQLite comes back from the progress query and the history, its time as written.
    #[tokio::test]
    async fn a_batch_written_to_sqlite_reads_back_in_history_and_progress() {
        let dir = tempfile::tempdir().unwrap();
        let url = StoreUrl::parse(&format!("sqlite://{}", dir.path().join("sink.db").display())).unwrap();
        let store = Store::open(&url);
        store.ensure_schema().await.unwrap();
        let object = ObjectId::new("web").unwrap();
        let row = |seq: u64, at: u64| EventRow {
            seq,
            object: object.clone(),
            epoch: 1,
            writer: jaque_core::MemberId::new("e1").unwrap(),
            writer_incarnation: 7,
            at: Time(at),
            kind: "transition",
            from_state: Some(jaque_core::State::Ok),
            to_state: Some(jaque_core::State::Critical),
            output: Some("down".into()),
            command_id: None,
            definition: None,
            alert: AlertColumns { hard: Some(true), attempt: Some(3), attempts_needed: None, flapping: None },
        };
        let objects = vec![ObjectRow {
            object: object.clone(),
            state: Some(jaque_core::State::Critical),
            definition: None,
            paused: false,
            acknowledged: false,
            deleted: false,
            last_seq: 4,
            labels: Some("{}".into()),
            soft_state: None,
            soft_attempt: None,
            soft_attempts_needed: None,
            flapping: false,
        }];
        let progress = jaque_core::sink::Progress { sink: jaque_core::MemberId::new("s1").unwrap(), position: 4 };
        let events = vec![row(3, 1_700_000_000_123), row(4, 1_700_000_001_000), row(4, 1_700_000_001_000)];
        let batch = Batch { id: 1, events, objects, progress };
        store.write(&batch).await.unwrap();
        store.write(&batch).await.unwrap();
        assert_eq!(store.last_seqs(std::slice::from_ref(&object)).await.unwrap(), vec![(object.clone(), 4)]);
        let q = HistoryQuery { object, since_ms: Some(1_700_000_000_123), until_ms: None, before: None, limit: 1 };
        let (events, more) = store.history(&q).await.unwrap();
        assert!(more);
        assert_eq!((events[0].seq, events[0].at.as_str()), (4, "2023-11-14T22:13:21.000Z"));
        assert_eq!((events[0].hard, events[0].attempt, events[0].attempts_needed), (Some(true), Some(3), None));
        let q = HistoryQuery { until_ms: Some(1_700_000_001_000), limit: 10, ..q };
        let (events, more) = store.history(&q).await.unwrap();
        assert!(!more);
        assert_eq!((events.len(), events[0].at.as_str()), (1, "2023-11-14T22:13:20.123Z"));
    }

    /// A SQLite file made as schema version 1 was (0.1.0's tables, its version row), with one row of each table.
    async fn version_1_sqlite(path: &Path) -> SqlitePool {
        let opts = SqliteConnectOptions::new().filename(path).create_if_missing(true);
        let pool = SqlitePool::connect_with(opts).await.unwrap();
        sqlx::query("CREATE TABLE jaque_schema (version INTEGER NOT NULL)").execute(&pool).await.unwrap();
        for ddl in DDL_V1 {
            sqlx::query(&ddl.replace("{TS}", "TEXT")).execute(&pool).await.unwrap();
        }
        for insert in [
            "INSERT INTO jaque_schema (version) VALUES (1)",
            "INSERT INTO events VALUES (2, 'db', 1, 'e1', 7, '2026-12-07T16:50:50.184Z', 'transition', 'pending', \
             'critical', 'refused', NULL, NULL)",
            "INSERT INTO objects VALUES ('db', 'critical', '{}', 0, 0, 0, 2)",
            "INSERT INTO sink_progress VALUES ('s1', 2, '2026-12-07T16:50:50.200Z')",
        ] {
            sqlx::query(insert).execute(&pool).await.unwrap();
        }
        pool
    }

    async fn columns(pool: &SqlitePool, table: &str) -> Vec<(String, String)> {
        sqlx::query_as(&format!("SELECT name, type FROM pragma_table_info('{table}') ORDER BY cid"))
            .fetch_all(pool)
            .await
            .unwrap()
    }

    fn sqlite_store(path: &Path) -> Store {
        Store::open(&StoreUrl::parse(&format!("sqlite://{}", path.display())).unwrap())
    }

    /// Version 1 to 2: the new columns added (NULL in the rows already there), version 2 recorded beside 1, the
    /// same tables a new store gets; again, nothing more; the history shows the old row as it was.
    #[tokio::test]
    async fn a_version_1_sqlite_store_is_migrated_once_with_its_rows_intact() {
        let dir = tempfile::tempdir().unwrap();
        let old = version_1_sqlite(&dir.path().join("old.db")).await;
        for _ in 0..2 {
            sqlite_store(&dir.path().join("old.db")).ensure_schema().await.unwrap();
            let versions: Vec<(i32,)> =
                sqlx::query_as("SELECT version FROM jaque_schema ORDER BY version").fetch_all(&old).await.unwrap();
            assert_eq!(versions, [(1,), (2,)], "version 2 recorded once, beside 1");
        }
        let new = sqlite_store(&dir.path().join("new.db"));
        new.ensure_schema().await.unwrap();
        let fresh =
            SqlitePool::connect_with(SqliteConnectOptions::new().filename(dir.path().join("new.db"))).await.unwrap();
        for table in ["events", "objects", "sink_progress", "jaque_schema"] {
            assert_eq!(columns(&old, table).await, columns(&fresh, table).await, "{table}");
        }
        let names: Vec<String> = columns(&old, "events").await.into_iter().map(|c| c.0).collect();
        assert_eq!(names[12..], ["hard", "attempt", "attempts_needed", "flapping"]);
        let names: Vec<String> = columns(&old, "objects").await.into_iter().map(|c| c.0).collect();
        assert_eq!(names[7..], ["labels", "soft_state", "soft_attempt", "soft_attempts_needed", "flapping"]);
        let (versions,): (i64,) = sqlx::query_as("SELECT count(*) FROM jaque_schema").fetch_one(&fresh).await.unwrap();
        assert_eq!(versions, 1, "a new store records its version alone");

        let row: (String, String, Option<bool>, Option<i32>, Option<bool>) =
            sqlx::query_as("SELECT type, to_state, hard, attempt, flapping FROM events WHERE seq = 2")
                .fetch_one(&old)
                .await
                .unwrap();
        assert_eq!(row, ("transition".into(), "critical".into(), None, None, None));
        let object: (String, i64, Option<String>, Option<bool>) =
            sqlx::query_as("SELECT state, last_seq, labels, flapping FROM objects").fetch_one(&old).await.unwrap();
        assert_eq!(object, ("critical".into(), 2, None, None), "filled when a sink next writes the row");
        let q = HistoryQuery {
            object: ObjectId::new("db").unwrap(),
            since_ms: None,
            until_ms: None,
            before: None,
            limit: 10,
        };
        let (events, _) = sqlite_store(&dir.path().join("old.db")).history(&q).await.unwrap();
        let json = serde_json::to_value(&events).unwrap();
        assert_eq!(json[0]["at"], "2026-12-07T16:50:50.184Z");
        assert_eq!(json[0]["to_state"], "critical");
        assert!(json[0].get("hard").is_none(), "a column the row has no value in is left out: {json}");

        // The way back docs/upgrading.md gives: version 1's tables and rows again, and a migration again after.
        sqlx::raw_sql(&rollback_sql()).execute(&old).await.unwrap();
        let versions: Vec<(i32,)> = sqlx::query_as("SELECT version FROM jaque_schema").fetch_all(&old).await.unwrap();
        assert_eq!(versions, [(1,)]);
        let fresh_v1 = version_1_sqlite(&dir.path().join("v1.db")).await;
        for table in ["events", "objects"] {
            assert_eq!(columns(&old, table).await, columns(&fresh_v1, table).await, "{table} as version 1 made it");
        }
        sqlite_store(&dir.path().join("old.db")).ensure_schema().await.unwrap();
        assert_eq!(columns(&old, "events").await.len(), 16, "migrated again");
    }

    /// The statements docs/upgrading.md gives to take a store from version 2 back to 1.
    fn rollback_sql() -> String {
        let doc = include_str!("../../../docs/upgrading.md");
        let (_, from) = doc.split_once("```sql\nBEGIN;").expect("docs/upgrading.md gives the way back in SQL");
        format!("BEGIN;{}", from.split_once("```").unwrap().0)
    }

    /// A migration the database refuses (here a column already there) stops the sink with what to do, and
    /// changes nothing: the store stays at version 1, without the columns added before the refusal.
    #[tokio::test]
    async fn a_migration_the_database_refuses_changes_nothing_and_says_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        let old = version_1_sqlite(&path).await;
        sqlx::query("ALTER TABLE objects ADD COLUMN flapping TEXT").execute(&old).await.unwrap();
        let Err(SchemaError::Fatal(msg)) = sqlite_store(&path).ensure_schema().await else {
            panic!("a migration that cannot apply is not retried for ever");
        };
        assert!(msg.contains("cannot be migrated to schema version 2") && msg.contains("ALTER TABLE"), "{msg}");
        let (version,): (i32,) = sqlx::query_as("SELECT max(version) FROM jaque_schema").fetch_one(&old).await.unwrap();
        assert_eq!(version, 1);
        assert_eq!(columns(&old, "events").await.len(), 12, "the columns added before the refusal rolled back");
    }

    #[tokio::test]
    async fn a_store_of_a_newer_schema_version_is_refused_naming_both_versions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new.db");
        sqlite_store(&path).ensure_schema().await.unwrap();
        let pool = SqlitePool::connect_with(SqliteConnectOptions::new().filename(&path)).await.unwrap();
        sqlx::query("INSERT INTO jaque_schema (version) VALUES (3)").execute(&pool).await.unwrap();
        let Err(SchemaError::Fatal(msg)) = sqlite_store(&path).ensure_schema().await else { panic!("refused") };
        assert!(msg.contains("schema version 3, newer than this build of jaque knows (2)"), "{msg}");
    }

    #[test]
    fn timestamps_round_trip_in_milliseconds() {
        let ms = 1_700_000_000_123;
        let s = rfc3339_millis(Time(ms));
        assert_eq!(s, "2023-11-14T22:13:20.123Z");
        assert_eq!(parse_rfc3339_ms(&s), Ok(ms));
        assert_eq!(parse_rfc3339_ms("2023-11-14T22:13:20.1234Z"), Ok(ms + 1));
        assert!(parse_rfc3339_ms("yesterday").is_err());
    }
}
