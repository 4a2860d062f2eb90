//! The sink's store read back with a client of the test's own (`sqlite://…` or `postgres://…`), and what the log
//! says it must hold: each accepted event as its row (`jaque_core::sink::event_row`), each object's row at its
//! last accepted event. Independent of the sink: the log is folded by `jaque_core::LogReader`.

use jaque_core::role::{After, Owned};
use jaque_core::sink::event_row;
use jaque_core::{LogEntry, LogReader, Read};
use std::collections::BTreeMap;

/// One row of `events`, the columns the checks compare.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub object: String,
    pub epoch: i64,
    pub writer: String,
    pub writer_incarnation: i64,
    pub kind: String,
    pub from_state: Option<String>,
    pub to_state: Option<String>,
    pub command_id: Option<String>,
}

pub type EventTuple = (i64, String, i64, String, i64, String, Option<String>, Option<String>, Option<String>);
pub const EVENTS_SQL: &str = "SELECT seq, object, epoch, writer, writer_incarnation, type, from_state, to_state, \
                          command_id FROM events ORDER BY seq";
pub const OBJECTS_SQL: &str = "SELECT object, state, last_seq, deleted FROM objects ORDER BY object";

/// What the store holds: events by seq, objects by id (state, last_seq, deleted).
#[derive(Debug, Default)]
pub struct Stored {
    pub events: BTreeMap<u64, Row>,
    pub objects: BTreeMap<String, (Option<String>, u64, bool)>,
}

pub fn stored_from(events: Vec<EventTuple>, objects: Vec<(String, Option<String>, i64, bool)>) -> Stored {
    let mut s = Stored::default();
    for (seq, object, epoch, writer, writer_incarnation, kind, from_state, to_state, command_id) in events {
        let row = Row { object, epoch, writer, writer_incarnation, kind, from_state, to_state, command_id };
        assert!(s.events.insert(seq as u64, row).is_none(), "seq {seq} twice in the store");
    }
    for (object, state, last_seq, deleted) in objects {
        s.objects.insert(object, (state, last_seq as u64, deleted));
    }
    s
}

/// The store read back with sqlx (a client of the test's own), `sqlite://...` or `postgres://...`.
pub fn read_store(url: &str) -> Result<Stored, String> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        if url.starts_with("sqlite://") {
            let opts = url.parse::<sqlx::sqlite::SqliteConnectOptions>().map_err(|e| e.to_string())?.read_only(true);
            let pool = sqlx::SqlitePool::connect_with(opts).await.map_err(|e| e.to_string())?;
            let events = sqlx::query_as(EVENTS_SQL).fetch_all(&pool).await.map_err(|e| e.to_string())?;
            let objects = sqlx::query_as(OBJECTS_SQL).fetch_all(&pool).await.map_err(|e| e.to_string())?;
            pool.close().await;
            Ok(stored_from(events, objects))
        } else {
            let pool = sqlx::PgPool::connect(url).await.map_err(|e| e.to_string())?;
            let events = sqlx::query_as(EVENTS_SQL).fetch_all(&pool).await.map_err(|e| e.to_string())?;
            let objects = sqlx::query_as(OBJECTS_SQL).fetch_all(&pool).await.map_err(|e| e.to_string())?;
            pool.close().await;
            Ok(stored_from(events, objects))
        }
    })
}

/// What the log says the store must hold: each accepted event as its row, and each object's last accepted seq.
pub struct Expected {
    pub events: BTreeMap<u64, Row>,
    pub last_seq: BTreeMap<String, u64>,
    pub stale: u64,
}

pub fn expected_from(entries: &[(u64, LogEntry)]) -> Expected {
    let mut reader = LogReader::new();
    let mut events = BTreeMap::new();
    let mut last_seq = BTreeMap::new();
    for (seq, entry) in entries {
        let read = reader.read(*seq, entry);
        let (LogEntry::Event(ev), Read::Event { verdict, .. }) = (entry, read) else { continue };
        if !verdict.is_accepted() {
            continue;
        }
        let r = event_row(&Owned { seq: *seq, event: ev.clone(), after: After::Replayed }, 4096);
        let row = Row {
            object: r.object.to_string(),
            epoch: r.epoch as i64,
            writer: r.writer.to_string(),
            writer_incarnation: r.writer_incarnation as i64,
            kind: r.kind.to_string(),
            from_state: r.from_state.map(|s| s.as_str().to_string()),
            to_state: r.to_state.map(|s| s.as_str().to_string()),
            command_id: r.command_id.map(|c| c.to_string()),
        };
        events.insert(*seq, row);
        last_seq.insert(r.object.to_string(), *seq);
    }
    Expected { events, last_seq, stale: reader.counters.stale_epoch_total }
}

/// The store holds exactly the expected rows, and each object's row is at its last accepted event.
pub fn store_matches(stored: &Stored, want: &Expected) -> Result<(), String> {
    if stored.events != want.events {
        let missing: Vec<_> = want.events.keys().filter(|s| !stored.events.contains_key(s)).take(10).collect();
        let extra: Vec<_> = stored.events.keys().filter(|s| !want.events.contains_key(s)).take(10).collect();
        let differ: Vec<_> =
            want.events.iter().filter(|(s, r)| stored.events.get(s).is_some_and(|h| h != *r)).take(3).collect();
        return Err(format!(
            "{} rows, {} accepted events; missing {missing:?}, not accepted {extra:?}, different {differ:?}",
            stored.events.len(),
            want.events.len()
        ));
    }
    for (object, last) in &want.last_seq {
        match stored.objects.get(object) {
            Some((_, seq, _)) if seq == last => {}
            other => return Err(format!("object {object}: row {other:?}, last accepted event at {last}")),
        }
    }
    Ok(())
}
