//! What one seed draws: the world's size and timing, the fault mix (swarm testing: some kinds switched off,
//! each fault with a minimum duration) and the workload. Every random choice of a run comes from a sub-seed of
//! the master seed, one per concern, so changing how one concern draws never moves the others.
//!
//! Every parameter of a world is drawn here, and nothing here depends on the world (`world/` reads these):
//! `params/notify.rs` holds the notifiers' and their endpoints', `params/objects.rs` the objects' definitions.

use jaque_core::CheckBatching;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::fmt;
use std::time::Duration;

mod notify;
mod objects;

pub use notify::{EndpointKind, EndpointParams, NotifyParams, GIVE_UP_NEVER_MS};
pub(crate) use objects::{draw_def, first_defs, secret_def};
pub use objects::{MARKER, SECRET};

/// The concerns that get their own random stream.
#[derive(Clone, Copy, Debug)]
pub enum Stream {
    Params = 1,
    Network = 2,
    Faults = 3,
    Workload = 4,
    Truth = 5,
    /// Per node: `Clock as u64 + index`.
    Clock = 6,
    /// The ui's choices (direct or ingress, a stale view): its own stream, so earlier seeds draw as before
    /// (clear of the per-node ranges above and below).
    Ui = 50,
    /// The sinks and their SQL store (issue 9): the store's faults, the sinks' messages. Per sink: `Sink as u64 +
    /// index` for its process stream, `SinkClock as u64 + index` for its clock.
    Sql = 60,
    SinkClock = 70,
    Sink = 200,
    /// The notifiers' faults and restarts (index 0) and their traffic (index 1).
    Notify = 90,
    /// Per notifier slot: `NotifierNode as u64 + index`.
    NotifierNode = 300,
    /// Per endpoint: `Endpoint as u64 + index`.
    Endpoint = 400,
    /// Per node: `Node as u64 + index`.
    Node = 100,
    /// Snapshots and compaction: the snapshot store's faults and latencies (index 0), and the moments the
    /// checker of invariant 11 samples (index 1), which never move the world.
    Snapshots = 80,
    /// The check workers of a pool of limited capacity: which worker takes a check, its backlog's picks, and
    /// how long each check runs.
    Workers = 85,
    /// Writes through ingress: which member of the queue group the server hands each attempt to.
    Ingress = 86,
    /// Faults between attempts (`Params::attempt_faults`): which soft attempts are followed by a fault of their
    /// writer, when, and which fault.
    AttemptFaults = 87,
    /// Policy changes in the workload (`Params::policy_changes`): which change each one is.
    Policy = 88,
}

/// The SplitMix64 finalizer, used to derive sub-seeds and to hash traces.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The random stream for one concern of one seed.
pub fn stream(seed: u64, s: Stream, index: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(mix(seed ^ mix((s as u64).wrapping_add(index).wrapping_mul(0x2545_f491_4f6c_dd1d))))
}

/// The fault kinds of the swarm, one vocabulary for every process whatever its role (`world/faults.rs` does
/// them). Each seed switches some of them off entirely, for the engines and sinks and for the notifiers apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultKind {
    /// State lost; the process comes back later as a new incarnation (or not).
    Crash,
    /// No inputs or timers processed for a while (sometimes longer than the ttl), then a backlog.
    Pause,
    /// A process and the store (NATS) cannot talk, both ways.
    StorePartition,
    /// Only one direction between a process and the store is cut (its writes vanish, or its reads stop).
    StoreOneWay,
    /// A process cannot reach its peers: two engines each other (request/reply, one way or both), a sink its
    /// database, a notifier the endpoints.
    PeerPartition,
    /// One process is cut from everything (the store and its peers).
    IsolateOne,
    /// A process's heartbeats are lost while everything else works.
    HeartbeatLoss,
    /// Messages to and from a process are held (delayed a lot) and released later: clogging.
    Clog,
    /// A clean leave (SIGTERM); the process may come back later as a new incarnation.
    Leave,
}

impl FaultKind {
    /// The kinds of the engines' and sinks' fault tick, in the order a seed draws them (and hashes them by).
    pub const ALL: [FaultKind; 9] = [
        FaultKind::Crash,
        FaultKind::Pause,
        FaultKind::StorePartition,
        FaultKind::StoreOneWay,
        FaultKind::PeerPartition,
        FaultKind::IsolateOne,
        FaultKind::HeartbeatLoss,
        FaultKind::Clog,
        FaultKind::Leave,
    ];

    /// The kinds of the notifiers' fault tick, in the order a seed draws them (and hashes them by): no
    /// isolate-one.
    pub const NOTIFIER: [FaultKind; 8] = [
        FaultKind::Crash,
        FaultKind::Pause,
        FaultKind::StorePartition,
        FaultKind::StoreOneWay,
        FaultKind::HeartbeatLoss,
        FaultKind::Clog,
        FaultKind::Leave,
        FaultKind::PeerPartition,
    ];
}

/// Every parameter of one run. `draw` makes a swarm mix from a seed; scenarios build one by hand.
#[derive(Clone, Debug)]
pub struct Params {
    pub seed: u64,
    pub engines: usize,
    /// `-heartbeat-ttl`, whole seconds as NATS has them.
    pub ttl_ms: u64,
    /// The store reports an expired key this late at most (uniform 0..=max per expiry).
    pub expiry_lag_max_ms: u64,
    pub objects: usize,
    pub interval_ms: (u64, u64),

    // Network and store timing.
    /// One-way latency of a message through NATS, uniform in `0..=net_delay_max_ms` (plus 1 ms).
    pub net_delay_max_ms: u64,
    /// Extra lag of a log reader, per entry, uniform 0..=max.
    pub log_lag_max_ms: u64,
    /// Extra lag of a membership watcher, per change, uniform 0..=max.
    pub watch_lag_max_ms: u64,
    /// The shell's request timeout for forwards; a forward to an unreachable engine ends in `timeout`.
    pub forward_timeout_ms: u64,
    /// A publish to the log that gets no ack ends in `AppendFailed` after this long.
    pub append_timeout_ms: u64,
    /// Probability that the answer to a compare-and-set proposal is lost.
    pub propose_answer_loss: f64,
    /// Probability that an append lands but its ack is lost (`AppendFailed` on a landed event).
    pub append_ack_loss: f64,
    /// Probability that an append times out and lands later anyway.
    pub append_late: f64,
    /// Probability that a log entry or a membership change is delivered twice to a reader.
    pub duplicate: f64,
    /// Probability that a check result is lost (the worker died).
    pub check_loss: f64,
    /// Delay from boot to the delivery of the snapshot and backlog.
    pub boot_delay_max_ms: u64,
    /// Each engine's clock is off the simulation's by a constant uniform in -max..=max.
    pub clock_skew_max_ms: u64,

    // Faults.
    pub faults: Vec<FaultKind>,
    /// Mean time between two fault starts in the safety phase.
    pub fault_every_ms: u64,
    /// Every fault lasts at least this long (VOPR's "stability"), at most `fault_max_ms`.
    pub fault_min_ms: u64,
    pub fault_max_ms: u64,
    /// A paused engine stays paused up to this long; sometimes more than the ttl.
    pub pause_max_ms: u64,
    /// Some fault ticks swizzle-clog (FoundationDB): clog a random subset one by one, unclog in random order.
    pub swizzle: bool,
    /// Share of heartbeats dropped during a heartbeat-loss fault.
    pub heartbeat_loss: f64,

    // Workload.
    /// Mean time between two submitted commands.
    pub command_every_ms: u64,
    /// Share of commands that go through ingress (the rest are submitted at a random engine).
    pub ingress_share: f64,
    /// Probability that a command that ended `unavailable` is submitted again with the same id.
    pub retry: f64,
    /// Probability that a command is submitted twice at once, by two paths, with the same id.
    pub double_submit: f64,
    /// A leaving engine stays in the ingress queue group until it exits.
    pub ingress_while_leaving: bool,
    /// Share of ingress commands sent instead as a `-target ui` does: straight to the owner its log view names
    /// (`jaque_core::ui::submit_to`), through ingress when that engine has no responder.
    pub ui_direct_share: f64,
    /// Probability that the ui's view is one epoch behind the log when it picks the owner.
    pub ui_view_stale: f64,
    /// Mean length of a period in which an object's simulated truth is constant.
    pub truth_period_ms: u64,

    // Phases.
    pub safety_ms: u64,
    /// Probability that an engine down at the heal comes back for the liveness phase.
    pub restart_at_heal: f64,

    // Sinks (issue 9), drawn from their own stream: a seed without sinks draws the world it drew before them.
    /// Sink processes `s1`..: 0–4.
    pub sinks: usize,
    pub sink: SinkParams,
    /// Notifiers and their endpoints (a stream of their own).
    pub notify: NotifyParams,
    /// Snapshots and compaction (issue 11; a stream of their own).
    pub snapshots: SnapshotParams,
    /// How the engines gather checks due into dispatches (`-check-linger`, `-check-batch`; a stream of their own).
    pub check_batching: CheckBatching,
    /// Check workers of limited capacity, each with the core's backlog (a stream of their own); none: a check
    /// answers after a latency up to its timeout, as if workers had no limit.
    pub workers: Option<PoolParams>,
    /// How the ui's ingress writes wait for claims, and how soon the NATS server drops a member of the ingress
    /// queue group that stopped answering (a stream of their own).
    pub ingress: IngressParams,
    /// Mixed versions: members of an older build beside this one's, each replaced by this build mid-run.
    pub versions: VersionParams,
    /// Faults between attempts (the alert rules, invariant 14): the chance that an accepted soft attempt is
    /// followed, before its next attempt is due, by a fault of the engine that wrote it (one of the seed's
    /// engine fault kinds: a crash, a pause, a cut from the store, a clean leave, lost heartbeats), so that
    /// another owner goes on with the count. On in half the seeds (a stream of its own; in a seed of mixed versions,
    /// soft attempts come once the cluster's format is 3).
    pub attempt_faults: f64,
    /// The share of the workload's commands after the first puts that change the notification policy instead
    /// (cluster format 4, on the reserved key `jaque/policy`): receivers, routes, silences and windows, some of
    /// them refused (a route naming a receiver that is not there, a silence ending before it starts). Decided by
    /// a hash of the command's number, so the workload's stream stays as it was; on in half the seeds (a
    /// stream of its own). Every reader's policy is held to the oracle's at every policy change (invariant 15).
    pub policy_changes: f64,
}

/// What a seed draws for writes through ingress (`sim/src/world/ingress.rs`).
#[derive(Clone, Copy, Debug)]
pub struct IngressParams {
    /// The ui's `-claim-timeout`; 0: claims off (one request a write, as before claims).
    pub claim_timeout_ms: u64,
    /// The NATS server drops a client that stopped answering (paused, or cut off) this long after it went quiet:
    /// its pings unanswered (up to `ping_interval` x (`ping_max` + 2): the server pings only after an interval
    /// with nothing from the client; the shipped `deploy/nats` settings, 1 s and 2, dropped a stopped engine 4.5 s
    /// after its SIGSTOP here). Until then the ingress queue group may hand it writes.
    pub server_drop_ms: u64,
}

impl IngressParams {
    /// What `jaque` ships with, on a server with the `deploy/nats` ping settings.
    pub fn shipped() -> IngressParams {
        IngressParams { claim_timeout_ms: 200, server_drop_ms: 4_500 }
    }

    pub fn draw(seed: u64) -> IngressParams {
        // Index 8: the pool's draw has 7 (sharing it made the two correlated).
        let mut r = stream(seed, Stream::Params, 8);
        IngressParams {
            claim_timeout_ms: pick_u64(&mut r, &[0, 50, 200, 200, 500]),
            server_drop_ms: r.random_range(4..=10u64) * 500,
        }
    }
}

/// Which role a member of an older build plays (`VersionParams`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Engine,
    Sink,
    Notifier,
}

/// Mixed versions (issue 33): some members start as a build of the oldest cluster format
/// (`jaque_core::format::OLDEST_CLUSTER_FORMAT`: it announces it, and its reader and commands are that build's),
/// and each is replaced by this build at its time, one by one, with a clean leave and a start, as an operator
/// upgrades a running cluster. Meanwhile the workload withdraws some acknowledgements (`unack`, a command of
/// format 2), which the cluster refuses until it is at format 2.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VersionParams {
    /// Each older member: its role, its slot and when it is replaced (ms from the start), sorted by time.
    pub old: Vec<(Role, usize, u64)>,
    /// Per mille of the workload's acknowledgements sent as `unack` instead.
    pub unack_permille: u32,
}

impl VersionParams {
    /// A third of the swarm's seeds mix versions (a stream of its own: the other seeds' worlds stay as they were).
    pub fn draw(p: &Params) -> VersionParams {
        let mut r = stream(p.seed, Stream::Params, 9);
        if !r.random_bool(0.33) {
            return VersionParams::default();
        }
        let members = [(Role::Engine, p.engines), (Role::Sink, p.sinks), (Role::Notifier, p.notify.notifiers)];
        let mut old: Vec<(Role, usize, u64)> = Vec::new();
        for (role, n) in members {
            for slot in 0..n {
                if r.random_bool(0.5) {
                    old.push((role, slot, 0));
                }
            }
        }
        if old.is_empty() {
            old.push((Role::Engine, r.random_range(0..p.engines), 0));
        }
        // One by one across the safety phase (its first fifth runs mixed before the first replacement).
        let (from, to) = (p.safety_ms / 5, p.safety_ms * 4 / 5);
        let mut times: Vec<u64> = old.iter().map(|_| r.random_range(from..=to.max(from))).collect();
        times.sort_unstable();
        old.shuffle(&mut r);
        for (o, t) in old.iter_mut().zip(times) {
            o.2 = t;
        }
        VersionParams { old, unack_permille: pick_u64(&mut r, &[100, 300, 1000]) as u32 }
    }

    pub fn is_mixed(&self) -> bool {
        !self.old.is_empty()
    }
}

/// What a seed draws for its check workers (`sim/src/world/workers.rs`): none, or a pool of limited capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolParams {
    pub workers: usize,
    /// Check slots per worker (`-worker-concurrency`).
    pub slots: usize,
    /// A check of an object whose truth is critical runs to its timeout, as a connect to a port whose packets
    /// are dropped does; otherwise it answers after a latency up to its timeout like any other.
    pub critical_times_out: bool,
}

impl PoolParams {
    /// A swarm seed's pool (a stream of its own): half the seeds have none. The pool has `room` times the
    /// slots its workload keeps busy on average (`busy_slots`), so it keeps up on average, while single
    /// workers, picked at random per check, and bursts (the first check of every object at once, a takeover's
    /// catch-up) fill up and make work wait in their backlogs.
    pub fn draw(p: &Params) -> Option<PoolParams> {
        let mut r = stream(p.seed, Stream::Params, 7);
        if r.random_bool(0.5) {
            return None;
        }
        let room = [1.5, 2.0, 4.0][r.random_range(0..3)];
        let critical_times_out = r.random_bool(0.5);
        let total = ((busy_slots(p, critical_times_out) * room).ceil() as usize).max(1);
        let workers = r.random_range(1..=4usize);
        Some(PoolParams { workers, slots: total.div_ceil(workers), critical_times_out })
    }
}

/// How many check slots the objects' first definitions keep busy on average: a check runs for up to its
/// timeout (half of it on average, all of it when critical and `critical_times_out`; critical is about a
/// sixth of the simulated truth) once per interval.
fn busy_slots(p: &Params, critical_times_out: bool) -> f64 {
    let share = if critical_times_out { 0.5 + 0.5 * 0.15 } else { 0.5 };
    objects::first_defs(p).1.iter().map(|d| d.timeout_ms as f64 * share / d.interval_ms.max(1) as f64).sum()
}

/// What a seed draws for snapshots and compaction (`sim/src/world/snapshots.rs`): the engines' config and the
/// snapshot store's faults.
#[derive(Clone, Debug)]
pub struct SnapshotParams {
    /// Off: no engine writes one within a run and nothing is purged (the worlds of before snapshots).
    pub on: bool,
    /// `-snapshot-every`, `-snapshot-interval`, `-log-retention`.
    pub every: u64,
    pub interval_ms: u64,
    pub retention_ms: u64,
    /// A write or a read at the snapshot store takes 1..=max ms there.
    pub store_ms_max: u64,
    /// Safety phase: share of writes the store refuses (nothing stored, an error answered).
    pub write_fail: f64,
    /// Safety phase: share of writes stored whose answer is lost (the engine's client times out).
    pub answer_loss: f64,
    /// Safety phase: share of writes that land after their client timed out.
    pub late: f64,
}

impl SnapshotParams {
    /// No snapshots: what every seed ran before them, and the scenarios' default.
    pub fn off() -> SnapshotParams {
        SnapshotParams {
            on: false,
            every: u64::MAX,
            interval_ms: 100 * 365 * 24 * 3_600_000,
            retention_ms: 0,
            store_ms_max: 5,
            write_fail: 0.0,
            answer_loss: 0.0,
            late: 0.0,
        }
    }

    /// On, with a faultless store: a snapshot every `every` entries, purges keeping `retention_ms` of log
    /// time (scenarios).
    pub fn every(every: u64, retention_ms: u64) -> SnapshotParams {
        SnapshotParams { on: true, every, interval_ms: 3_600_000, retention_ms, ..SnapshotParams::off() }
    }

    /// What `jaque` ships with: every 10,000 entries or 5 minutes, 7 days kept.
    pub fn shipped() -> SnapshotParams {
        let d = jaque_core::compact::SnapshotConfig::default();
        SnapshotParams {
            on: true,
            every: d.every,
            interval_ms: d.interval.as_millis() as u64,
            retention_ms: d.retention.as_millis() as u64,
            ..SnapshotParams::off()
        }
    }

    pub fn draw(seed: u64) -> SnapshotParams {
        let mut r = stream(seed, Stream::Params, 5);
        if r.random_bool(0.2) {
            return SnapshotParams::off();
        }
        SnapshotParams {
            on: true,
            every: pick_u64(&mut r, &[5, 20, 50, 200]),
            interval_ms: pick_u64(&mut r, &[1_000, 5_000, 30_000, 300_000]),
            // Zero purges all a snapshot covers at once: any reader behind it falls into a hole. The log clock's
            // marks are a minute apart, so 10 s and 30 s purge only in runs past a minute and a bit; 7 days never.
            retention_ms: pick_u64(&mut r, &[0, 0, 10_000, 30_000, 7 * 24 * 3_600_000]),
            store_ms_max: pick_u64(&mut r, &[5, 50, 500]),
            write_fail: pick(&mut r, &[0.0, 0.05, 0.2]),
            answer_loss: pick(&mut r, &[0.0, 0.1, 0.3]),
            late: pick(&mut r, &[0.0, 0.05]),
        }
    }

    /// The engines' `SnapshotConfig`.
    pub fn config(&self) -> jaque_core::compact::SnapshotConfig {
        jaque_core::compact::SnapshotConfig {
            every: self.every,
            interval: Duration::from_millis(self.interval_ms),
            retention: Duration::from_millis(self.retention_ms),
        }
    }
}

/// What a seed draws for its sinks and their SQL store (`sim/src/world/sink/`).
#[derive(Clone, Debug)]
pub struct SinkParams {
    /// `SinkConfig`: rows per transaction, rows held before dropping them, log entries per replay read, events
    /// held while a resume runs, longest output stored.
    pub max_batch: usize,
    pub max_pending: usize,
    pub replay_chunk: u64,
    pub max_held: usize,
    pub max_output: usize,
    /// A commit or query takes 0..=max ms at the database.
    pub commit_ms_max: u64,
    /// Safety phase: share of commits that take 1–8 s (past the client's timeout, some land after it).
    pub slow_commit: f64,
    /// Safety phase: share of commits whose answer is lost (committed, answered unavailable).
    pub lost_answer: f64,
    /// Safety phase: the database goes down about this often (0: never), for `fault_min..=fault_max`.
    pub down_every_ms: u64,
    /// The shell's statement timeout: an answer not back by then is `IoError::Timeout`.
    pub timeout_ms: u64,
    /// Share of check outputs carrying the marker the database refuses.
    pub refuse: f64,
    /// Share of the refused rows the database refuses even degraded (by log position): skipped and counted.
    pub refuse_degraded: f64,
    /// Some objects' definitions carry the marker too (their put rows and objects rows are refused).
    pub refuse_defs: bool,
}

impl SinkParams {
    /// A quiet store: no faults, no refusals, core's batch sizes.
    pub fn quiet() -> SinkParams {
        SinkParams {
            max_batch: 1000,
            max_pending: 20_000,
            replay_chunk: 1000,
            max_held: 10_000,
            max_output: 4096,
            commit_ms_max: 5,
            slow_commit: 0.0,
            lost_answer: 0.0,
            down_every_ms: 0,
            timeout_ms: 3_000,
            refuse: 0.0,
            refuse_degraded: 0.0,
            refuse_defs: false,
        }
    }
}

impl Params {
    /// A swarm mix: every seed draws its own world, fault kinds and rates.
    pub fn draw(seed: u64) -> Params {
        let mut r = stream(seed, Stream::Params, 0);
        let ttl_ms = r.random_range(2..=10u64) * 1000;
        let mut faults: Vec<FaultKind> = FaultKind::ALL.iter().copied().filter(|_| r.random_bool(0.6)).collect();
        // A seed with no fault at all tests little; a few of them are fine.
        if faults.is_empty() && r.random_bool(0.8) {
            faults.push(FaultKind::ALL[r.random_range(0..FaultKind::ALL.len())]);
        }
        let lo = r.random_range(1..=10u64) * 500;
        let fault_min_ms = r.random_range(200..=2_000u64);
        let mut p = Params {
            seed,
            engines: r.random_range(1..=7),
            ttl_ms,
            expiry_lag_max_ms: r.random_range(0..=1_500),
            objects: r.random_range(1..=120),
            interval_ms: (lo, lo * r.random_range(1..=6u64)),
            net_delay_max_ms: r.random_range(0..=30),
            log_lag_max_ms: r.random_range(0..=200),
            watch_lag_max_ms: r.random_range(0..=300),
            forward_timeout_ms: r.random_range(1..=5u64) * 1000,
            append_timeout_ms: r.random_range(1..=5u64) * 1000,
            propose_answer_loss: pick(&mut r, &[0.0, 0.05, 0.3]),
            append_ack_loss: pick(&mut r, &[0.0, 0.01, 0.1]),
            append_late: pick(&mut r, &[0.0, 0.01, 0.05]),
            duplicate: pick(&mut r, &[0.0, 0.02, 0.2]),
            check_loss: pick(&mut r, &[0.0, 0.01, 0.1]),
            boot_delay_max_ms: r.random_range(0..=500),
            clock_skew_max_ms: 0,
            faults,
            fault_every_ms: r.random_range(1..=20u64) * 1000,
            fault_min_ms,
            fault_max_ms: fault_min_ms + r.random_range(0..=3u64) * ttl_ms,
            pause_max_ms: ttl_ms * r.random_range(1..=3u64),
            swizzle: false,
            heartbeat_loss: pick(&mut r, &[0.5, 0.9, 1.0]),
            command_every_ms: r.random_range(20..=2_000),
            ingress_share: pick(&mut r, &[0.0, 0.5, 0.9, 1.0]),
            retry: pick(&mut r, &[0.0, 0.3, 0.8]),
            double_submit: 0.0,
            ingress_while_leaving: false,
            ui_direct_share: 0.0,
            ui_view_stale: 0.0,
            truth_period_ms: r.random_range(2..=120u64) * 1000,
            safety_ms: r.random_range(20..=120u64) * 1000,
            restart_at_heal: pick(&mut r, &[0.0, 0.5, 1.0]),
            sinks: 0,
            sink: SinkParams::quiet(),
            notify: NotifyParams::none(),
            snapshots: SnapshotParams::off(),
            check_batching: CheckBatching::NONE,
            workers: None,
            ingress: IngressParams::shipped(),
            versions: VersionParams::default(),
            attempt_faults: 0.0,
            policy_changes: 0.0,
        };
        // Later additions draw from their own stream, so the worlds of earlier (pinned) seeds stay as they were.
        let mut x = stream(seed, Stream::Params, 1);
        if x.random_bool(0.25) {
            // Slow readers: a log consumer or a watcher seconds behind.
            p.log_lag_max_ms = pick_u64(&mut x, &[1_000, 3_000]);
            p.watch_lag_max_ms = pick_u64(&mut x, &[500, 2_000]);
        }
        if x.random_bool(0.3) {
            p.clock_skew_max_ms = pick_u64(&mut x, &[100, 1_000, 3_000]);
        }
        if x.random_bool(0.15) {
            // Churn: a fault every fraction of a second, and a burst of commands.
            p.fault_every_ms = x.random_range(200..=1_000);
            p.command_every_ms = x.random_range(5..=50);
        }
        p.double_submit = pick(&mut x, &[0.0, 0.0, 0.05, 0.3]);
        p.ingress_while_leaving = x.random_bool(0.5);
        p.swizzle = !p.faults.is_empty() && x.random_bool(0.3);
        let mut y = stream(seed, Stream::Params, 2);
        p.ui_direct_share = pick(&mut y, &[0.0, 0.5, 0.9]);
        p.ui_view_stale = pick(&mut y, &[0.0, 0.2, 0.6]);
        let mut z = stream(seed, Stream::Params, 3);
        // Most seeds have sinks; a tenth have none (and replay the world they had before sinks existed).
        p.sinks = if z.random_bool(0.1) { 0 } else { z.random_range(1..=4) };
        p.sink = SinkParams {
            max_batch: pick_usize(&mut z, &[1, 3, 20, 1000]),
            max_pending: pick_usize(&mut z, &[30, 300, 20_000]),
            replay_chunk: pick_u64(&mut z, &[1, 7, 100, 1000]),
            max_held: pick_usize(&mut z, &[4, 60, 10_000]),
            max_output: pick_usize(&mut z, &[4096, 4096, 9]),
            commit_ms_max: z.random_range(0..=30),
            slow_commit: pick(&mut z, &[0.0, 0.02, 0.2]),
            lost_answer: pick(&mut z, &[0.0, 0.05, 0.3]),
            down_every_ms: pick_u64(&mut z, &[0, 0, 5_000, 30_000]),
            timeout_ms: z.random_range(1..=5u64) * 1000,
            refuse: pick(&mut z, &[0.0, 0.0, 0.05, 0.3]),
            refuse_degraded: pick(&mut z, &[0.0, 0.3, 1.0]),
            refuse_defs: z.random_bool(0.2),
        };
        // What a sink holds besides live events: a resume reads on while fewer than `max_batch` rows are held,
        // each read bringing up to `replay_chunk`, and a finished resume hands over up to `max_held` events. A
        // `max_pending` below their sum drops a resume's work at its end, again and again (a livelock; core's
        // `SinkConfig` does not refuse it, see the ignored test in core/tests/sink.rs). Runnable configs only,
        // with room for a few live events on top.
        let k = &p.sink;
        p.sink.max_pending = k.max_pending.max(k.max_batch + k.replay_chunk as usize + k.max_held + 50);
        p.notify = NotifyParams::draw(&p);
        p.snapshots = SnapshotParams::draw(seed);
        let mut b = stream(seed, Stream::Params, 6);
        if b.random_bool(0.5) {
            p.check_batching = CheckBatching {
                linger: Duration::from_millis(pick_u64(&mut b, &[5, 50, 200])),
                batch: pick_usize(&mut b, &[2, 8, 128]),
            };
        }
        p.workers = PoolParams::draw(&p);
        p.ingress = IngressParams::draw(seed);
        p.versions = VersionParams::draw(&p);
        let mut a = stream(seed, Stream::Params, 10);
        p.attempt_faults = if a.random_bool(0.5) { pick(&mut a, &[0.1, 0.3, 0.6]) } else { 0.0 };
        let mut c = stream(seed, Stream::Params, 11);
        p.policy_changes = if c.random_bool(0.5) { pick(&mut c, &[0.05, 0.2]) } else { 0.0 };
        p
    }

    /// A quiet world for hand-written scenarios: no random faults, a light workload off, small delays.
    pub fn scripted(seed: u64, engines: usize) -> Params {
        Params {
            seed,
            engines,
            ttl_ms: 3_000,
            expiry_lag_max_ms: 300,
            objects: 0,
            interval_ms: (2_000, 2_000),
            net_delay_max_ms: 2,
            log_lag_max_ms: 10,
            watch_lag_max_ms: 10,
            forward_timeout_ms: 2_000,
            append_timeout_ms: 2_000,
            propose_answer_loss: 0.0,
            append_ack_loss: 0.0,
            append_late: 0.0,
            duplicate: 0.0,
            check_loss: 0.0,
            boot_delay_max_ms: 50,
            clock_skew_max_ms: 0,
            faults: Vec::new(),
            fault_every_ms: 1_000,
            fault_min_ms: 1_000,
            fault_max_ms: 1_000,
            pause_max_ms: 1_000,
            swizzle: false,
            heartbeat_loss: 1.0,
            command_every_ms: 0,
            ingress_share: 1.0,
            retry: 0.0,
            double_submit: 0.0,
            ingress_while_leaving: false,
            ui_direct_share: 0.0,
            ui_view_stale: 0.0,
            truth_period_ms: 3_600_000,
            safety_ms: 0,
            restart_at_heal: 1.0,
            sinks: 0,
            sink: SinkParams::quiet(),
            notify: NotifyParams::none(),
            snapshots: SnapshotParams::off(),
            check_batching: CheckBatching::NONE,
            workers: None,
            ingress: IngressParams::shipped(),
            versions: VersionParams::default(),
            attempt_faults: 0.0,
            policy_changes: 0.0,
        }
    }

    /// The benchmark's world: 5 engines, 1000 objects, every fault kind at a moderate rate.
    pub fn bench(seed: u64) -> Params {
        let mut p = Params::draw(seed);
        p.engines = 5;
        p.objects = 1000;
        p.ttl_ms = 10_000;
        p.interval_ms = (10_000, 60_000);
        p.faults = FaultKind::ALL.to_vec();
        p.fault_every_ms = 20_000;
        p.fault_min_ms = 1_000;
        p.fault_max_ms = 30_000;
        p.pause_max_ms = 20_000;
        p.command_every_ms = 200;
        p.truth_period_ms = 300_000;
        p.safety_ms = 600_000;
        // The engines' benchmark: no sinks, so its trace stays comparable across builds.
        p.sinks = 0;
        // The engines' benchmark: its world stays what it was before notifiers joined the simulator.
        p.notify = NotifyParams::none();
        // What jaque ships with: at 1,000 objects a snapshot every 5 minutes, nothing purged in 10.
        p.snapshots = SnapshotParams::shipped();
        p.check_batching = CheckBatching::SHIPPED;
        // The engines' benchmark: workers without limit, as before the pool was modelled.
        p.workers = None;
        p.ingress = IngressParams::shipped();
        // The engines' benchmark: faults at their tick only, as before faults between attempts.
        p.attempt_faults = 0.0;
        // The engines' benchmark: object commands only, as before the policy.
        p.policy_changes = 0.0;
        p
    }

    /// ttl + ttl/3 + the store's expiry lag: invariant 7's budget.
    pub fn takeover_window_ms(&self) -> u64 {
        self.ttl_ms + self.ttl_ms / 3 + self.expiry_lag_max_ms
    }

    /// The longest one message can take through NATS when nothing is clogged.
    pub fn max_hop_ms(&self) -> u64 {
        self.net_delay_max_ms + 1 + self.log_lag_max_ms.max(self.watch_lag_max_ms)
    }
}

fn pick(r: &mut ChaCha8Rng, options: &[f64]) -> f64 {
    options[r.random_range(0..options.len())]
}

fn pick_u64(r: &mut ChaCha8Rng, options: &[u64]) -> u64 {
    options[r.random_range(0..options.len())]
}

fn pick_usize(r: &mut ChaCha8Rng, options: &[usize]) -> usize {
    options[r.random_range(0..options.len())]
}

impl fmt::Display for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let faults: Vec<String> = self.faults.iter().map(|k| format!("{k:?}")).collect();
        let off: Vec<String> =
            FaultKind::ALL.iter().filter(|k| !self.faults.contains(k)).map(|k| format!("{k:?}")).collect();
        writeln!(f, "seed {}", self.seed)?;
        writeln!(
            f,
            "  world: engines={} objects={} interval={}..{}ms ttl={}ms expiry_lag<={}ms",
            self.engines, self.objects, self.interval_ms.0, self.interval_ms.1, self.ttl_ms, self.expiry_lag_max_ms
        )?;
        writeln!(
            f,
            "  network: delay<={}ms log_lag<={}ms watch_lag<={}ms forward_timeout={}ms append_timeout={}ms boot<={}ms clock_skew<={}ms",
            self.net_delay_max_ms,
            self.log_lag_max_ms,
            self.watch_lag_max_ms,
            self.forward_timeout_ms,
            self.append_timeout_ms,
            self.boot_delay_max_ms,
            self.clock_skew_max_ms
        )?;
        writeln!(
            f,
            "  loss: propose_answer={} append_ack={} append_late={} duplicate={} check={}",
            self.propose_answer_loss, self.append_ack_loss, self.append_late, self.duplicate, self.check_loss
        )?;
        writeln!(
            f,
            "  faults on: [{}] off: [{}] swizzle={} every~{}ms lasting {}..{}ms pause<={}ms heartbeat_loss={} between_attempts={}",
            faults.join(","),
            off.join(","),
            self.swizzle,
            self.fault_every_ms,
            self.fault_min_ms,
            self.fault_max_ms,
            self.pause_max_ms,
            self.heartbeat_loss,
            self.attempt_faults
        )?;
        writeln!(
            f,
            "  workload: command every~{}ms ingress_share={} (of which ui direct {}, stale view {}) retry={} double_submit={} ingress_while_leaving={} truth_period~{}ms policy_changes={}",
            self.command_every_ms,
            self.ingress_share,
            self.ui_direct_share,
            self.ui_view_stale,
            self.retry,
            self.double_submit,
            self.ingress_while_leaving,
            self.truth_period_ms,
            self.policy_changes
        )?;
        writeln!(f, "  phases: safety={}ms then liveness (restart_at_heal={})", self.safety_ms, self.restart_at_heal)?;
        let k = &self.sink;
        writeln!(
            f,
            "  sinks={} batch={} pending={} replay_chunk={} held={} max_output={} commit<={}ms slow={} lost_answer={} down_every={}ms timeout={}ms refuse={} (degraded too {}) refuse_defs={}",
            self.sinks,
            k.max_batch,
            k.max_pending,
            k.replay_chunk,
            k.max_held,
            k.max_output,
            k.commit_ms_max,
            k.slow_commit,
            k.lost_answer,
            k.down_every_ms,
            k.timeout_ms,
            k.refuse,
            k.refuse_degraded,
            k.refuse_defs
        )?;
        writeln!(f, "{}", self.snapshots)?;
        if self.versions.is_mixed() {
            writeln!(
                f,
                "  mixed versions: older members (role, slot, replaced at ms) {:?}, unack {}‰ of acks",
                self.versions.old, self.versions.unack_permille
            )?;
        }
        let b = &self.check_batching;
        write!(f, "  checks: linger={}ms batch={}", b.linger.as_millis(), b.batch)?;
        match &self.workers {
            None => writeln!(f, " workers: no limit")?,
            Some(w) => writeln!(
                f,
                " workers: {} x {} slots, critical runs to its timeout: {}",
                w.workers, w.slots, w.critical_times_out
            )?,
        }
        let i = &self.ingress;
        writeln!(f, "  ingress: claim_timeout={}ms server_drop={}ms", i.claim_timeout_ms, i.server_drop_ms)?;
        write!(f, "{}", self.notify)
    }
}

impl fmt::Display for SnapshotParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.on {
            return write!(f, "  snapshots: off");
        }
        write!(
            f,
            "  snapshots: every={} interval={}ms retention={}ms store<={}ms write_fail={} answer_loss={} late={}",
            self.every,
            self.interval_ms,
            self.retention_ms,
            self.store_ms_max,
            self.write_fail,
            self.answer_loss,
            self.late
        )
    }
}
