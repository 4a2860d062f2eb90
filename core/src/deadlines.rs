//! Deadlines of one kind, soonest first: what one named timer of a role's timer table stands for (the engine's
//! replies, checks and slots, the notifier's lanes). A role's `poll_timeout` is the soonest `first()` over its
//! tables, named; its `handle_timeout` takes what is due from each with `pop_due`.

use crate::time::Time;
use std::collections::BTreeSet;

/// Keys with a deadline each, ordered by (deadline, key): a key may stand at several deadlines, and ties go by
/// key, so the order never depends on how the set was built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deadlines<K: Ord> {
    set: BTreeSet<(Time, K)>,
}

impl<K: Ord> Default for Deadlines<K> {
    fn default() -> Self {
        Deadlines { set: BTreeSet::new() }
    }
}

impl<K: Ord + Clone> Deadlines<K> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn insert(&mut self, at: Time, key: K) {
        self.set.insert((at, key));
    }

    /// Takes `key` off its deadline `at`; returns whether it stood there.
    pub fn remove(&mut self, at: Time, key: &K) -> bool {
        self.set.remove(&(at, key.clone()))
    }

    pub fn contains(&self, at: Time, key: &K) -> bool {
        self.set.contains(&(at, key.clone()))
    }

    /// The soonest deadline.
    pub fn first(&self) -> Option<Time> {
        self.set.first().map(|(t, _)| *t)
    }

    /// The soonest entry if it is due by `now`, taken off.
    pub fn pop_due(&mut self, now: Time) -> Option<(Time, K)> {
        if self.set.first().is_some_and(|(t, _)| *t <= now) {
            self.set.pop_first()
        } else {
            None
        }
    }

    /// Every deadline, soonest first.
    pub fn times(&self) -> impl Iterator<Item = Time> + '_ {
        self.set.iter().map(|(t, _)| *t)
    }

    pub fn iter(&self) -> impl Iterator<Item = &(Time, K)> + '_ {
        self.set.iter()
    }

    pub fn len(&self) -> usize {
        self.set.len()
    }

    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    pub fn clear(&mut self) {
        self.set.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_entries_come_off_soonest_first_and_ties_by_key() {
        let mut d = Deadlines::new();
        d.insert(Time(20), "b");
        d.insert(Time(10), "z");
        d.insert(Time(20), "a");
        assert_eq!(d.first(), Some(Time(10)));
        assert_eq!(d.pop_due(Time(9)), None);
        assert_eq!(d.pop_due(Time(20)), Some((Time(10), "z")));
        assert_eq!(d.pop_due(Time(20)), Some((Time(20), "a")));
        assert!(d.remove(Time(20), &"b") && !d.remove(Time(20), &"b"));
        assert!(d.is_empty() && d.first().is_none());
    }
}
