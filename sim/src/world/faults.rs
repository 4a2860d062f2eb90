//! Faults: one vocabulary for every process, whatever its role — a [`Fault`] done to a process ([`Who`]), undone
//! by an [`Undo`] — the two fault ticks of the safety phase that draw them (the engines' and sinks' tick picks its
//! process among both; the notifiers' tick has its own stream and parameters), FoundationDB's swizzle-clog, and
//! the heal that starts the liveness phase. A fault that ends by itself is undone by a `FaultEnd` of the current
//! fault generation; the heal starts a new generation, so what was scheduled before it is void.
//!
//! The kinds a seed switches on are `params.rs`'s [`FaultKind`]; what a kind does depends on the process only
//! where its peers differ: a peer partition cuts two engines apart (one way or both), a sink from its database, a
//! notifier from the endpoints, and isolate-one cuts a process from the store and from all its peers.

use super::lifecycle::{by_role, Act, LifeEv, Role};
use super::process::{Peer, Who};
use super::{exp, Ev, Phase, Sim, TICK};
use crate::params::{stream, FaultKind, Stream};
use jaque_core::{Event, EventBody};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// A fault done to one process, whatever its role: what it is and how long it lasts.
#[derive(Clone, Copy, Debug)]
pub(super) enum Fault {
    /// State lost; back as a new incarnation after `back_after` ms, or not.
    Crash { back_after: Option<u64> },
    /// No inputs or timers handled for this long, then a backlog.
    Pause(u64),
    /// Cut from NATS: it reads nothing (`inbound`), its writes vanish (`outbound`).
    CutStore { inbound: bool, outbound: bool, ms: u64 },
    /// Cut from a peer.
    CutPeer { peer: Peer, ms: u64 },
    /// Its heartbeats are lost while everything else works.
    HeartbeatLoss(u64),
    /// Messages to and from it are held (delayed a lot) and released later.
    Clog(u64),
    /// A clean leave (SIGTERM); back as a new incarnation after `back_after` ms, or not.
    Leave { back_after: Option<u64> },
}

/// What ends one fault of a process.
#[derive(Clone, Copy, Debug)]
pub(super) enum Undo {
    StoreIn,
    StoreOut,
    Peer(Peer),
    HeartbeatLoss,
    Clog,
}

pub(super) struct Faults {
    pub rng: ChaCha8Rng,
    /// Faults between attempts (`Params::attempt_faults`): their own stream.
    pub attempts: ChaCha8Rng,
    /// Bumped by the heal: a `FaultEnd`, `ClogStart` or `AttemptFault` of an earlier generation is void.
    pub gen: u64,
}

impl Faults {
    pub fn new(seed: u64) -> Faults {
        Faults { rng: stream(seed, Stream::Faults, 0), attempts: stream(seed, Stream::AttemptFaults, 0), gen: 0 }
    }
}

/// The kinds a fault between attempts draws from, those of the seed's that take an engine away from its objects
/// for a while (a crash or leave that may come back, a pause, a cut from the store, lost heartbeats).
const BETWEEN_ATTEMPTS: [FaultKind; 6] = [
    FaultKind::Crash,
    FaultKind::Pause,
    FaultKind::StorePartition,
    FaultKind::IsolateOne,
    FaultKind::HeartbeatLoss,
    FaultKind::Leave,
];

impl Sim {
    // ---- the public API of scenarios and tests ----

    /// Cuts process `who` from NATS inbound (it reads nothing: log, watcher, answers), outbound (its writes
    /// vanish) or both, for `ms` or until healed.
    pub fn cut_store(&mut self, who: Who, inbound: bool, outbound: bool, ms: Option<u64>) {
        by_role!(who, |R, slot| {
            R::note(self, slot, Act::CutStore);
            let p = &mut R::slots_mut(self)[slot];
            if inbound {
                p.store_in_cut += 1;
            }
            if outbound {
                p.store_out_cut += 1;
            }
            R::links_changed(self, slot);
        });
        self.tr(|| format!("{who} cut from the store (in={inbound} out={outbound}) for {ms:?}ms"));
        if let Some(ms) = ms {
            let gen = self.faults.gen;
            if inbound {
                self.after(ms, Ev::FaultEnd { gen, who, undo: Undo::StoreIn });
            }
            if outbound {
                self.after(ms, Ev::FaultEnd { gen, who, undo: Undo::StoreOut });
            }
        }
    }

    /// Cuts process `who` from `peer` (one way: an engine's requests to another engine; a sink's to its
    /// database, whose answers on their way are lost too; a notifier's to the endpoints, likewise), for `ms` or
    /// until healed.
    pub fn cut_peer(&mut self, who: Who, peer: Peer, ms: Option<u64>) {
        by_role!(who, |R, slot| {
            R::note(self, slot, Act::CutPeer);
            R::slots_mut(self)[slot].cut_peer(peer);
        });
        self.tr(|| format!("{who} cut from {peer:?} for {ms:?}ms"));
        if let Some(ms) = ms {
            let gen = self.faults.gen;
            self.after(ms, Ev::FaultEnd { gen, who, undo: Undo::Peer(peer) });
        }
    }

    /// Every cut of process `who` heals: from NATS both ways (its followers catch up) and from its peers.
    pub fn heal_cuts(&mut self, who: Who) {
        by_role!(who, |R, slot| {
            let p = &mut R::slots_mut(self)[slot];
            p.store_out_cut = 0;
            p.heal_peers();
            if p.store_in_cut > 0 {
                p.store_in_cut = 0;
                self.catch_up::<R>(slot);
            }
            R::links_changed(self, slot);
        })
    }

    // ---- faults, and what ends them ----

    /// Does `fault` to process `who`.
    pub(super) fn fault(&mut self, who: Who, fault: Fault) {
        match fault {
            Fault::Crash { back_after } => {
                self.crash(who);
                self.back_after(who, back_after);
            }
            Fault::Pause(ms) => self.pause(who, ms),
            Fault::CutStore { inbound, outbound, ms } => self.cut_store(who, inbound, outbound, Some(ms)),
            Fault::CutPeer { peer, ms } => self.cut_peer(who, peer, Some(ms)),
            Fault::HeartbeatLoss(ms) => {
                by_role!(who, |R, slot| {
                    R::note(self, slot, Act::HeartbeatLoss);
                    R::slots_mut(self)[slot].hb_loss += 1;
                });
                self.tr(|| format!("{who} loses heartbeats for {ms}ms"));
                let gen = self.faults.gen;
                self.after(ms, Ev::FaultEnd { gen, who, undo: Undo::HeartbeatLoss });
            }
            Fault::Clog(ms) => {
                by_role!(who, |R, slot| {
                    R::note(self, slot, Act::Clog);
                    R::slots_mut(self)[slot].clog += 1;
                    R::clog_changed(self, slot);
                });
                self.tr(|| format!("{who} clogged for {ms}ms"));
                let gen = self.faults.gen;
                self.after(ms, Ev::FaultEnd { gen, who, undo: Undo::Clog });
            }
            Fault::Leave { back_after } => {
                self.leave(who);
                self.back_after(who, back_after);
            }
        }
    }

    /// A restart of `who` after a crash or a leave, if it comes back (dropped once healed: the heal decides).
    fn back_after(&mut self, who: Who, ms: Option<u64>) {
        if let Some(ms) = ms {
            self.after(ms, Ev::Life(who, LifeEv::Restart { healing: false }));
        }
    }

    /// A fault of process `who` is over.
    pub(super) fn undo(&mut self, who: Who, undo: Undo) {
        by_role!(who, |R, slot| {
            let p = &mut R::slots_mut(self)[slot];
            match undo {
                Undo::StoreIn => {
                    p.store_in_cut = p.store_in_cut.saturating_sub(1);
                    if p.store_in_cut == 0 {
                        self.catch_up::<R>(slot);
                    }
                    R::links_changed(self, slot);
                }
                Undo::StoreOut => {
                    p.store_out_cut = p.store_out_cut.saturating_sub(1);
                    R::links_changed(self, slot);
                }
                Undo::Peer(peer) => p.uncut_peer(peer),
                Undo::HeartbeatLoss => p.hb_loss = p.hb_loss.saturating_sub(1),
                Undo::Clog => {
                    p.clog = p.clog.saturating_sub(1);
                    R::clog_changed(self, slot);
                }
            }
        });
        self.tr(|| format!("{who} fault over: {undo:?}"));
    }

    /// Swizzle: engine `n`'s turn to be clogged.
    pub(super) fn clog_start(&mut self, gen: u64, n: usize) {
        if gen == self.faults.gen {
            self.nodes[n].clog += 1;
            self.note_fitness(n);
        }
    }

    // ---- the ticks ----

    /// The engines' and sinks' fault tick: one kind of those the seed switched on, at any engine or sink, for at
    /// least `fault_min` (with no sinks, the draws of before sinks).
    pub(super) fn fault_tick(&mut self) {
        if self.phase != Phase::Safety {
            return;
        }
        let next = exp(&mut self.faults.rng, self.params.fault_every_ms);
        self.after(next, Ev::FaultTick);
        if self.params.swizzle && self.faults.rng.random_bool(0.2) {
            self.swizzle();
            return;
        }
        let p = &self.params;
        let kind = p.faults[self.faults.rng.random_range(0..p.faults.len())];
        let n = self.faults.rng.random_range(0..self.nodes.len() + self.sinks.len());
        let d = self.faults.rng.random_range(p.fault_min_ms..=p.fault_max_ms.max(p.fault_min_ms));
        self.stats.faults += 1;
        self.h(kind as u64);
        let who = if n < self.nodes.len() { Who::Engine(n) } else { Who::Sink(n - self.nodes.len()) };
        if let Who::Sink(_) = who {
            self.sinks.counters.faults += 1;
        }
        let rng = &mut self.faults.rng;
        let (min, pause_max) = (self.params.fault_min_ms, self.params.pause_max_ms);
        match kind {
            FaultKind::Crash => {
                let back_after = rng.random_bool(0.7).then_some(d);
                self.fault(who, Fault::Crash { back_after });
            }
            FaultKind::Pause => {
                let ms = rng.random_range(min..=pause_max.max(min));
                self.fault(who, Fault::Pause(ms));
            }
            FaultKind::StorePartition => self.fault(who, Fault::CutStore { inbound: true, outbound: true, ms: d }),
            FaultKind::StoreOneWay => {
                let inbound = rng.random_bool(0.5);
                self.fault(who, Fault::CutStore { inbound, outbound: !inbound, ms: d });
            }
            FaultKind::PeerPartition => match who {
                Who::Engine(n) if self.nodes.len() > 1 => {
                    let m = (n + rng.random_range(1..self.nodes.len())) % self.nodes.len();
                    self.tr(|| format!("e{} and e{} partitioned for {d}ms", n + 1, m + 1));
                    self.fault(who, Fault::CutPeer { peer: Peer::Engine(m), ms: d });
                    if self.faults.rng.random_bool(0.5) {
                        self.fault(Who::Engine(m), Fault::CutPeer { peer: Peer::Engine(n), ms: d });
                    }
                }
                Who::Sink(_) => self.fault(who, Fault::CutPeer { peer: Peer::Database, ms: d }),
                _ => {}
            },
            FaultKind::IsolateOne => {
                self.fault(who, Fault::CutStore { inbound: true, outbound: true, ms: d });
                match who {
                    Who::Engine(n) => {
                        for m in (0..self.nodes.len()).filter(|m| *m != n) {
                            self.fault(who, Fault::CutPeer { peer: Peer::Engine(m), ms: d });
                            self.fault(Who::Engine(m), Fault::CutPeer { peer: Peer::Engine(n), ms: d });
                        }
                    }
                    _ => self.fault(who, Fault::CutPeer { peer: Peer::Database, ms: d }),
                }
            }
            FaultKind::HeartbeatLoss => self.fault(who, Fault::HeartbeatLoss(d)),
            FaultKind::Clog => self.fault(who, Fault::Clog(d)),
            FaultKind::Leave => {
                let back_after = rng.random_bool(0.7).then_some(d);
                self.fault(who, Fault::Leave { back_after });
            }
        }
    }

    /// The notifiers' fault tick (their own stream, kinds and timings; every draw made before the fault).
    pub(super) fn notifier_fault_tick(&mut self) {
        if self.phase != Phase::Safety {
            return;
        }
        let np = &self.params.notify;
        let (every, min, max, pause_max) = (np.fault_every_ms, np.fault_min_ms, np.fault_max_ms, np.pause_max_ms);
        let r = &mut self.notify.rng;
        let next = exp(r, every);
        let kind = np.faults[r.random_range(0..np.faults.len())];
        let who = Who::Notifier(r.random_range(0..self.notify.slots.len()));
        let d = r.random_range(min..=max.max(min));
        let again = r.random_bool(0.7).then_some(d);
        let one_way_in = r.random_bool(0.5);
        let pause = r.random_range(min..=pause_max.max(min));
        self.after(next, Ev::Notify(super::notifier::NEv::FaultTick));
        // Hashed by its place in the notifiers' kinds (the codes of when they had a fault type of their own).
        let code = FaultKind::NOTIFIER.iter().position(|k| *k == kind).expect("a notifier's kind") as u64;
        self.h(200 + code);
        let fault = match kind {
            FaultKind::Crash => Fault::Crash { back_after: again },
            FaultKind::Pause => Fault::Pause(pause),
            FaultKind::StorePartition => Fault::CutStore { inbound: true, outbound: true, ms: d },
            FaultKind::StoreOneWay => Fault::CutStore { inbound: one_way_in, outbound: !one_way_in, ms: d },
            FaultKind::HeartbeatLoss => Fault::HeartbeatLoss(d),
            FaultKind::Clog => Fault::Clog(d),
            FaultKind::Leave => Fault::Leave { back_after: again },
            FaultKind::PeerPartition => Fault::CutPeer { peer: Peer::Endpoints, ms: d },
            FaultKind::IsolateOne => unreachable!("not a notifier's fault kind"),
        };
        self.fault(who, fault);
    }

    /// FoundationDB's swizzle-clog: clog a random subset of engines one by one, then unclog them in another
    /// random order.
    fn swizzle(&mut self) {
        self.stats.faults += 1;
        let mut order: Vec<usize> = (0..self.nodes.len()).filter(|_| self.faults.rng.random_bool(0.5)).collect();
        let gen = self.faults.gen;
        let mut t = 0;
        let mut starts = Vec::new();
        for &n in &order {
            t += self.faults.rng.random_range(50..=500);
            starts.push((t, n));
        }
        // Unclog in a shuffled order, after the last one is clogged.
        for i in (1..order.len()).rev() {
            let j = self.faults.rng.random_range(0..=i);
            order.swap(i, j);
        }
        for (at, n) in starts {
            self.after(at, Ev::ClogStart { gen, node: n });
        }
        for n in order {
            t += self.faults.rng.random_range(200..=2_000);
            self.after(t, Ev::FaultEnd { gen, who: Who::Engine(n), undo: Undo::Clog });
        }
        self.tr(|| "swizzle-clog".into());
    }

    // ---- faults between attempts ----

    /// Entry `seq`, `ev`, was just read by the oracle: if it is an accepted soft attempt, now and then
    /// (`Params::attempt_faults`) its writer gets a fault at a moment before the next attempt is due, so the count
    /// goes on at another owner (or at the same one, back in time).
    pub(super) fn fault_between_attempts(&mut self, seq: u64, ev: &Event) {
        if self.phase != Phase::Safety || self.params.attempt_faults <= 0.0 {
            return;
        }
        if !matches!(ev.body, EventBody::Soft { attempt, .. } if attempt > 0) || !self.oracle.is_accepted(seq) {
            return;
        }
        let Some(view) = self.oracle.reader.object(&ev.object) else { return };
        let retry_ms = u64::try_from(view.rules(self.oracle.active_format()).retry_interval.as_millis()).unwrap_or(1);
        let engine = ev.writer.id.as_str().strip_prefix('e').and_then(|n| n.parse::<usize>().ok());
        let Some(n) = engine.and_then(|n| n.checked_sub(1)).filter(|n| *n < self.nodes.len()) else { return };
        let p = &self.params;
        let kinds: Vec<FaultKind> = BETWEEN_ATTEMPTS.into_iter().filter(|k| p.faults.contains(k)).collect();
        let r = &mut self.faults.attempts;
        if kinds.is_empty() || !r.random_bool(p.attempt_faults) {
            return;
        }
        let at = r.random_range(0..retry_ms.max(1));
        let d = r.random_range(p.fault_min_ms..=p.fault_max_ms.max(p.fault_min_ms));
        let again = r.random_bool(0.7).then_some(d);
        let fault = match kinds[r.random_range(0..kinds.len())] {
            FaultKind::Crash => Fault::Crash { back_after: again },
            FaultKind::Pause => Fault::Pause(r.random_range(p.fault_min_ms..=p.pause_max_ms.max(p.fault_min_ms))),
            FaultKind::StorePartition | FaultKind::IsolateOne => {
                Fault::CutStore { inbound: true, outbound: true, ms: d }
            }
            FaultKind::HeartbeatLoss => Fault::HeartbeatLoss(d),
            _ => Fault::Leave { back_after: again },
        };
        let (gen, inc) = (self.faults.gen, ev.writer.incarnation);
        self.after(at, Ev::AttemptFault { gen, node: n, inc, fault });
    }

    /// A fault between attempts is due: done if the incarnation that wrote the attempt still runs and the heal
    /// has not come.
    pub(super) fn attempt_fault(&mut self, gen: u64, n: usize, inc: u64, fault: Fault) {
        if gen != self.faults.gen || !self.nodes[n].is_current(inc) {
            return;
        }
        self.oracle.alerts.stats.attempt_faults += 1;
        self.stats.faults += 1;
        self.tr(|| format!("fault between attempts at e{}: {fault:?}", n + 1));
        self.fault(Who::Engine(n), fault);
    }

    // ---- the heal ----

    /// The end of the safety phase: every fault heals, the workload stops, some processes that are down come
    /// back (at least one engine, one sink and one notifier run).
    pub(super) fn heal(&mut self) {
        if self.nodes.iter().any(|n| n.is_leaving()) {
            self.checks.drain_allowance_ms = self.drain_limit_ms() + 1_000;
        }
        self.phase = Phase::Liveness;
        self.checks.healed = Some(self.now);
        self.faults.gen += 1;
        self.heal_pool();
        self.tr(|| "heal: faults off, workload off".into());
        self.heal_role::<super::engine::EngineRole>();
        self.heal_sinks();
        self.heal_notifiers();
        self.after(TICK, Ev::LivenessCheck);
    }
}
