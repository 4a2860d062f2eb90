//! The calculation behind docs/scaling.md: what bounds one jaque installation (one log), from figures measured
//! by `scripts/bench.sh` (P5, P8, P9, P10: the constants below, each named by the row it comes from), and what K
//! independent logs would change, with objects placed on logs by the same HRW the engines use
//! (`jaque_core::hrw`), simulated here over a million object ids.
//!
//! Run: `cargo run --release -p jaque-core --example scaling` (a few seconds). The doc quotes its output.

use jaque_core::log::{ObjectView, TransitionInfo};
use jaque_core::{hrw, ObjectDef, ObjectId, Probe, Time};
use std::mem::size_of;

/// P8 (1M objects): resident bytes per object of each process that folds the log.
const BYTES_PER_OBJECT: [(&str, f64); 4] =
    [("engine (engine,ui)", 411.0), ("-target ui", 286.0), ("sink", 314.0), ("notifier", 325.0)];
/// P9: checks one engine and one worker complete per CPU second between them, tcp probes (-queue nats, 10k objects
/// every second; the lowest of 2026-12-06's runs, on the host whose connects cost more).
const CHECKS_PER_CPU_SECOND: f64 = 21_000.0;
/// P10: events of a transition's size one bare client appends to one stream per second, acks in windows of 1000.
const APPENDS_PER_SECOND: f64 = 125_000.0;
/// P9: checks per second where one engine and one worker saturate on this 2-core machine (-queue nats, 30k due;
/// the lowest of 2026-12-06's runs): a storm's transitions cannot come faster than the checks that find them.
const STORM_TRANSITIONS_PER_SECOND: f64 = 27_000.0;
/// P5: a reader's fence verdict per event, hashing the object id (ns).
const VERDICT_NS: f64 = 36.5;
/// docs/design.md §3: each member writes its heartbeat every ttl/3.
const TTL_SECONDS: f64 = 10.0;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

fn main() {
    println!("## One log: the bounds");
    println!();
    println!("| bound | formula | value |");
    println!("|---|---|---|");
    for (who, b) in BYTES_PER_OBJECT {
        println!("| objects one {who} holds in 8 GiB | 8 GiB / {b:.0} B | {:.1} M |", 8.0 * GIB / b / 1e6);
    }
    for (objects, interval) in [(100_000.0, 60.0), (1_000_000.0, 60.0), (1_000_000.0, 10.0)] {
        let rate = objects / interval;
        println!(
            "| CPU for {:.1}M objects every {interval:.0} s (engine + worker) | {rate:.0} checks/s / {CHECKS_PER_CPU_SECOND:.0} per CPU s | {:.1} cores |",
            objects / 1e6,
            rate / CHECKS_PER_CPU_SECOND
        );
    }
    for objects in [50_000.0, 1_000_000.0] {
        println!(
            "| a storm of {:.2}M transitions into one stream: at the bare append rate / at the checks one engine and worker find them (P9 saturation) | N / {APPENDS_PER_SECOND:.0}/s, N / {STORM_TRANSITIONS_PER_SECOND:.0}/s | {:.1} s / {:.1} s |",
            objects / 1e6,
            objects / APPENDS_PER_SECOND,
            objects / STORM_TRANSITIONS_PER_SECOND
        );
    }
    println!(
        "| a reader's CPU for the fence alone at the bare append rate | {APPENDS_PER_SECOND:.0}/s x {VERDICT_NS} ns | {:.1}% of a core |",
        APPENDS_PER_SECOND * VERDICT_NS / 1e9 * 100.0
    );
    for readers in [4.0, 16.0] {
        println!(
            "| messages the server delivers per second with {readers:.0} log readers at that rate | appends x (1 + readers) | {:.0} |",
            APPENDS_PER_SECOND * (1.0 + readers)
        );
    }
    for members in [10.0, 100.0, 1000.0] {
        let writes = members * 3.0 / TTL_SECONDS;
        println!(
            "| heartbeat writes per second, {members:.0} members, ttl {TTL_SECONDS:.0} s | members x 3 / ttl | {writes:.0}/s ({:.2}% of one stream's appends) |",
            writes / APPENDS_PER_SECOND * 100.0
        );
    }
    println!();

    // What one object costs a reader: the inline sizes of what it keeps per object (heap blocks come on top: the
    // object id's bytes, the probe's address, a transition's output and writer).
    println!("## One object in a reader");
    println!();
    println!("| part | bytes |");
    println!("|---|---|");
    println!("| `ObjectView` inline (the value of the reader's map) | {} |", size_of::<ObjectView>());
    println!("| of which `ObjectDef` (probe, interval, timeout) | {} |", size_of::<ObjectDef>());
    println!(
        "| of which `Option<Box<TransitionInfo>>` (the last transition, shown by the ui; a heap block only once \
         the object changed state) | {} |",
        size_of::<Option<Box<TransitionInfo>>>()
    );
    println!(
        "| `TransitionInfo` in its heap block, once the object had a transition | {} |",
        size_of::<TransitionInfo>()
    );
    println!(
        "| `ObjectId` inline (an `Arc<str>`: the map's key; its bytes and count are one heap block shared by every \
         copy) | {} |",
        size_of::<ObjectId>()
    );
    println!(
        "| a due entry of an engine's schedule, `(Time, ObjectId)` (the id shared, not copied) | {} |",
        size_of::<(Time, ObjectId)>()
    );
    let probe = Probe::Tcp { addr: "127.0.0.1:9".into() };
    println!("| `Probe` inline (its address is a heap block) | {} |", size_of_val(&probe));
    println!();

    // K logs: objects placed on logs by HRW over the log names, as engines place objects on members.
    const N: usize = 1_000_000;
    let keys: Vec<u64> = (0..N).map(|i| hrw::key(&format!("object-{i:06}"))).collect();
    let place = |k: usize| -> Vec<u32> {
        let logs: Vec<u64> = (0..k).map(|p| hrw::key(&format!("log-{p}"))).collect();
        keys.iter()
            .map(|o| {
                let mut best = 0;
                for (p, l) in logs.iter().enumerate() {
                    if hrw::score(*l, *o) > hrw::score(logs[best], *o) {
                        best = p;
                    }
                }
                best as u32
            })
            .collect()
    };
    println!("## K logs: {N} objects placed by HRW over the logs' names");
    println!();
    println!(
        "| K | largest log (objects) | largest / mean | moved when a log is added (share; ideal 1/(K+1)) | per-reader memory, engine, largest log | storm of all {N} at the bare append rate, logs in parallel |"
    );
    println!("|---|---|---|---|---|---|");
    let engine_bytes = BYTES_PER_OBJECT[0].1;
    for k in [1usize, 2, 4, 8, 16, 32] {
        let cur = place(k);
        let mut sizes = vec![0usize; k];
        for p in &cur {
            sizes[*p as usize] += 1;
        }
        let largest = *sizes.iter().max().unwrap();
        let next = place(k + 1);
        let moved = cur.iter().zip(&next).filter(|(a, b)| a != b).count();
        // Every move is to the new log: HRW never shuffles objects between the old ones.
        let to_new = next.iter().zip(&cur).filter(|(n, c)| n != c && **n == k as u32).count();
        assert_eq!(moved, to_new, "objects only move to the added log");
        println!(
            "| {k} | {largest} | {:.3} | {:.4} ({:.4}) | {:.0} MiB | {:.1} s |",
            largest as f64 / (N as f64 / k as f64),
            moved as f64 / N as f64,
            1.0 / (k as f64 + 1.0),
            largest as f64 * engine_bytes / 1024.0 / 1024.0,
            largest as f64 / APPENDS_PER_SECOND
        );
    }
}
