//! Forwarding under membership changes: a hop never exceeds 1, every command ends in exactly one outcome,
//! and no command id is applied twice.

mod common;
use common::*;
use jaque_core::Life;
use jaque_core::*;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Clone, Debug)]
enum Op {
    Submit { at: usize, object: u8, kind: u8, id: u8, hop1: bool },
    Join(usize),
    Leave(usize),
    Pause(usize),
    Resume,
    Advance(u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => (0usize..5, 0u8..12, 0u8..6, 0u8..40, prop::bool::weighted(0.15))
            .prop_map(|(at, object, kind, id, hop1)| Op::Submit { at, object, kind, id, hop1 }),
        1 => (0usize..5).prop_map(Op::Join),
        1 => (0usize..5).prop_map(Op::Leave),
        1 => (0usize..5).prop_map(Op::Pause),
        1 => Just(Op::Resume),
        2 => (1u16..12_000).prop_map(Op::Advance),
    ]
}

const NAMES: [&str; 5] = ["a", "b", "c", "d", "e"];

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn every_command_ends_in_one_outcome_and_never_travels_two_hops(ops in proptest::collection::vec(op(), 1..80)) {
        let mut w = World::new();
        w.add_engine("a", 1);
        w.add_engine("b", 1);
        let mut incarnation = 1u64;
        let mut submitted = Vec::new();
        for op in ops {
            match op {
                Op::Submit { at, object, kind, id, hop1 } => {
                    let live: Vec<String> = w.engines.keys().cloned().collect();
                    let at = &live[at % live.len()];
                    let kind = match kind {
                        0 | 1 => CommandKind::Put { def: def(5) },
                        2 => CommandKind::Delete,
                        3 => CommandKind::Pause,
                        4 => CommandKind::Resume,
                        _ => CommandKind::CheckNow,
                    };
                    let mut c = cmd(&format!("cmd-{id}"), &format!("o{object}"), kind);
                    if hop1 { c.hop = 1; }
                    submitted.push(w.submit_nowait(at, c));
                }
                Op::Join(i) => {
                    if !w.engines.contains_key(NAMES[i]) {
                        incarnation += 1;
                        w.add_engine(NAMES[i], incarnation);
                    }
                }
                Op::Leave(i) => {
                    if w.engines.len() > 1 && w.engines.contains_key(NAMES[i]) && !w.paused.iter().any(|p| p == NAMES[i]) {
                        let now = w.now;
                        let e = w.engines.get_mut(NAMES[i]).unwrap();
                        e.handle(now, Input::Life(Life::Leave));
                        w.run();
                        // Wait for what it has in flight, as the shell does, then it exits.
                        w.advance(Duration::from_secs(6));
                        w.remove_engine(NAMES[i]);
                    }
                }
                Op::Pause(i) => {
                    if w.engines.contains_key(NAMES[i]) && w.paused.is_empty() && w.engines.len() > 1 {
                        w.paused.push(NAMES[i].into());
                    }
                }
                Op::Resume => w.paused.clear(),
                Op::Advance(ms) => w.advance(Duration::from_millis(u64::from(ms))),
            }
            w.run();
        }
        w.paused.clear();
        w.run();
        w.advance(Duration::from_secs(30));
        prop_assert!(w.max_hop_seen <= 1);
        for r in &submitted {
            let got = w.replies.get(r).map_or(0, |v| v.len());
            prop_assert_eq!(got, 1, "command {} got {} outcomes", r, got);
        }
        // No id applied twice: count accepted events per command id whose fold applied them.
        let mut reader = LogReader::new();
        let mut applied: BTreeMap<String, u32> = BTreeMap::new();
        for (i, e) in w.log.iter().enumerate() {
            if let (LogEntry::Event(ev), Read::Event { effect: Effect::Command(Outcome::Applied { .. }), .. }) = (e, reader.read(i as u64 + 1, e)) {
                *applied.entry(ev.command_id.as_ref().unwrap().to_string()).or_default() += 1;
            }
        }
        for (id, n) in applied {
            prop_assert_eq!(n, 1, "{} applied {} times", id, n);
        }
        // Every outcome that says applied is backed by an accepted event at that position.
        for outs in w.replies.values() {
            for o in outs {
                if let Outcome::Applied { seq, command_id, .. } = o {
                    let LogEntry::Event(ev) = &w.log[*seq as usize - 1] else { panic!("applied at an epoch record") };
                    prop_assert_eq!(ev.command_id.as_ref(), Some(command_id));
                }
            }
        }
    }
}
