//! A worker's backlog under any sequence of work taken and slots freed: it never starts work its engine has
//! stopped waiting for, starts each piece at most once, and accounts for every piece (started, dropped unstarted
//! and counted, or still waiting).

use jaque_core::backlog::Backlog;
use jaque_core::{Time, CHECK_GRACE};
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::time::Duration;

#[derive(Clone, Debug)]
enum Op {
    /// `n` pieces taken `gap` ms after the last step, each with its timeout (ms).
    Take { gap: u64, timeouts: Vec<u64> },
    /// A slot frees `gap` ms after the last step; `pick` drives the random choices.
    Next { gap: u64, pick: Vec<usize> },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..3_000u64, prop::collection::vec(1..5_000u64, 0..40)).prop_map(|(gap, timeouts)| Op::Take { gap, timeouts }),
        (0..3_000u64, prop::collection::vec(any::<usize>(), 0..8)).prop_map(|(gap, pick)| Op::Next { gap, pick }),
    ]
}

proptest! {
    #[test]
    fn never_starts_expired_work_starts_each_once_and_accounts_for_all(ops in prop::collection::vec(op(), 0..200)) {
        let mut b = Backlog::default();
        let mut now = Time(0);
        // Per piece: when it was taken and until when it is worth starting.
        let mut pieces: Vec<(Time, Time)> = Vec::new();
        let mut started = BTreeSet::new();
        let mut expired = 0;
        for op in ops {
            match op {
                Op::Take { gap, timeouts } => {
                    now = now + Duration::from_millis(gap);
                    for t in timeouts {
                        let timeout = Duration::from_millis(t);
                        b.take(now, timeout, pieces.len());
                        pieces.push((now, now + timeout + CHECK_GRACE));
                    }
                }
                Op::Next { gap, pick } => {
                    now = now + Duration::from_millis(gap);
                    let mut k = 0;
                    let next = b.next(now, |n| {
                        k += 1;
                        pick.get(k - 1).copied().unwrap_or(k) % n
                    });
                    if let Some((i, waited)) = next {
                        prop_assert!(now < pieces[i].1, "piece {i} started at {now}, worth it until {}", pieces[i].1);
                        prop_assert_eq!(waited, now.saturating_since(pieces[i].0));
                        prop_assert!(started.insert(i), "piece {i} started twice");
                    }
                    // A free slot stays idle only when nothing worth starting waits.
                    if next.is_none() {
                        prop_assert!(b.is_empty());
                    }
                }
            }
            expired += b.take_expired();
            prop_assert_eq!(started.len() as u64 + expired + b.len() as u64, pieces.len() as u64);
        }
    }
}
