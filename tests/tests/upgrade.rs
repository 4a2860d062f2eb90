//! Rolling upgrade, real processes (issue 33): a cluster of the previous release's `jaque` upgraded to this
//! build one process at a time while writes, checks, transitions, the sink and the notifier go on; rollback of
//! an engine with the format held at the previous build's (`-hold-format`, docs/upgrading.md) and after the
//! cluster moved to this build's; a `-data-dir` written by the previous build read by this one, and back.
//!
//! The previous build is `JAQUE_PREVIOUS_BIN`, which `scripts/upgrade.sh` builds from git and sets; without it
//! every test here prints that it was skipped and passes, so the default test command needs no old build.
//!
//! The formats are the builds' own, never written here: the previous build's cluster format is what its
//! `jaque --version` prints (`cluster format N …`; a build before v0.1.0 prints none: format 1), this build's is
//! `jaque_core::format::CLUSTER_FORMAT`, and the previous build must be the release before this one, of the
//! format before this build's (builds two formats apart may not share a cluster, docs/upgrading.md; a run from
//! 7954f1c, format 1, showed its ui passing over format-3 entries). From v0.2.0 (format 3) to this build (format
//! 4), "a command of the new format" is a put with `parents` (`new_format_put`; the test checks that such a put
//! needs exactly this build's format, so a later format makes it say to pick another command). Under format 3 a
//! flipping target makes soft states, flapping and few hard transitions, so nothing here counts transitions:
//! what is held is that every reader, the log, the sink and the webhook agree on whatever happened (`goes_on`,
//! `check_all`).
//!
//! The cluster: one nats-server, three engines (`-target engine,ui`, so each one's view can be compared; a
//! snapshot every 50 entries, so each new engine starts from one the old build wrote), two workers, a ui, a sink
//! into PostgreSQL and a notifier with a webhook receiver, all of the previous build; 24 objects checked against
//! a local target whose answers flip every 350 ms, so transitions flow, and `held`, critical and acknowledged,
//! which nothing touches until its acknowledgement is withdrawn; writes through the ui (`checker::Writer`). Each
//! process is replaced in turn (SIGTERM, a clean exit, its leave seen, the new build started with the same flags
//! and id, its join seen, writes applied, results written and every notification due delivered again), in
//! this order:
//!
//! 1. the workers (w1, w2): stateless, in no bucket; the engines' check work must reach a worker of either build;
//! 2. the engines (e1, e2, e3), one at a time: the log's writers, each waited back into the epoch, owning
//!    objects and writing their results, before the next. With e1 new, the new-format put through e1 is
//!    refused with a reason naming the format it needs, whoever owns the object (an owner of the previous
//!    build must not apply it without the fields it does not know);
//! 3. the sink (s1), then the notifier (n1): readers of the log the engines write, so they follow the writers;
//!    with n1 new, every member speaks this build's format;
//! 4. the ui last: it only reads and submits, and the writer goes through it, so its writes pause over its restart
//!    (one writer before, one after). Not a member, it does not hold the format back: once the cluster moved,
//!    the previous build's ui must be not ready, saying which format the log needs.
//!
//! The end-of-run checks (`check_all`): every acknowledged write applied once (`checker::check_run`), every
//! engine and the ui at the same position with the same state as the log; the sink's rows exactly the log's
//! accepted events; every accepted event the notifier sends (a hard transition unless the object flaps, a
//! flapping start or end: `notified`) since the notifier's start delivered, with its one webhook-id, and none
//! twice (every stop was a clean SIGTERM); no process of either build counted a message it could not decode.
//! Once the cluster moved, the new-format put of every object is applied and every reader shows its parents.
//!
//! A rollback (`roll_back_and_forward`) takes the engine that writes the snapshots back to the previous build,
//! writes flowing; then starts a ui of the new build (from the latest snapshot, the previous build's), sends
//! the new-format put through an engine that stayed new, and takes the engine forward to the new build again.
//! At each step every object must read the same in the process that changed as in that engine (what both
//! builds show, `common`, where the builds differ), or the process must refuse with a reason: a process that
//! is ready with a state of its own is the silent wrong state these tests fail on.
//!
//! A breach of the upgrade's rules that leaves the cluster running (a new-format command applied while it must
//! be refused, or applied without its fields) is a finding (`Cluster::finding`): printed at once, the run goes
//! on through every other check, and the test fails at its end naming each.

use jaque_core::compact::SNAPSHOT_KEY;
use jaque_core::format::{CLUSTER_FORMAT, OLDEST_CLUSTER_FORMAT};
use jaque_core::hrw::{self, Ownership};
use jaque_core::notifier::EndpointId;
use jaque_core::{CommandKind, EventBody, LogEntry, LogReader, MemberId, MemberRef, ObjectDef, ObjectId, Read};
use jaque_tests::checker::{
    check_log, check_run, epoch_records_raw, notify_start_record, object_body_with, read_log, CountingTarget, Flapper,
    WriteRecord, Writer,
};
use jaque_tests::sink_store::{expected_from, read_store, store_matches};
use jaque_tests::webhook::Receiver;
use jaque_tests::{http, jaque_bin, poll, Jaque, Nats, Postgres};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The two tests each run a cluster or a process under load: one at a time on a 2-core machine.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const ENGINES: [&str; 3] = ["e1", "e2", "e3"];
const OBJECTS: usize = 24;

/// The previous build: its binary and the cluster format it speaks.
#[derive(Clone, Debug)]
struct Previous {
    bin: PathBuf,
    format: u32,
}

/// The previous build, or `None` (and a line saying the test is skipped) when it is not given.
fn previous_build(test: &str) -> Option<Previous> {
    let Some(p) = std::env::var_os("JAQUE_PREVIOUS_BIN") else {
        eprintln!("{test}: skipped: JAQUE_PREVIOUS_BIN is not set (scripts/upgrade.sh builds the previous release)");
        return None;
    };
    let p = PathBuf::from(p);
    assert!(p.is_file(), "JAQUE_PREVIOUS_BIN={} is not a file", p.display());
    // An upgrade from this build's own binary would test nothing.
    let same = std::fs::canonicalize(&p).ok() == std::fs::canonicalize(jaque_bin()).ok();
    assert!(!same, "JAQUE_PREVIOUS_BIN is this build's own binary");
    assert_eq!(format_of(&jaque_bin()), CLUSTER_FORMAT, "this build's --version names its CLUSTER_FORMAT");
    let format = format_of(&p);
    // The test's premise: the previous build is the release before this one, whose format is the one before
    // this build's. Two formats apart may not share a cluster (docs/upgrading.md, *Which builds may share a
    // cluster*), and a run shows why: from 7954f1c (before v0.1.0, format 1) to format 3, the ui of the previous
    // build (not a member, so it does not hold the format back; replaced last) passed over 263 entries of format
    // 3 it could not decode.
    assert_eq!(
        format + 1,
        CLUSTER_FORMAT,
        "the previous build ({}) speaks cluster format {format}, this build {CLUSTER_FORMAT}: the rolling-upgrade \
         test runs from the release before this build (cluster format {}; scripts/upgrade.sh's default FROM_REF); \
         builds two formats apart may not share a cluster (docs/upgrading.md)",
        p.display(),
        CLUSTER_FORMAT - 1
    );
    // The command of the new format must need exactly this build's format (`new_format_put`).
    let parents = vec![ObjectId::new(NEW_PARENT).unwrap()];
    let def = ObjectDef { parents, ..ObjectDef::tcp("127.0.0.1:1", 1_000, 800) };
    assert_eq!(
        CommandKind::Put { def }.needs(),
        CLUSTER_FORMAT,
        "a put with parents must need this build's cluster format: pick a command of format {CLUSTER_FORMAT} in \
         new_format_put"
    );
    eprintln!("{test}: from {} (cluster format {format}) to this build (cluster format {CLUSTER_FORMAT})", p.display());
    Some(Previous { bin: p, format })
}

/// The cluster format a build speaks, as its `jaque --version` prints it (`cluster format N (reads …)`); a
/// build before v0.1.0 prints no such line (nor, maybe, a version at all): format 1.
fn format_of(bin: &Path) -> u32 {
    version_line(bin, "cluster format ").unwrap_or(OLDEST_CLUSTER_FORMAT)
}

/// The sink schema version a build writes, as its `jaque --version` prints it (`sink schema version N …`); a
/// build before v0.1.0 prints none, and writes version 1.
fn sink_schema_of(bin: &Path) -> u32 {
    version_line(bin, "sink schema version ").unwrap_or(1)
}

/// The number after `prefix` on the line of `jaque --version` that starts with it.
fn version_line(bin: &Path, prefix: &str) -> Option<u32> {
    let out = std::process::Command::new(bin).arg("--version").output().expect("the build runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let rest = text.lines().find_map(|l| l.strip_prefix(prefix))?;
    let n = rest.split(' ').next().unwrap_or_default();
    Some(n.parse().unwrap_or_else(|_| panic!("{}: --version says \"{prefix}{rest}\"", bin.display())))
}

/// The alert rules every object of these tests is put with (cluster format 3, which the previous release speaks):
/// each change hard at once and no flapping, so transitions flow and are notified under either build as they
/// did before soft states (`go` waits for hard states; the default rules take three results in a row, retried a
/// minute apart for an hourly check; a target flipping every 350 ms makes every object flap).
fn rules() -> Value {
    json!({"max_attempts": 1, "flapping": false})
}

/// The parent the new-format put gives an object (it need not exist).
const NEW_PARENT: &str = "upstream";

/// The parents the new-format put gives an object, as a reader of this build shows them.
fn new_parents() -> Value {
    json!([NEW_PARENT])
}

/// `body` with parents: a put that needs this build's cluster format (parents came with format 4; checked in
/// `previous_build`), refused while a member of an older format is live or the format is held, applied after.
fn new_format_put(body: &Value) -> Value {
    let mut body = body.clone();
    body["parents"] = new_parents();
    body
}

/// The part of the reason an engine of this build refuses the new-format put with while the cluster's active
/// format is older.
fn needs_new_format() -> String {
    format!("needs cluster format {CLUSTER_FORMAT}")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Build {
    Old,
    New,
}

struct Builds {
    old: PathBuf,
    new: PathBuf,
    /// The cluster format the previous build speaks (`format_of`).
    old_format: u32,
}

impl Builds {
    fn bin(&self, b: Build) -> &Path {
        match b {
            Build::Old => &self.old,
            Build::New => &self.new,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Engine,
    Worker,
    Sink,
    Notifier,
    Ui,
}

/// A process of the cluster: its role, its flags (the same for every build it runs), the build it runs now.
struct Member {
    name: &'static str,
    role: Role,
    args: Vec<String>,
    /// Flags only the new build takes (`-hold-format`: the previous build does not know it).
    new_only: Vec<String>,
    build: Build,
    jaque: Jaque,
    /// It may have exited by itself: a previous build that said it cannot run here (`roll_back_and_forward`).
    may_have_exited: bool,
}

/// Messages a process could not decode, of every kind (a command of a kind an owner of the previous build does
/// not know is one too: nothing here sends one, the new-format command is a put).
fn decode_errors(j: &Jaque) -> f64 {
    let text = j.get("/metrics").text();
    text.lines()
        .filter(|l| l.starts_with("jaque_wire_decode_errors_total{"))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

struct Cluster {
    builds: Builds,
    nats: Nats,
    pg: Postgres,
    rx: Receiver,
    hook: String,
    target: Arc<CountingTarget>,
    objects: Vec<String>,
    /// The definition of `held` (its put's body).
    held: Value,
    members: BTreeMap<&'static str, Member>,
    /// Per process and build: the decode errors it had counted when it was stopped.
    decode_errors: Vec<(String, Build, f64)>,
    /// Breaches of the upgrade's rules that left the cluster running (`finding`).
    findings: Mutex<Vec<String>>,
}

impl Cluster {
    fn start(builds: Builds) -> Cluster {
        let nats = Nats::start();
        let pg = Postgres::start();
        let rx = Receiver::start(Some(SECRET));
        let hook = rx.url("/hook");
        let url = nats.url.clone();
        let store = pg.url();
        fn member(id: &str) -> Vec<&str> {
            vec!["-id", id, "-heartbeat-ttl", "3s"]
        }
        let mut specs: Vec<(&'static str, Role, Vec<&str>)> = Vec::new();
        for id in ENGINES {
            // Each engine also serves the read API (the checker compares every reader's view), and writes a
            // snapshot every 50 entries, so a new build starts from snapshots the old one wrote, and back.
            let args = ["-target", "engine,ui", "-queue", &url, "-coordination", &url, "-snapshot-every", "50"];
            specs.push((id, Role::Engine, [&args[..], &member(id)].concat()));
        }
        for id in ["w1", "w2"] {
            specs.push((id, Role::Worker, vec!["-target", "worker", "-queue", &url, "-id", id]));
        }
        let sink = ["-target", "sink", "-coordination", &url, "-sink-store", &store];
        specs.push(("s1", Role::Sink, [&sink[..], &member("s1")].concat()));
        let notifier =
            ["-target", "notifier", "-coordination", &url, "-notify-webhook", &hook, "-notify-secret", SECRET];
        specs.push(("n1", Role::Notifier, [&notifier[..], &member("n1")].concat()));
        specs.push(("ui", Role::Ui, vec!["-target", "ui", "-coordination", &url, "-id", "ui"]));

        let mut members = BTreeMap::new();
        for (name, role, args) in specs {
            let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
            let jaque = start(&builds, Build::Old, name, &args, &[]);
            let new_only = Vec::new();
            members
                .insert(name, Member { name, role, args, new_only, build: Build::Old, jaque, may_have_exited: false });
        }
        for m in members.values() {
            m.jaque.wait_ready();
        }
        let target = Arc::new(CountingTarget::start());
        // `held`: checked hourly against a port that refuses, so it stays critical and makes no transition, and
        // the writer leaves it alone; acknowledged now, its acknowledgement withdrawn at the end.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap(); // dropped: refuses
        let held = json!({"probe": {"type": "tcp", "addr": closed.to_string()}, "interval": "1h"});
        let c = Cluster {
            builds,
            nats,
            pg,
            rx,
            hook,
            target,
            objects: (0..OBJECTS).map(|i| format!("obj-{i}")).collect(),
            held,
            members,
            decode_errors: Vec::new(),
            findings: Mutex::default(),
        };
        c.ui().wait_epoch(&ENGINES);
        c.wait_live("sink/membership/", &["s1"]);
        c.wait_live("notifier/membership/", &["n1"]);
        for o in &c.objects {
            let body = object_body_with(&c.target.url(), o, &rules()).to_string();
            let key = format!("setup-{o}");
            poll(&format!("{o} created"), || {
                let r = http(
                    c.ui().addr,
                    "PUT",
                    &format!("/api/objects/{o}"),
                    &[("Idempotency-Key", &key)],
                    Some(body.as_bytes()),
                );
                (r.status == 200).then_some(())
            });
        }
        let body = c.held.to_string();
        poll("held created", || {
            let r = http(
                c.ui().addr,
                "PUT",
                "/api/objects/held",
                &[("Idempotency-Key", "setup-held")],
                Some(body.as_bytes()),
            );
            (r.status == 200).then_some(())
        });
        poll("held critical", || (c.ui().get("/api/objects/held").json()["state"] == "critical").then_some(()));
        let r = c.ui().request("POST", "/api/objects/held/actions/ack", &[("Idempotency-Key", "setup-held-ack")], None);
        assert_eq!(r.status, 200, "{}", r.text());
        c
    }

    fn get(&self, name: &str) -> &Jaque {
        &self.members[name].jaque
    }

    fn ui(&self) -> &Jaque {
        self.get("ui")
    }

    fn build_of(&self, name: &str) -> Build {
        self.members[name].build
    }

    /// A breach of the upgrade's rules that leaves the cluster running: printed now, and the test fails at its
    /// end (`no_findings`), after every other check.
    fn finding(&self, what: String) {
        eprintln!("upgrade: FINDING: {what}");
        self.findings.lock().unwrap_or_else(|e| e.into_inner()).push(what);
    }

    /// Fails the test with every finding of the run.
    fn no_findings(&self, what: &str) {
        let findings = self.findings.lock().unwrap_or_else(|e| e.into_inner()).clone();
        assert!(findings.is_empty(), "{what}: {} finding(s):\n{}", findings.len(), findings.join("\n"));
    }

    /// The results the engines wrote so far, by their counters: transitions, and from format 3 on soft states
    /// and flapping starts and ends (a previous build's engine counts only transitions).
    fn results_written(&self) -> f64 {
        ENGINES.iter().map(|e| results_written(self.get(e))).sum()
    }

    /// The live members of a bucket (`sink/membership/`, `notifier/membership/`), as the ui sees them.
    fn live(&self, bucket: &str) -> BTreeSet<String> {
        let c = self.ui().get("/api/cluster").json();
        let b = c["buckets"].as_array().into_iter().flatten().find(|b| b["bucket"] == bucket).cloned();
        b.and_then(|b| b["live_members"].as_array().cloned())
            .into_iter()
            .flatten()
            .filter_map(|m| m["id"].as_str().map(String::from))
            .collect()
    }

    fn wait_live(&self, bucket: &str, ids: &[&str]) {
        let want: BTreeSet<String> = ids.iter().map(|s| s.to_string()).collect();
        poll(&format!("live {bucket} {want:?}"), || (self.live(bucket) == want).then_some(()));
    }

    fn readers(&self) -> Vec<&Jaque> {
        std::iter::once(self.ui()).chain(ENGINES.iter().map(|e| self.get(e))).collect()
    }

    fn writer(&self, name: &str) -> Writer {
        let w = Writer::start_with(self.ui().addr, name, self.objects.clone(), self.target.url(), rules());
        poll("writes applied through the ui", || (w.applied() >= 10).then_some(()));
        w
    }

    /// Replaces `name` by a process of `build` with the same flags and id: SIGTERM, a clean exit, its leave
    /// seen by the others, the new one started and ready, and its join seen (an engine in the epoch again and
    /// owning objects, a sink or notifier live in its bucket). Then waits for what shows the cluster works with
    /// it: `progress`.
    fn replace(&mut self, name: &'static str, build: Build) {
        let began = Instant::now();
        let m = self.members.get_mut(name).unwrap();
        let role = m.role;
        if m.jaque.proc.is_running() {
            self.decode_errors.push((name.to_string(), m.build, decode_errors(&m.jaque)));
            m.jaque.proc.signal("TERM");
            let status = m.jaque.proc.wait_exit();
            assert!(status.success(), "{name} ({:?} build) exits cleanly on SIGTERM: {status}", m.build);
        } else {
            let status = m.jaque.proc.wait_exit();
            assert!(
                m.may_have_exited,
                "{name} ({:?} build) exited before it was replaced: {status}\n{}",
                m.build,
                m.jaque.proc.output.text()
            );
            eprintln!("upgrade: {name} ({:?} build) had exited by itself ({status})", m.build);
        }
        let others: Vec<&str> = ENGINES.iter().copied().filter(|e| *e != name).collect();
        match role {
            Role::Engine => self.ui().wait_epoch(&others),
            Role::Sink => self.wait_live("sink/membership/", &[]),
            Role::Notifier => self.wait_live("notifier/membership/", &[]),
            Role::Worker | Role::Ui => {}
        }
        let m = self.members.get_mut(name).unwrap();
        let jaque = start(&self.builds, build, name, &m.args, &m.new_only);
        jaque.wait_ready();
        m.jaque = jaque;
        m.build = build;
        m.may_have_exited = false;
        match role {
            Role::Engine => {
                self.ui().wait_epoch(&ENGINES);
                let e = self.get(name);
                poll(&format!("{name} owns objects again and writes their results"), || {
                    let owned = e.metric("jaque_engine_objects_owned").unwrap_or(0.0);
                    (owned > 0.0 && results_written(e) > 0.0).then_some(())
                });
            }
            Role::Sink => {
                self.wait_live("sink/membership/", &["s1"]);
                let s = self.get(name);
                poll("the new sink writes rows", || {
                    (s.metric("jaque_sink_events_written_total").unwrap_or(0.0) > 0.0).then_some(())
                });
            }
            Role::Notifier => {
                self.wait_live("notifier/membership/", &["n1"]);
                let n = self.get(name);
                poll("the new notifier delivers", || {
                    (n.metric("jaque_notifier_deliveries_total{outcome=\"delivered\"}").unwrap_or(0.0) > 0.0)
                        .then_some(())
                });
            }
            Role::Worker => {
                // Checks reach the target again (from either worker: both run once the second is replaced).
                let hits = || self.target.all_hits().values().sum::<u64>();
                let before = hits();
                poll("checks after a worker's restart", || (hits() >= before + OBJECTS as u64).then_some(()));
            }
            Role::Ui => {}
        }
        eprintln!("upgrade: {name} now runs the {build:?} build ({:.1} s)", began.elapsed().as_secs_f64());
    }

    /// Flags the new build of every process of `role` takes from its next start on.
    fn new_only(&mut self, role: Role, args: &[&str]) {
        for m in self.members.values_mut().filter(|m| m.role == role) {
            m.new_only = args.iter().map(|s| s.to_string()).collect();
        }
    }

    /// Waits until `w` has had `n` more writes applied.
    fn more_writes(&self, w: &Writer, n: usize) {
        let applied = w.applied();
        poll(&format!("{n} more writes applied"), || (w.applied() >= applied + n).then_some(()));
    }

    /// Waits until `w` has had `n` more writes applied, the engines `n` more results written, and the webhook
    /// every notification due up to the log's end then: the cluster as it is now takes writes, checks, writes
    /// their results and notifies what is to be notified. Below format 3 every result written is a transition
    /// and notified, so that is `n` more deliveries; from 3 on a flipping target makes soft states and flapping,
    /// and how many of its results are notified is the alert rules' business: all of those are delivered.
    fn goes_on(&self, w: &Writer, n: usize) {
        let results = self.results_written();
        let delivered = self.rx.delivery_count("/hook");
        self.more_writes(w, n);
        poll(&format!("{n} more results written"), || (self.results_written() >= results + n as f64).then_some(()));
        let start = notify_start_record(&self.nats.url, &self.hook);
        let due = notifications_due(&read_log(&self.nats.url), start);
        let (from, upto) = (due.keys().next().copied(), due.keys().last().copied());
        poll(&format!("the {} notifications due (seq {from:?} to {upto:?}) delivered", due.len()), || {
            let delivered: BTreeSet<u64> =
                self.rx.deliveries("/hook").iter().filter_map(|d| d.body["seq"].as_u64()).collect();
            due.keys().all(|s| delivered.contains(s)).then_some(())
        });
        eprintln!(
            "upgrade: goes on: {n} more writes, {} more results, {} more deliveries",
            self.results_written() - results,
            self.rx.delivery_count("/hook") - delivered
        );
    }

    /// The decode errors of every process: those counted by processes stopped so far, and the running ones'.
    fn all_decode_errors(&self) -> Vec<(String, Build, f64)> {
        let running = self.members.values().map(|m| (m.name.to_string(), m.build, decode_errors(&m.jaque)));
        self.decode_errors.iter().cloned().chain(running).collect()
    }
}

/// The results an engine wrote so far (`Cluster::results_written`).
fn results_written(e: &Jaque) -> f64 {
    let transitions = e.metric("jaque_engine_transitions_written_total").unwrap_or(0.0);
    transitions + e.metric("jaque_engine_soft_written_total").unwrap_or(0.0)
}

fn start(builds: &Builds, build: Build, name: &str, args: &[String], new_only: &[String]) -> Jaque {
    let extra = if build == Build::New { new_only } else { &[] };
    let args: Vec<&str> = args.iter().chain(extra).map(String::as_str).collect();
    Jaque::start_bin(&format!("{name} ({build:?})"), builds.bin(build), &args, &[])
}

/// The active cluster format the latest epoch record carries, printed (`None`: no record has the field; a
/// build before v0.1.0 writes none). Where records carry one, it never falls from one record to the next.
fn active_format(nats_url: &str, when: &str) -> Option<u64> {
    let records = epoch_records_raw(nats_url);
    let formats: Vec<(u64, Option<u64>)> =
        records.iter().map(|(_, r)| (r["epoch"].as_u64().unwrap_or(0), r["format"].as_u64())).collect();
    let mut highest: Option<(u64, u64)> = None;
    for (epoch, f) in &formats {
        if let Some(f) = f {
            if let Some((e, h)) = highest {
                assert!(*f >= h, "the active format fell from {h} (epoch {e}) to {f} (epoch {epoch}): {formats:?}");
            }
            highest = Some((*epoch, *f));
        }
    }
    let latest = records.last().map(|(seq, r)| (*seq, r.clone()));
    let format = latest.as_ref().and_then(|(_, r)| r["format"].as_u64());
    match &latest {
        Some((seq, r)) => eprintln!(
            "upgrade: {when}: latest epoch record (epoch {}, at {seq}) {}; formats by epoch {formats:?}",
            r["epoch"],
            match format {
                Some(f) => format!("has active format {f}"),
                None => "has no format field (written by a build that records none)".to_string(),
            }
        ),
        None => eprintln!("upgrade: {when}: no epoch record in the log"),
    }
    format
}

/// Waits until the sink's store holds exactly the log's accepted events; how many.
fn check_sink(c: &Cluster) -> usize {
    let s = c.get("s1");
    let mut why = String::new();
    let n = poll("the store to hold exactly the log's accepted events", || {
        // The store first, then the log: the log then holds at least every event the store does.
        let stored = match read_store(&c.pg.url()) {
            Ok(s) => s,
            Err(e) => {
                why = e;
                return None;
            }
        };
        let want = expected_from(&read_log(&c.nats.url));
        if s.metric("jaque_sink_lag_events") != Some(0.0) {
            why = "the sink lags".into();
            return None;
        }
        if let Err(e) = store_matches(&stored, &want) {
            why = e;
            eprintln!("upgrade: sink not there yet: {why}");
            return None;
        }
        Some(stored.events.len())
    });
    assert!(n > 100, "transitions flowed: {n} events in the store ({why})");
    n
}

/// What the notifier sends for an event's body (the notification's `type`), as `jaque_core::notifier` decides
/// it from the event alone (restated here, as an independent reader): a transition unless the object flaps
/// after it, a flapping start or end (with a transition or a soft state, or on its own); nothing for a soft
/// state or a command.
fn notified(body: &EventBody) -> Option<&'static str> {
    let flap = |on: bool| if on { "flapping_start" } else { "flapping_end" };
    match body {
        // Its writer decided it goes to none of the notifiers' own endpoints (the notification policy).
        EventBody::Transition { notify: Some(n), .. } if !n.implicit => None,
        EventBody::Transition { flapping: Some(on), .. } => Some(flap(*on)),
        EventBody::Transition { flaps: true, .. } => None,
        EventBody::Transition { .. } => Some("transition"),
        EventBody::Soft { flapping: Some(on), .. } => Some(flap(*on)),
        EventBody::Flapping { on } => Some(flap(*on)),
        EventBody::Released { notify, .. } if notify.implicit => Some("released"),
        _ => None,
    }
}

/// Every accepted event of `entries` after `start` that the notifier sends: seq -> (object, type).
fn notifications_due(entries: &[(u64, LogEntry)], start: u64) -> BTreeMap<u64, (String, &'static str)> {
    let mut reader = LogReader::new();
    let mut due = BTreeMap::new();
    for (seq, entry) in entries {
        let read = reader.read(*seq, entry);
        if let (LogEntry::Event(ev), Read::Event { verdict, .. }) = (entry, read) {
            if let (true, true, Some(kind)) = (*seq > start, verdict.is_accepted(), notified(&ev.body)) {
                due.insert(*seq, (ev.object.to_string(), kind));
            }
        }
    }
    due
}

/// Waits until every accepted event the notifier sends, after its start record, was delivered; checks that
/// every delivery is of such an event, of its type and object, with its one webhook-id. Returns (notifications
/// due, deliveries, repeats).
fn check_notifier(c: &Cluster) -> (usize, usize, usize) {
    let start = notify_start_record(&c.nats.url, &c.hook);
    let (due, deliveries) = poll("every notification due delivered", || {
        // The deliveries first, then the log: the log then holds every event delivered.
        let deliveries = c.rx.deliveries("/hook");
        let due = notifications_due(&read_log(&c.nats.url), start);
        let delivered: BTreeSet<u64> = deliveries.iter().filter_map(|d| d.body["seq"].as_u64()).collect();
        due.keys().all(|s| delivered.contains(s)).then_some((due, deliveries))
    });
    let mut per_seq: BTreeMap<u64, usize> = BTreeMap::new();
    for d in &deliveries {
        assert!(d.signed, "{d:?}");
        let seq = d.body["seq"].as_u64().unwrap();
        assert!(seq > start, "seq {seq} is from before the notifier started ({start})");
        let (object, kind) =
            due.get(&seq).unwrap_or_else(|| panic!("seq {seq} is not an accepted event to notify: {:?}", d.body));
        assert_eq!(d.body["object"], object.as_str(), "{:?}", d.body);
        assert_eq!(d.body["type"], *kind, "{:?}", d.body);
        assert_eq!(d.id, format!("jaque-{seq}-{}", EndpointId::of(&c.hook)), "one webhook-id per event");
        *per_seq.entry(seq).or_default() += 1;
    }
    let repeats = per_seq.values().map(|n| n - 1).sum();
    (due.len(), deliveries.len(), repeats)
}

/// Unack of every object (and `held`) through the ui, as writes for the checker: each applied (unack needs
/// format 2; the cluster is at this build's).
fn unacks(c: &Cluster, name: &str) -> Vec<WriteRecord> {
    c.objects
        .iter()
        .chain([&"held".to_string()])
        .map(|o| {
            let key = format!("{name}-{o}");
            let r =
                c.ui().request("POST", &format!("/api/objects/{o}/actions/unack"), &[("Idempotency-Key", &key)], None);
            assert_eq!(r.status, 200, "unack of {o} at the active format {CLUSTER_FORMAT}: {}", r.text());
            let outcome = r.json();
            WriteRecord { key, object: o.clone(), op: "unack", status: r.status, outcome, attempts: 1 }
        })
        .collect()
}

/// The body of the new-format put of `o`: its definition as the test wrote it, with parents.
fn new_format_body(c: &Cluster, o: &str) -> Value {
    let plain = if o == "held" { c.held.clone() } else { object_body_with(&c.target.url(), o, &rules()) };
    new_format_put(&plain)
}

/// The parents `via` shows for `o` once it has read the log up to `seq` (null where its build has none).
fn parents_at(j: &Jaque, o: &str, seq: u64) -> Value {
    poll(&format!("a reader at position {seq}"), || {
        (j.get("/api/cluster").json()["log_position"].as_u64()? >= seq).then_some(())
    });
    j.get(&format!("/api/objects/{o}")).json()["definition"]["parents"].clone()
}

/// The new-format put of every object (and `held`) through the ui, once the cluster moved: each applied, and
/// every reader of this build shows the parents. As writes for the checker.
fn new_format_applied(c: &Cluster, name: &str) -> Vec<WriteRecord> {
    let writes: Vec<WriteRecord> = c
        .objects
        .iter()
        .chain([&"held".to_string()])
        .map(|o| {
            let key = format!("{name}-{o}");
            let body = new_format_body(c, o).to_string();
            let r = c.ui().request(
                "PUT",
                &format!("/api/objects/{o}"),
                &[("Idempotency-Key", &key)],
                Some(body.as_bytes()),
            );
            assert_eq!(r.status, 200, "the new-format put of {o} at the active format {CLUSTER_FORMAT}: {}", r.text());
            let outcome = r.json();
            WriteRecord { key, object: o.clone(), op: "put", status: r.status, outcome, attempts: 1 }
        })
        .collect();
    let last = writes.iter().filter_map(|w| w.outcome["seq"].as_u64()).max().unwrap_or(0);
    for name in std::iter::once("ui").chain(ENGINES).filter(|n| c.build_of(n) == Build::New) {
        let j = c.get(name);
        for w in &writes {
            assert_eq!(parents_at(j, &w.object, last), new_parents(), "{name} shows {} with the parents put", w.object);
        }
    }
    eprintln!("upgrade: the new-format put of {} objects applied; every reader shows their parents", writes.len());
    writes
}

/// The engine that writes the snapshots: the owner of their key by HRW over the engines (by id).
fn snapshot_writer() -> &'static str {
    let members: Vec<MemberRef> =
        ENGINES.iter().map(|id| MemberRef { id: MemberId::new(*id).unwrap(), incarnation: 1 }).collect();
    let owner = Ownership::new(&members).owner_of_key(hrw::key(SNAPSHOT_KEY)).unwrap().id.to_string();
    ENGINES.into_iter().find(|e| *e == owner).unwrap()
}

/// An object of `GET /api/objects` as both builds show it: every field of the previous build's object, the
/// definition's probe, interval and timeout among them. This build also shows the definition's parents, and
/// `episode` and `parents_down`.
fn common(o: &Value) -> Value {
    let d = &o["definition"];
    json!({
        "id": o["id"],
        "definition": {"probe": d["probe"], "interval": d["interval"], "timeout": d["timeout"]},
        "state": o["state"],
        "state_since_ms": o["state_since_ms"],
        "paused": o["paused"],
        "acknowledged": o["acknowledged"],
        "owner": o["owner"],
        "epoch": o["epoch"],
        "last_transition": o["last_transition"],
        "last_seq": o["last_seq"],
    })
}

/// Every object as `name` and `reference` read it at one log position: `None` when they agree (every field
/// where both run one build, what both builds show where not: `common`), else the objects that differ (each as
/// both read it), what `name` runs, and what it said.
fn views_differ(c: &Cluster, name: &str, reference: &str) -> Option<String> {
    let (j, r) = (c.get(name), c.get(reference));
    let same_build = c.build_of(name) == c.build_of(reference);
    let objects = |j: &Jaque| -> BTreeMap<String, Value> {
        let list = j.get("/api/objects").json();
        let shown = |o: &Value| if same_build { o.clone() } else { common(o) };
        list.as_array().into_iter().flatten().map(|o| (o["id"].as_str().unwrap_or("").to_string(), shown(o))).collect()
    };
    let (mine, theirs, position) = poll(&format!("{name} and {reference} at one position"), || {
        let at = |j: &Jaque| j.get("/api/cluster").json()["log_position"].as_u64();
        let p = at(j)?;
        let (mine, theirs) = (objects(j), objects(r));
        (at(r)? == p && at(j)? == p).then_some((mine, theirs, p))
    });
    let kept = |o: Option<&Value>| {
        o.map_or(json!("absent"), |o| {
            json!({"state": o["state"], "acknowledged": o["acknowledged"], "paused": o["paused"], "last_seq": o["last_seq"]})
        })
    };
    let ids: BTreeSet<&String> = mine.keys().chain(theirs.keys()).collect();
    let differ: Vec<String> = ids
        .into_iter()
        .filter(|id| mine.get(*id) != theirs.get(*id))
        .map(|id| format!("{id}: {} where {reference} has {}", kept(mine.get(id)), kept(theirs.get(id))))
        .collect();
    if differ.is_empty() {
        return None;
    }
    let said: Vec<String> = j
        .proc
        .output
        .text()
        .lines()
        .filter(|l| l.contains("does not decode") || l.contains("starting from a snapshot"))
        .take(4)
        .map(|l| l.split_once("  ").map_or(l, |(_, r)| r).to_string())
        .collect();
    let format = |j: &Jaque| j.get("/api/cluster").json()["cluster_format"].clone();
    Some(format!(
        "{name} ({:?} build), ready (/healthz {}), owning {} objects, at position {position} reads {} of {} objects \
         otherwise than {reference}: {:?}; it counted {} messages it could not decode and logged {said:?}; \
         cluster_format: {name} {}, {reference} {}",
        c.members[name].build,
        j.get("/healthz").status,
        j.metric("jaque_engine_objects_owned").unwrap_or(0.0),
        differ.len(),
        mine.len(),
        differ.iter().take(4).collect::<Vec<_>>(),
        decode_errors(j),
        format(j),
        format(r),
    ))
}

/// The cluster's format as the ui reads it (`/api/cluster`: `active`, `lowest_live`, `this_build`).
fn cluster_format(c: &Cluster) -> Value {
    c.ui().get("/api/cluster").json()["cluster_format"].clone()
}

/// Replaces every process by the new build, in the order of the module docs, with writes through the ui, and
/// results written and notified after each. With e1 new, the new-format put through it is refused whoever owns
/// the object (the command ids are returned with the writes; any that was applied is a finding, and among the
/// writes, so the end checks hold it to the log). Leaves the flapper running.
fn upgrade_all(c: &mut Cluster) -> (Vec<WriteRecord>, Vec<String>) {
    let w = c.writer("old");
    poll("the sink writes and the notifier delivers", || {
        let rows = c.get("s1").metric("jaque_sink_events_written_total").unwrap_or(0.0);
        (rows > 20.0 && c.rx.delivery_count("/hook") > 10).then_some(())
    });
    // A build before v0.1.0 records no format (format 1 is left out of a record); v0.1.0 on record theirs.
    let old_format = c.builds.old_format;
    let recorded = (old_format > OLDEST_CLUSTER_FORMAT).then_some(u64::from(old_format));
    assert_eq!(active_format(&c.nats.url, "every member old"), recorded, "the previous build's records");
    let (mut refused, mut applied) = (Vec::new(), Vec::new());
    for name in ["w1", "w2", "e1", "e2", "e3", "s1", "n1"] {
        c.replace(name, Build::New);
        c.goes_on(&w, 20);
        active_format(&c.nats.url, &format!("{name} replaced"));
        if name == "e1" {
            // The new format's put through the new e1 while e2 and e3 (and the sink, the notifier) are old.
            (refused, applied) = new_format_refused(c, "e1", "parents-mixed");
        }
    }
    // The ui of the previous build is not a member, so the cluster moved without it: it must show no state of its
    // own, but stop being ready at the first entry of the new format, saying why (docs/upgrading.md, *In what
    // order to upgrade*). Writes through it still go to the engines.
    if check_log(&c.nats.url).reader.fence().active_format() == CLUSTER_FORMAT {
        let why = poll("the previous build's ui not ready, saying why", || {
            let h = c.ui().get("/healthz");
            (h.status == 503 && h.text().contains(&needs_new_format())).then(|| h.text())
        });
        eprintln!("upgrade: the cluster moved; the previous build's ui is not ready: {why}");
    }
    // The ui: the writer through it stops before it goes and another starts once the new one is up.
    let mut writes: Vec<WriteRecord> = w.finish();
    c.replace("ui", Build::New);
    let w = c.writer("new");
    c.goes_on(&w, 20);
    writes.extend(w.finish());
    writes.extend(applied);
    active_format(&c.nats.url, "every member new");
    (writes, refused)
}

/// The new-format put of every object through `via`, while the cluster's active format is older than this
/// build's (a member of the previous build live, or the format held): each must be refused (400) with the
/// reason that it needs this build's format, whoever owns the object. Returns the ids of those refused, and the
/// writes of any that was applied, each also a finding with what it did to the object.
fn new_format_refused(c: &Cluster, via: &str, name: &str) -> (Vec<String>, Vec<WriteRecord>) {
    let j = c.get(via);
    let active = cluster_format(c)["active"].clone();
    let mut reasons: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let (mut keys, mut applied) = (Vec::new(), Vec::new());
    for o in &c.objects {
        let key = format!("{name}-{o}");
        let body = new_format_body(c, o);
        let path = format!("/api/objects/{o}");
        let r = j.request("PUT", &path, &[("Idempotency-Key", &key)], Some(body.to_string().as_bytes()));
        match r.status {
            400 => {
                let reason = r.json()["reason"].as_str().unwrap_or_default().to_string();
                if !reason.contains(&needs_new_format()) {
                    c.finding(format!(
                        "the new-format put of {o} through {via} ({:?}) while the cluster is at format {active}: \
                         refused, but not saying it {}: {}",
                        c.build_of(via),
                        needs_new_format(),
                        r.text()
                    ));
                }
                reasons.entry(reason).or_default().push(o.clone());
                keys.push(key);
            }
            200 => {
                let outcome = r.json();
                let owner = outcome["owner"].as_str().unwrap_or_default().to_string();
                let seq = outcome["seq"].as_u64().unwrap_or(0);
                let parents = parents_at(j, o, seq);
                let owner_build = c.members.get(owner.as_str()).map(|m| m.build);
                c.finding(format!(
                    "the new-format put of {o} ({body}) through {via} ({:?}) while the cluster is at format {active}: \
                     applied (200 {outcome}) by {owner} ({owner_build:?} build) at seq {seq}, where it needs format \
                     {CLUSTER_FORMAT}; {via} now shows the object's parents as {parents}{}",
                    c.build_of(via),
                    if parents == new_parents() { "" } else { " (the parents put were dropped)" }
                ));
                applied.push(WriteRecord { key, object: o.clone(), op: "put", status: 200, outcome, attempts: 1 });
            }
            s => panic!("the new-format put of {o} through {via} at format {active}: {s} {}", r.text()),
        }
    }
    for (reason, objects) in &reasons {
        eprintln!("upgrade: the new-format put through {via} refused for {} objects: {reason}", objects.len());
    }
    if !applied.is_empty() {
        eprintln!("upgrade: the new-format put through {via} APPLIED for {} objects", applied.len());
    }
    (keys, applied)
}

/// The end-of-run checks: the checker's (writes, readers, the log), none of `refused` applied, the sink's rows,
/// the notifications (none twice: every stop was a clean SIGTERM), no message any process could not decode.
fn check_all(c: &Cluster, writes: &[WriteRecord], refused: &[String], what: &str) {
    let log = check_run(&c.nats.url, writes, &c.readers());
    for key in refused {
        assert_eq!(log.applied.get(key), None, "{key} was refused, yet applied");
    }
    let rows = check_sink(c);
    let (due, deliveries, repeats) = check_notifier(c);
    eprintln!(
        "upgrade: {what}: the readers agreed at {}; then {rows} rows in the store, the log's accepted events; \
         {due} notifications due (transitions, flapping starts and ends) delivered in {deliveries} deliveries \
         ({repeats} repeats)",
        log.reader.position()
    );
    assert_eq!(repeats, 0, "every stop was a clean SIGTERM: no transition may be delivered twice");
    let errors = c.all_decode_errors();
    assert!(errors.iter().all(|(_, _, n)| *n == 0.0), "messages some process could not decode: {errors:?}");
}

/// A cluster of the previous build, its checks flapping, upgraded one process at a time to this build (the
/// tests one at a time: `_one`), until an engine records this build's format as the active one.
struct Upgraded {
    _one: std::sync::MutexGuard<'static, ()>,
    began: Instant,
    c: Cluster,
    flapper: Flapper,
    writes: Vec<WriteRecord>,
    refused: Vec<String>,
}

fn builds(prev: Previous) -> Builds {
    Builds { old: prev.bin, new: jaque_bin(), old_format: prev.format }
}

fn upgraded(prev: Previous) -> Upgraded {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let began = Instant::now();
    let mut c = Cluster::start(builds(prev));
    let flapper = Flapper::start(c.target.clone(), Duration::from_millis(350));
    let (writes, refused) = upgrade_all(&mut c);
    // Every member speaks this build's format: an engine records it as the active format.
    poll(&format!("the active format {CLUSTER_FORMAT} in the log"), || {
        (check_log(&c.nats.url).reader.fence().active_format() == CLUSTER_FORMAT).then_some(())
    });
    Upgraded { _one, began, c, flapper, writes, refused }
}

#[test]
fn a_cluster_of_the_previous_build_upgraded_one_process_at_a_time() {
    let Some(prev) = previous_build("rolling upgrade") else { return };
    let Upgraded { _one, began, c, mut flapper, mut writes, refused } = upgraded(prev);
    active_format(&c.nats.url, "the active format raised");
    let format = cluster_format(&c);
    eprintln!("upgrade: /api/cluster: cluster_format {format}");
    let n = CLUSTER_FORMAT;
    assert_eq!(format, json!({"active": n, "lowest_live": n, "this_build": n}));
    writes.extend(new_format_applied(&c, "parents"));
    writes.extend(unacks(&c, "unack"));
    flapper.stop();
    check_all(&c, &writes, &refused, "old -> new");
    for e in ENGINES {
        let j = c.get(e);
        let failures = j.metric("jaque_snapshot_load_failures_total").unwrap_or(0.0);
        let loads = j.metric("jaque_snapshot_loads_total").unwrap_or(0.0);
        eprintln!("upgrade: {e} (new) started from {loads} snapshot(s), {failures} it could not read");
        assert_eq!(failures, 0.0, "{e}: a snapshot of the previous build it could not read");
    }
    eprintln!("upgrade: old -> new done in {:.1} s", began.elapsed().as_secs_f64());
    c.no_findings("old -> new");
}

#[test]
fn with_the_format_held_at_the_previous_one_an_engine_rolls_back_and_forward_then_the_hold_is_lifted() {
    let Some(prev) = previous_build("rolling upgrade held at the previous format") else { return };
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let began = Instant::now();
    let held = prev.format;
    let mut c = Cluster::start(builds(prev));
    // docs/upgrading.md, *Rolling back*: the new release's engines start with -hold-format at the older
    // release's format.
    let hold = held.to_string();
    c.new_only(Role::Engine, &["-hold-format", &hold]);
    let mut flapper = Flapper::start(c.target.clone(), Duration::from_millis(350));
    let (mut writes, mut refused) = upgrade_all(&mut c);
    // Every member speaks this build's format, the cluster stays at the previous one.
    let n = CLUSTER_FORMAT;
    poll(&format!("every live member at format {n}"), || (cluster_format(&c)["lowest_live"] == n).then_some(()));
    let format = cluster_format(&c);
    eprintln!("held: /api/cluster: cluster_format {format}");
    assert_eq!(format, json!({"active": held, "lowest_live": n, "this_build": n}));
    assert_eq!(check_log(&c.nats.url).reader.fence().active_format(), held, "the log's records say {held}");
    let (keys, applied) = new_format_refused(&c, "ui", "parents-held");
    refused.extend(keys);
    writes.extend(applied);
    flapper.stop();

    // The rollback a hold keeps possible: it must join and agree, and so must everything after it.
    let (more, silent) = roll_back_and_forward(&mut c);
    writes.extend(more);
    assert!(silent.is_empty(), "rollback held at format {held}: SILENT WRONG STATE:\n{}", silent.join("\n"));
    eprintln!("held: rollback and forward again: every object reads the same everywhere");

    // The hold lifted: each engine restarted without the flag, one at a time; then the cluster moves.
    c.new_only(Role::Engine, &[]);
    let mut flapper = Flapper::start(c.target.clone(), Duration::from_millis(350));
    for e in ENGINES {
        c.replace(e, Build::New);
    }
    poll(&format!("the active format {n} in the log"), || {
        (check_log(&c.nats.url).reader.fence().active_format() == n).then_some(())
    });
    active_format(&c.nats.url, "the hold lifted");
    writes.extend(new_format_applied(&c, "parents"));
    writes.extend(unacks(&c, "unack"));
    flapper.stop();
    check_all(&c, &writes, &refused, "held, rolled back, forward, lifted");
    eprintln!("held: done in {:.1} s", began.elapsed().as_secs_f64());
    c.no_findings("held, rolled back, forward, lifted");
}

#[test]
fn after_the_cluster_moved_a_previous_build_engine_says_it_cannot_run_or_agrees() {
    let Some(prev) = previous_build("rollback after the cluster moved") else { return };
    // From v0.1.0 on a previous build stops at the first entry it cannot read, which this test holds (a build
    // before v0.1.0 had no such guard: it passed over entries it could not decode and served a state of its own,
    // so a rollback to it after the move is not supported, docs/upgrading.md; `previous_build` takes only the
    // release before this one).
    let Upgraded { _one, began, mut c, mut flapper, mut writes, refused } = upgraded(prev);
    writes.extend(new_format_applied(&c, "parents"));
    writes.extend(unacks(&c, "unack"));
    flapper.stop();
    // docs/upgrading.md: "an older build started into it stops at the first entry of the new format it meets,
    // leaves and exits with the reason (it never folds what it cannot read)".
    let (more, silent) = roll_back_and_forward(&mut c);
    writes.extend(more);
    eprintln!("moved: done in {:.1} s", began.elapsed().as_secs_f64());
    assert!(silent.is_empty(), "rollback after the cluster moved: SILENT WRONG STATE:\n{}", silent.join("\n"));
    check_all(&c, &writes, &refused, "moved, rolled back, forward");
    c.no_findings("moved, rolled back, forward");
}

/// Rollback of the engine that writes the snapshots (the HRW owner of their key; the one whose state every
/// reader that starts later takes) to the previous build, writes flowing: it must join and read every object as
/// an engine that stayed new does, or say it cannot run (exit, or not ready with a reason). Then a ui of the new
/// build started (from the latest snapshot, the previous build's), the new-format put through the engine that
/// stayed new, and the engine forward to the new build again, each compared likewise. Returns the writes made
/// and, for each process ready with a state of its own, what it read otherwise.
fn roll_back_and_forward(c: &mut Cluster) -> (Vec<WriteRecord>, Vec<String>) {
    let back = snapshot_writer();
    let reference = ENGINES.into_iter().find(|e| *e != back).unwrap();
    let mut flapper = Flapper::start(c.target.clone(), Duration::from_millis(350));
    let w = c.writer("rollback");
    let m = c.members.get_mut(back).unwrap();
    c.decode_errors.push((back.into(), m.build, decode_errors(&m.jaque)));
    m.jaque.proc.signal("TERM");
    assert!(m.jaque.proc.wait_exit().success());
    let args = m.args.clone();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let others: Vec<&str> = ENGINES.iter().copied().filter(|e| *e != back).collect();
    c.ui().wait_epoch(&others);
    let mut silent = Vec::new();
    let old = match Jaque::try_start_bin(&format!("{back} (Old, rollback)"), &c.builds.old, &args, &[]) {
        Ok(old) => old,
        Err(mut proc) => {
            // Refused before it listened: the refusal must say why, and the rest of the cluster goes on.
            let status = proc.wait_exit();
            let out = proc.output.text();
            eprintln!("rollback: the previous build refused to start ({status}):\n{out}");
            assert!(!status.success(), "an exit before listening is a failure");
            assert!(out.contains("ERROR") || out.contains("error"), "it says why: {out}");
            c.more_writes(&w, 10);
            return (w.finish(), silent);
        }
    };
    let mut old = old;
    let outcome = poll(&format!("the previous {back} to join the epoch, or to say it cannot"), || {
        if !old.proc.is_running() {
            return Some(Err(format!("exited: {}", old.proc.output.text())));
        }
        let h = old.get("/healthz");
        let owns = old.metric("jaque_engine_objects_owned").unwrap_or(0.0) > 0.0;
        if h.status == 200 && owns && c.ui().epoch_members() == ENGINES.iter().map(|s| s.to_string()).collect() {
            return Some(Ok(()));
        }
        let said = h.text();
        (h.status == 503 && (said.contains("format") || said.contains("version") || said.contains("newer")))
            .then(|| Err(format!("not ready: {said}")))
    });
    let m = c.members.get_mut(back).unwrap();
    m.jaque = old;
    m.build = Build::Old;
    m.may_have_exited = outcome.is_err();
    if let Err(why) = outcome {
        eprintln!("rollback: the previous build's {back} says it cannot run here: {why}");
        c.more_writes(&w, 10);
        let writes = w.finish();
        flapper.stop();
        // Forward again: the cluster goes on as it was.
        let mut flapper = Flapper::start(c.target.clone(), Duration::from_millis(350));
        c.replace(back, Build::New);
        flapper.stop();
        return (writes, silent);
    }
    c.goes_on(&w, 20);
    let old = c.get(back);
    poll(&format!("a snapshot written by the previous {back}"), || {
        (old.metric("jaque_snapshots_written_total")? >= 1.0).then_some(())
    });
    let mut writes = w.finish();
    flapper.stop();
    silent.extend(views_differ(c, back, reference));
    let old = c.get(back);
    eprintln!(
        "rollback: the previous build's {back} joined (it started from {} snapshot(s), {} it could not read, {} \
         messages it could not decode); it reads {}",
        old.metric("jaque_snapshot_loads_total").unwrap_or(0.0),
        old.metric("jaque_snapshot_load_failures_total").unwrap_or(0.0),
        decode_errors(old),
        if silent.is_empty() { "every object as the others do" } else { "objects otherwise" }
    );
    active_format(&c.nats.url, &format!("after the rollback of {back}"));
    // A reader of the new build that starts now starts from the latest snapshot, the previous build's.
    c.replace("ui", Build::New);
    silent.extend(views_differ(c, "ui", reference));
    // The new-format put of every object through the engine that stayed new: where the cluster's active format
    // allows it (and a new engine owns the object) it is applied, with its parents, and every reader of the new
    // build must fold it; where not, it is refused saying why, whoever owns the object.
    let active = cluster_format(c)["active"].as_u64().unwrap_or(0);
    let (mut applied, mut refused) = (0, 0);
    for o in &c.objects {
        let key = format!("parents-rollback-{o}");
        let body = new_format_body(c, o);
        let path = format!("/api/objects/{o}");
        let r = c.get(reference).request("PUT", &path, &[("Idempotency-Key", &key)], Some(body.to_string().as_bytes()));
        match r.status {
            200 => {
                applied += 1;
                let outcome = r.json();
                let seq = outcome["seq"].as_u64().unwrap_or(0);
                let parents = parents_at(c.get(reference), o, seq);
                if active < u64::from(CLUSTER_FORMAT) || parents != new_parents() {
                    let owner = outcome["owner"].as_str().unwrap_or_default().to_string();
                    let owner_build = c.members.get(owner.as_str()).map(|m| m.build);
                    c.finding(format!(
                        "after the rollback of {back}: the new-format put of {o} through {reference} while the \
                         cluster is at format {active}: applied (200 {outcome}) by {owner} ({owner_build:?} build); \
                         {reference} now shows its parents as {parents}"
                    ));
                }
                writes.push(WriteRecord { key, object: o.clone(), op: "put", status: 200, outcome, attempts: 1 });
            }
            400 => {
                refused += 1;
                if !r.text().contains(&needs_new_format()) {
                    c.finding(format!(
                        "after the rollback of {back}: the new-format put of {o} through {reference} at format \
                         {active}: refused, but not saying it {}: {}",
                        needs_new_format(),
                        r.text()
                    ));
                }
            }
            s => panic!("the new-format put of {o} after the rollback: {s} {}", r.text()),
        }
    }
    eprintln!("rollback: the new-format put through {reference}: {applied} applied, {refused} refused");
    silent.extend(views_differ(c, "ui", reference));
    // Forward again (with transitions flowing, which its replacement waits for).
    let mut flapper = Flapper::start(c.target.clone(), Duration::from_millis(350));
    c.replace(back, Build::New);
    flapper.stop();
    silent.extend(views_differ(c, back, reference));
    (writes, silent)
}

// (b) and (c): one process with a data directory.

/// One process on a data directory, `-target engine,worker,ui,sink` (history from its SQLite store), writing a
/// snapshot every 5 entries. `purged`: no retention below a snapshot (`-log-retention 0s`), so a restart must
/// start from a snapshot the other build wrote; else the default retention keeps the whole log.
fn solo_args(dir: &Path, purged: bool) -> Vec<String> {
    let d = dir.to_str().unwrap();
    let retention: &[&str] = if purged { &["-log-retention", "0s"] } else { &[] };
    [
        &[
            "-target",
            "engine,worker,ui,sink",
            "-queue",
            "memory",
            "-coordination",
            "memory",
            "-data-dir",
            d,
            "-id",
            "solo",
            "-snapshot-every",
            "5",
        ][..],
        retention,
    ]
    .concat()
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn start_solo(bin: &Path, name: &str, dir: &Path, purged: bool, extra: &[&str]) -> Jaque {
    let args = solo_args(dir, purged);
    let args: Vec<&str> = args.iter().map(String::as_str).chain(extra.iter().copied()).collect();
    let j = Jaque::start_bin(name, bin, &args, &[]);
    j.wait_ready();
    j
}

/// What the API says of every object and its history, less who owns it and under which epoch (a restart is a
/// new owner and a new epoch), as this build shows it; `common_view` keeps what both builds show.
fn api_view(j: &Jaque) -> BTreeMap<String, Value> {
    let list = j.get("/api/objects");
    assert_eq!(list.status, 200, "{}", list.text());
    let mut out = BTreeMap::new();
    for o in list.json().as_array().unwrap() {
        let id = o["id"].as_str().unwrap().to_string();
        let one = j.get(&format!("/api/objects/{id}")).json();
        let history = j.get(&format!("/api/objects/{id}/history?limit=1000")).json();
        let kept = |o: &Value| {
            json!({
                "definition": o["definition"],
                "state": o["state"],
                "paused": o["paused"],
                "acknowledged": o["acknowledged"],
                "last_transition": o["last_transition"],
                "last_seq": o["last_seq"],
                "soft": o["soft"],
                "flapping": o["flapping"],
            })
        };
        out.insert(id, json!({"list": kept(o), "object": kept(&one), "history": history["events"]}));
    }
    out
}

/// An API view (`api_view`) as both builds show it: of an object, the definition's probe, interval and timeout,
/// its state, paused, acknowledged, last transition and last seq (this build also shows the parents, `episode`
/// and `parents_down`); of each history event, the columns both builds' stores have.
fn common_view(view: &BTreeMap<String, Value>) -> BTreeMap<String, Value> {
    let object = |o: &Value| {
        let d = &o["definition"];
        json!({
            "definition": {"probe": d["probe"], "interval": d["interval"], "timeout": d["timeout"]},
            "state": o["state"],
            "paused": o["paused"],
            "acknowledged": o["acknowledged"],
            "last_transition": o["last_transition"],
            "last_seq": o["last_seq"],
        })
    };
    const EVENT: [&str; 11] = [
        "seq",
        "at",
        "type",
        "epoch",
        "writer",
        "writer_incarnation",
        "from_state",
        "to_state",
        "output",
        "command_id",
        "definition",
    ];
    let event = |e: &Value| -> Value { EVENT.iter().map(|k| (k.to_string(), e[*k].clone())).collect() };
    let history = |h: &Value| -> Value { h.as_array().map_or(Value::Null, |h| h.iter().map(event).collect()) };
    view.iter()
        .map(|(id, v)| {
            let v =
                json!({"list": object(&v["list"]), "object": object(&v["object"]), "history": history(&v["history"])});
            (id.clone(), v)
        })
        .collect()
}

fn action(j: &Jaque, id: &str, action: &str) {
    let r = j.request("POST", &format!("/api/objects/{id}/actions/{action}"), &[], None);
    assert_eq!(r.status, 200, "{id} {action}: {}", r.text());
}

/// Makes `web` and `db` (checked hourly) go to `state` now: the target answers so, and each is checked now.
fn go(j: &Jaque, target: &CountingTarget, state: &str) {
    target.set_failing(state == "critical");
    for id in ["web", "db"] {
        action(j, id, "check");
    }
    poll(&format!("web and db {state}"), || {
        let list = j.get("/api/objects").json();
        let all = list.as_array()?;
        all.iter().filter(|o| o["id"] == "web" || o["id"] == "db").all(|o| o["state"] == state).then_some(())
    });
}

/// Waits until the sink has every event in the store (each object's history reaches its last event) and a
/// snapshot past the last write is stored; the API view then.
fn settled(j: &Jaque) -> BTreeMap<String, Value> {
    poll("the sink caught up and a snapshot at the log's end", || {
        let position = j.get("/api/cluster").json()["log_position"].as_u64()?;
        let snap = j.metric("jaque_snapshot_position")? as u64;
        let lag = j.metric("jaque_sink_lag_events")?;
        let view = api_view(j);
        let complete = view.values().all(|v| v["history"][0]["seq"] == v["object"]["last_seq"]);
        (lag == 0.0 && complete && snap + 5 > position).then_some(view)
    })
}

/// How a build met a data directory the other build wrote: it read it (and shows the same objects, states
/// and history), or it refused with a message.
enum Met {
    Read(Jaque),
    /// Why, and the process when it is still running (not ready).
    Refused(String, Option<Jaque>),
}

fn meet(bin: &Path, name: &str, dir: &Path, purged: bool) -> Met {
    let args = solo_args(dir, purged);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut j = match Jaque::try_start_bin(name, bin, &args, &[]) {
        Ok(j) => j,
        Err(mut p) => {
            return Met::Refused(format!("exited {} before listening: {}", p.wait_exit(), p.output.text()), None)
        }
    };
    let ready = poll(&format!("{name} ready, or saying why not"), || {
        if !j.proc.is_running() {
            return Some(false);
        }
        let h = j.get("/healthz");
        if h.status == 200 {
            return Some(true);
        }
        // Not ready, and a warning or error that names the version it cannot read.
        let out = j.proc.output.text();
        let said = out.lines().any(|l| (l.contains("WARN") || l.contains("ERROR")) && l.contains("version"));
        (h.status == 503 && said).then_some(false)
    });
    if ready {
        Met::Read(j)
    } else {
        let running = j.proc.is_running();
        let status = if running { "running, not ready".into() } else { format!("exited {}", j.proc.wait_exit()) };
        let why = format!("{status}; /healthz {}; output:\n{}", j.get("/healthz").text(), j.proc.output.text());
        Met::Refused(why, running.then_some(j))
    }
}

/// An API view (`api_view`) without the history's alert columns (sink schema 2: `hard`, `attempt`,
/// `attempts_needed`, `flapping`), which the store's way back to schema 1 drops.
fn without_alert_columns(view: &BTreeMap<String, Value>) -> BTreeMap<String, Value> {
    let mut view = view.clone();
    for v in view.values_mut() {
        for e in v["history"].as_array_mut().into_iter().flatten() {
            if let Some(e) = e.as_object_mut() {
                for k in ["hard", "attempt", "attempts_needed", "flapping"] {
                    e.remove(k);
                }
            }
        }
    }
    view
}

/// The schema version of a SQLite sink store.
fn sink_schema(db: &Path) -> u32 {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let opts = sqlx::sqlite::SqliteConnectOptions::new().filename(db).read_only(true);
        let pool = sqlx::SqlitePool::connect_with(opts).await.unwrap();
        let (v,): (i64,) = sqlx::query_as("SELECT max(version) FROM jaque_schema").fetch_one(&pool).await.unwrap();
        pool.close().await;
        u32::try_from(v).unwrap()
    })
}

/// Runs on a SQLite sink store the statements docs/upgrading.md gives to take a store from schema 2 back to 1.
fn rollback_store(db: &Path) {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/upgrading.md")).unwrap();
    let (_, from) = doc.split_once("```sql\nBEGIN;").expect("docs/upgrading.md gives the way back in SQL");
    let sql = format!("BEGIN;{}", from.split_once("```").unwrap().0);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let pool =
            sqlx::SqlitePool::connect_with(sqlx::sqlite::SqliteConnectOptions::new().filename(db)).await.unwrap();
        sqlx::raw_sql(&sql).execute(&pool).await.unwrap_or_else(|e| panic!("docs/upgrading.md's way back: {e}\n{sql}"));
        pool.close().await;
    })
}

fn compare(before: &BTreeMap<String, Value>, after: &BTreeMap<String, Value>, what: &str) {
    assert_eq!(after.keys().collect::<Vec<_>>(), before.keys().collect::<Vec<_>>(), "{what}: the same objects");
    for (id, b) in before {
        assert_eq!(&after[id], b, "{what}: {id}, its state and history");
    }
}

/// The objects whose view differs between two API reads, each with both views.
fn differences(before: &BTreeMap<String, Value>, after: &BTreeMap<String, Value>) -> Vec<String> {
    let ids: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    ids.into_iter()
        .filter(|id| before.get(*id) != after.get(*id))
        .map(|id| format!("{id}: {} where it was {}", show(after.get(id)), show(before.get(id))))
        .collect()
}

/// An object's view without its history (which the sink's store keeps whatever build reads the log).
fn show(v: Option<&Value>) -> String {
    v.map_or("absent".into(), |v| v["object"].to_string())
}

#[test]
fn a_data_dir_of_the_previous_build_is_read_by_this_one_and_back_from_snapshots() {
    data_dir_scenario("data dir upgrade (purged below snapshots)", true, false);
}

/// With the whole log and no hold, a build before v0.1.0 misreads what this one wrote (docs/upgrading.md, *The
/// `-data-dir` version*: "nothing stops it from misreading: the copy is the safe way back"), so the way back
/// on the directory itself is with `-hold-format` at the previous build's format.
#[test]
fn a_data_dir_held_at_the_previous_format_is_read_by_this_build_and_back_with_the_whole_log() {
    data_dir_scenario("data dir upgrade (whole log, held at the previous format)", false, true);
}

/// (b) and (c): the previous build writes a data directory, this one reads it and writes more (the new format's
/// put, with the rules that make every change hard at once, and unack, each unless `held` at a format that
/// refuses it), the previous one meets that, and this one reads the directory once more.
fn data_dir_scenario(what: &str, purged: bool, held: bool) {
    let Some(prev) = previous_build(what) else { return };
    let old = prev.bin;
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let new = jaque_bin();
    let dir = tempfile::tempdir().unwrap();
    let target = CountingTarget::start();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap(); // dropped: refuses

    // The previous build: objects, transitions, an ack, a pause.
    let mut j = start_solo(&old, "solo (Old)", dir.path(), purged, &[]);
    let held_at = prev.format.to_string();
    let hold: &[&str] = if held { &["-hold-format", &held_at] } else { &[] };
    let hourly = |url: String| {
        let mut body = json!({"probe": {"type": "http", "url": url}, "interval": "1h", "timeout": "800ms"});
        body.as_object_mut().expect("an object").extend(rules().as_object().expect("an object").clone());
        body
    };
    for id in ["web", "db"] {
        let r = j.put(&format!("/api/objects/{id}"), &hourly(format!("{}/{id}", target.url())));
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let quiet = json!({"probe": {"type": "tcp", "addr": closed.to_string()}, "interval": "1h"});
    assert_eq!(j.put("/api/objects/quiet", &quiet).status, 200);
    go(&j, &target, "ok");
    go(&j, &target, "critical");
    action(&j, "db", "ack");
    go(&j, &target, "ok");
    go(&j, &target, "critical");
    action(&j, "web", "ack");
    poll("quiet critical", || (j.get("/api/objects/quiet").json()["state"] == "critical").then_some(()));
    action(&j, "quiet", "pause");
    let before = settled(&j);
    let epoch_before = j.metric("jaque_engine_epoch").unwrap() as u64;
    j.proc.signal("TERM");
    assert!(j.proc.wait_exit().success(), "the previous build exits cleanly on SIGTERM");

    // This build on the same directory: the same objects, states and history, from the old build's snapshot.
    let mut j = start_solo(&new, "solo (New)", dir.path(), purged, hold);
    compare(&common_view(&before), &common_view(&api_view(&j)), "the new build reading the old build's data directory");
    assert!(j.metric("jaque_snapshot_loads_total").unwrap_or(0.0) >= 1.0, "started from the old build's snapshot");
    assert_eq!(j.metric("jaque_snapshot_load_failures_total"), Some(0.0));
    poll("the epoch after the stored one", || {
        (j.metric("jaque_engine_epoch")? as u64 == epoch_before + 1).then_some(())
    });
    // The new format (one process speaking it is the whole cluster): web and db put again with parents and the
    // rules that make every change hard at once (`go` waits for hard states; the default rules take three
    // results in a row, retried a minute apart for an hourly check), applied; while the format is held at the
    // previous build's, refused saying why, and then put with those rules alone (the previous format's).
    let format = j.get("/api/cluster").json()["cluster_format"].clone();
    let active = if held { prev.format } else { CLUSTER_FORMAT };
    assert_eq!(format["active"], active, "{what}: {format}");
    for id in ["web", "db"] {
        let mut body = new_format_put(&hourly(format!("{}/{id}", target.url())));
        body["max_attempts"] = json!(1);
        body["flapping"] = json!(false);
        let r = j.put(&format!("/api/objects/{id}"), &body);
        eprintln!(
            "{what}: the new build at cluster_format {format}: the new-format put of {id}: {} {}",
            r.status,
            r.text()
        );
        let parents = if held {
            assert_eq!(r.status, 400, "{}", r.text());
            assert!(r.text().contains(&needs_new_format()), "{}", r.text());
            body.as_object_mut().expect("a put's body is an object").remove("parents");
            let r = j.put(&format!("/api/objects/{id}"), &body);
            assert_eq!(r.status, 200, "{what}: the put of {id} without parents: {}", r.text());
            json!([])
        } else {
            assert_eq!(r.status, 200, "{}", r.text());
            new_parents()
        };
        let d = j.get(&format!("/api/objects/{id}")).json()["definition"].clone();
        assert_eq!((&d["parents"], &d["max_attempts"], &d["flapping"]), (&parents, &json!(1), &json!(false)));
    }
    // It goes on: more transitions, a resume, written by this build.
    go(&j, &target, "ok");
    action(&j, "quiet", "resume");
    go(&j, &target, "critical");
    action(&j, "db", "ack");
    // Format 2: an acknowledgement withdrawn; refused, saying why, while the format is held at 1.
    action(&j, "web", "ack");
    let r = j.request("POST", "/api/objects/web/actions/unack", &[], None);
    eprintln!("{what}: the new build at cluster_format {format}: unack answered {} {}", r.status, r.text());
    if active < 2 {
        assert_eq!(r.status, 400, "{}", r.text());
        assert!(r.text().contains("needs cluster format 2"), "{}", r.text());
    } else {
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(j.get("/api/objects/web").json()["acknowledged"], false);
    }
    let before = settled(&j);
    j.proc.signal("TERM");
    assert!(j.proc.wait_exit().success(), "the new build exits cleanly on SIGTERM");
    eprintln!("{what}: the new build read the previous build's directory: {} objects, same history", before.len());

    // The sink's store (`jaque-sink.db` in the directory) has a version of its own (docs/upgrading.md, *The sink
    // schema version*), which no hold keeps: this build migrated it to a schema the previous build may not
    // know. Held, the way back is the hold for the log and snapshots and the store's own way back: the previous
    // build refuses the store saying so, the statements docs/upgrading.md gives take it back, and then the
    // previous build must read the directory as this one left it.
    let store = dir.path().join("jaque-sink.db");
    let (known, stored) = (sink_schema_of(&old), sink_schema(&store));
    let store_rolled_back = held && stored > known;
    if store_rolled_back {
        match meet(&old, "solo (Old, newer store)", dir.path(), purged) {
            Met::Refused(why, j) => {
                let said = format!("schema version {stored}, newer than this build of jaque knows ({known})");
                assert!(why.contains(&said), "{what}: the previous build's refusal names the store's version: {why}");
                eprintln!("{what}: rollback: the previous build refuses the store of sink schema {stored}: {said}");
                if let Some(mut j) = j {
                    j.proc.signal("TERM");
                    j.proc.wait_exit();
                }
            }
            Met::Read(_) => {
                panic!("{what}: the previous build (sink schema {known}) ran on a store of schema {stored}")
            }
        }
        assert_eq!((stored, known), (2, 1), "{what}: docs/upgrading.md gives the way back from sink schema 2 to 1");
        rollback_store(&store);
        assert_eq!(sink_schema(&store), known, "{what}: the store after docs/upgrading.md's way back");
        eprintln!("{what}: rollback: the store taken back to sink schema {known} by docs/upgrading.md's statements");
    }

    // Rollback: the previous build on what this one wrote. It reads it all, or it says it cannot (held, it must
    // read it: that is what the hold is for); a previous build that is ready with a state of its own is the
    // silent wrong state this must never be.
    let mut silent = None;
    let rolled_back = match meet(&old, "solo (Old, rollback)", dir.path(), purged) {
        Met::Read(j) => {
            let diff = differences(&common_view(&before), &common_view(&api_view(&j)));
            let (loads, failures) = (
                j.metric("jaque_snapshot_loads_total").unwrap_or(0.0),
                j.metric("jaque_snapshot_load_failures_total").unwrap_or(0.0),
            );
            let passed_over: Vec<String> = j
                .proc
                .output
                .text()
                .lines()
                .filter(|l| l.contains("does not decode"))
                .map(|l| l.split_once("WARN ").map_or(l, |(_, r)| r).to_string())
                .collect();
            if diff.is_empty() {
                eprintln!(
                    "{what}: rollback: the previous build read what this one wrote: same objects, states and \
                     history (started from {loads} snapshot(s), {failures} it could not read)"
                );
            } else {
                let msg = format!(
                    "the previous build is ready (/healthz 200) on what this build wrote, with a state of its own: \
                     {diff:?}; it started from {loads} snapshot(s), {failures} it could not read, and said only: \
                     {passed_over:?}"
                );
                eprintln!("{what}: rollback: SILENT WRONG STATE: {msg}");
                silent = Some(msg);
            }
            Some(j)
        }
        Met::Refused(why, j) => {
            eprintln!("{what}: rollback: the previous build cannot read what this one wrote, and says so: {why}");
            assert!(!held, "{what}: with the format held, the previous build must read the directory: {why}");
            j
        }
    };
    // Forward again: whatever the previous build did with the directory, this build reads what it wrote.
    if let Some(mut j) = rolled_back {
        j.proc.signal("TERM");
        let status = j.proc.wait_exit();
        eprintln!("{what}: the previous build exited {status} on SIGTERM");
    }
    let j = start_solo(&new, "solo (New, again)", dir.path(), purged, hold);
    // The store's way back dropped the alert columns of the rows this build had written.
    let kept = |v: &BTreeMap<String, Value>| if store_rolled_back { without_alert_columns(v) } else { v.clone() };
    let diff = differences(&kept(&before), &kept(&api_view(&j)));
    eprintln!(
        "{what}: forward again: the new build reads the directory; differences from before the rollback: {diff:?}"
    );
    if let Some(msg) = silent {
        panic!("rollback of a data directory to the previous build: {msg}");
    }
    assert!(diff.is_empty(), "the new build after the rollback: {diff:?}");
}
