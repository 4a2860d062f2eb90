//! P10's storm replayed through core alone, for profiling the engine's share of it: one engine owning 50,000
//! objects checked every 10 s, every output answered at once (a check's result, an append read back as the next
//! log entry, a snapshot written), each event encoded and decoded as the shell does and each snapshot encoded.
//! 40 s of ok results, then 35 s of critical ones; prints the time, checks dispatched, events and snapshots of each.
//!
//!     cargo build --release --example storm_replay -p jaque-core
//!     MAX=1 target/release/examples/storm_replay            # max_attempts 1 (unset: the default rules)
//!     MAX=1 valgrind --tool=callgrind --toggle-collect='*storm_phase*' target/release/examples/storm_replay
//!
//! `PERMUTE=1` defines the objects in an order unrelated to their ids (it matters to builds whose slots follow
//! the put's time, before spread schedules). docs/benchmarks.md (P9 and P10 before and after) says what it found.

use jaque_core::engine::*;
use jaque_core::follow::Life;
use jaque_core::follow::LifeOutput;
use jaque_core::membership::MembershipOutput;
use jaque_core::model::*;
use jaque_core::time::Time;
use jaque_core::wire;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

const N: usize = 50_000;

/// The engine, the log position it read to, the replay's clock (ms) and what it counted.
struct Replay {
    e: Engine,
    seq: u64,
    now: u64,
    critical: bool,
    transitions: u64,
    appends: u64,
    snap_bytes: usize,
    snaps: u64,
    dispatches: u64,
}

impl Replay {
    /// Answers every output, and the inputs that answers make, until the engine has nothing more to say.
    fn pump(&mut self) {
        let mut inputs: VecDeque<Input> = VecDeque::new();
        loop {
            while let Some(o) = self.e.poll_output() {
                match o {
                    Output::Dispatch(w) => {
                        self.dispatches += 1;
                        let (state, output) = if self.critical {
                            (State::Critical, "connect 127.0.0.1:40000: Connection refused (os error 111)".to_string())
                        } else {
                            (State::Ok, "connected to 127.0.0.1:40000".to_string())
                        };
                        inputs.push_back(Input::CheckResult(CheckResult {
                            check_id: w.check_id,
                            object: w.object,
                            state,
                            output,
                        }));
                    }
                    Output::Append(ev) => {
                        self.appends += 1;
                        if matches!(ev.body, EventBody::Transition { .. }) {
                            self.transitions += 1;
                        }
                        let bytes = wire::encode_log_entry(&LogEntry::Event(ev));
                        let entry = wire::decode_log_entry(&bytes).unwrap();
                        self.seq += 1;
                        inputs.push_back(Input::Life(Life::Log { seq: self.seq, entry }));
                    }
                    Output::WriteSnapshot(s) => {
                        let b = wire::encode_snapshot(&s);
                        self.snap_bytes += b.len();
                        self.snaps += 1;
                        inputs.push_back(Input::SnapshotWritten { position: s.position, result: Ok(()) });
                    }
                    Output::Life(LifeOutput::Membership(MembershipOutput::PutHeartbeat { .. })) => {
                        inputs.push_back(Input::Life(Life::HeartbeatWritten { ok: true }));
                    }
                    _ => {}
                }
            }
            match inputs.pop_front() {
                Some(i) => self.e.handle(Time(self.now), i),
                None => break,
            }
        }
    }
    fn run_until(&mut self, until: u64) {
        while self.now < until {
            self.now += 10;
            while let Some((t, _)) = self.e.poll_timeout() {
                if t.0 > self.now {
                    break;
                }
                self.e.handle_timeout(Time(self.now));
                self.pump();
            }
            self.pump();
        }
    }
}

#[inline(never)]
fn storm_phase(h: &mut Replay, until: u64) {
    h.run_until(until);
}

fn main() {
    let me = MemberRef { id: MemberId::new("e1").unwrap(), incarnation: 1 };
    let def = ObjectDef {
        probe: Probe::Tcp { addr: "127.0.0.1:40000".into() },
        interval_ms: 10_000,
        timeout_ms: 1000,
        max_attempts: std::env::var("MAX").ok().map(|s| s.parse().unwrap()),
        ..ObjectDef::UNSET
    };
    let permute = std::env::var("PERMUTE").is_ok();
    let mut e = Engine::new(EngineConfig::new(me.clone(), Duration::from_secs(9)));
    e.handle(Time(0), Input::Life(Life::Start));
    e.handle(Time(0), Input::Life(Life::CaughtUp));
    let rec = EpochRecord {
        epoch: 1,
        members: vec![me.clone()],
        members_rev: 1,
        idempotency_window_ms: None,
        format: jaque_core::format::CLUSTER_FORMAT,
    };
    e.handle(Time(0), Input::Life(Life::Log { seq: 1, entry: LogEntry::Epoch(rec) }));
    let mut seq = 1;
    for i in 0..N {
        let put = Event {
            object: ObjectId::new(format!("object-{i:06}")).unwrap(),
            epoch: 1,
            writer: me.clone(),
            at: Time(if permute { (i as u64 * 7919) % N as u64 } else { i as u64 } * 10_000 / N as u64),
            command_id: None,
            body: EventBody::Put { def: def.clone() },
        };
        seq += 1;
        e.handle(Time(10_000), Input::Life(Life::Log { seq, entry: LogEntry::Event(put) }));
    }
    let mut h = Replay {
        e,
        seq,
        now: 10_000,
        critical: false,
        transitions: 0,
        appends: 0,
        snap_bytes: 0,
        snaps: 0,
        dispatches: 0,
    };
    h.pump();
    let t = Instant::now();
    h.run_until(50_000);
    eprintln!(
        "warm: {:?}, {} transitions, {} appends, {} snapshots {} bytes",
        t.elapsed(),
        h.transitions,
        h.appends,
        h.snaps,
        h.snap_bytes
    );
    h.critical = true;
    let (tr, ap, sn, sb, di) = (h.transitions, h.appends, h.snaps, h.snap_bytes, h.dispatches);
    let t = Instant::now();
    storm_phase(&mut h, 85_000);
    eprintln!(
        "storm: {} dispatches, {:?}, {} transitions, {} appends, {} snapshots {} bytes",
        h.dispatches - di,
        t.elapsed(),
        h.transitions - tr,
        h.appends - ap,
        h.snaps - sn,
        h.snap_bytes - sb
    );
}
