//! The alert rules (issue 34, invariant 14) by hand: an owner that crashes between two soft attempts leaves the
//! count in the log, and the engine that takes the object over goes on from it; every swarm invariant is checked
//! on the way (the oracle holds each result event to the rules).

use jaque_core::{EventBody, LogEntry, ObjectDef, ObjectId, State};
use jaque_sim::scenario::Scenario;
use jaque_sim::{Params, Via};

/// The accepted result events of `id`, in log order: (writer `id#incarnation`, body).
fn results(s: &Scenario, id: &ObjectId) -> Vec<(String, EventBody)> {
    s.sim
        .log()
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e {
            LogEntry::Event(ev)
                if &ev.object == id && ev.body.is_result() && s.sim.oracle.is_accepted(i as u64 + 1) =>
            {
                Some((ev.writer.to_string(), ev.body.clone()))
            }
            _ => None,
        })
        .collect()
}

fn soft_attempt(s: &Scenario, id: &ObjectId) -> Option<u32> {
    s.sim.oracle.reader.object(id)?.soft().map(|soft| soft.attempt)
}

#[test]
fn the_next_owner_goes_on_from_the_attempt_the_crashed_owner_reached() {
    let mut s = Scenario::with(Params { objects: 6, ..Params::scripted(71, 3) }, 3);
    let id = s.object(0);
    // Five attempts, a retry every 2 s: room to crash the owner between two of them.
    let def = ObjectDef {
        max_attempts: Some(5),
        retry_interval_ms: Some(2_000),
        flapping: Some(false),
        ..s.sim.object_def(0)
    };
    let def = ObjectDef { interval_ms: 10_000, timeout_ms: 500, ..def };
    let sub = s.submit(Via::Ingress, &id, jaque_core::CommandKind::Put { def });
    s.run_until(15_000, "the put", |sim| sim.subs[sub].outcome.is_some());
    s.sim.set_truth(&id, State::Ok);
    s.run_until(30_000, "the object is ok", |sim| sim.oracle.reader.object(&id).is_some_and(|v| v.state == State::Ok));
    s.sim.set_truth(&id, State::Critical);
    s.run_until(30_000, "the second soft attempt", |sim| {
        sim.oracle.reader.object(&id).and_then(|v| v.soft().map(|soft| soft.attempt)) == Some(2)
    });
    let owner = s.owner(&id).expect("an owner");
    let crashed = s.sim.oracle.reader.owner(&id).expect("an owner").to_string();
    s.crash(owner);
    s.run_until(60_000, "the problem is hard", |sim| {
        sim.oracle.reader.object(&id).is_some_and(|v| v.state == State::Critical)
    });
    assert_eq!(soft_attempt(&s, &id), None);
    let got = results(&s, &id);
    let tail: Vec<(String, String)> = got
        .iter()
        .rev()
        .take_while(|(_, b)| !matches!(b, EventBody::Transition { to: State::Ok, .. }))
        .map(|(w, b)| {
            let what = match b {
                EventBody::Soft { attempt, of, .. } => format!("soft {attempt}/{of}"),
                EventBody::Transition { attempt, .. } => format!("hard {attempt}"),
                other => format!("{other:?}"),
            };
            (w.clone(), what)
        })
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    let what: Vec<&str> = tail.iter().map(|(_, w)| w.as_str()).collect();
    assert_eq!(what, ["soft 1/5", "soft 2/5", "soft 3/5", "soft 4/5", "hard 5"], "{tail:?}");
    assert_eq!(tail[0].0, crashed, "the first attempts are the crashed owner's: {tail:?}");
    assert_ne!(tail[4].0, crashed, "the attempt that made it hard is the new owner's: {tail:?}");
    s.assert_ok();
    s.assert_readers_agree();
}

/// Checks of `id` while it goes ok -> critical, from the change until 12 s after, with `max_attempts` attempts
/// and a retry every 2 s: the retries of a soft problem and nothing more. A change that is hard at once
/// (`max_attempts` 1) is checked again at its next slot, not at the retry interval: a retry after a hard
/// transition would only check again what the log already says (an extra check of every object in a storm).
fn checks_after_a_change(max_attempts: u32) -> (u64, Vec<u32>) {
    let mut s = Scenario::with(Params { objects: 1, ..Params::scripted(72, 1) }, 1);
    let id = s.object(0);
    let def = ObjectDef {
        max_attempts: Some(max_attempts),
        retry_interval_ms: Some(2_000),
        flapping: Some(false),
        interval_ms: 10_000,
        timeout_ms: 500,
        ..s.sim.object_def(0)
    };
    let sub = s.submit(Via::Ingress, &id, jaque_core::CommandKind::Put { def });
    s.run_until(15_000, "the put", |sim| sim.subs[sub].outcome.is_some());
    s.sim.set_truth(&id, State::Ok);
    s.run_until(30_000, "the object is ok", |sim| sim.oracle.reader.object(&id).is_some_and(|v| v.state == State::Ok));
    // Right after a check: the next slot is an interval away.
    let last = s.sim.last_checked(&id).map(|c| c.2);
    s.run_until(15_000, "the next check", |sim| sim.last_checked(&id).map(|c| c.2) != last);
    s.sim.set_truth(&id, State::Critical);
    let before = s.sim.stats.checks;
    s.run_until(30_000, "the problem is hard", |sim| {
        sim.oracle.reader.object(&id).is_some_and(|v| v.state == State::Critical)
    });
    // Past where a retry would run (2 s after the last result), before the next slot (an interval after the
    // first critical check; the last retry's result is at most 5.5 s after it).
    s.run_for(3_000);
    let checks = s.sim.stats.checks - before;
    let attempts = results(&s, &id)
        .iter()
        .filter_map(|(_, b)| match b {
            EventBody::Soft { state: State::Critical, attempt, .. }
            | EventBody::Transition { to: State::Critical, attempt, .. } => Some(*attempt),
            _ => None,
        })
        .collect();
    s.assert_ok();
    (checks, attempts)
}

#[test]
fn retries_run_while_a_problem_is_soft_and_stop_once_it_is_hard() {
    // The first critical result is at the first slot after the change (up to an interval away); the problem is
    // hard at the last retry; 3 s afterwards no further check has run.
    assert_eq!(checks_after_a_change(3), (3, vec![1, 2, 3]));
    assert_eq!(checks_after_a_change(1), (1, vec![1]));
}

/// Faults between attempts (`Params::attempt_faults`): on in about half the seeds, where the engine that wrote a
/// soft attempt gets a fault before the next one is due; there the counts go on at another owner far more often
/// than where only the seed's fault tick strikes, and every invariant holds (14: a hard problem only after
/// `max_attempts` results in a row, counted across owners).
#[test]
fn faults_between_attempts_run_in_half_the_seeds_and_counts_go_on_at_another_owner() {
    let (mut on, mut faults, mut continued_on, mut continued_off) = (0, 0, 0, 0);
    let seeds = 1..=40u64;
    for seed in seeds.clone() {
        let report = jaque_sim::run_seed(Params::draw(seed), 0);
        assert!(report.result.is_ok(), "seed {seed}: {:?}; replay: jaque-sim --seed {seed}", report.result);
        let a = &report.stats.alerts;
        if report.params.attempt_faults > 0.0 {
            on += 1;
            faults += a.attempt_faults;
            continued_on += a.continued;
        } else {
            assert_eq!(a.attempt_faults, 0, "seed {seed}: none where they are off");
            continued_off += a.continued;
        }
    }
    let n = seeds.count() as u64;
    assert!((n / 4..=3 * n / 4).contains(&on), "on in {on} of {n} seeds");
    assert!(faults >= on, "{faults} faults between attempts in {on} seeds");
    assert!(
        continued_on > 2 * continued_off,
        "attempts that went on at another owner: {continued_on} with, {continued_off} without"
    );
}
