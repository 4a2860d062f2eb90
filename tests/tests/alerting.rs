//! Alert semantics (issue 34) against the shipped binary on NATS: a blip is a soft state and notifies nothing,
//! `max_attempts` failures in a row are one hard problem and one webhook, a recovery takes `recovery_attempts` ok
//! results; the engine that takes over an object killed between two attempts goes on from the attempt its owner
//! reached; a flapping target sends one flapping start, not a storm of transitions.
//!
//! The target is an exec plugin that answers from a queue the test fills (`Results`): each check takes the next
//! exit code, 0 once the queue is empty. So "fails once" is one failing result, whatever the timing. What the
//! cluster did is read from the log itself (`checker::read_log`, folded by core's reader) and from what a webhook
//! receiver got.

use jaque_core::log::{Effect, Read};
use jaque_core::{EventBody, LogEntry, LogReader, MemberId, State};
use jaque_tests::checker::read_log;
use jaque_tests::webhook::Receiver;
use jaque_tests::{poll, Jaque, Nats};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

/// Exits with the first code queued in the file named by its argument (0 when there is none) and takes it off,
/// one check at a time (`flock`). A plugin runs with a cleared environment: every command by its path.
const QUEUE_PLUGIN: &str = "#!/bin/sh
f=\"$1\"
exec 9>>\"$f.lock\"
/usr/bin/flock 9
code=$(/usr/bin/head -n 1 \"$f\" 2>/dev/null)
[ -n \"$code\" ] || code=0
/usr/bin/tail -n +2 \"$f\" > \"$f.next\" 2>/dev/null
/bin/mv \"$f.next\" \"$f\"
echo \"queued exit $code\"
exit \"$code\"
";

/// A plugin directory with the queue plugin, and each object's queue of results in it.
struct Results {
    dir: tempfile::TempDir,
}

impl Results {
    fn new() -> Results {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let p = dir.path().join("queue");
        std::fs::write(&p, QUEUE_PLUGIN).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o700)).unwrap();
        Results { dir }
    }

    fn dir(&self) -> &str {
        self.dir.path().to_str().unwrap()
    }

    fn file(&self, object: &str) -> PathBuf {
        self.dir.path().join(format!("{object}.results"))
    }

    /// Queues exit codes for `object`'s next checks, under the lock the plugin takes.
    fn push(&self, object: &str, codes: &[i32]) {
        let file = self.file(object);
        let lines: String = codes.iter().map(|c| format!("{c}\n")).collect();
        let status = std::process::Command::new("/usr/bin/flock")
            .arg(format!("{}.lock", file.display()))
            .args(["-c", &format!("printf '{lines}' >> '{}'", file.display())])
            .status()
            .expect("flock");
        assert!(status.success());
    }

    /// The object's definition: the queue plugin on its own file, checked every second.
    fn def(&self, object: &str, extra: Value) -> Value {
        let mut body = json!({
            "probe": {"type": "exec", "plugin": "queue", "args": [self.file(object).to_str().unwrap()]},
            "interval": "1s",
            "timeout": "500ms",
        });
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    }
}

/// The result events of `object` the log's reader took, in log order: (position, writer, body).
fn results(nats_url: &str, object: &str) -> Vec<(u64, MemberId, EventBody)> {
    let mut reader = LogReader::new();
    let mut out = Vec::new();
    for (seq, entry) in read_log(nats_url) {
        let read = reader.read(seq, &entry);
        if let (LogEntry::Event(ev), Read::Event { effect: Effect::Transitioned | Effect::Folded, .. }) = (&entry, read)
        {
            if ev.object.as_str() == object && ev.body.is_result() {
                out.push((seq, ev.writer.id.clone(), ev.body.clone()));
            }
        }
    }
    out
}

/// What a result event says, short: `soft critical 1/3`, `back ok`, `hard ok->critical 3`, `flapping on`.
fn brief(body: &EventBody) -> String {
    match body {
        EventBody::Soft { state, attempt: 0, .. } => format!("back {}", state.as_str()),
        EventBody::Soft { state, attempt, of, .. } => format!("soft {} {attempt}/{of}", state.as_str()),
        EventBody::Transition { from, to, attempt, .. } => format!("hard {}->{} {attempt}", from.as_str(), to.as_str()),
        EventBody::Flapping { on } => format!("flapping {on}"),
        other => format!("{other:?}"),
    }
}

fn briefs(nats_url: &str, object: &str) -> Vec<String> {
    results(nats_url, object).iter().map(|(_, _, b)| brief(b)).collect()
}

/// Waits until the object's result events, from the first, are `want` (and fails on any other sequence that
/// is not a prefix of it).
fn wait_results(nats_url: &str, object: &str, want: &[&str]) {
    poll(&format!("{object}: {want:?}"), || {
        let got = briefs(nats_url, object);
        assert!(
            got.len() <= want.len() && got.iter().zip(want).all(|(g, w)| g == w),
            "{object}: {got:?}, want {want:?}"
        );
        (got.len() == want.len()).then_some(())
    });
}

fn everything(nats: &Nats, id: &str, plugins: &Results, hook: &str) -> Jaque {
    let args = [
        "-target",
        "engine,worker,ui,notifier",
        "-coordination",
        &nats.url,
        "-queue",
        &nats.url,
        "-id",
        id,
        "-heartbeat-ttl",
        "3s",
        "-plugin-dir",
        plugins.dir(),
        "-notify-webhook",
        hook,
    ];
    let j = Jaque::start(id, &args);
    j.wait_ready();
    j
}

fn put(j: &Jaque, id: &str, body: &Value) {
    let r = j.put(&format!("/api/objects/{id}"), body);
    assert_eq!(r.status, 200, "{}", r.text());
}

/// The types and states the receiver got for `object`, in order, each once (a notifier's fault may repeat one,
/// with its `webhook-id`).
fn notified(rx: &Receiver, object: &str) -> Vec<String> {
    let mut seen = std::collections::BTreeSet::new();
    rx.deliveries("/hook")
        .iter()
        .filter(|d| d.body["object"] == object && seen.insert(d.id.clone()))
        .map(|d| {
            let (kind, from, to) = (&d.body["type"], &d.body["from"], &d.body["to"]);
            format!("{} {}->{}", kind.as_str().unwrap(), from.as_str().unwrap(), to.as_str().unwrap())
        })
        .collect()
}

#[test]
fn a_blip_is_soft_three_failures_are_one_hard_problem_and_recovery_takes_its_attempts() {
    let nats = Nats::start();
    let rx = Receiver::start(None);
    let plugins = Results::new();
    let j = everything(&nats, "e1", &plugins, &rx.url("/hook"));
    let extra = json!({"max_attempts": 3, "retry_interval": "500ms", "recovery_attempts": 2});
    put(&j, "web", &plugins.def("web", extra));
    // A new object's first result is its state at once.
    wait_results(&nats.url, "web", &["hard pending->ok 1"]);

    // One failing result: a soft state, back to ok at the next; nothing notified, no hard transition.
    plugins.push("web", &[2]);
    wait_results(&nats.url, "web", &["hard pending->ok 1", "soft critical 1/3", "back ok"]);
    assert_eq!(j.get("/api/objects/web").json()["state"], "ok");

    // Three in a row: one hard problem, one webhook.
    plugins.push("web", &[2, 2, 2]);
    let problem = [
        "hard pending->ok 1",
        "soft critical 1/3",
        "back ok",
        "soft critical 1/3",
        "soft critical 2/3",
        "hard ok->critical 3",
    ];
    wait_results(&nats.url, "web", &problem);

    // The queue is empty: ok results, and the hard problem ends at the second of them.
    let mut recovered = problem.to_vec();
    recovered.extend(["soft ok 1/2", "hard critical->ok 2"]);
    wait_results(&nats.url, "web", &recovered);
    let sent = poll("the recovery notified", || {
        let n = notified(&rx, "web");
        (n.len() >= 3).then_some(n)
    });
    assert_eq!(sent, ["transition pending->ok", "transition ok->critical", "transition critical->ok"]);
    assert_eq!(j.metric("jaque_engine_transitions_written_total"), Some(3.0));
}

#[test]
fn the_next_owner_goes_on_from_the_attempt_the_killed_owner_reached() {
    let nats = Nats::start();
    let rx = Receiver::start(None);
    let plugins = Results::new();
    let mut engines =
        [everything(&nats, "e1", &plugins, &rx.url("/hook")), everything(&nats, "e2", &plugins, &rx.url("/hook"))];
    engines[0].wait_epoch(&["e1", "e2"]);
    // Retries far enough apart that the owner dies between the first and the second attempt.
    let extra = json!({"interval": "20s", "max_attempts": 3, "retry_interval": "1s", "flapping": false});
    put(&engines[0], "db", &plugins.def("db", extra));
    wait_results(&nats.url, "db", &["hard pending->ok 1"]);
    plugins.push("db", &[2; 12]);
    wait_results(&nats.url, "db", &["hard pending->ok 1", "soft critical 1/3"]);
    let owner = engines[0].get("/api/objects/db").json()["owner"].as_str().unwrap().to_string();
    let (dead, alive) = if owner == "e1" { (0, 1) } else { (1, 0) };
    engines[dead].proc.signal("KILL");
    engines[dead].proc.wait_exit();

    let done = poll("db hard critical", || {
        let r = results(&nats.url, "db");
        r.iter().any(|(_, _, b)| matches!(b, EventBody::Transition { to: State::Critical, .. })).then_some(r)
    });
    let attempts: Vec<(String, String)> = done.iter().map(|(_, w, b)| (w.to_string(), brief(b))).collect();
    let got: Vec<&str> = attempts.iter().map(|(_, b)| b.as_str()).collect();
    assert_eq!(got, ["hard pending->ok 1", "soft critical 1/3", "soft critical 2/3", "hard ok->critical 3"]);
    // The attempt that made it hard is the survivor's: it went on from the log's count.
    let survivor = if alive == 0 { "e1" } else { "e2" };
    assert_eq!(attempts[3].0, survivor, "{attempts:?}");
    let sent = poll("the problem notified", || {
        let n = notified(&rx, "db");
        n.iter().any(|s| s.ends_with("ok->critical")).then_some(n)
    });
    assert_eq!(sent, ["transition pending->ok", "transition ok->critical"]);
}

#[test]
fn a_flapping_target_sends_one_flapping_start_and_no_storm_of_transitions() {
    let nats = Nats::start();
    let rx = Receiver::start(None);
    let plugins = Results::new();
    let j = everything(&nats, "e1", &plugins, &rx.url("/hook"));
    // Every change hard at once, so every result of an alternating target is a transition.
    put(&j, "flappy", &plugins.def("flappy", json!({"max_attempts": 1})));
    wait_results(&nats.url, "flappy", &["hard pending->ok 1"]);
    let alternating: Vec<i32> = (0..24).map(|i| if i % 2 == 0 { 2 } else { 0 }).collect();
    plugins.push("flappy", &alternating);
    // Once the changes make up Icinga's 30 % of the last 20 intervals, flapping starts; then the transitions go
    // on in the log but are not sent; the queue runs dry, the target stays ok, and flapping ends below 25 %.
    let events = poll("flapping started and ended", || {
        let r = results(&nats.url, "flappy");
        let ends = r.iter().filter(|(_, _, b)| flapping_change(b) == Some(false)).count();
        (ends == 1).then_some(r)
    });
    let starts = events.iter().filter(|(_, _, b)| flapping_change(b) == Some(true)).count();
    assert_eq!(starts, 1, "{:?}", events.iter().map(|(_, _, b)| brief(b)).collect::<Vec<_>>());
    let hard = events.iter().filter(|(_, _, b)| matches!(b, EventBody::Transition { .. })).count();
    let sent = poll("flapping's end notified", || {
        let n = notified(&rx, "flappy");
        n.iter().any(|s| s.starts_with("flapping_end")).then_some(n)
    });
    let transitions = sent.iter().filter(|s| s.starts_with("transition")).count();
    assert_eq!(sent.iter().filter(|s| s.starts_with("flapping_start")).count(), 1, "{sent:?}");
    // Between the flapping start and end, no transition was sent, though the log has them.
    let start = sent.iter().position(|s| s.starts_with("flapping_start")).unwrap();
    let end = sent.iter().position(|s| s.starts_with("flapping_end")).unwrap();
    assert!(sent[start + 1..end].iter().all(|s| !s.starts_with("transition")), "{sent:?}");
    assert!(transitions + 4 < hard, "{transitions} transitions sent of {hard} in the log: {sent:?}");
}

/// The flapping start (`true`) or end an event carries.
fn flapping_change(body: &EventBody) -> Option<bool> {
    match body {
        EventBody::Flapping { on } => Some(*on),
        EventBody::Transition { flapping, .. } | EventBody::Soft { flapping, .. } => *flapping,
        _ => None,
    }
}
