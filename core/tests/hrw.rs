//! HRW ownership: the pinned test vectors (every build on every platform must agree with them forever) and
//! the properties users rely on: the owner is a member, it is deterministic, a join moves objects only to the
//! newcomer, a leave moves only the leaver's objects, and objects spread evenly.

use jaque_core::hrw::{self, Ownership};
use jaque_core::{MemberId, MemberRef, ObjectId};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

const VECTORS: &str = "tests/hrw_vectors.json";

#[derive(Serialize, Deserialize, PartialEq, Debug)]
struct Vectors {
    about: String,
    keys: Vec<KeyVector>,
    owners: Vec<OwnerVector>,
}

#[derive(Serialize, Deserialize, PartialEq, Debug)]
struct KeyVector {
    s: String,
    key: String,
}

#[derive(Serialize, Deserialize, PartialEq, Debug)]
struct OwnerVector {
    members: Vec<String>,
    object: String,
    owner: String,
}

fn m(id: &str) -> MemberRef {
    MemberRef { id: MemberId::new(id).unwrap(), incarnation: 1 }
}

fn owner(members: &[String], object: &str) -> String {
    let ms: Vec<MemberRef> = members.iter().map(|s| m(s)).collect();
    Ownership::new(&ms).owner(&ObjectId::new(object).unwrap()).unwrap().id.to_string()
}

fn generate() -> Vectors {
    let lists: Vec<Vec<&str>> = vec![
        vec!["engine-1"],
        vec!["a", "b"],
        vec!["a", "b", "c"],
        vec!["engine-1", "engine-2", "engine-3"],
        vec!["n1", "n2", "n3", "n4", "n5"],
        vec!["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf"],
        vec!["e0", "e1", "e2", "e3", "e4", "e5", "e6", "e7", "e8", "e9"],
    ];
    let objects = [
        "web",
        "db:5432",
        "obj-0",
        "obj-1",
        "https.example",
        "x",
        "check_disk@host-7",
        "a-very-long-object-name.with.dots:and:colons",
    ];
    let mut owners = Vec::new();
    for (i, list) in lists.iter().enumerate() {
        let members: Vec<String> = list.iter().map(|s| s.to_string()).collect();
        for (j, o) in objects.iter().enumerate() {
            if (i + j) % 2 == 0 || list.len() > 5 {
                owners.push(OwnerVector { owner: owner(&members, o), members: members.clone(), object: o.to_string() });
            }
        }
    }
    let keys = ["", "a", "engine-1", "web", "obj-0", "db:5432"]
        .iter()
        .map(|s| KeyVector { s: s.to_string(), key: format!("{:#018x}", hrw::key(s)) })
        .collect();
    Vectors {
        about: "jaque HRW: key(s) = XXH3-64(s, seed 0); score = splitmix64_finalizer(key(member) ^ key(object)); \
                owner = highest score, ties to the greater member id. See core/src/hrw.rs."
            .into(),
        keys,
        owners,
    }
}

#[test]
fn every_build_agrees_with_the_committed_vectors() {
    if std::env::var_os("JAQUE_WRITE_HRW_VECTORS").is_some() {
        std::fs::write(VECTORS, serde_json::to_string_pretty(&generate()).unwrap() + "\n").unwrap();
    }
    let committed: Vectors = serde_json::from_str(&std::fs::read_to_string(VECTORS).unwrap()).unwrap();
    assert!(committed.owners.len() >= 20, "at least 20 owner vectors");
    for k in &committed.keys {
        assert_eq!(format!("{:#018x}", hrw::key(&k.s)), k.key, "key({:?})", k.s);
    }
    for v in &committed.owners {
        assert_eq!(owner(&v.members, &v.object), v.owner, "owner of {:?} over {:?}", v.object, v.members);
    }
}

fn member_list() -> impl Strategy<Value = Vec<String>> {
    proptest::collection::btree_set("[a-z][a-z0-9-]{0,8}", 1..12).prop_map(|s| s.into_iter().collect())
}

fn objects() -> impl Strategy<Value = Vec<String>> {
    proptest::collection::vec("[a-z0-9._:-]{1,20}", 1..60)
}

fn owners_of(members: &[String], objs: &[String]) -> Vec<String> {
    let own = Ownership::new(&members.iter().map(|s| m(s)).collect::<Vec<_>>());
    objs.iter().map(|o| own.owner(&ObjectId::new(o.as_str()).unwrap()).unwrap().id.to_string()).collect()
}

proptest! {
    /// The bulk form (four objects at a time) picks the same owner as the one-object form, ties included.
    #[test]
    fn assign_agrees_with_owner_index(members in proptest::collection::btree_set("[a-z]{1,3}", 0..8), keys in proptest::collection::vec(any::<u64>(), 0..40)) {
        let own = Ownership::new(&members.iter().map(|s| m(s)).collect::<Vec<_>>());
        let mut out = Vec::new();
        hrw::assign(&own, &keys, &mut out);
        let one: Vec<u32> = keys.iter().map(|&k| own.owner_index(k).map_or(u32::MAX, |i| i as u32)).collect();
        prop_assert_eq!(out, one);
    }

    #[test]
    fn the_owner_is_a_member_and_deterministic(members in member_list(), objs in objects()) {
        let a = owners_of(&members, &objs);
        let mut shuffled = members.clone();
        shuffled.reverse();
        prop_assert_eq!(&a, &owners_of(&shuffled, &objs));
        for o in &a {
            prop_assert!(members.contains(o));
        }
    }

    #[test]
    fn a_join_moves_objects_only_to_the_newcomer(members in member_list(), newcomer in "[A-Z][a-z]{0,6}", objs in objects()) {
        let before = owners_of(&members, &objs);
        let mut joined = members.clone();
        joined.push(newcomer.clone());
        let after = owners_of(&joined, &objs);
        for (b, a) in before.iter().zip(&after) {
            prop_assert!(a == b || *a == newcomer, "moved from {} to {}", b, a);
        }
    }

    #[test]
    fn a_leave_moves_only_the_leavers_objects(members in member_list(), leaver_ix in any::<prop::sample::Index>(), objs in objects()) {
        prop_assume!(members.len() >= 2);
        let leaver = members[leaver_ix.index(members.len())].clone();
        let before = owners_of(&members, &objs);
        let rest: Vec<String> = members.iter().filter(|x| **x != leaver).cloned().collect();
        let after = owners_of(&rest, &objs);
        for (b, a) in before.iter().zip(&after) {
            prop_assert!(a == b || *b == leaver, "{} moved to {} though {} stayed", b, a, b);
        }
    }
}

#[test]
fn objects_spread_evenly() {
    for n in [2usize, 3, 5, 10] {
        let members: Vec<String> = (0..n).map(|i| format!("engine-{i}")).collect();
        let objs: Vec<String> = (0..20_000).map(|i| format!("obj-{i}")).collect();
        let mut count: BTreeMap<String, usize> = BTreeMap::new();
        for o in owners_of(&members, &objs) {
            *count.entry(o).or_default() += 1;
        }
        let fair = objs.len() / n;
        for (member, c) in count {
            // A binomial spread: a share more than 10% off the fair one means the hash is biased.
            assert!(c.abs_diff(fair) * 10 < fair, "{member} got {c} of {} over {n} members", objs.len());
        }
    }
}
