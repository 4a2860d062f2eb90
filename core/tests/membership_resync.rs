//! A membership view that lost its watch and catches up from a fresh snapshot (`LiveSet::resync`) holds the
//! store's live set, with revisions that only grow, and takes every change the new watch reports after it: over
//! random histories of puts, deletes, expiries whose markers are gone by the time of the snapshot, and writes of
//! other buckets and records sharing the revision sequence.

use jaque_core::{Bucket, LiveSet, MemberChange, MemberId, MemberObservation, MemberRef};
use proptest::prelude::*;
use std::collections::BTreeMap;

#[derive(Clone, Debug)]
enum Op {
    /// A heartbeat put of member `i` (a new incarnation when `restart`).
    Put { i: u8, restart: bool },
    /// The key of member `i` deleted or expired: a marker, which is gone by the snapshot when `marker_gone`.
    Down { i: u8, marker_gone: bool },
    /// A write of another bucket or a notifier's record: it takes a revision.
    Other,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..5, any::<bool>()).prop_map(|(i, restart)| Op::Put { i, restart }),
        2 => (0u8..5, any::<bool>()).prop_map(|(i, marker_gone)| Op::Down { i, marker_gone }),
        1 => Just(Op::Other),
    ]
}

fn id(i: u8) -> MemberId {
    MemberId::new(format!("m{i}")).unwrap()
}

/// The store: one revision sequence, the last change per key (with whether its marker still lives), and
/// every change as the watch reports it.
#[derive(Default)]
struct Store {
    rev: u64,
    incarnations: BTreeMap<u8, u64>,
    last: BTreeMap<u8, (u64, MemberChange, bool)>,
    changes: Vec<MemberObservation>,
}

impl Store {
    fn apply(&mut self, op: &Op) {
        self.rev += 1;
        let rev = self.rev;
        let change = match *op {
            Op::Put { i, restart } => {
                let inc = self.incarnations.entry(i).or_insert(1);
                *inc += u64::from(restart);
                MemberChange::Up(MemberRef { id: id(i), incarnation: *inc })
            }
            Op::Down { i, .. } => MemberChange::Down(id(i)),
            Op::Other => return,
        };
        let (Op::Put { i, .. } | Op::Down { i, .. }) = *op else { return };
        let marker_gone = matches!(op, Op::Down { marker_gone: true, .. });
        self.last.insert(i, (rev, change.clone(), marker_gone));
        self.changes.push(MemberObservation::new(Bucket::Engine, rev, change));
    }

    /// What a watch started now reads first: the last change of every key still there, in revision order.
    fn snapshot(&self) -> Vec<MemberObservation> {
        let mut s: Vec<MemberObservation> = self
            .last
            .values()
            .filter(|(_, _, gone)| !gone)
            .map(|(rev, change, _)| MemberObservation::new(Bucket::Engine, *rev, change.clone()))
            .collect();
        s.sort_by_key(|o| o.rev);
        s
    }

    fn live(&self) -> Vec<MemberRef> {
        self.last
            .values()
            .filter_map(|(_, c, _)| match c {
                MemberChange::Up(m) => Some(m.clone()),
                MemberChange::Down(_) => None,
            })
            .collect()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn a_resynced_view_holds_the_stores_live_set_and_takes_every_later_change(
        seen in prop::collection::vec(op(), 0..20),
        away in prop::collection::vec(op(), 0..20),
        after in prop::collection::vec(op(), 0..10),
    ) {
        let mut store = Store::default();
        let mut view = LiveSet::default();
        for o in &seen {
            store.apply(o);
        }
        for c in &store.changes {
            view.observe(c);
        }
        // The watch is lost; these changes happen unseen.
        for o in &away {
            store.apply(o);
        }
        let upto = store.rev;
        let r = view.resync(Bucket::Engine, &store.snapshot(), upto);
        prop_assert!(r.unplaced.is_empty(), "a revision for every missing member: {:?}", r.unplaced);
        let mut last = view.rev();
        for o in &r.observations {
            prop_assert!(o.rev > last && o.rev <= upto, "revisions grow, up to the snapshot's: {o:?} after {last}");
            last = o.rev;
            view.observe(o);
        }
        let mut live = store.live();
        live.sort_by(|a, b| a.id.cmp(&b.id));
        prop_assert_eq!(view.members(), live);
        // The new watch goes on: every later change is taken.
        let from = store.changes.len();
        for o in &after {
            store.apply(o);
        }
        let ignored = view.ignored_total;
        for c in &store.changes[from..] {
            view.observe(c);
        }
        prop_assert_eq!(view.ignored_total, ignored);
        let mut live = store.live();
        live.sort_by(|a, b| a.id.cmp(&b.id));
        prop_assert_eq!(view.members(), live);
    }
}
