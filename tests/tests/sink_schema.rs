//! The sink's store at schema version 2 (issue 34) against real processes: a check's soft attempts and its hard
//! transition stored with their alert columns and the object's row with its labels and soft state, in SQLite and
//! PostgreSQL; the v0.1.0 stores of `tests/compat/v0.1.0/` (a `-data-dir`'s SQLite file, a PostgreSQL dump)
//! migrated from version 1 with their rows intact, the PostgreSQL one by three sinks starting at once. The store
//! is read here with a client of the test's own.

use jaque_tests::postgres::psql_file;
use jaque_tests::{poll, Jaque, Nats, Postgres, Target};
use serde_json::{json, Value};
use sqlx::Row;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The PostgreSQL tests run one at a time, so the machine's two cores are not shared by several clusters.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// The rows `sql` selects from the store at `url` (`sqlite://…` or `postgres://…`), one string a row, its columns
/// joined by `|`, NULL as empty (as `psql -At` prints them). Every column `sql` selects must be text (`text` below).
fn rows(url: &str, sql: &str) -> Vec<String> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        fn line<R: Row>(row: &R) -> String
        where
            usize: sqlx::ColumnIndex<R>,
            for<'a> Option<String>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
        {
            (0..row.len())
                .map(|i| row.try_get::<Option<String>, _>(i).unwrap().unwrap_or_default())
                .collect::<Vec<_>>()
                .join("|")
        }
        if url.starts_with("sqlite://") {
            let opts = url.parse::<sqlx::sqlite::SqliteConnectOptions>().unwrap().read_only(true);
            let pool = sqlx::SqlitePool::connect_with(opts).await.unwrap();
            let rows = sqlx::query(sql).fetch_all(&pool).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
            pool.close().await;
            rows.iter().map(line).collect()
        } else {
            let pool = sqlx::PgPool::connect(url).await.unwrap();
            let rows = sqlx::query(sql).fetch_all(&pool).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
            pool.close().await;
            rows.iter().map(line).collect()
        }
    })
}

/// A column as text the same way in both databases: a boolean as `t` or `f`, anything else cast.
fn text(column: &str, boolean: bool) -> String {
    if boolean {
        format!("CASE WHEN {column} THEN 't' WHEN NOT {column} THEN 'f' END")
    } else {
        format!("CAST({column} AS TEXT)")
    }
}

/// An object's event rows: type, from_state, to_state, hard, attempt, attempts_needed, flapping.
fn alert_rows(url: &str, object: &str) -> Vec<String> {
    let columns = [
        "type".to_string(),
        "from_state".into(),
        "to_state".into(),
        text("hard", true),
        text("attempt", false),
        text("attempts_needed", false),
        text("flapping", true),
    ];
    rows(url, &format!("SELECT {} FROM events WHERE object = '{object}' ORDER BY seq", columns.join(", ")))
}

/// An object's row: state, labels, soft_state, soft_attempt, soft_attempts_needed, flapping.
fn object_row(url: &str, object: &str) -> Option<String> {
    let columns = [
        "state".to_string(),
        "labels".into(),
        "soft_state".into(),
        text("soft_attempt", false),
        text("soft_attempts_needed", false),
        text("flapping", true),
    ];
    rows(url, &format!("SELECT {} FROM objects WHERE object = '{object}'", columns.join(", "))).pop()
}

/// Every `jaque_schema` row, lowest first.
fn versions(url: &str) -> Vec<String> {
    rows(url, "SELECT CAST(version AS TEXT) FROM jaque_schema ORDER BY version")
}

/// One process with a sink on `store`: `db` (3 attempts, retried every 300 ms) and `slow` (100 attempts) are ok
/// on a target, which then goes away. `db`'s problem is stored as two soft rows and the hard transition at its
/// third attempt; `slow`'s row holds its soft state while it lasts; both rows carry their labels; the history
/// API shows the columns.
fn soft_and_hard_rows_are_stored_with_their_columns(store: &str) {
    let j = Jaque::start("jaque", &["-target", "engine,worker,ui,sink", "-queue", "memory", "-sink-store", store]);
    j.wait_ready();
    let mut target = Target::start();
    let probe = json!({"type": "http", "url": target.url()});
    let db = json!({"probe": probe, "interval": "2s", "timeout": "200ms", "retry_interval": "300ms",
                    "max_attempts": 3, "labels": {"team": "db", "tier": "1"}});
    let slow = json!({"probe": probe, "interval": "2s", "timeout": "200ms", "retry_interval": "1s",
                      "max_attempts": 100});
    for (id, body) in [("db", &db), ("slow", &slow)] {
        let r = j.put(&format!("/api/objects/{id}"), body);
        assert_eq!(r.status, 200, "{id}: {}", r.text());
    }
    poll("both objects ok", || {
        let list = j.get("/api/objects").json();
        (list.as_array()?.len() == 2 && list.as_array()?.iter().all(|o| o["state"] == "ok")).then_some(())
    });
    target.stop();

    let soft = poll("slow's row in its soft state", || {
        object_row(store, "slow").filter(|r| r.starts_with("ok|{}|critical|") && !r.ends_with("|t"))
    });
    let fields: Vec<&str> = soft.split('|').collect();
    assert!(fields[3].parse::<u32>().is_ok_and(|a| (1..100).contains(&a)), "an attempt of 100: {soft}");
    assert_eq!(fields[4], "100", "{soft}");

    let stored = poll("db's hard transition to critical stored", || {
        let rows = alert_rows(store, "db");
        rows.iter().any(|r| r.starts_with("transition|ok|critical|")).then_some(rows)
    });
    let from_ok: Vec<&str> =
        stored.iter().skip_while(|r| !r.starts_with("transition|pending|ok|")).skip(1).map(String::as_str).collect();
    assert_eq!(
        from_ok,
        ["soft||critical|f|1|3|", "soft||critical|f|2|3|", "transition|ok|critical|t|3||"],
        "db's rows after it was ok: {stored:#?}"
    );
    assert!(stored[0].starts_with("put||||||"), "a put has no alert columns: {stored:#?}");
    assert!(stored[1].starts_with("transition|pending|ok|t|"), "{stored:#?}");
    assert_eq!(
        object_row(store, "db").unwrap(),
        r#"critical|{"team":"db","tier":"1"}||||f"#,
        "db's row once its problem is hard: no soft state"
    );

    // The history API, newest first: the hard transition, the two soft attempts; a put without the columns.
    let history = j.get("/api/objects/db/history").json();
    let events = history["events"].as_array().unwrap();
    let last = |i: usize| &events[i];
    assert_eq!(
        (last(0)["type"].clone(), last(0)["hard"].clone(), last(0)["attempt"].clone()),
        (json!("transition"), json!(true), json!(3)),
        "{history}"
    );
    assert!(last(0).get("attempts_needed").is_none(), "{history}");
    for (i, attempt) in [(1, 2), (2, 1)] {
        let e = last(i);
        assert_eq!(
            [&e["type"], &e["hard"], &e["attempt"], &e["attempts_needed"], &e["to_state"]],
            [&json!("soft"), &json!(false), &json!(attempt), &json!(3), &json!("critical")],
            "{history}"
        );
        assert_eq!(e["from_state"], Value::Null, "a soft row names no hard state it departs from: {history}");
    }
    let put = events.last().unwrap();
    assert_eq!(put["type"], "put");
    for key in ["hard", "attempt", "attempts_needed", "flapping"] {
        assert!(put.get(key).is_none(), "{key} on a put: {put}");
    }
    assert_eq!(put["definition"]["labels"], json!({"team": "db", "tier": "1"}));
}

#[test]
fn soft_attempts_and_the_hard_transition_are_stored_with_their_columns_in_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    soft_and_hard_rows_are_stored_with_their_columns(&format!("sqlite://{}", dir.path().join("sink.db").display()));
}

#[test]
fn soft_attempts_and_the_hard_transition_are_stored_with_their_columns_in_postgres() {
    let _one = one_at_a_time();
    let pg = Postgres::start();
    soft_and_hard_rows_are_stored_with_their_columns(&pg.url());
}

// ---- v0.1.0's stores (schema version 1) ----

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("compat/v0.1.0")
}

/// The columns of schema version 1, as text, of every events row at or below the release's last position: what
/// the migration must leave as it was.
fn version_1_events(url: &str, position: u64) -> Vec<String> {
    rows(
        url,
        &format!(
            "SELECT CAST(seq AS TEXT), object, CAST(epoch AS TEXT), writer, CAST(writer_incarnation AS TEXT), \
             type, from_state, to_state, output, command_id, definition FROM events WHERE seq <= {position} \
             ORDER BY seq"
        ),
    )
}

/// The columns of schema version 1, as text, of every objects row still at or below the release's last position
/// (a row the sink wrote again at the same position is the same row).
fn version_1_objects(url: &str, position: u64) -> Vec<String> {
    rows(
        url,
        &format!(
            "SELECT object, state, definition, {}, {}, {}, CAST(last_seq AS TEXT) FROM objects \
             WHERE last_seq <= {position} ORDER BY object",
            text("paused", true),
            text("acknowledged", true),
            text("deleted", true)
        ),
    )
}

/// What the migration must leave as it was: the release's event rows, and its objects rows not moved on since.
fn assert_release_rows_intact(url: &str, position: u64, events: &[String], objects: &[String]) {
    assert_eq!(version_1_events(url, position), events, "the release's event rows as they were");
    for row in version_1_objects(url, position) {
        assert!(objects.contains(&row), "{row} is not a row the release wrote: {objects:#?}");
    }
}

/// How many of the rows at or below `position` have a value in a column version 2 added.
fn filled_new_columns(url: &str, position: u64) -> String {
    rows(
        url,
        &format!(
            "SELECT CAST(count(*) AS TEXT) FROM events WHERE seq <= {position} AND (hard IS NOT NULL OR attempt \
             IS NOT NULL OR attempts_needed IS NOT NULL OR flapping IS NOT NULL)"
        ),
    )
    .concat()
}

fn release_position() -> u64 {
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture().join("data-dir-expected.json")).unwrap()).unwrap();
    expected["log_position"].as_u64().unwrap()
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let dest = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &dest);
        } else {
            std::fs::copy(entry.path(), &dest).unwrap();
        }
    }
}

/// This build on a copy of v0.1.0's `-data-dir`: its SQLite store goes to version 2 at the sink's start (version
/// 1's row kept), the release's rows as they were with the new columns empty, and every object's row, which the
/// sink writes again as it takes its objects on, with its labels and alert state.
#[test]
fn the_v0_1_0_sqlite_store_is_migrated_to_version_2_with_its_rows_intact() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data-dir");
    copy_tree(&fixture().join("data-dir"), &dir);
    let store = format!("sqlite://{}", dir.join("jaque-sink.db").display());
    let position = release_position();
    assert_eq!(versions(&store), ["1"]);
    let (events, objects) = (version_1_events(&store, position), version_1_objects(&store, position));
    assert_eq!(events.len() as u64, position - 1, "{events:#?}");

    let d = dir.to_str().unwrap();
    let mut j = Jaque::start(
        "on v0.1.0's data dir",
        &["-target", "engine,worker,ui,sink", "-queue", "memory", "-data-dir", d, "-id", "fixture"],
    );
    j.wait_ready();
    assert_eq!(versions(&store), ["1", "2"]);
    j.proc.wait_for_line("sink store: schema migrated");
    poll("every object's row written again with its labels", || {
        let rows =
            rows(&store, &format!("SELECT object, labels, {} FROM objects WHERE NOT deleted", text("flapping", true)));
        (!rows.is_empty() && rows.iter().all(|r| r.ends_with("|{}|f"))).then_some(())
    });
    j.proc.signal("TERM");
    assert!(j.proc.wait_exit().success());
    assert_release_rows_intact(&store, position, &events, &objects);
    assert_eq!(filled_new_columns(&store, position), "0", "the release's rows have no alert columns");
    assert_eq!(versions(&store), ["1", "2"], "migrated once");
}

/// v0.1.0's PostgreSQL store, three sinks of this build started on it at once: one migrates it under the
/// advisory lock, the others wait, find version 2 and go on; nobody fails, version 2 is recorded once, and the
/// release's rows are as they were.
#[test]
fn the_v0_1_0_postgres_store_is_migrated_once_by_sinks_starting_together() {
    let _one = one_at_a_time();
    let pg = Postgres::start();
    let store = pg.url();
    psql_file(&store, &fixture().join("postgres.sql"));
    let position = release_position();
    assert_eq!(versions(&store), ["1"]);
    let (events, objects) = (version_1_events(&store, position), version_1_objects(&store, position));
    assert_eq!(events.len() as u64, position - 1, "{events:#?}");

    let nats = Nats::start();
    let mut sinks: Vec<Jaque> = ["s1", "s2", "s3"]
        .iter()
        .map(|id| {
            let args = ["-target", "sink", "-coordination", &nats.url, "-sink-store", &store, "-id", id];
            Jaque::start(id, &args)
        })
        .collect();
    for s in &mut sinks {
        s.proc.wait_for_line("the store's schema is ready");
    }
    let migrated = sinks.iter().filter(|s| s.proc.output.text().contains("sink store: schema migrated")).count();
    assert_eq!(migrated, 1, "one sink migrated the store, the others found it done");
    assert_eq!(versions(&store), ["1", "2"]);
    assert_release_rows_intact(&store, position, &events, &objects);
    assert_eq!(version_1_objects(&store, position), objects, "no sink here owns the release's objects");
    assert_eq!(filled_new_columns(&store, position), "0");
    let columns = pg.psql(
        "SELECT table_name || '.' || column_name || ' ' || data_type FROM information_schema.columns \
         WHERE table_name IN ('events', 'objects') AND column_name IN ('hard', 'attempt', 'attempts_needed', \
         'flapping', 'labels', 'soft_state', 'soft_attempt', 'soft_attempts_needed') ORDER BY 1",
    );
    assert_eq!(
        columns,
        "events.attempt integer\nevents.attempts_needed integer\nevents.flapping boolean\nevents.hard boolean\n\
         objects.flapping boolean\nobjects.labels text\nobjects.soft_attempt integer\n\
         objects.soft_attempts_needed integer\nobjects.soft_state text"
    );
    for s in &mut sinks {
        s.proc.signal("TERM");
        assert!(s.proc.wait_exit().success(), "{} exits cleanly", s.proc.name);
    }

    // The way back docs/upgrading.md gives: version 1 again with the release's rows, and a sink of this build
    // started on it migrates it again.
    pg.psql(&rollback_sql());
    assert_eq!(versions(&store), ["1"]);
    assert_release_rows_intact(&store, position, &events, &objects);
    let dump_columns = "SELECT table_name || '.' || column_name FROM information_schema.columns \
                        WHERE table_name IN ('events', 'objects') ORDER BY 1";
    let v1_columns = pg.psql(dump_columns);
    assert_eq!(v1_columns.lines().count(), 12 + 7, "{v1_columns}");
    let mut again = Jaque::start("s4", &["-target", "sink", "-coordination", &nats.url, "-sink-store", &store]);
    again.proc.wait_for_line("sink store: schema migrated");
    assert_eq!(versions(&store), ["1", "2"]);
}

/// The statements docs/upgrading.md gives to take a store from version 2 back to 1.
fn rollback_sql() -> String {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/upgrading.md")).unwrap();
    let (_, from) = doc.split_once("```sql\nBEGIN;").expect("docs/upgrading.md gives the way back in SQL");
    format!("BEGIN;{}", from.split_once("```").unwrap().0)
}
