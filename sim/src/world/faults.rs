//! Faults: the fault tick of the safety phase (one kind of those the seed switched on, at a random process,
//! for at least `fault_min`), FoundationDB's swizzle-clog, what ends each fault, and the heal that starts the
//! liveness phase. A fault that ends by itself is undone by a `FaultEnd` of the current fault generation;
//! the heal starts a new generation, so what was scheduled before it is void.

use super::{exp, Ev, Phase, Sim, TICK};
use crate::params::{stream, FaultKind, Stream};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// What ends one fault.
#[derive(Clone, Copy, Debug)]
pub(super) enum Undo {
    StoreIn(usize),
    StoreOut(usize),
    Pair(usize, usize),
    HeartbeatLoss(usize),
    Clog(usize),
}

pub(super) struct Faults {
    pub rng: ChaCha8Rng,
    /// Bumped by the heal: a `FaultEnd` or `ClogStart` of an earlier generation is void.
    pub gen: u64,
}

impl Faults {
    pub fn new(seed: u64) -> Faults {
        Faults { rng: stream(seed, Stream::Faults, 0), gen: 0 }
    }
}

impl Sim {
    /// Cuts process `n` from the store inbound (it reads nothing), outbound (its writes vanish) or both, for
    /// `ms` or until healed.
    pub fn cut_store(&mut self, n: usize, inbound: bool, outbound: bool, ms: Option<u64>) {
        if inbound {
            self.nodes[n].store_in_cut += 1;
        }
        if outbound {
            self.nodes[n].store_out_cut += 1;
        }
        self.note_dark(n);
        self.tr(|| format!("e{} cut from the store (in={inbound} out={outbound}) for {ms:?}ms", n + 1));
        if let Some(ms) = ms {
            let gen = self.faults.gen;
            if inbound {
                self.after(ms, Ev::FaultEnd { gen, undo: Undo::StoreIn(n) });
            }
            if outbound {
                self.after(ms, Ev::FaultEnd { gen, undo: Undo::StoreOut(n) });
            }
        }
    }

    pub fn heal_store(&mut self, n: usize) {
        self.nodes[n].store_out_cut = 0;
        if self.nodes[n].store_in_cut > 0 {
            self.nodes[n].store_in_cut = 0;
            self.catch_up(n);
        }
        self.note_dark(n);
    }

    fn cut_pair(&mut self, a: usize, b: usize, ms: u64) {
        self.net.cut(a, b);
        let gen = self.faults.gen;
        self.after(ms, Ev::FaultEnd { gen, undo: Undo::Pair(a, b) });
    }

    pub(super) fn undo(&mut self, undo: Undo) {
        match undo {
            Undo::StoreIn(n) => {
                self.nodes[n].store_in_cut = self.nodes[n].store_in_cut.saturating_sub(1);
                if self.nodes[n].store_in_cut == 0 {
                    self.catch_up(n);
                }
                self.note_dark(n);
            }
            Undo::StoreOut(n) => {
                self.nodes[n].store_out_cut = self.nodes[n].store_out_cut.saturating_sub(1);
                self.note_dark(n);
            }
            Undo::Pair(a, b) => self.net.uncut(a, b),
            Undo::HeartbeatLoss(n) => self.nodes[n].hb_loss = self.nodes[n].hb_loss.saturating_sub(1),
            Undo::Clog(n) => {
                self.nodes[n].clog = self.nodes[n].clog.saturating_sub(1);
                self.note_fitness(n);
            }
        }
        self.tr(|| format!("fault over: {undo:?}"));
    }

    pub(super) fn clog_start(&mut self, gen: u64, n: usize) {
        if gen == self.faults.gen {
            self.nodes[n].clog += 1;
            self.note_fitness(n);
        }
    }

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
        // Any process: an engine or a sink (with no sinks, the draw of before).
        let n = self.faults.rng.random_range(0..self.nodes.len() + self.sinks.len());
        let d = self.faults.rng.random_range(p.fault_min_ms..=p.fault_max_ms.max(p.fault_min_ms));
        let gen = self.faults.gen;
        self.stats.faults += 1;
        self.h(kind as u64);
        if n >= self.nodes.len() {
            return self.sink_fault(kind, n - self.nodes.len(), d);
        }
        match kind {
            FaultKind::Crash => {
                self.crash(n);
                if self.faults.rng.random_bool(0.7) {
                    self.after(d, Ev::Restart { node: n, healing: false });
                }
            }
            FaultKind::Pause => {
                let (min, max) = (self.params.fault_min_ms, self.params.pause_max_ms);
                let ms = self.faults.rng.random_range(min..=max.max(min));
                self.pause(n, ms);
            }
            FaultKind::StorePartition => self.cut_store(n, true, true, Some(d)),
            FaultKind::StoreOneWay => {
                let inbound = self.faults.rng.random_bool(0.5);
                self.cut_store(n, inbound, !inbound, Some(d));
            }
            FaultKind::EnginePartition => {
                if self.nodes.len() > 1 {
                    let m = (n + self.faults.rng.random_range(1..self.nodes.len())) % self.nodes.len();
                    self.tr(|| format!("e{} and e{} partitioned for {d}ms", n + 1, m + 1));
                    self.cut_pair(n, m, d);
                    if self.faults.rng.random_bool(0.5) {
                        self.cut_pair(m, n, d);
                    }
                }
            }
            FaultKind::IsolateOne => {
                self.cut_store(n, true, true, Some(d));
                for m in 0..self.nodes.len() {
                    if m != n {
                        self.cut_pair(n, m, d);
                        self.cut_pair(m, n, d);
                    }
                }
            }
            FaultKind::HeartbeatLoss => {
                self.nodes[n].hb_loss += 1;
                self.tr(|| format!("e{} loses heartbeats for {d}ms", n + 1));
                self.after(d, Ev::FaultEnd { gen, undo: Undo::HeartbeatLoss(n) });
            }
            FaultKind::Clog => {
                self.nodes[n].clog += 1;
                self.note_fitness(n);
                self.tr(|| format!("e{} clogged for {d}ms", n + 1));
                self.after(d, Ev::FaultEnd { gen, undo: Undo::Clog(n) });
            }
            FaultKind::Leave => {
                self.leave(n);
                if self.faults.rng.random_bool(0.7) {
                    self.after(d, Ev::Restart { node: n, healing: false });
                }
            }
        }
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
            self.after(t, Ev::FaultEnd { gen, undo: Undo::Clog(n) });
        }
        self.tr(|| "swizzle-clog".into());
    }

    /// The end of the safety phase: every fault heals, the workload stops, some dead engines (and notifiers)
    /// come back.
    pub(super) fn heal(&mut self) {
        if self.nodes.iter().any(|n| n.is_leaving()) {
            self.checks.drain_allowance_ms = self.drain_limit_ms() + 1_000;
        }
        self.phase = Phase::Liveness;
        self.checks.healed = Some(self.now);
        self.faults.gen += 1;
        self.net.heal();
        self.heal_pool();
        self.tr(|| "heal: faults off, workload off".into());
        for n in 0..self.nodes.len() {
            self.nodes[n].hb_loss = 0;
            self.nodes[n].clog = 0;
            self.heal_store(n);
            self.note_fitness(n);
            if self.nodes[n].is_paused() {
                self.resume(n);
            }
        }
        let mut up = self.nodes.iter().filter(|n| n.is_running() && !n.is_leaving()).count();
        for n in 0..self.nodes.len() {
            if !self.nodes[n].is_running() && (up == 0 || self.faults.rng.random_bool(self.params.restart_at_heal)) {
                self.restart(n);
                up += 1;
            }
        }
        if up == 0 {
            // Every engine is leaving: bring the first back once it has exited.
            self.after(1_000, Ev::Restart { node: 0, healing: true });
        }
        self.heal_sinks();
        self.heal_notifiers();
        self.after(TICK, Ev::LivenessCheck);
    }
}
