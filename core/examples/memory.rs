//! What each role's core holds per object, measured in-process: the log of `jaque-bench p8m` (a put per object
//! written by a departed loader) fed to a `LogReader` (a ui), an `Engine` that takes every object over, a
//! `Notifier` with one endpoint and no delivery records, and a `Sink` whose store is empty, each driven as the
//! shell drives it. A counting allocator gives the heap each holds once it is done (live) and the most it held
//! on the way (peak), in bytes per object, both as requested and as glibc's malloc lays it out (8 bytes of
//! header, 16-byte steps, 32 at least): the resident figure of `p8m` is near the latter, plus what the peak left
//! behind in the allocator and the shell's own buffers.
//!
//! Run: `cargo run --release -p jaque-core --example memory [objects]` (default 200000).

use jaque_core::engine::{Engine, EngineConfig, Input as EInput, Output as EOutput};
use jaque_core::membership::{MemberChange, MemberObservation, MembershipOutput};
use jaque_core::notifier::{Endpoint, Input as NInput, Notifier, NotifierConfig, Output as NOutput};
use jaque_core::sink::{Input as SInput, Output as SOutput, Sink, SinkConfig};
use jaque_core::{
    Bucket, EpochRecord, Event, EventBody, LogEntry, LogReader, MemberId, MemberRef, ObjectDef, ObjectId, Probe, Time,
};
use jaque_core::{Life, LifeOutput};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static LIVE_CHUNKS: AtomicUsize = AtomicUsize::new(0);
static PEAK_CHUNKS: AtomicUsize = AtomicUsize::new(0);

/// What glibc's malloc takes for a request of `size` bytes (below its mmap threshold).
fn chunk(size: usize) -> usize {
    ((size + 8 + 15) & !15).max(32)
}

fn add(size: usize) {
    let live = LIVE.fetch_add(size, Relaxed) + size;
    PEAK.fetch_max(live, Relaxed);
    let c = chunk(size);
    let chunks = LIVE_CHUNKS.fetch_add(c, Relaxed) + c;
    PEAK_CHUNKS.fetch_max(chunks, Relaxed);
}

fn sub(size: usize) {
    LIVE.fetch_sub(size, Relaxed);
    LIVE_CHUNKS.fetch_sub(chunk(size), Relaxed);
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        add(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        sub(layout.size());
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        sub(layout.size());
        add(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// Heap (requested, chunks) now, and resets the peak to it.
fn mark() -> (usize, usize) {
    let (l, c) = (LIVE.load(Relaxed), LIVE_CHUNKS.load(Relaxed));
    PEAK.store(l, Relaxed);
    PEAK_CHUNKS.store(c, Relaxed);
    (l, c)
}

fn report(role: &str, n: usize, base: (usize, usize)) {
    let per = |v: usize, b: usize| v.saturating_sub(b) as f64 / n as f64;
    println!(
        "| {role} | {:.0} | {:.0} | {:.0} | {:.0} |",
        per(LIVE.load(Relaxed), base.0),
        per(LIVE_CHUNKS.load(Relaxed), base.1),
        per(PEAK.load(Relaxed), base.0),
        per(PEAK_CHUNKS.load(Relaxed), base.1),
    );
}

fn loader() -> MemberRef {
    MemberRef { id: MemberId::new("loader").unwrap(), incarnation: 1 }
}

/// The log of `p8m`: an epoch record naming the loader at position 1, then a put per object.
fn entry(seq: u64) -> LogEntry {
    if seq == 1 {
        return LogEntry::Epoch(EpochRecord {
            epoch: 1,
            members: vec![loader()],
            members_rev: 0,
            idempotency_window_ms: None,
            format: 1,
        });
    }
    let def = ObjectDef {
        probe: Probe::Tcp { addr: "127.0.0.1:9".into() },
        interval_ms: 86_400_000,
        timeout_ms: 1000,
        ..ObjectDef::UNSET
    };
    LogEntry::Event(Event {
        object: ObjectId::new(format!("object-{:06}", seq - 2)).unwrap(),
        epoch: 1,
        writer: loader(),
        at: Time(1_000),
        command_id: None,
        body: EventBody::Put { def },
    })
}

const NOW: Time = Time(3_600_000);

fn me(id: &str) -> MemberRef {
    MemberRef { id: MemberId::new(id).unwrap(), incarnation: 7 }
}

fn up(bucket: Bucket, m: &MemberRef, rev: u64) -> MemberObservation {
    MemberObservation::new(bucket, rev, MemberChange::Up(m.clone()))
}

fn ui(n: usize) {
    let base = mark();
    let mut r = LogReader::new();
    for seq in 1..=n as u64 + 1 {
        r.read(seq, &entry(seq));
    }
    report("ui (LogReader)", n, base);
    // What an engine's snapshot adds while it is written: the copy handed to the encoder and the encoded bytes.
    let base_snapshot = mark();
    let snapshot = r.snapshot();
    let bytes = jaque_core::wire::encode_snapshot(&snapshot);
    drop(snapshot);
    SNAPSHOT_BYTES.store(bytes.len(), Relaxed);
    drop(bytes);
    report("a snapshot of that reader, taken and encoded (on top of it)", n, base_snapshot);
    drop(r);
}

static SNAPSHOT_BYTES: AtomicUsize = AtomicUsize::new(0);

fn engine(n: usize) {
    let base = mark();
    let m = me("e1");
    let mut e = Engine::new(EngineConfig::new(m.clone(), Duration::from_secs(3)));
    e.handle(NOW, EInput::Life(Life::Start));
    e.handle(NOW, EInput::Life(Life::Member(up(Bucket::Engine, &m, 1))));
    let last = n as u64 + 1;
    for seq in 1..=last {
        e.handle(NOW, EInput::Life(Life::Log { seq, entry: entry(seq) }));
    }
    e.handle(NOW, EInput::Life(Life::CaughtUp));
    let mut seq = last;
    while let Some(out) = e.poll_output() {
        if let EOutput::ProposeEpoch { record, .. } = out {
            seq += 1;
            e.handle(NOW, EInput::Life(Life::Log { seq, entry: LogEntry::Epoch(record) }));
        }
    }
    assert_eq!(e.counters.epochs_proposed, 1);
    assert!(e.next_check(&ObjectId::new("object-000000").unwrap()).is_some(), "the engine owns the objects");
    report("engine (Engine, its reader included)", n, base);
    drop(e);
}

fn notifier(n: usize) {
    let base = mark();
    let m = me("n1");
    let endpoint = Endpoint::new("http://127.0.0.1:9/hook");
    let mut x = Notifier::new(NotifierConfig::new(m.clone(), Duration::from_secs(3), vec![endpoint.clone()]));
    x.handle(NOW, NInput::Life(Life::Start));
    x.handle(NOW, NInput::Life(Life::Member(up(Bucket::Notifier, &m, 1))));
    let last = n as u64 + 1;
    for seq in 1..=last {
        x.handle(NOW, NInput::Life(Life::Log { seq, entry: entry(seq) }));
    }
    x.handle(NOW, NInput::Life(Life::CaughtUp));
    let mut answered = 0;
    while let Some(out) = x.poll_output() {
        match out {
            NOutput::Life(LifeOutput::Membership(MembershipOutput::PutHeartbeat { .. })) => {
                x.handle(NOW, NInput::Life(Life::HeartbeatWritten { ok: true }))
            }
            NOutput::ReadStarts { propose, .. } => {
                x.handle(NOW, NInput::Starts { result: Ok(vec![(endpoint.id, propose)]) })
            }
            NOutput::ReadProgress { token, objects } => {
                answered += objects.len();
                drop(objects);
                x.handle(NOW, NInput::Progress { token, result: Ok(Vec::new()) });
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(answered, n, "one progress query for every object");
    x.check_invariants().unwrap();
    report("notifier (Notifier, one endpoint)", n, base);
    drop(x);
}

fn sink(n: usize) {
    let base = mark();
    let m = me("s1");
    let mut s = Sink::new(SinkConfig::new(m.clone(), Duration::from_secs(3)));
    s.handle(NOW, SInput::Life(Life::Start));
    s.handle(NOW, SInput::Life(Life::Member(up(Bucket::Sink, &m, 1))));
    let last = n as u64 + 1;
    for seq in 1..=last {
        s.handle(NOW, SInput::Life(Life::Log { seq, entry: entry(seq) }));
    }
    s.handle(NOW, SInput::Life(Life::CaughtUp));
    let mut written = 0;
    while let Some(out) = s.poll_output() {
        match out {
            SOutput::Life(LifeOutput::Membership(_)) => {}
            SOutput::QueryProgress { token, .. } => s.handle(NOW, SInput::Progress { token, result: Ok(Vec::new()) }),
            SOutput::Replay { token, from, to } => {
                let entries = (from..=to.min(last)).map(|seq| (seq, entry(seq))).collect();
                s.handle(NOW, SInput::Replayed { token, result: Ok((to, entries)) });
            }
            SOutput::Write(batch) => {
                written += batch.events.len();
                s.handle(NOW, SInput::Written { batch: batch.id, result: Ok(()) });
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(written, n, "every put written");
    assert_eq!(s.lag(), 0);
    report("sink (Sink, store empty)", n, base);
    drop(s);
}

fn main() {
    let n: usize = std::env::args().nth(1).map(|a| a.parse().expect("a number of objects")).unwrap_or(200_000);
    println!("Heap per object, {n} objects: bytes requested and in glibc chunks, once done (live) and at most (peak).");
    println!();
    println!("| core | live | live, chunks | peak | peak, chunks |");
    println!("|---|---|---|---|---|");
    ui(n);
    engine(n);
    notifier(n);
    sink(n);
    println!();
    println!(
        "An encoded snapshot of the ui's reader: {:.0} bytes per object.",
        SNAPSHOT_BYTES.load(Relaxed) as f64 / n as f64
    );
}
