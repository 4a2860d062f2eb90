//! Notification policy (issue 35): maintenance windows' schedules hold to their own rules at any time, in time
//! zones with summer time, half-hour offsets and half-hour summer-time shifts.

use jaque_core::policy::{Day, Schedule};
use jaque_core::time::Time;
use proptest::prelude::*;

const ZONES: [&str; 6] =
    ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kathmandu", "America/Santiago"];
const DAYS: [Day; 7] = [Day::Mon, Day::Tue, Day::Wed, Day::Thu, Day::Fri, Day::Sat, Day::Sun];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Between `t` and the next change `next_change(t)` names, the window stays as it is at `t`; an occurrence
    /// that holds `t` started at or before it, ends after it and lasts the schedule's duration.
    #[test]
    fn a_window_changes_only_where_next_change_says(
        days in proptest::collection::btree_set(0..7usize, 0..=7),
        hour in 0..24u32,
        minute in 0..60u32,
        duration_min in 1..=(7 * 24 * 60u64),
        zone in 0..ZONES.len(),
        t in 1_577_836_800_000u64..2_082_758_400_000,
        probes in proptest::collection::vec(0.0..1.0f64, 1..8),
    ) {
        let schedule = Schedule {
            days: days.iter().map(|d| DAYS[*d]).collect(),
            start: format!("{hour:02}:{minute:02}"),
            duration_ms: duration_min * 60_000,
            time_zone: ZONES[zone].to_string(),
        };
        let w = schedule.recurrence().unwrap();
        let t = Time(t);
        let open = w.open_at(t);
        if let Some((s, e)) = open {
            prop_assert!(s <= t && t < e, "{w}: {t} in [{s}, {e})");
            prop_assert_eq!(e.0 - s.0, duration_min * 60_000);
        }
        let next = w.next_change(t).expect("a schedule with a day in every week changes within 8 days");
        prop_assert!(next > t);
        if let Some((_, e)) = open {
            prop_assert!(next <= e, "{w}: open until {e}, next change at {next}");
        }
        for p in probes {
            let u = Time(t.0 + ((next.0 - t.0) as f64 * p) as u64);
            prop_assert_eq!(w.open_at(u).is_some(), open.is_some(), "{} at {} (from {}, next change {})", w, u, t, next);
        }
    }
}

// ---- The policy in the log (cluster format 4) ----

mod common;
use common::*;
use jaque_core::policy::{Change, Name, Receiver, ReceiverKind, Route, SecretRef, Silence};
use jaque_core::{CommandKind, LogReader, ObjectId, Outcome};
use std::time::Duration;

fn name(s: &str) -> Name {
    Name::new(s).unwrap()
}

fn receiver(n: &str) -> Change {
    Change::PutReceiver {
        receiver: Receiver {
            name: name(n),
            kind: ReceiverKind::Webhook {
                url: format!("https://hooks.example.com/{n}"),
                secret: Some(SecretRef::Env("HOOK_SECRET".into())),
            },
        },
    }
}

fn routes(to: &[&str]) -> Change {
    Change::SetRoutes {
        routes: vec![Route {
            selector: "team=db".parse().unwrap(),
            receivers: to.iter().map(|n| name(n)).collect(),
            continue_: false,
            repeat_interval_ms: Some(3_600_000),
            escalations: vec![],
        }],
    }
}

/// A silence named `n` of the objects labelled team=db, from the epoch's start until `ends_at`.
fn db_silence(n: &str, ends_at: jaque_core::Time) -> Change {
    Change::PutSilence {
        silence: Silence {
            name: name(n),
            selector: "team=db".parse().unwrap(),
            starts_at: jaque_core::Time(0),
            ends_at,
            author: "ana".into(),
            comment: String::new(),
        },
    }
}

fn policy_cmd(id: &str, change: Change) -> jaque_core::Command {
    cmd(id, ObjectId::POLICY, CommandKind::Policy { change: Box::new(change) })
}

fn rejected(o: &Outcome) -> &str {
    match o {
        Outcome::Rejected { reason } => reason,
        other => panic!("expected rejected, got {other:?}"),
    }
}

fn three() -> World {
    let mut w = World::new();
    w.announce = Some(jaque_core::format::CLUSTER_FORMAT);
    for id in ["a", "b", "c"] {
        w.add_engine(id, 1);
    }
    w.advance(Duration::from_millis(10));
    w
}

#[test]
fn policy_changes_are_owned_forwarded_and_folded_alike_by_every_reader_and_kept_in_snapshots() {
    let mut w = three();
    let owner = w.owner_of(ObjectId::POLICY).expect("the policy's key has an owner");
    let other = ["a", "b", "c"].into_iter().find(|e| *e != owner).unwrap();
    // Sent to an engine that does not own the key: forwarded once, applied by the owner.
    let r = w.submit(other, policy_cmd("p1", receiver("db-team")));
    assert!(matches!(w.outcome(r), Outcome::Applied { owner: o, .. } if o.as_str() == owner), "{:?}", w.outcome(r));
    let r = w.submit(&owner, policy_cmd("p2", routes(&["db-team"])));
    assert!(matches!(w.outcome(r), Outcome::Applied { .. }), "{:?}", w.outcome(r));
    w.advance(Duration::ZERO);
    let oracle = w.oracle();
    let policy = oracle.policy();
    assert_eq!(policy.receivers.len(), 1);
    assert_eq!(policy.routes.len(), 1);
    assert!(oracle.object(&oid(ObjectId::POLICY)).is_none(), "the policy's key is no object");
    for (id, e) in &w.engines {
        assert_eq!(e.reader().policy(), policy, "engine {id} holds the same policy");
    }
    // Applied once: the same command id again changes nothing.
    let before = w.log.len();
    let r = w.submit(other, policy_cmd("p1", receiver("db-team")));
    assert!(matches!(w.outcome(r), Outcome::Applied { .. }));
    assert_eq!(w.log.len(), before, "a repeated id writes nothing");
    // A snapshot carries it, and a reader started from it holds the same policy.
    let restored = LogReader::from_snapshot(oracle.snapshot()).unwrap();
    assert_eq!(restored.policy(), policy);
    assert_eq!(restored, oracle);
    let snapshot = oracle.snapshot();
    assert_eq!(snapshot.version, jaque_core::format::SNAPSHOT_VERSION);
    let decoded = jaque_core::wire::decode_snapshot(&jaque_core::wire::encode_snapshot(&snapshot)).unwrap();
    assert_eq!(decoded.policy(), policy);
}

#[test]
fn a_change_that_names_nothing_or_breaks_a_rule_is_refused_with_the_reason_and_not_written() {
    let mut w = three();
    let owner = w.owner_of(ObjectId::POLICY).unwrap();
    let before = w.log.len();
    let r = w.submit(&owner, policy_cmd("p1", routes(&["nobody"])));
    assert!(rejected(w.outcome(r)).contains("names receiver nobody, which does not exist"), "{:?}", w.outcome(r));
    let r = w.submit(&owner, policy_cmd("p2", Change::DeleteReceiver { name: name("nobody") }));
    assert_eq!(rejected(w.outcome(r)), "receiver nobody does not exist");
    let r = w.submit(&owner, policy_cmd("p3", Change::ExpireSilence { name: name("none") }));
    assert_eq!(rejected(w.outcome(r)), "silence none does not exist");
    w.submit(&owner, policy_cmd("p4", receiver("db-team")));
    w.submit(&owner, policy_cmd("p5", routes(&["db-team"])));
    let r = w.submit(&owner, policy_cmd("p6", Change::DeleteReceiver { name: name("db-team") }));
    assert!(rejected(w.outcome(r)).contains("which does not exist"), "a receiver a route names stays");
    assert_eq!(w.log.len(), before + 2, "only the two valid changes were written");
    // The wrong key for the kind, either way.
    let r = w.submit(&owner, cmd("p7", "web", CommandKind::Policy { change: Box::new(receiver("x")) }));
    assert!(rejected(w.outcome(r)).contains("policy's key"), "{:?}", w.outcome(r));
    let r = w.submit(&owner, cmd("p8", ObjectId::POLICY, CommandKind::Pause));
    assert!(rejected(w.outcome(r)).contains("policy's key"), "{:?}", w.outcome(r));
    assert_eq!(w.log.len(), before + 2);
}

#[test]
fn a_change_the_fold_cannot_take_is_left_out_alike_by_every_reader_and_counted() {
    // What a partitioned or older writer could get in: a route naming a receiver that is not there.
    let mut r = LogReader::new();
    let epoch = jaque_core::LogEntry::Epoch(jaque_core::EpochRecord {
        epoch: 1,
        members: vec![member("a", 1)],
        members_rev: 1,
        idempotency_window_ms: None,
        format: jaque_core::format::CLUSTER_FORMAT,
    });
    r.read(1, &epoch);
    let event = |change| {
        jaque_core::LogEntry::Event(jaque_core::Event {
            object: oid(ObjectId::POLICY),
            epoch: 1,
            writer: member("a", 1),
            at: jaque_core::Time(1_000),
            command_id: None,
            body: jaque_core::EventBody::Policy { change: Box::new(change) },
        })
    };
    r.read(2, &event(routes(&["nobody"])));
    assert!(r.policy().is_empty());
    assert_eq!(r.counters.policy_refused_total, 1);
    r.read(3, &event(receiver("nobody")));
    r.read(4, &event(routes(&["nobody"])));
    assert_eq!(r.policy().routes.len(), 1);
    // A silence expires at the change's time; one that ended a week before a later change is dropped.
    r.read(5, &event(db_silence("s", jaque_core::Time(1_000_000))));
    r.read(6, &event(Change::ExpireSilence { name: name("s") }));
    assert_eq!(r.policy().silences[&name("s")].ends_at, jaque_core::Time(1_000));
    let late = jaque_core::LogEntry::Event(jaque_core::Event {
        at: jaque_core::Time(1_000 + 8 * 24 * 3_600_000),
        ..match event(receiver("other")) {
            jaque_core::LogEntry::Event(e) => e,
            _ => unreachable!(),
        }
    });
    r.read(7, &late);
    assert!(r.policy().silences.is_empty(), "dropped a week after it ended");
    // A policy change on an object's key is ignored.
    let mut on_object = match event(receiver("x")) {
        jaque_core::LogEntry::Event(e) => e,
        _ => unreachable!(),
    };
    on_object.object = oid("web");
    r.read(8, &jaque_core::LogEntry::Event(on_object));
    assert!(!r.policy().receivers.contains_key(&name("x")));
}

#[test]
fn policy_commands_wait_for_every_member_to_speak_format_4() {
    let mut w = World::new();
    w.announce = Some(jaque_core::format::CLUSTER_FORMAT);
    w.config = Some(|c| c.hold_format = 3);
    w.add_engine("a", 1);
    w.advance(Duration::from_millis(10));
    let before = w.log.len();
    let r = w.submit("a", policy_cmd("p1", receiver("db-team")));
    let reason = rejected(w.outcome(r));
    assert!(reason.contains("needs cluster format 4") && reason.contains("docs/upgrading.md"), "{reason}");
    assert_eq!(w.log.len(), before);
}

// ---- Episodes and parents (cluster format 4) ----

fn reader_at(format: u32) -> LogReader {
    let mut r = LogReader::new();
    r.read(
        1,
        &jaque_core::LogEntry::Epoch(jaque_core::EpochRecord {
            epoch: 1,
            members: vec![member("a", 1)],
            members_rev: 1,
            idempotency_window_ms: None,
            format,
        }),
    );
    r
}

fn on(object: &str, at: u64, body: jaque_core::EventBody) -> jaque_core::LogEntry {
    jaque_core::LogEntry::Event(jaque_core::Event {
        object: oid(object),
        epoch: 1,
        writer: member("a", 1),
        at: jaque_core::Time(at),
        command_id: None,
        body,
    })
}

fn hard(from: jaque_core::State, to: jaque_core::State) -> jaque_core::EventBody {
    jaque_core::EventBody::transition(from, to, "")
}

#[test]
fn an_episode_is_the_position_of_the_transition_that_opened_the_problem_until_the_recovery() {
    use jaque_core::State::*;
    for format in [3, 4] {
        let mut r = reader_at(format);
        let episode = |r: &LogReader| r.object(&oid("db")).unwrap().episode();
        r.read(2, &on("db", 10, jaque_core::EventBody::Put { def: def(30) }));
        r.read(3, &on("db", 20, hard(Pending, Ok)));
        assert_eq!(episode(&r), None);
        r.read(4, &on("db", 30, hard(Ok, Critical)));
        let opened = (format >= 4).then_some(4);
        assert_eq!(episode(&r), opened, "format {format}");
        r.read(5, &on("db", 40, hard(Critical, Warning)));
        assert_eq!(episode(&r), opened, "a change of problem stays in the episode");
        r.read(6, &on("db", 50, hard(Warning, Ok)));
        assert_eq!(episode(&r), None, "the recovery ends it");
        r.read(7, &on("db", 60, hard(Ok, Unknown)));
        assert_eq!(episode(&r), (format >= 4).then_some(7), "a new problem, a new episode");
        // A snapshot carries it.
        assert_eq!(LogReader::from_snapshot(r.snapshot()).unwrap(), r);
    }
}

#[test]
fn an_object_whose_parent_is_in_a_hard_problem_has_its_parent_down() {
    use jaque_core::State::*;
    let mut r = reader_at(4);
    let child = jaque_core::ObjectDef { parents: vec![oid("switch"), oid("gone")], ..def(30) };
    r.read(2, &on("switch", 10, jaque_core::EventBody::Put { def: def(30) }));
    r.read(3, &on("web", 10, jaque_core::EventBody::Put { def: child }));
    let down = |r: &LogReader| -> Vec<String> {
        r.parents_down(r.object(&oid("web")).unwrap()).map(|p| p.to_string()).collect()
    };
    assert!(down(&r).is_empty());
    r.read(4, &on("switch", 20, hard(Pending, Critical)));
    assert_eq!(down(&r), ["switch"], "a parent that does not exist is not down");
    r.read(5, &on("switch", 30, hard(Critical, Ok)));
    assert!(down(&r).is_empty());
}

#[test]
fn parents_need_format_4_and_an_object_cannot_be_its_own_parent() {
    let put = |parents: &[&str]| CommandKind::Put {
        def: jaque_core::ObjectDef { parents: parents.iter().map(|p| oid(p)).collect(), ..def(30) },
    };
    assert_eq!(put(&["db"]).needs(), 4);
    assert_eq!(put(&[]).needs(), 1);
    let mut w = three();
    let owner = w.owner_of("web").unwrap();
    let r = w.submit(&owner, cmd("p1", "web", put(&["web"])));
    assert!(rejected(w.outcome(r)).contains("web cannot be its own parent"), "{:?}", w.outcome(r));
    let r = w.submit(&owner, cmd("p2", "web", put(&["db", "db"])));
    assert!(rejected(w.outcome(r)).contains("named twice"), "{:?}", w.outcome(r));
    let r = w.submit(&owner, cmd("p3", "web", put(&["db"])));
    assert!(matches!(w.outcome(r), Outcome::Applied { .. }), "{:?}", w.outcome(r));
}

// ---- Who a transition notifies (cluster format 4) ----

fn labelled(team: &str) -> jaque_core::ObjectDef {
    let labels = jaque_core::labels::Labels::new([("team".to_string(), team.to_string())].into()).unwrap();
    jaque_core::ObjectDef { labels, max_attempts: Some(1), flapping: Some(false), ..def(10) }
}

/// The `notify` of every hard transition of `object` in the log, in order: (to, receivers, implicit, suppressed).
fn notifies(w: &World, object: &str) -> Vec<(jaque_core::State, Vec<String>, bool, Option<String>)> {
    w.log
        .iter()
        .filter_map(|e| match e {
            jaque_core::LogEntry::Event(ev) if ev.object.as_str() == object => match &ev.body {
                jaque_core::EventBody::Transition { to, notify: Some(n), .. } => Some((
                    *to,
                    n.receivers.iter().map(|r| r.to_string()).collect(),
                    n.implicit,
                    n.suppressed.as_ref().map(|s| format!("{} {}", s.reason, s.by.join(","))),
                )),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

#[test]
fn a_recovery_goes_to_every_receiver_its_problem_went_to_whatever_the_routes_say_by_then() {
    use jaque_core::State::*;
    let mut w = three();
    let policy_owner = w.owner_of(ObjectId::POLICY).unwrap();
    for (id, change) in [("p1", receiver("db-team")), ("p2", receiver("web-team")), ("p3", routes(&["db-team"]))] {
        let r = w.submit(&policy_owner, policy_cmd(id, change));
        assert!(matches!(w.outcome(r), Outcome::Applied { .. }), "{:?}", w.outcome(r));
    }
    let owner = w.owner_of("db").unwrap();
    w.truth.insert("db".into(), Critical);
    w.submit(&owner, cmd("c1", "db", CommandKind::Put { def: labelled("db") }));
    w.advance(Duration::from_secs(11));
    // The routes change mid-episode: the recovery still reaches db-team, and only it.
    w.submit(&policy_owner, policy_cmd("p4", routes(&["web-team"])));
    w.truth.insert("db".into(), Ok);
    w.advance(Duration::from_secs(11));
    let none = None;
    assert_eq!(
        notifies(&w, "db"),
        [(Critical, vec!["db-team".to_string()], false, none.clone()), (Ok, vec!["db-team".to_string()], false, none)]
    );
    let episode = w.oracle().object(&oid("db")).unwrap().episode();
    assert_eq!(episode, None, "the recovery ended the episode");
}

#[test]
fn a_silenced_problem_goes_to_nobody_and_so_does_its_recovery() {
    use jaque_core::State::*;
    let mut w = three();
    let policy_owner = w.owner_of(ObjectId::POLICY).unwrap();
    w.submit(&policy_owner, policy_cmd("p1", receiver("db-team")));
    w.submit(&policy_owner, policy_cmd("p2", routes(&["db-team"])));
    let r = w.submit(&policy_owner, policy_cmd("p3", db_silence("upgrade", w.now + Duration::from_secs(15))));
    assert!(matches!(w.outcome(r), Outcome::Applied { .. }), "{:?}", w.outcome(r));
    let owner = w.owner_of("db").unwrap();
    w.truth.insert("db".into(), Critical);
    w.submit(&owner, cmd("c1", "db", CommandKind::Put { def: labelled("db") }));
    w.advance(Duration::from_secs(11));
    w.truth.insert("db".into(), Ok);
    w.advance(Duration::from_secs(11));
    // The silence is over by now; a new problem is sent, to the routes' receiver.
    w.truth.insert("db".into(), Warning);
    w.advance(Duration::from_secs(11));
    let got = notifies(&w, "db");
    assert_eq!(got[0], (Critical, vec![], false, Some("silenced upgrade".into())));
    assert_eq!(got[1], (Ok, vec![], false, None), "nothing was sent, so nothing is resolved");
    assert_eq!(got[2], (Warning, vec!["db-team".to_string()], false, None));
}

#[test]
fn a_problem_while_a_parent_is_down_goes_to_nobody_and_without_routes_everything_goes_to_the_implicit_route() {
    use jaque_core::State::*;
    let mut w = three();
    w.truth.insert("switch".into(), Critical);
    w.truth.insert("host".into(), Critical);
    let switch = w.owner_of("switch").unwrap();
    w.submit(&switch, cmd("c1", "switch", CommandKind::Put { def: labelled("net") }));
    w.advance(Duration::from_secs(11));
    let host = w.owner_of("host").unwrap();
    let def = jaque_core::ObjectDef { parents: vec![oid("switch")], ..labelled("net") };
    w.submit(&host, cmd("c2", "host", CommandKind::Put { def }));
    w.advance(Duration::from_secs(11));
    assert_eq!(notifies(&w, "switch"), [(Critical, vec![], true, None)], "no policy: the implicit route");
    assert_eq!(notifies(&w, "host"), [(Critical, vec![], false, Some("parent_down switch".into()))]);
}

#[test]
fn a_receiver_that_was_sent_a_problem_not_yet_recovered_is_not_deleted() {
    use jaque_core::State::*;
    let mut w = three();
    let policy_owner = w.owner_of(ObjectId::POLICY).unwrap();
    for (id, change) in [("p1", receiver("db-team")), ("p2", receiver("web-team")), ("p3", routes(&["db-team"]))] {
        w.submit(&policy_owner, policy_cmd(id, change));
    }
    let owner = w.owner_of("db").unwrap();
    w.truth.insert("db".into(), Critical);
    w.submit(&owner, cmd("c1", "db", CommandKind::Put { def: labelled("db") }));
    w.advance(Duration::from_secs(11));
    w.submit(&policy_owner, policy_cmd("p4", routes(&["web-team"])));
    let r = w.submit(&policy_owner, policy_cmd("p5", Change::DeleteReceiver { name: name("db-team") }));
    let reason = rejected(w.outcome(r)).to_string();
    assert!(
        reason.contains("receiver db-team was sent problems of 1 objects that have not recovered yet (db)"),
        "{reason}"
    );
    w.truth.insert("db".into(), Ok);
    w.advance(Duration::from_secs(11));
    let r = w.submit(&policy_owner, policy_cmd("p6", Change::DeleteReceiver { name: name("db-team") }));
    assert!(matches!(w.outcome(r), Outcome::Applied { .. }), "once db recovered: {:?}", w.outcome(r));
}

// ---- Held problems released ----

/// The `Released` events on `object` in the log: (episode, receivers, implicit).
fn releases(w: &World, object: &str) -> Vec<(u64, Vec<String>, bool)> {
    w.log
        .iter()
        .filter_map(|e| match e {
            jaque_core::LogEntry::Event(ev) if ev.object.as_str() == object => match &ev.body {
                jaque_core::EventBody::Released { episode, notify, .. } => {
                    Some((*episode, notify.receivers.iter().map(|r| r.to_string()).collect(), notify.implicit))
                }
                _ => None,
            },
            _ => None,
        })
        .collect()
}

#[test]
fn a_problem_held_by_a_parent_down_is_released_when_the_parent_recovers_and_its_recovery_follows() {
    use jaque_core::State::*;
    let mut w = three();
    w.truth.insert("switch".into(), Critical);
    w.truth.insert("host".into(), Critical);
    let switch = w.owner_of("switch").unwrap();
    w.submit(&switch, cmd("c1", "switch", CommandKind::Put { def: labelled("net") }));
    w.advance(Duration::from_secs(11));
    let host = w.owner_of("host").unwrap();
    let def = jaque_core::ObjectDef { parents: vec![oid("switch")], ..labelled("net") };
    w.submit(&host, cmd("c2", "host", CommandKind::Put { def }));
    w.advance(Duration::from_secs(11));
    assert!(releases(&w, "host").is_empty(), "held while the switch is down");
    w.truth.insert("switch".into(), Ok);
    w.advance(Duration::from_secs(11));
    let episode = w.oracle().object(&oid("host")).unwrap().episode().unwrap();
    assert_eq!(releases(&w, "host"), [(episode, vec![], true)], "released once, to the implicit route");
    w.truth.insert("host".into(), Ok);
    w.advance(Duration::from_secs(11));
    let got = notifies(&w, "host");
    assert_eq!(got.last().unwrap(), &(Ok, vec![], true, None), "its recovery goes where the release went");
    assert_eq!(releases(&w, "host").len(), 1);
}

#[test]
fn a_problem_held_by_a_silence_is_released_when_the_silence_ends_on_its_own() {
    use jaque_core::State::*;
    let mut w = three();
    let policy_owner = w.owner_of(ObjectId::POLICY).unwrap();
    w.submit(&policy_owner, policy_cmd("p1", receiver("db-team")));
    w.submit(&policy_owner, policy_cmd("p2", routes(&["db-team"])));
    w.submit(&policy_owner, policy_cmd("p3", db_silence("upgrade", w.now + Duration::from_secs(30))));
    let owner = w.owner_of("db").unwrap();
    w.truth.insert("db".into(), Critical);
    w.submit(&owner, cmd("c1", "db", CommandKind::Put { def: labelled("db") }));
    w.advance(Duration::from_secs(11));
    assert_eq!(notifies(&w, "db")[0].3.as_deref(), Some("silenced upgrade"));
    assert!(releases(&w, "db").is_empty(), "held while the silence holds");
    w.advance(Duration::from_secs(25));
    let episode = w.oracle().object(&oid("db")).unwrap().episode().unwrap();
    assert_eq!(releases(&w, "db"), [(episode, vec!["db-team".to_string()], false)], "sent when the silence ended");
    w.truth.insert("db".into(), Ok);
    w.advance(Duration::from_secs(11));
    assert_eq!(notifies(&w, "db").last().unwrap(), &(Ok, vec!["db-team".to_string()], false, None));
}

#[test]
fn an_engine_that_read_the_policy_while_catching_up_releases_a_problem_when_its_silence_ends() {
    use jaque_core::State::*;
    let mut w = three();
    let policy_owner = w.owner_of(ObjectId::POLICY).unwrap();
    w.submit(&policy_owner, policy_cmd("p1", receiver("db-team")));
    w.submit(&policy_owner, policy_cmd("p2", routes(&["db-team"])));
    w.submit(&policy_owner, policy_cmd("p3", db_silence("upgrade", w.now + Duration::from_secs(30))));
    let owner = w.owner_of("db").unwrap();
    w.truth.insert("db".into(), Critical);
    w.submit(&owner, cmd("c1", "db", CommandKind::Put { def: labelled("db") }));
    w.advance(Duration::from_secs(11));
    // An engine that read the policy while catching up (no policy change since) takes everything over: only its
    // own look at what it took over sets the timer at the silence's end.
    let _ = owner;
    w.add_engine("d", 1);
    for e in ["a", "b", "c"] {
        w.remove_engine(e);
    }
    w.advance(Duration::from_secs(40));
    assert_eq!(w.owner_of("db").as_deref(), Some("d"));
    let episode = w.oracle().object(&oid("db")).unwrap().episode().unwrap();
    assert_eq!(releases(&w, "db"), [(episode, vec!["db-team".to_string()], false)]);
}
