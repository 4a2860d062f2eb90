//! The membership KV as NATS has it: one KV bucket (`jaque_membership`) whose keys are `membership/<id>`,
//! `sink/membership/<id>` and `notifier/membership/<id>` — one key space per [`Bucket`], ONE revision
//! sequence across all of them. A heartbeat writes a key with a TTL, a delete deletes it, an expired key
//! becomes a delete after an expiry lag (a refresh that lands in between keeps it). Watchers see every key's
//! changes in revision order, whatever its bucket (a role ignores the other buckets' keys); a (re)started
//! watcher first gets the snapshot: the last entry of every key, in revision order.
//!
//! The bucket's other keys (the notifier's progress and start records) take revisions from the same sequence,
//! as NATS KV gives them, with its compare-and-set: `update` at an expected revision, `create` if absent.
//! Watchers of membership never see them (the shell's watcher filters by prefix).

use super::engine::EngineRole;
use super::{Ev, Sim};
use crate::oracle::member_hash;
use jaque_core::{Bucket, MemberChange, MemberId, MemberObservation, MemberRef};
use rand::Rng;
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Clone, Debug)]
struct KeyState {
    inc: u64,
    /// Bumped by every write and delete of the key: an expiry scheduled before it is void.
    gen: u64,
    live: bool,
    last_rev: u64,
}

pub(super) struct Store {
    /// `revs[rev - 1]`: the change at revision `rev`, and its key's bucket (`None`: a write to another key).
    revs: Vec<Option<(Bucket, MemberChange, u32)>>,
    keys: BTreeMap<(Bucket, MemberId), KeyState>,
    /// `live[rev][bucket]`: the hash of the bucket's live set after revision `rev` (index 0: every bucket
    /// empty), so an epoch record's `members_rev` can be checked against what the bucket really held.
    live: Vec<[u64; Bucket::ALL.len()]>,
    /// The other keys: value and the revision it was written at.
    others: BTreeMap<String, (String, u64)>,
}

impl Store {
    pub fn new() -> Store {
        Store { revs: Vec::new(), keys: BTreeMap::new(), live: vec![[0; Bucket::ALL.len()]], others: BTreeMap::new() }
    }

    /// The last revision (0: nothing written yet).
    pub fn rev(&self) -> u64 {
        self.revs.len() as u64
    }

    /// The change at revision `rev`, as a watcher reports it (`None`: a write to another key).
    pub fn observation(&self, rev: u64) -> Option<MemberObservation> {
        let (bucket, change, format) = self.revs[(rev - 1) as usize].clone()?;
        Some(MemberObservation { bucket, rev, change, format })
    }

    /// The watcher's snapshot: the last entry of every key of every bucket, in revision order.
    pub fn snapshot(&self) -> Vec<MemberObservation> {
        let mut last: Vec<u64> = self.keys.values().map(|k| k.last_rev).collect();
        last.sort_unstable();
        last.into_iter().filter_map(|rev| self.observation(rev)).collect()
    }

    /// The incarnation whose key is live in `bucket` under `id`, if any.
    pub fn live_incarnation(&self, bucket: Bucket, id: &MemberId) -> Option<u64> {
        self.keys.get(&(bucket, id.clone())).filter(|k| k.live).map(|k| k.inc)
    }

    /// Another key's value and revision.
    pub fn get(&self, key: &str) -> Option<(&str, u64)> {
        self.others.get(key).map(|(v, rev)| (v.as_str(), *rev))
    }

    /// The other keys under `prefix`, in key order.
    pub fn scan<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = (&'a str, &'a str, u64)> + 'a {
        self.others
            .range(prefix.to_string()..)
            .take_while(move |(k, _)| k.starts_with(prefix))
            .map(|(k, (v, r))| (k.as_str(), v.as_str(), *r))
    }

    /// Compare-and-set: writes `key` only if it is at revision `expect` (`None`: only if it does not exist);
    /// returns the new revision, or `None` when the key is not at `expect`.
    pub fn update(&mut self, key: &str, value: String, expect: Option<u64>) -> Option<u64> {
        if self.others.get(key).map(|(_, r)| *r) != expect {
            return None;
        }
        let rev = self.rev() + 1;
        let live = *self.live.last().expect("live hashes of revision 0");
        self.live.push(live);
        self.revs.push(None);
        self.others.insert(key.to_string(), (value, rev));
        Some(rev)
    }

    /// Create if absent: the value the key holds afterwards (this one, or the one it already had).
    pub fn create(&mut self, key: &str, value: String) -> String {
        if let Some((v, _)) = self.others.get(key) {
            return v.clone();
        }
        self.update(key, value.clone(), None);
        value
    }

    /// The hash of `bucket`'s live set (id and incarnation of every live key) after revision `rev`.
    pub fn live_hash(&self, bucket: Bucket, rev: u64) -> Option<u64> {
        self.live.get(usize::try_from(rev).ok()?).map(|h| h[bucket as usize])
    }

    /// Writes `member`'s key at the next revision; returns the revision and the key's generation.
    fn put(&mut self, bucket: Bucket, member: MemberRef, format: u32) -> (u64, u64) {
        let rev = self.rev() + 1;
        let mut live = *self.live.last().expect("live hashes of revision 0");
        let key = self.keys.entry((bucket, member.id.clone())).or_insert(KeyState {
            inc: 0,
            gen: 0,
            live: false,
            last_rev: 0,
        });
        let hash = &mut live[bucket as usize];
        if key.live {
            *hash = hash.wrapping_sub(member_hash(&MemberRef { id: member.id.clone(), incarnation: key.inc }));
        }
        *hash = hash.wrapping_add(member_hash(&member));
        key.inc = member.incarnation;
        key.gen += 1;
        key.live = true;
        key.last_rev = rev;
        let gen = key.gen;
        self.live.push(live);
        self.revs.push(Some((bucket, MemberChange::Up(member), format)));
        (rev, gen)
    }

    /// Deletes a live key at the next revision; returns that revision (`None`: no such live key).
    fn delete(&mut self, bucket: Bucket, id: &MemberId) -> Option<u64> {
        let key = self.keys.get_mut(&(bucket, id.clone())).filter(|k| k.live)?;
        let rev = self.revs.len() as u64 + 1;
        key.live = false;
        key.gen += 1;
        key.last_rev = rev;
        let gone = MemberRef { id: id.clone(), incarnation: key.inc };
        let mut live = *self.live.last().expect("live hashes");
        live[bucket as usize] = live[bucket as usize].wrapping_sub(member_hash(&gone));
        self.live.push(live);
        self.revs.push(Some((bucket, MemberChange::Down(id.clone()), jaque_core::format::OLDEST_CLUSTER_FORMAT)));
        Some(rev)
    }

    /// The key is still live and unchanged since the write that scheduled expiry `gen`.
    fn expires(&self, bucket: Bucket, id: &MemberId, gen: u64) -> bool {
        self.keys.get(&(bucket, id.clone())).is_some_and(|k| k.gen == gen && k.live)
    }
}

impl Sim {
    /// A process's heartbeat on its way to the store (lost while its heartbeats are being dropped).
    /// An engine's heartbeat put: it lands unless the engine's writes are cut or the heartbeat is lost, and is
    /// answered `ok` once the ack is back within the publish timeout, else failed at the timeout; answers reach
    /// the engine in the order of its puts (its lease runs from them).
    pub(super) fn send_heartbeat(&mut self, n: usize, bucket: Bucket, member: MemberRef, ttl: Duration) {
        let lost = self.nodes[n].hb_loss > 0 && self.net.rng.random_bool(self.params.heartbeat_loss);
        let timeout = self.params.append_timeout_ms;
        let mut answer = (timeout, false);
        if self.nodes[n].can_send() && !lost {
            let d = self.delay(n);
            let ttl_ms = ttl.as_millis() as u64;
            let format = self.nodes[n].speaks;
            self.after(d, Ev::HeartbeatLand { bucket, member, ttl_ms, format });
            if self.nodes[n].can_recv() {
                let back = d + self.delay(n);
                if back <= timeout {
                    answer = (back, true);
                }
            }
        }
        let (after, ok) = answer;
        self.answer_heartbeat::<EngineRole>(n, after, ok);
    }

    pub(super) fn send_delete(&mut self, n: usize, bucket: Bucket, member: MemberRef) {
        if self.nodes[n].can_send() {
            let d = self.delay(n);
            self.after(d, Ev::HeartbeatDelete { bucket, member });
        }
    }

    pub(super) fn kv_put(&mut self, bucket: Bucket, member: MemberRef, ttl_ms: u64, format: u32) {
        let id = member.id.clone();
        let replaced = self.store.live_incarnation(bucket, &id).filter(|i| *i != member.incarnation);
        let (rev, gen) = self.store.put(bucket, member, format);
        if let Some(incarnation) = replaced {
            self.key_gone(bucket, MemberRef { id: id.clone(), incarnation });
        }
        let lag = self.net.rng.random_range(0..=self.params.expiry_lag_max_ms);
        self.after(ttl_ms + lag, Ev::Expire { bucket, id, gen });
        self.notify_watchers(rev);
    }

    /// A member's leave: it deletes its key only while the key is its own incarnation's (the shell deletes by
    /// compare-and-set on the revision of its own heartbeat), so a late delete of an earlier incarnation never
    /// takes the key of the process that replaced it.
    pub(super) fn kv_delete_own(&mut self, bucket: Bucket, member: &MemberRef) {
        if self.store.live_incarnation(bucket, &member.id) == Some(member.incarnation) {
            self.kv_delete(bucket, &member.id);
        } else {
            self.tr(|| format!("store: a stale delete of {}{member} is refused", bucket.prefix()));
        }
    }

    pub(super) fn kv_delete(&mut self, bucket: Bucket, id: &MemberId) {
        let inc = self.store.live_incarnation(bucket, id);
        let Some(rev) = self.store.delete(bucket, id) else { return };
        self.tr(|| format!("store: rev {rev} deletes {}{id}", bucket.prefix()));
        if let Some(incarnation) = inc {
            self.key_gone(bucket, MemberRef { id: id.clone(), incarnation });
        }
        self.notify_watchers(rev);
    }

    pub(super) fn kv_expire(&mut self, bucket: Bucket, id: MemberId, gen: u64) {
        if self.store.expires(bucket, &id, gen) {
            self.tr(|| format!("store: key {}{id} expired", bucket.prefix()));
            self.kv_delete(bucket, &id);
        }
    }

    /// A member's key is gone (deleted, expired, or overwritten by a newer incarnation).
    fn key_gone(&mut self, bucket: Bucket, member: MemberRef) {
        if bucket == Bucket::Notifier {
            self.notifier_key_gone(&member);
        }
    }

    /// Revision `rev` is on its way to every running watcher, each after its own lag.
    fn notify_watchers(&mut self, rev: u64) {
        self.h(rev << 20);
        self.watched(rev);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(id: &str, inc: u64) -> MemberRef {
        MemberRef { id: MemberId::new(id).unwrap(), incarnation: inc }
    }

    #[test]
    fn every_bucket_shares_one_revision_sequence_and_keeps_its_own_live_set() {
        let mut s = Store::new();
        assert_eq!(s.put(Bucket::Engine, m("a", 1), 1), (1, 1));
        assert_eq!(s.put(Bucket::Sink, m("a", 1), 1), (2, 1), "same id, another bucket: another key");
        assert_eq!(s.put(Bucket::Engine, m("b", 1), 1).0, 3);
        assert_eq!(s.delete(Bucket::Sink, &m("a", 1).id), Some(4));
        assert_eq!(s.delete(Bucket::Sink, &m("a", 1).id), None, "already deleted");
        let engines = crate::oracle::members_hash(&[m("a", 1), m("b", 1)]);
        assert_eq!(s.live_hash(Bucket::Engine, 4), Some(engines), "the sink's delete leaves the engines alone");
        assert_eq!(s.live_hash(Bucket::Sink, 2), Some(member_hash(&m("a", 1))));
        assert_eq!(s.live_hash(Bucket::Sink, 4), Some(0));
        assert_eq!(s.live_hash(Bucket::Notifier, 4), Some(0));
        let snapshot: Vec<(Bucket, u64)> = s.snapshot().iter().map(|o| (o.bucket, o.rev)).collect();
        assert_eq!(snapshot, [(Bucket::Engine, 1), (Bucket::Engine, 3), (Bucket::Sink, 4)]);
    }

    #[test]
    fn other_keys_share_the_revisions_and_compare_and_set() {
        let mut s = Store::new();
        assert_eq!(s.put(Bucket::Notifier, m("n1", 1), 1).0, 1);
        assert_eq!(s.update("notifier/progress/a/o1", "x".into(), Some(7)), None, "no such key at revision 7");
        assert_eq!(s.update("notifier/progress/a/o1", "x".into(), None), Some(2), "created: the next revision");
        assert_eq!(s.update("notifier/progress/a/o1", "y".into(), None), None, "exists: create fails");
        assert_eq!(s.update("notifier/progress/a/o1", "y".into(), Some(1)), None, "not at revision 1");
        assert_eq!(s.put(Bucket::Notifier, m("n2", 1), 1).0, 3, "a membership key after it: one sequence");
        assert_eq!(s.update("notifier/progress/a/o1", "y".into(), Some(2)), Some(4));
        assert_eq!(s.get("notifier/progress/a/o1"), Some(("y", 4)));
        assert_eq!(s.create("notifier/start/a", "5".into()), "5");
        assert_eq!(s.create("notifier/start/a", "9".into()), "5", "create if absent keeps the first");
        assert_eq!(s.rev(), 5);
        let scanned: Vec<&str> = s.scan("notifier/progress/").map(|(k, _, _)| k).collect();
        assert_eq!(scanned, ["notifier/progress/a/o1"]);
        // Watchers see only the membership keys; the live sets are those of revisions 1 and 3.
        assert!(s.observation(2).is_none() && s.observation(4).is_none());
        let snapshot: Vec<u64> = s.snapshot().iter().map(|o| o.rev).collect();
        assert_eq!(snapshot, [1, 3]);
        assert_eq!(s.live_hash(Bucket::Notifier, 5), s.live_hash(Bucket::Notifier, 3));
        assert_eq!(s.live_incarnation(Bucket::Notifier, &m("n2", 1).id), Some(1));
    }

    #[test]
    fn a_refresh_voids_the_expiry_of_the_write_before_it() {
        let mut s = Store::new();
        let (_, gen) = s.put(Bucket::Notifier, m("n1", 1), 1);
        assert!(s.expires(Bucket::Notifier, &m("n1", 1).id, gen));
        let (_, again) = s.put(Bucket::Notifier, m("n1", 1), 1);
        assert!(!s.expires(Bucket::Notifier, &m("n1", 1).id, gen));
        assert!(s.expires(Bucket::Notifier, &m("n1", 1).id, again));
        assert!(!s.expires(Bucket::Engine, &m("n1", 1).id, again), "not a key of the engine bucket");
    }
}
