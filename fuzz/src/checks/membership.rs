//! Membership transitions: arbitrary joins, leaves, timer expiries and watcher observations (any bucket,
//! revisions that grow, repeat or go back) on one `Membership`, against a simple model.
//!
//! Input format (every byte string is valid): two bytes of ttl in units of 10 ms, one byte of incarnation,
//! one byte choosing the bucket, then one operation per byte (with its arguments in the bytes after it).
//!
//! Checked after every operation: the live set is the model's (member id -> incarnation, applying an
//! observation only when its revision is above the last applied one, per bucket); `observe` reports a change
//! exactly when the model changed; ignored observations are counted; a live member's heartbeat timer is always
//! its last heartbeat + ttl/3; a leave deletes the key once and no heartbeat is written again until the next
//! join; an own key lost while alive is written again at once; an own id with a newer incarnation is counted
//! as a conflict; a standalone `LiveSet` fed the same observations agrees.

use super::bytes::Bytes;
use jaque_core::time::millis;
use jaque_core::{
    Bucket, LiveSet, MemberChange, MemberId, MemberObservation, MemberRef, Membership, MembershipOutput, Time,
};
use std::collections::BTreeMap;
use std::time::Duration;

const IDS: [&str; 4] = ["e1", "e2", "e3", "e4"];
const MAX_OPS: usize = 2048;

fn id(i: usize) -> MemberId {
    MemberId::new(IDS[i % IDS.len()]).unwrap()
}

#[derive(Default)]
struct Model {
    live: BTreeMap<MemberId, u64>,
    rev: u64,
    ignored: u64,
    /// The time of the next heartbeat while joined and not leaving.
    next: Option<Time>,
    /// Joined at least once and not left since.
    joined: bool,
    leaving: bool,
    conflicts: u64,
}

pub fn check(data: &[u8]) {
    let mut b = Bytes::new(data);
    let ttl = Duration::from_millis(u64::from(b.u16()) * 10);
    let me = MemberRef { id: id(0), incarnation: 1 + u64::from(b.u8() % 4) };
    let bucket = Bucket::ALL[b.below(3)];
    let period = millis(ttl / 3);
    let mut ms = Membership::new(bucket, me.clone(), ttl);
    assert_eq!(ms.refresh_every(), ttl / 3);
    let mut standalone = LiveSet::default();
    let mut model = Model::default();
    let mut now = Time(u64::from(b.u16()));
    let mut rev = 0u64;
    let mut last_put: Option<Time> = None;

    let mut ops = 0;
    while !b.is_empty() && ops < MAX_OPS {
        ops += 1;
        let op = b.u8();
        let mut want: Vec<MembershipOutput> = Vec::new();
        let put = MembershipOutput::PutHeartbeat { bucket, member: me.clone(), ttl };
        match op % 8 {
            0 => {
                ms.join(now);
                model.leaving = false;
                model.joined = true;
                model.next = Some(now + ttl / 3);
                want.push(put);
            }
            1 => {
                ms.leave();
                if !model.leaving {
                    model.leaving = true;
                    model.next = None;
                    want.push(MembershipOutput::DeleteHeartbeat { bucket, member: me.clone() });
                }
            }
            2 => {
                // Time passes; the driver calls handle_timeout at (or after) the deadline, or early.
                let d = b.u8();
                now = match (d % 4, ms.poll_timeout()) {
                    (0, Some(t)) => t.max(now),
                    _ => Time(now.0.saturating_add(u64::from(d) * u64::from(d) * 10)),
                };
                ms.handle_timeout(now);
                if model.next.is_some_and(|t| t <= now) {
                    model.next = Some(now + ttl / 3);
                    want.push(put);
                }
            }
            _ => {
                let on = if b.u8() & 7 == 0 { Bucket::ALL[b.below(3)] } else { bucket };
                let r = b.u8();
                rev = match r % 8 {
                    0 => rev.saturating_sub(u64::from(r >> 3)),
                    1 => rev,
                    _ => rev + 1 + u64::from(r >> 6),
                };
                let c = b.u8();
                let change = if c & 1 == 0 {
                    MemberChange::Up(MemberRef { id: id(usize::from(c >> 1)), incarnation: 1 + u64::from(c >> 4) % 3 })
                } else {
                    MemberChange::Down(id(usize::from(c >> 1)))
                };
                let obs = MemberObservation::new(on, rev, change.clone());
                let changed = ms.handle_observation(now, &obs);
                let mut model_changed = false;
                if on == bucket {
                    assert_eq!(standalone.observe(&obs), changed, "standalone LiveSet disagrees");
                    if rev <= model.rev {
                        model.ignored += 1;
                    } else {
                        model.rev = rev;
                        model_changed = match &change {
                            MemberChange::Up(m) => {
                                model.live.insert(m.id.clone(), m.incarnation) != Some(m.incarnation)
                            }
                            MemberChange::Down(id) => model.live.remove(id).is_some(),
                        };
                    }
                    match &change {
                        MemberChange::Down(id)
                            if *id == me.id && model_changed && !model.leaving && model.next.is_some() =>
                        {
                            model.next = Some(now + ttl / 3);
                            want.push(put);
                        }
                        MemberChange::Up(m) if m.id == me.id && m.incarnation > me.incarnation && model_changed => {
                            model.conflicts += 1;
                        }
                        _ => {}
                    }
                }
                assert_eq!(changed, model_changed, "observe({obs:?}) reported the wrong change");
            }
        }

        let got: Vec<MembershipOutput> = std::iter::from_fn(|| ms.poll_output()).collect();
        assert_eq!(got, want, "outputs after op {op}");
        for o in &got {
            match o {
                MembershipOutput::PutHeartbeat { ttl: t, member, .. } => {
                    assert!(!model.leaving, "a heartbeat after a leave");
                    assert_eq!((*t, member), (ttl, &me));
                    last_put = Some(now);
                }
                MembershipOutput::DeleteHeartbeat { member, .. } => {
                    assert_eq!(member, &me);
                    last_put = None;
                }
            }
        }

        // The live set, three ways.
        let live = ms.view().members();
        let want_live: Vec<MemberRef> =
            model.live.iter().map(|(id, inc)| MemberRef { id: id.clone(), incarnation: *inc }).collect();
        assert_eq!(live, want_live, "live set");
        assert!(ms.view().equals(&want_live));
        assert_eq!(ms.view(), &standalone, "membership's view and a standalone LiveSet");
        assert_eq!(ms.view().len(), model.live.len());
        assert_eq!(ms.view().is_empty(), model.live.is_empty());
        assert_eq!(ms.view().rev(), model.rev);
        assert_eq!(ms.view().ignored_total, model.ignored);
        for i in 0..IDS.len() {
            assert_eq!(ms.view().incarnation(&id(i)), model.live.get(&id(i)).copied());
        }

        // The heartbeat schedule: ttl/3 after the last heartbeat while live; nothing after a leave.
        assert_eq!(ms.poll_timeout(), model.next, "heartbeat timer");
        assert_eq!(ms.is_leaving(), model.leaving);
        if model.leaving || !model.joined {
            assert_eq!(ms.poll_timeout(), None);
        } else {
            let last = last_put.expect("a joined member has written its key");
            assert_eq!(ms.poll_timeout(), Some(Time(last.0.saturating_add(period))));
            assert!(period <= millis(ttl), "refresh period longer than the ttl");
        }
        assert_eq!(ms.id_conflicts_total, model.conflicts);
    }
}
