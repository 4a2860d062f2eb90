//! Where a command goes: applied by its owner, forwarded once to the owner, or dropped as not owned.
//! This is the whole one-hop rule; the engine only carries out what `route` says.

use crate::model::MemberRef;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// This engine owns the object: apply here.
    Apply,
    /// Send it once to the owner over `jaque.cmd.<engine-id>`, with hop 1.
    Forward(MemberRef),
    /// A forwarded command reached a non-owner: drop it and count `jaque_engine_not_owned_total`.
    NotOwned,
    /// Nobody can take it now (no owner, forwarding off, this engine leaving); the submitter may retry.
    Unavailable(&'static str),
}

/// The routing decision for a command with `hop` at engine `me`, given the owner under the epoch in force.
pub fn route(owner: Option<&MemberRef>, me: &MemberRef, hop: u8, forwarding: bool, leaving: bool) -> Route {
    match owner {
        Some(o) if o == me && leaving => Route::Unavailable("the owning engine is leaving"),
        Some(o) if o == me => Route::Apply,
        // Never a second hop, whoever owns it now.
        _ if hop >= 1 => Route::NotOwned,
        // Our own id under an older incarnation: ownership is about to move to us; do not send to ourselves.
        Some(o) if o.id == me.id => Route::Unavailable("ownership is moving to this engine"),
        Some(o) if forwarding => Route::Forward(o.clone()),
        Some(_) => Route::Unavailable("owned by another engine and forwarding is off"),
        None => Route::Unavailable("no engine owns the object"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::MemberId;

    fn m(id: &str, inc: u64) -> MemberRef {
        MemberRef { id: MemberId::new(id).unwrap(), incarnation: inc }
    }

    #[test]
    fn owner_applies_non_owner_forwards_once() {
        let (a, b) = (m("a", 1), m("b", 1));
        assert_eq!(route(Some(&a), &a, 0, true, false), Route::Apply);
        assert_eq!(route(Some(&a), &a, 1, true, false), Route::Apply);
        assert_eq!(route(Some(&b), &a, 0, true, false), Route::Forward(b.clone()));
        assert_eq!(route(Some(&b), &a, 1, true, false), Route::NotOwned);
        assert_eq!(route(None, &a, 1, true, false), Route::NotOwned);
        assert!(matches!(route(None, &a, 0, true, false), Route::Unavailable(_)));
    }

    #[test]
    fn nothing_is_forwarded_without_forwarding() {
        let (a, b) = (m("a", 1), m("b", 1));
        assert!(matches!(route(Some(&b), &a, 0, false, false), Route::Unavailable(_)));
    }

    #[test]
    fn a_stale_incarnation_of_ourselves_is_not_a_forward_target() {
        assert!(matches!(route(Some(&m("a", 1)), &m("a", 2), 0, true, false), Route::Unavailable(_)));
    }
}
