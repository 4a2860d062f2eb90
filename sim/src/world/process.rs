//! One member process, whatever its role (engine, sink, notifier), and the name of one: [`Who`]. A process has
//! its incarnation, whether it runs, is paused or is leaving, what reached it while it was paused, its armed
//! timer, how far its log follower and its membership watcher have read, the order of its heartbeats' answers,
//! its clock, its random stream, and the faults that hold it (store cuts, cuts from its peers, heartbeat loss,
//! clogging). What only its role has lives in `R`, one value per running incarnation: a crash drops it with the
//! process, a restart makes a new one. The life it goes through is `lifecycle.rs`'s.

use super::Ev;
use jaque_core::{MemberId, MemberRef, Time};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::fmt;

/// A process of the world: its role and its slot (`Engine(0)` is member `e1`, `Sink(0)` `s1`, `Notifier(0)`
/// `n1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Who {
    Engine(usize),
    Sink(usize),
    Notifier(usize),
}

impl fmt::Display for Who {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Who::Engine(n) => write!(f, "e{}", n + 1),
            Who::Sink(s) => write!(f, "s{}", s + 1),
            Who::Notifier(k) => write!(f, "n{}", k + 1),
        }
    }
}

/// What a process talks to besides NATS: an engine to another engine (request/reply, one way), a sink to its
/// database, a notifier to the webhook endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Peer {
    Engine(usize),
    Database,
    Endpoints,
}

pub struct Process<R> {
    pub id: MemberId,
    /// The incarnation of the running process (or of the last one).
    pub inc: u64,
    /// The running incarnation's role state; `None`: crashed, exited, or never started.
    pub(super) role: Option<R>,
    pub(super) paused_until: Option<Time>,
    /// It has had its watcher's snapshot and the log's backlog.
    pub(super) booted: bool,
    pub(super) leave_started: Option<Time>,
    /// What reached this process while it was paused, in arrival order: handled when it resumes.
    held: Vec<Ev>,
    /// The deadline its one timer is armed at, on its own clock.
    pub(super) armed: Option<Time>,
    pub(super) log: Follow,
    pub(super) members: Follow,
    /// The store's answers to its heartbeat puts come in the order of the puts.
    pub(super) hb_answers: Follow,
    pub(super) rng: ChaCha8Rng,
    /// This host's clock minus the simulation's, in milliseconds.
    clock: i64,
    pub(super) hb_loss: u32,
    pub(super) clog: u32,
    pub(super) store_out_cut: u32,
    pub(super) store_in_cut: u32,
    /// Cuts from its peers, counted (faults may overlap).
    peer_cuts: BTreeMap<Peer, u32>,
    /// Scenarios: the log follower is held (a slow reader), or the membership watcher (it sees no change);
    /// released with a catch-up.
    pub(super) log_held: bool,
    pub(super) watch_held: bool,
    /// A load of the latest snapshot is out (the shell's one at a time).
    pub(super) loading: bool,
    /// Since when it has stopped answering NATS (paused, or cut off either way): the server drops it from the
    /// ingress queue group a while after (`ingress.rs`).
    pub(super) dark_since: Option<Time>,
    /// The cluster format of the build this slot runs (`VersionParams`): this build's unless the seed mixes
    /// versions; an upgrade replaces the process by this build.
    pub(super) speaks: u32,
    /// Replaced by this build: its next start speaks this build's format.
    pub(super) upgrade: bool,
}

/// How far a follower (of the log, or of the membership bucket) has read, and when its last delivery is
/// due: deliveries to one follower never overtake each other.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Follow {
    pub cursor: u64,
    pub sched: Time,
}

impl Follow {
    /// The next delivery, due at `at` at the earliest: not before the one scheduled last.
    pub fn schedule(&mut self, at: Time) -> Time {
        let at = at.max(self.sched);
        self.sched = at;
        at
    }
}

impl<R> Process<R> {
    pub(super) fn new(id: MemberId, rng: ChaCha8Rng, clock: i64) -> Process<R> {
        Process {
            id,
            inc: 0,
            role: None,
            paused_until: None,
            booted: false,
            leave_started: None,
            held: Vec::new(),
            armed: None,
            log: Follow::default(),
            members: Follow::default(),
            hb_answers: Follow::default(),
            rng,
            clock,
            hb_loss: 0,
            clog: 0,
            store_out_cut: 0,
            store_in_cut: 0,
            peer_cuts: BTreeMap::new(),
            log_held: false,
            watch_held: false,
            loading: false,
            dark_since: None,
            speaks: jaque_core::format::CLUSTER_FORMAT,
            upgrade: false,
        }
    }

    pub fn is_running(&self) -> bool {
        self.role.is_some()
    }

    pub fn is_paused(&self) -> bool {
        self.paused_until.is_some()
    }

    pub fn is_leaving(&self) -> bool {
        self.leave_started.is_some()
    }

    /// Incarnation `inc` is the one running (events for an older one are dropped).
    pub fn is_current(&self, inc: u64) -> bool {
        self.inc == inc && self.role.is_some()
    }

    pub fn member(&self) -> MemberRef {
        MemberRef { id: self.id.clone(), incarnation: self.inc }
    }

    /// A new incarnation begins at `now`: nothing read, no timer, not paused, not leaving. The caller makes
    /// its role state (which may need [`Process::member`]) and hands it to [`Process::run`].
    pub(super) fn begin(&mut self, now: Time) {
        assert!(self.role.is_none(), "restart of a running process");
        self.inc += 1;
        if std::mem::take(&mut self.upgrade) {
            self.speaks = jaque_core::format::CLUSTER_FORMAT;
        }
        self.booted = false;
        self.log = Follow { cursor: 0, sched: now };
        self.members = Follow { cursor: 0, sched: now };
        self.hb_answers = Follow { cursor: 0, sched: now };
        self.armed = None;
        self.paused_until = None;
        self.leave_started = None;
        self.loading = false;
        self.dark_since = None;
    }

    pub(super) fn run(&mut self, role: R) {
        self.role = Some(role);
    }

    /// The process is gone (crash or exit): its role state and its buffers with it.
    pub(super) fn end(&mut self) {
        self.role = None;
        self.booted = false;
        self.paused_until = None;
        self.armed = None;
        self.leave_started = None;
        self.held.clear();
        self.dark_since = None;
    }

    pub(super) fn hold(&mut self, ev: Ev) {
        self.held.push(ev);
    }

    /// Its pause ends by `now`.
    pub(super) fn pause_over(&self, now: Time) -> bool {
        self.paused_until.is_some_and(|t| t <= now)
    }

    /// Resumes: what waited in its buffers, in arrival order.
    pub(super) fn resume(&mut self) -> Vec<Ev> {
        self.paused_until = None;
        std::mem::take(&mut self.held)
    }

    /// Its clock reading at simulation time `t`.
    pub(super) fn local(&self, t: Time) -> Time {
        Time((t.0 as i64).saturating_add(self.clock).max(0) as u64)
    }

    /// The simulation time at which its clock reads `t`.
    pub(super) fn global(&self, t: Time) -> Time {
        Time((t.0 as i64).saturating_sub(self.clock).max(0) as u64)
    }

    /// Its messages to the store get through.
    pub(super) fn can_send(&self) -> bool {
        self.store_out_cut == 0
    }

    /// The store's messages reach it.
    pub(super) fn can_recv(&self) -> bool {
        self.store_in_cut == 0
    }

    /// Its messages to `peer` get through (as far as cuts go).
    pub(super) fn reaches(&self, peer: Peer) -> bool {
        !self.peer_cuts.contains_key(&peer)
    }

    /// A cut from `peer` begins.
    pub(super) fn cut_peer(&mut self, peer: Peer) {
        *self.peer_cuts.entry(peer).or_default() += 1;
    }

    /// A cut from `peer` ends (it reaches it again once every cut from it has).
    pub(super) fn uncut_peer(&mut self, peer: Peer) {
        if let Some(c) = self.peer_cuts.get_mut(&peer) {
            *c -= 1;
            if *c == 0 {
                self.peer_cuts.remove(&peer);
            }
        }
    }

    /// Every cut from its peers heals.
    pub(super) fn heal_peers(&mut self) {
        self.peer_cuts.clear();
    }

    /// Running and booted: its followers get what lands.
    pub(super) fn follows(&self) -> bool {
        self.booted && self.role.is_some()
    }
}
