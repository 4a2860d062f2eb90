//! The cluster format (`jaque_core::format`): members announce what they speak, the engine that proposes an
//! epoch records the active format (the lowest any live member of any bucket speaks, never going down), a
//! writer writes a newer kind only once it is active, and a reader that does not speak an entry's format stops
//! there rather than fold it, where every reader that does speaks the same verdict.

mod common;
use common::*;
use jaque_core::format::{CLUSTER_FORMAT, OLDEST_CLUSTER_FORMAT};
use jaque_core::log::Read;
use jaque_core::wire::{self, WireError};
use jaque_core::*;

fn record(epoch: u64, members: &[&str], rev: u64, format: u32) -> LogEntry {
    LogEntry::Epoch(EpochRecord {
        epoch,
        members: members.iter().map(|m| member(m, 1)).collect(),
        members_rev: rev,
        idempotency_window_ms: None,
        format,
    })
}

fn event(body: EventBody, command: Option<&str>) -> LogEntry {
    LogEntry::Event(Event {
        object: oid("web"),
        epoch: 1,
        writer: member("a", 1),
        at: Time(10),
        command_id: command.map(|c| CommandId::new(c).unwrap()),
        body,
    })
}

fn put() -> LogEntry {
    event(EventBody::Put { def: def(30) }, Some("p"))
}

fn critical() -> LogEntry {
    event(EventBody::transition(State::Pending, State::Critical, "down"), None)
}

fn up(bucket: Bucket, rev: u64, id: &str, format: u32) -> Input {
    Input::Life(Life::Member(MemberObservation { bucket, rev, change: MemberChange::Up(member(id, 1)), format }))
}

fn down(bucket: Bucket, rev: u64, id: &str) -> Input {
    Input::Life(Life::Member(MemberObservation::new(bucket, rev, MemberChange::Down(member(id, 1).id))))
}

/// The formats an engine's proposals record, in order (each proposal answered as won and read back).
fn proposed(e: &mut Engine, seq: &mut u64) -> Vec<u32> {
    let mut formats = Vec::new();
    while let Some(o) = e.poll_output() {
        if let Output::ProposeEpoch { record, .. } = o {
            formats.push(record.format);
            *seq += 1;
            e.handle(Time(0), Input::ProposeResult { epoch: record.epoch, won: true });
            e.handle(Time(0), Input::Life(Life::Log { seq: *seq, entry: LogEntry::Epoch(record) }));
        }
    }
    formats
}

#[test]
fn the_active_format_is_the_highest_any_record_named_so_far() {
    let mut r = LogReader::new();
    assert_eq!(r.fence().active_format(), OLDEST_CLUSTER_FORMAT, "before any record");
    r.read(1, &record(1, &["a"], 1, 1));
    assert_eq!(r.fence().active_format(), 1);
    r.read(2, &record(2, &["a", "b"], 2, 2));
    assert_eq!(r.fence().active_format(), 2);
    // A record of a build that names no format (1), say an old engine that was paused while the others moved on.
    r.read(3, &record(3, &["a"], 3, 1));
    assert_eq!(r.fence().active_format(), 2, "the active format never goes down");
}

#[test]
fn every_reader_that_speaks_a_format_folds_its_entries_whatever_the_records_say() {
    // A reader started from a snapshot that a build before v0.1.0 wrote: its records lost their format, so it
    // takes the cluster for format 1 where the log's own records said 2. It folds the unack all the same, as
    // the readers of the log's records do: readers that read on never disagree.
    let (mut from_log, mut from_old_snapshot) = (LogReader::new(), LogReader::new());
    from_log.read(1, &record(1, &["a"], 1, 2));
    from_old_snapshot.read(1, &record(1, &["a"], 1, 1));
    for r in [&mut from_log, &mut from_old_snapshot] {
        r.read(2, &put());
        r.read(3, &critical());
        r.read(4, &event(EventBody::Ack, Some("a1")));
        assert!(matches!(r.read(5, &event(EventBody::Unack, Some("u1"))), Read::Event { .. }));
        assert!(!r.object(&oid("web")).unwrap().acked);
    }
    assert_eq!(from_log.objects(), from_old_snapshot.objects());
    assert_eq!(from_log.counters, from_old_snapshot.counters);
    // A reader that does not speak it stops there, wherever it stands (its bytes alone say so).
    let mut old = LogReader::new().speaking(1);
    old.read(1, &record(1, &["a"], 1, 1));
    assert_eq!(old.read_too_new(2, 2), Read::TooNew { needs: 2 });
    // A format this build speaks that still does not decode: garbage, passed over like any.
    let mut r = LogReader::new();
    r.read(1, &record(1, &["a"], 1, 1));
    assert_eq!(r.read_too_new(2, 2), Read::Unreadable);
}

#[test]
fn a_reader_that_does_not_speak_a_format_stops_at_its_first_entry_and_says_what_to_run() {
    let mut new = LogReader::new();
    let mut old = LogReader::new().speaking(1);
    for r in [&mut new, &mut old] {
        r.read(1, &record(1, &["a"], 1, 2));
        r.read(2, &put());
        r.read(3, &critical());
        r.read(4, &event(EventBody::Ack, Some("a1")));
        assert!(r.object(&oid("web")).unwrap().acked);
    }
    let unack = event(EventBody::Unack, Some("u1"));
    assert!(matches!(new.read(5, &unack), Read::Event { .. }));
    assert!(!new.object(&oid("web")).unwrap().acked);
    assert_eq!(old.read(5, &unack), Read::TooNew { needs: 2 });
    assert_eq!(old.position(), 4, "not read");
    assert_eq!(old.read(6, &put()), Read::TooNew { needs: 2 }, "nothing after it is read either");
    assert_eq!(old.blocked(), Some((5, 2)));
    let reason = old.blocked_reason().unwrap();
    assert!(reason.contains("position 5 needs cluster format 2") && reason.contains("docs/upgrading.md"), "{reason}");
    // A newer build's entry, by its bytes alone: a stop.
    let mut r = new.clone();
    assert_eq!(r.read_too_new(6, CLUSTER_FORMAT + 1), Read::TooNew { needs: CLUSTER_FORMAT + 1 });
}

#[test]
fn an_entry_that_needs_more_than_format_1_says_so_in_its_first_bytes() {
    let unack = event(EventBody::Unack, Some("u1"));
    let bytes = wire::encode_log_entry(&unack);
    assert!(bytes.starts_with(b"{\"v\":2,\"entry\":\"event\""), "{}", String::from_utf8_lossy(&bytes));
    assert_eq!(wire::stamped_format(&bytes), Some(2));
    assert_eq!(wire::decode_log_entry(&bytes).unwrap(), unack);
    // Format-1 entries keep the bytes every build before v0.1.0 wrote.
    let ack = event(EventBody::Ack, Some("a1"));
    assert_eq!(wire::encode_log_entry(&ack), wire::encode(&ack));
    let epoch = record(1, &["a"], 1, 1);
    assert!(!String::from_utf8(wire::encode_log_entry(&epoch)).unwrap().contains("format"));
    // A newer build's entry is known for what it is, whatever the rest of its bytes.
    let newer = format!("{{\"v\":{},\"entry\":\"event\",\"type\":\"flapping\"}}", CLUSTER_FORMAT + 1);
    assert!(
        matches!(wire::decode_log_entry(newer.as_bytes()), Err(WireError::TooNew { needs }) if needs == CLUSTER_FORMAT + 1)
    );
    // A heartbeat without a format is a build before v0.1.0: format 1.
    let (m, format) = wire::decode_heartbeat("e1", br#"{"incarnation":7}"#).unwrap();
    assert_eq!((m.incarnation, format), (7, 1));
    assert_eq!(wire::decode_heartbeat("e1", br#"{"incarnation":7,"format":2}"#).unwrap().1, 2);
}

#[test]
fn the_engine_raises_the_active_format_once_every_member_of_every_bucket_speaks_it() {
    let mut e = Engine::new(EngineConfig::new(member("a", 1), TTL));
    e.handle(Time(0), Input::Life(Life::Start));
    let mut seq = 0;
    e.handle(Time(0), up(Bucket::Engine, 1, "a", 2));
    e.handle(Time(0), up(Bucket::Sink, 2, "s", 1));
    e.handle(Time(0), Input::Life(Life::CaughtUp));
    assert_eq!(proposed(&mut e, &mut seq), vec![1], "a sink of format 1 is live: the cluster stays at 1");
    // An unack is refused while an old member may read the log.
    let r = ReplyTo(1);
    e.handle(Time(0), Input::Command { reply: r, cmd: cmd("p", "web", CommandKind::Put { def: def(30) }) });
    e.handle(Time(0), Input::Command { reply: ReplyTo(2), cmd: cmd("u", "web", CommandKind::Unack) });
    let refused = std::iter::from_fn(|| e.poll_output()).find_map(|o| match o {
        Output::Reply { to: ReplyTo(2), outcome: Outcome::Rejected { reason } } => Some(reason),
        _ => None,
    });
    assert!(refused.as_deref().is_some_and(|r| r.contains("needs cluster format 2")), "{refused:?}");
    // The old sink goes (restarted into the new build): every live member speaks 2, and the engine says so.
    e.handle(Time(0), down(Bucket::Sink, 3, "s"));
    assert_eq!(proposed(&mut e, &mut seq), vec![2], "the same members, a new record for the format alone");
    assert_eq!(e.reader().fence().active_format(), 2);
    e.handle(Time(0), up(Bucket::Sink, 4, "s", 2));
    assert_eq!(proposed(&mut e, &mut seq), Vec::<u32>::new(), "nothing changed for the engines");
    // An old notifier joins after all (a rollback): the format stays where it is.
    e.handle(Time(0), up(Bucket::Notifier, 5, "n", 1));
    e.handle(Time(0), up(Bucket::Engine, 6, "b", 2));
    assert_eq!(proposed(&mut e, &mut seq), vec![2]);
    assert_eq!(e.reader().fence().active_format(), 2, "never lower");
}

#[test]
fn an_engine_held_at_a_format_does_not_raise_the_cluster_past_it() {
    let mut cfg = EngineConfig::new(member("a", 1), TTL);
    cfg.hold_format = 1;
    let mut e = Engine::new(cfg);
    e.handle(Time(0), Input::Life(Life::Start));
    e.handle(Time(0), up(Bucket::Engine, 1, "a", 2));
    e.handle(Time(0), Input::Life(Life::CaughtUp));
    let mut seq = 0;
    assert_eq!(proposed(&mut e, &mut seq), vec![1]);
    e.handle(Time(0), up(Bucket::Engine, 2, "b", 2));
    assert_eq!(proposed(&mut e, &mut seq), vec![1], "every member speaks 2, and the engine is held at 1");
}

#[test]
fn an_engine_that_meets_an_entry_it_cannot_read_leaves_its_bucket_and_says_why() {
    let mut cfg = EngineConfig::new(member("a", 1), TTL);
    cfg.hold_format = 1;
    let mut e = Engine::with_reader(cfg, LogReader::new().speaking(1));
    e.handle(Time(0), Input::Life(Life::Start));
    e.handle(Time(0), Input::Life(Life::CaughtUp));
    e.handle(Time(0), Input::Life(Life::Log { seq: 1, entry: record(1, &["a", "b"], 1, 2) }));
    e.handle(Time(0), Input::Life(Life::LogTooNew { seq: 2, needs: 2 }));
    assert!(e.is_leaving());
    let deleted = std::iter::from_fn(|| e.poll_output())
        .any(|o| matches!(o, Output::Life(LifeOutput::Membership(MembershipOutput::DeleteHeartbeat { .. }))));
    assert!(deleted, "its key goes at once, so its objects move to engines that read on");
    assert!(e.reader().blocked_reason().is_some());
}

#[test]
fn a_snapshot_has_the_newest_version_every_member_reads() {
    let mut r = LogReader::new();
    r.read(1, &record(1, &["a"], 1, 1));
    r.read(2, &put());
    let v1 = r.snapshot();
    assert_eq!(v1.version, 1, "the cluster is at format 1: a build before v0.1.0 may restore it");
    assert!(LogReader::from_snapshot_speaking(v1.clone(), 1).is_ok());
    r.read(3, &record(2, &["a"], 2, 2));
    let v2 = r.snapshot();
    assert_eq!(v2.version, 2);
    assert_eq!(LogReader::from_snapshot(v2.clone()).unwrap(), r);
    let refused = LogReader::from_snapshot_speaking(v2, 1).unwrap_err();
    assert!(refused.to_string().contains("snapshot version 2 is not one this build reads"), "{refused}");
    // A newer build's snapshot is known for what it is: the driver stops the reader at it (`Life::LogTooNew`)
    // instead of passing over it as a damaged one.
    let mut newer = r.snapshot();
    newer.version = jaque_core::format::SNAPSHOT_VERSION + 1;
    let bytes = wire::encode_snapshot(&newer);
    let e = wire::decode_snapshot(&bytes).unwrap_err();
    assert!(matches!(e, WireError::SnapshotTooNew { version } if version == newer.version), "{e}");
    let mut damaged = r.snapshot();
    damaged.version = 0;
    assert!(matches!(wire::decode_snapshot(&wire::encode_snapshot(&damaged)), Err(WireError::Invalid { .. })));
}

// ---- Cluster format 3: alert semantics (issue 34) ----

/// The alert events and definitions need format 3, say so in their bytes, and a reader of format 2 stops at the
/// first of them; a transition as every build wrote it keeps format 1.
#[test]
fn alert_events_and_labelled_definitions_need_format_3_and_an_older_reader_stops_at_them() {
    let soft = event(
        EventBody::Soft { state: State::Critical, attempt: 1, of: 3, output: "refused".into(), flapping: None },
        None,
    );
    let bytes = wire::encode_log_entry(&soft);
    assert!(bytes.starts_with(b"{\"v\":3,"), "{}", String::from_utf8_lossy(&bytes));
    assert_eq!(wire::decode_log_entry(&bytes).unwrap(), soft);
    let hard = EventBody::Transition {
        from: State::Ok,
        to: State::Critical,
        output: String::new(),
        attempt: 3,
        flapping: None,
        flaps: false,
        notify: None,
    };
    for body in [hard, EventBody::Flapping { on: true }] {
        assert_eq!(body.needs(), 3, "{body:?}");
    }
    assert_eq!(EventBody::transition(State::Ok, State::Critical, "x").needs(), 1);
    let labels = labels::Labels::new([("env".to_string(), "prod".to_string())].into()).unwrap();
    let labelled = ObjectDef { labels, ..def(30) };
    assert_eq!(EventBody::Put { def: labelled.clone() }.needs(), 3);
    assert_eq!(CommandKind::Put { def: labelled }.needs(), 3);
    assert_eq!(CommandKind::Put { def: ObjectDef { max_attempts: Some(5), ..def(30) } }.needs(), 3);
    assert_eq!(CommandKind::Put { def: def(30) }.needs(), 1, "a definition without the new fields: as before");

    let mut old = LogReader::new().speaking(2);
    old.read(1, &record(1, &["a"], 1, 3));
    old.read(2, &put());
    assert_eq!(old.read(3, &soft), Read::TooNew { needs: 3 });
    assert!(old.blocked_reason().unwrap().contains("needs cluster format 3"));
}

/// While an older member is in the cluster, an engine keeps every change hard at once and refuses a put that
/// names the new fields; a result is written as a transition every build reads.
#[test]
fn under_format_2_every_change_is_hard_at_once_and_new_fields_are_refused() {
    let mut e = Engine::new(EngineConfig::new(member("a", 1), TTL));
    e.handle(Time(0), Input::Life(Life::Start));
    e.handle(Time(0), up(Bucket::Engine, 1, "a", 3));
    e.handle(Time(0), up(Bucket::Notifier, 2, "n", 2));
    e.handle(Time(0), Input::Life(Life::CaughtUp));
    let mut seq = 0;
    assert_eq!(proposed(&mut e, &mut seq), vec![2], "a notifier of format 2 is live");
    let labelled = ObjectDef { max_attempts: Some(3), ..def(30) };
    e.handle(Time(0), Input::Command { reply: ReplyTo(1), cmd: cmd("p1", "web", CommandKind::Put { def: labelled }) });
    let refused = std::iter::from_fn(|| e.poll_output()).find_map(|o| match o {
        Output::Reply { to: ReplyTo(1), outcome: Outcome::Rejected { reason } } => Some(reason),
        _ => None,
    });
    assert!(refused.as_deref().is_some_and(|r| r.contains("needs cluster format 3")), "{refused:?}");
    let rules = alert::Rules::of(&def(30), 2);
    assert_eq!((rules.max_attempts, rules.flapping), (1, false));
}

/// Found by the rolling-upgrade test: an engine that does not own the object refuses a command of a newer
/// format than the active one instead of forwarding it, since the owner may be of the older build and apply what
/// it can decode of it (a put without its labels).
#[test]
fn a_command_of_a_newer_format_is_refused_before_it_is_forwarded() {
    let mut e = Engine::new(EngineConfig::new(member("a", 1), TTL));
    e.handle(Time(0), Input::Life(Life::Start));
    e.handle(Time(0), up(Bucket::Engine, 1, "a", 3));
    e.handle(Time(0), up(Bucket::Engine, 2, "b", 2));
    e.handle(Time(0), Input::Life(Life::CaughtUp));
    let mut seq = 0;
    assert_eq!(proposed(&mut e, &mut seq), vec![2], "an engine of format 2 is live");
    let own = hrw::Ownership::new(&[member("a", 1), member("b", 1)]);
    let theirs = (0..100).map(|i| format!("o{i}")).find(|o| own.owner(&oid(o)) == Some(&member("b", 1))).unwrap();
    let labels = labels::Labels::new([("env".to_string(), "prod".to_string())].into()).unwrap();
    let put = CommandKind::Put { def: ObjectDef { labels, ..def(30) } };
    e.handle(Time(0), Input::Command { reply: ReplyTo(1), cmd: cmd("p1", &theirs, put) });
    let outs: Vec<Output> = std::iter::from_fn(|| e.poll_output()).collect();
    assert!(!outs.iter().any(|o| matches!(o, Output::Forward { .. })), "not forwarded: {outs:?}");
    let refused = outs.iter().find_map(|o| match o {
        Output::Reply { to: ReplyTo(1), outcome: Outcome::Rejected { reason } } => Some(reason.clone()),
        _ => None,
    });
    assert!(refused.as_deref().is_some_and(|r| r.contains("needs cluster format 3")), "{outs:?}");
    // A command every build reads is still forwarded to its owner.
    e.handle(Time(0), Input::Command { reply: ReplyTo(2), cmd: cmd("p2", &theirs, CommandKind::Put { def: def(30) }) });
    assert!(std::iter::from_fn(|| e.poll_output()).any(|o| matches!(o, Output::Forward { .. })));
}
