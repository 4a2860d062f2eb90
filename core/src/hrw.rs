//! Rendezvous (highest-random-weight) ownership. The hash is part of the wire contract: every build on every
//! platform must pick the same owner, so it is spelled out here and pinned by `tests/hrw_vectors.json`.
//!
//! ```text
//! key(s)          = XXH3-64(utf8 bytes of s, seed 0)                  (the published XXH3 algorithm)
//! score(m, o)     = mix64(key(member id m) XOR key(object id o))
//! mix64(z)        = z ^= z >> 30; z *= 0xbf58476d1ce4e5b9; z ^= z >> 27; z *= 0x94d049bb133111eb; z ^= z >> 31
//!                   (the SplitMix64 finalizer, wrapping 64-bit arithmetic)
//! owner(o, M)     = the member m of M with the highest score(m, o); on a tie the greater member id (bytewise)
//! ```
//!
//! Only the member id is hashed, not its incarnation: a restarted engine gets its objects back. Whether the
//! incarnation that wrote an event is the one in the epoch record is the fence's question, not HRW's.

use crate::model::{MemberRef, ObjectId};
use xxhash_rust::xxh3::xxh3_64;

/// XXH3-64 of a string's bytes: the key of a member id or an object id.
#[inline]
pub fn key(s: &str) -> u64 {
    xxh3_64(s.as_bytes())
}

/// The SplitMix64 finalizer: a bijection with full avalanche, so distinct inputs never tie.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[inline]
pub fn score(member_key: u64, object_key: u64) -> u64 {
    mix64(member_key ^ object_key)
}

/// A member list prepared for ownership questions: the member keys are hashed once.
#[derive(Clone, Debug, Default)]
pub struct Ownership {
    members: Vec<MemberRef>,
    keys: Vec<u64>,
}

impl Ownership {
    /// `members` in any order; duplicates by id are the caller's bug (the epoch record never has them).
    pub fn new(members: &[MemberRef]) -> Ownership {
        let mut members = members.to_vec();
        members.sort();
        let keys = members.iter().map(|m| key(m.id.as_str())).collect();
        Ownership { members, keys }
    }

    pub fn members(&self) -> &[MemberRef] {
        &self.members
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The index into `members()` of the owner of an object with key `object_key`; `None` with no members.
    #[inline]
    pub fn owner_index(&self, object_key: u64) -> Option<usize> {
        let (&first, rest) = self.keys.split_first()?;
        let (mut best, mut at) = (score(first, object_key), 0);
        for (i, &mk) in rest.iter().enumerate() {
            let s = score(mk, object_key);
            // Members are sorted by id, so on a tie the later one has the greater id and wins.
            if s >= best {
                (best, at) = (s, i + 1);
            }
        }
        Some(at)
    }

    #[inline]
    pub fn owner_of_key(&self, object_key: u64) -> Option<&MemberRef> {
        self.owner_index(object_key).map(|i| &self.members[i])
    }

    pub fn owner(&self, object: &ObjectId) -> Option<&MemberRef> {
        self.owner_of_key(key(object.as_str()))
    }

    /// Whether `writer` (id and incarnation) owns the object under this member list.
    #[inline]
    pub fn is_owner(&self, object_key: u64, writer: &MemberRef) -> bool {
        self.owner_of_key(object_key) == Some(writer)
    }
}

/// Owner index for each object key, over one member list: the bulk form used on every epoch change.
pub fn assign(ownership: &Ownership, object_keys: &[u64], out: &mut Vec<u32>) {
    out.clear();
    out.reserve(object_keys.len());
    let keys = &ownership.keys;
    if keys.is_empty() {
        out.resize(object_keys.len(), u32::MAX);
        return;
    }
    // Four objects at a time: their scores are independent, so the CPU overlaps them instead of waiting on one
    // object's running maximum. Same rule as `owner_index` (highest score, ties to the later member).
    let mut chunks = object_keys.chunks_exact(4);
    for c in &mut chunks {
        let mut best = [0u64; 4];
        let mut at = [0u32; 4];
        for (i, &mk) in keys.iter().enumerate() {
            for j in 0..4 {
                let s = score(mk, c[j]);
                if i == 0 || s >= best[j] {
                    best[j] = s;
                    at[j] = i as u32;
                }
            }
        }
        out.extend_from_slice(&at);
    }
    for &ok in chunks.remainder() {
        out.push(ownership.owner_index(ok).map_or(u32::MAX, |i| i as u32));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::MemberId;

    fn m(id: &str) -> MemberRef {
        MemberRef { id: MemberId::new(id).unwrap(), incarnation: 1 }
    }

    #[test]
    fn xxh3_matches_the_published_reference() {
        // XXH3_64bits("", 0) from the xxHash specification's sanity values.
        assert_eq!(key(""), 0x2D06_8005_38D3_94C2);
    }

    #[test]
    fn mix64_is_splitmix64_finalizer() {
        // SplitMix64 with state 0 yields mix64(0x9e3779b97f4a7c15) as its first output.
        assert_eq!(mix64(0x9e37_79b9_7f4a_7c15), 0xe220_a839_7b1d_cdaf);
    }

    #[test]
    fn no_members_no_owner() {
        let o = Ownership::new(&[]);
        assert_eq!(o.owner(&ObjectId::new("x").unwrap()), None);
    }

    #[test]
    fn owner_ignores_member_order() {
        let a = Ownership::new(&[m("a"), m("b"), m("c")]);
        let b = Ownership::new(&[m("c"), m("a"), m("b")]);
        for i in 0..200 {
            let obj = ObjectId::new(format!("obj-{i}")).unwrap();
            assert_eq!(a.owner(&obj), b.owner(&obj));
        }
    }
}
