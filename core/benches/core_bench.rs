//! Core benchmarks: HRW reassignment and the fence verdict, each beside the raw cost it is built on, measured
//! in the same run. Run: `cargo bench -p jaque-core` (prints a table; ratios are what to compare).

use jaque_core::hrw::{self, Ownership};
use jaque_core::Life;
use jaque_core::*;
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Median time of `f` over `runs` runs.
fn median(runs: usize, mut f: impl FnMut()) -> Duration {
    let mut t: Vec<Duration> = (0..runs)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed()
        })
        .collect();
    t.sort();
    t[runs / 2]
}

/// Times `base` and `x` alternately, so load from other processes hits both alike: medians of each and the
/// median of the per-round ratio x/base.
fn paired(runs: usize, mut base: impl FnMut(), mut x: impl FnMut()) -> (Duration, Duration, f64) {
    let (mut tb, mut tx, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let b = median(1, &mut base);
        let y = median(1, &mut x);
        ratios.push(y.as_secs_f64() / b.as_secs_f64());
        tb.push(b);
        tx.push(y);
    }
    tb.sort();
    tx.sort();
    ratios.sort_by(f64::total_cmp);
    (tb[runs / 2], tx[runs / 2], ratios[runs / 2])
}

fn m(i: usize, inc: u64) -> MemberRef {
    MemberRef { id: MemberId::new(format!("engine-{i}")).unwrap(), incarnation: inc }
}

fn ns(d: Duration, n: usize) -> f64 {
    d.as_nanos() as f64 / n as f64
}

fn main() {
    const OBJECTS: usize = 100_000;
    const MEMBERS: usize = 10;
    let ids: Vec<String> = (0..OBJECTS).map(|i| format!("object-{i:06}")).collect();
    let keys: Vec<u64> = ids.iter().map(|s| hrw::key(s)).collect();
    let members: Vec<MemberRef> = (0..MEMBERS).map(|i| m(i, 1)).collect();
    let member_keys: Vec<u64> = members.iter().map(|x| hrw::key(x.id.as_str())).collect();

    // --- P4: reassignment of 100k objects over 10 members ---
    // Raw: the scores HRW cannot avoid (objects x members), summed in a bare loop.
    let mut out = Vec::new();
    let (raw, assign, assign_ratio) = paired(
        31,
        || {
            let mut acc = 0u64;
            for &k in &keys {
                for &mk in &member_keys {
                    acc = acc.wrapping_add(hrw::score(mk, k));
                }
            }
            black_box(acc);
        },
        || {
            let own = Ownership::new(black_box(&members));
            hrw::assign(&own, &keys, &mut out);
            black_box(&out);
        },
    );
    // Including hashing the object ids themselves (a reader that has not cached the keys).
    let raw_hash = median(11, || {
        let mut acc = 0u64;
        for s in &ids {
            acc ^= hrw::key(s);
        }
        black_box(acc);
    });

    // The engine's whole reaction to an epoch change with 100k objects: recompute what it owns, schedule
    // what it gained, unschedule what it lost.
    let engine_reassign = engine_epoch_change(&ids, &members);

    // --- P5: the fence verdict per event ---
    let mut fence = Fence::default();
    for e in 1..=4u64 {
        let ms: Vec<MemberRef> = (0..MEMBERS).filter(|i| e == 4 || *i as u64 != e).map(|i| m(i, 1)).collect();
        fence
            .install(&EpochRecord { epoch: e, members: ms, members_rev: e, idempotency_window_ms: None, format: 1 })
            .unwrap();
    }
    let own = fence.current_ownership().unwrap().clone();
    // Events by their owners under the epoch in force (the common case), 1 in 8 written one epoch back. A
    // reader decides on an event it has just decoded, so its strings are in cache: the events are a window of
    // 4096 read over and over (100k verdicts in all), not 100k cold allocations.
    const WINDOW: usize = 4096;
    let events: Vec<(u64, u64, MemberRef)> = keys[..WINDOW]
        .iter()
        .enumerate()
        .map(|(i, &k)| (k, if i % 8 == 0 { 3 } else { 4 }, own.owner_of_key(k).unwrap().clone()))
        .collect();
    let rounds = OBJECTS / WINDOW;
    let bare = median(21, || {
        let mut acc = 0u64;
        for _ in 0..rounds {
            for (k, e, w) in &events {
                acc = acc.wrapping_add(*k ^ *e ^ w.incarnation);
            }
        }
        black_box(acc);
    });
    let mut accepted = 0;
    let verdicts = median(21, || {
        accepted = 0;
        for _ in 0..rounds {
            for (k, e, w) in &events {
                accepted += usize::from(fence.verdict_for_key(*k, *e, w).is_accepted());
            }
        }
        black_box(accepted);
    });
    let full_events: Vec<Event> = ids
        .iter()
        .zip(&events)
        .map(|(id, (_, e, w))| Event {
            object: ObjectId::new(id.as_str()).unwrap(),
            epoch: *e,
            writer: w.clone(),
            at: Time(0),
            command_id: None,
            body: EventBody::Ack,
        })
        .collect();
    let verdicts_hashing = median(11, || {
        let mut n = 0;
        for _ in 0..rounds {
            for ev in &full_events {
                n += usize::from(fence.verdict(ev).is_accepted());
            }
        }
        black_box(n);
    });

    // One table in the columns of docs/benchmarks.md: | P | measure | jaque | floor (same run) | ratio | target |
    println!("jaque-core benchmarks ({OBJECTS} objects, {MEMBERS} members; medians of repeated runs)");
    println!("| P | measure | jaque | floor (same run) | ratio | target |");
    println!("|---|---|---|---|---|---|");
    println!(
        "| P4 | HRW reassignment of {OBJECTS} objects over {MEMBERS} members (hrw::assign) | {:.1} ns/object | {:.1} ns/object: raw scores in a bare loop | {:.2}x | <= 1.5x |",
        ns(assign, OBJECTS),
        ns(raw, OBJECTS),
        assign_ratio
    );
    println!(
        "| P4 | an engine's whole epoch change with {OBJECTS} objects (recompute, schedule, unschedule) | {:.1} ns/object | {:.1} ns/object: raw scores | {:.2}x | |",
        ns(engine_reassign, OBJECTS),
        ns(raw, OBJECTS),
        engine_reassign.as_secs_f64() / raw.as_secs_f64()
    );
    println!(
        "| P5 | fence verdict per event (object key cached) | {:.1} ns/event | {:.1} ns/event: bare loop over the events | {:.1}x | <= 100 ns/event |",
        ns(verdicts, rounds * WINDOW),
        ns(bare, rounds * WINDOW),
        verdicts.as_secs_f64() / bare.as_secs_f64()
    );
    println!(
        "| P5 | fence verdict per event, hashing the object id | {:.1} ns/event | {:.1} ns/event: xxh3 of the id alone | {:.1}x | <= 100 ns/event |",
        ns(verdicts_hashing, rounds * WINDOW),
        ns(raw_hash, OBJECTS),
        verdicts_hashing.as_secs_f64() / raw_hash.as_secs_f64() * OBJECTS as f64 / (rounds * WINDOW) as f64
    );
    // --- P7: objects moved per join and per leave, beside HRW's theoretical share ---
    let mut p7 = String::new();
    let mut out_before = Vec::new();
    let mut out_after = Vec::new();
    for n in [1usize, 2, 3, 5, 7, 10] {
        let before: Vec<MemberRef> = (0..n).map(|i| m(i, 1)).collect();
        let after_join: Vec<MemberRef> = (0..=n).map(|i| m(i, 1)).collect();
        let own = Ownership::new(&before);
        hrw::assign(&own, &keys, &mut out_before);
        let owner_ids = |o: &Ownership, idx: &[u32]| -> Vec<String> {
            idx.iter().map(|i| o.members()[*i as usize].id.to_string()).collect()
        };
        let b = owner_ids(&own, &out_before);
        let joined = Ownership::new(&after_join);
        hrw::assign(&joined, &keys, &mut out_after);
        let j = owner_ids(&joined, &out_after);
        let moved_join = b.iter().zip(&j).filter(|(x, y)| x != y).count() as f64 / OBJECTS as f64;
        let leave = if n > 1 {
            let left = Ownership::new(&before[1..]);
            hrw::assign(&left, &keys, &mut out_after);
            let l = owner_ids(&left, &out_after);
            let moved = b.iter().zip(&l).filter(|(x, y)| x != y).count() as f64 / OBJECTS as f64;
            let theory = 1.0 / n as f64;
            format!(
                "| P7 | objects moved when one of {n} members leaves | {moved:.4} | {theory:.4} = 1/n | {:.2}x | 1x |\n",
                moved / theory
            )
        } else {
            String::new()
        };
        let theory = 1.0 / (n + 1) as f64;
        p7 += &format!(
            "| P7 | objects moved when a member joins {n} | {moved_join:.4} | {theory:.4} = 1/(n+1) | {:.2}x | 1x |\n{leave}",
            moved_join / theory
        );
    }
    let per_round = events.iter().filter(|(_, e, _)| *e == 4).count() + count_kept(&fence, &events);
    assert_eq!(accepted, per_round * rounds, "verdicts are what the bench expects");
    print!("{p7}");
}

/// Events written one epoch back that are still accepted (their writer kept the object).
fn count_kept(fence: &Fence, events: &[(u64, u64, MemberRef)]) -> usize {
    events.iter().filter(|(k, e, w)| *e == 3 && fence.verdict_for_key(*k, *e, w).is_accepted()).count()
}

/// Time for one engine to react to a join (10 -> 11 members) with 100k objects in the log, median of 5.
fn engine_epoch_change(ids: &[String], members: &[MemberRef]) -> Duration {
    let mut joined = members.to_vec();
    joined.push(m(99, 1));
    joined.sort();
    let record = LogEntry::Epoch(EpochRecord {
        epoch: 2,
        members: joined,
        members_rev: 2,
        idempotency_window_ms: None,
        format: 1,
    });
    let mut times: Vec<Duration> = (0..5)
        .map(|_| {
            let mut e = loaded_engine(ids, members);
            let start = Instant::now();
            e.handle(Time(1000), Input::Life(Life::Log { seq: ids.len() as u64 + 2, entry: record.clone() }));
            let t = start.elapsed();
            black_box(e.owned_count());
            t
        })
        .collect();
    times.sort();
    times[2]
}

/// An engine (the first member) that has read epoch 1 and a put for every object.
fn loaded_engine(ids: &[String], members: &[MemberRef]) -> Engine {
    let me = members[0].clone();
    let def = ObjectDef {
        probe: Probe::Tcp { addr: "h:1".into() },
        interval_ms: 60_000,
        timeout_ms: 1000,
        ..ObjectDef::UNSET
    };
    let mut e = Engine::new(EngineConfig::new(me.clone(), Duration::from_secs(9)));
    e.handle(Time(0), Input::Life(Life::Start));
    e.handle(Time(0), Input::Life(Life::CaughtUp));
    let first =
        EpochRecord { epoch: 1, members: members.to_vec(), members_rev: 1, idempotency_window_ms: None, format: 1 };
    e.handle(Time(0), Input::Life(Life::Log { seq: 1, entry: LogEntry::Epoch(first) }));
    for (i, id) in ids.iter().enumerate() {
        let put = Event {
            object: ObjectId::new(id.as_str()).unwrap(),
            epoch: 1,
            writer: me.clone(),
            at: Time(0),
            command_id: None,
            body: EventBody::Put { def: def.clone() },
        };
        e.handle(Time(0), Input::Life(Life::Log { seq: i as u64 + 2, entry: LogEntry::Event(put) }));
    }
    while e.poll_output().is_some() {}
    e
}
