//! Where a ui write goes, and how its outcome reads over HTTP. Pure decisions, so the simulator and the tests
//! exercise the same rules the shell serves.

use crate::hrw::Ownership;
use crate::model::{MemberRef, ObjectId, Outcome};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteRoute {
    /// An engine runs in this process: hand the command to it (it forwards if it does not own the object).
    LocalEngine,
    /// No engine here but NATS coordination: a hop-0 request to the owner the ui's log view names
    /// (`jaque.cmd.<owner>`), or on `jaque.work.cmd.ingress` (engines' queue group) when it names none or the
    /// owner has no responder. Either way an engine that does not own the object forwards it once.
    Ingress,
    /// No engine here and no coordination: the page says 503.
    Reject,
}

pub fn write_route(local_engine: bool, nats_coordination: bool) -> WriteRoute {
    if local_engine {
        WriteRoute::LocalEngine
    } else if nats_coordination {
        WriteRoute::Ingress
    } else {
        WriteRoute::Reject
    }
}

/// Where a ui without an engine sends a write first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Submit {
    /// Straight to the owner its copy of the log names: a hop-0 request on `jaque.cmd.<owner>`. A view that is
    /// behind is harmless, since an engine that does not own the object forwards it once. If the owner has no
    /// responder (it died and the epoch has not moved yet), the write goes through ingress instead.
    Owner(MemberRef),
    /// Through `jaque.work.cmd.ingress`: the ui has no view yet (reading the log, no epoch in force).
    Ingress,
}

/// The first hop of a write from a ui whose log view has `ownership` in force (`None` before it caught up).
pub fn submit_to(ownership: Option<&Ownership>, object: &ObjectId) -> Submit {
    match ownership.and_then(|o| o.owner(object)) {
        Some(owner) => Submit::Owner(owner.clone()),
        None => Submit::Ingress,
    }
}

/// Seconds a caller should wait before retrying a 503.
pub const RETRY_AFTER_SECS: u32 = 1;

/// The HTTP status of an outcome, and whether it carries `Retry-After`.
pub fn http_status(outcome: &Outcome) -> (u16, bool) {
    match outcome {
        Outcome::Applied { .. } => (200, false),
        Outcome::NotFound { .. } => (404, false),
        Outcome::Rejected { .. } => (400, false),
        Outcome::NotOwned | Outcome::Unavailable { .. } => (503, true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ui_without_engine_or_coordination_rejects_writes() {
        assert_eq!(write_route(false, false), WriteRoute::Reject);
        assert_eq!(write_route(false, true), WriteRoute::Ingress);
        assert_eq!(write_route(true, false), WriteRoute::LocalEngine);
    }

    #[test]
    fn a_ui_writes_to_the_owner_it_knows_and_through_ingress_otherwise() {
        let m = |id: &str| MemberRef { id: crate::model::MemberId::new(id).unwrap(), incarnation: 1 };
        let object = ObjectId::new("web").unwrap();
        assert_eq!(submit_to(None, &object), Submit::Ingress);
        assert_eq!(submit_to(Some(&Ownership::new(&[])), &object), Submit::Ingress);
        let own = Ownership::new(&[m("a"), m("b"), m("c")]);
        assert_eq!(submit_to(Some(&own), &object), Submit::Owner(own.owner(&object).unwrap().clone()));
    }

    #[test]
    fn not_owned_and_unavailable_are_503_with_retry_after() {
        assert_eq!(http_status(&Outcome::NotOwned), (503, true));
        assert_eq!(http_status(&Outcome::Unavailable { reason: "x".into() }), (503, true));
        assert_eq!(http_status(&Outcome::Rejected { reason: "x".into() }), (400, false));
    }
}
