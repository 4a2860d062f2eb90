//! The versions of what jaque writes and reads: one cluster format for everything members share (log entries,
//! membership and notifier values, commands and outcomes, check work and results), and a version of each
//! format kept on its own (snapshots, a `-data-dir`, the sink's schema). `docs/upgrading.md` is the rule for
//! each: which versions read which, which may share a cluster, in what order to upgrade and how to roll back.
//!
//! **The cluster format.** Every member announces the cluster format it speaks in its membership value
//! (`{"incarnation": n, "format": f}`; a value without one is from a build before v0.1.0, which speaks 1). The
//! engine that proposes an epoch records the cluster's *active* format in the record: the lowest any live
//! member of any bucket speaks, never lower than the record before it (it only rises), and never higher than
//! what the proposer itself speaks or is held at (`-hold-format`). A writer uses a format or a kind of entry
//! only once the record in force where it stands in the log allows it (the fence's discipline), so a cluster
//! with one old member never writes what that member cannot read.
//!
//! An entry that needs more than format 1 says so (`"v": 2`); a reader that speaks less does not fold it
//! (folding an entry it does not understand would give it a state no other reader has): it stops there and
//! says which build it needs. Every reader that speaks the format folds it, wherever it stands, so the readers
//! that read on never disagree about it.

/// The cluster format this build speaks: the highest it reads and the highest it writes once the cluster's
/// active format allows it.
pub const CLUSTER_FORMAT: u32 = 4;

/// The lowest cluster format this build reads and writes: what a value without a `format` (a build before
/// v0.1.0) speaks.
pub const OLDEST_CLUSTER_FORMAT: u32 = 1;

/// The snapshot version this build writes once the active cluster format is 4 (it holds the notification
/// policy, `crate::policy`; version 3's objects may hold soft states and flapping, `crate::alert`); it reads every
/// version from `OLDEST_SNAPSHOT_VERSION` up to this one.
pub const SNAPSHOT_VERSION: u32 = 4;

/// Snapshot version 1 (builds before v0.1.0): the same fields, some of them absent in the oldest (tombstones,
/// time marks, two counters), read as empty.
pub const OLDEST_SNAPSHOT_VERSION: u32 = 1;

/// The snapshot version a writer uses under the active cluster format `active`.
pub fn snapshot_version(active: u32) -> u32 {
    active.clamp(OLDEST_SNAPSHOT_VERSION, SNAPSHOT_VERSION)
}

/// The cluster format an entry or value that does not name one needs: 1.
pub fn unnamed() -> u32 {
    OLDEST_CLUSTER_FORMAT
}

/// Whether a format is 1 (left out when a value is written, so format-1 bytes stay what builds before v0.1.0
/// wrote).
pub fn is_unnamed(f: &u32) -> bool {
    *f == OLDEST_CLUSTER_FORMAT
}

/// The cluster format a snapshot of `version` needs of its reader: the one whose writers write that version,
/// and for a version newer than this build knows, one newer than its own.
pub fn snapshot_needs(version: u32) -> u32 {
    match version {
        v if v <= OLDEST_SNAPSHOT_VERSION => OLDEST_CLUSTER_FORMAT,
        // Versions 2 to 4 are written under the cluster format of the same number.
        v if v <= SNAPSHOT_VERSION => v,
        _ => CLUSTER_FORMAT + 1,
    }
}

/// Why a command is refused under the active cluster format `active`: its event needs a newer one (a member of an
/// older build could not read it, or would apply only what it can decode of it). `None`: it may be written.
/// The engine asks where a command comes in and where it is applied; a ui without an engine asks before it
/// submits, since the engine that claims the write may be of an older build that does not ask.
pub fn refusal(kind: &crate::model::CommandKind, active: u32) -> Option<String> {
    let needs = kind.needs();
    (needs > active).then(|| {
        format!(
            "{} needs cluster format {needs}; the cluster's active format is {active}: it moves up once every member \
             runs a build that speaks {needs} (docs/upgrading.md)",
            kind.name()
        )
    })
}

/// The versions this build writes and reads, as `jaque --version` prints them after its own version.
pub fn describe() -> String {
    format!(
        "cluster format {CLUSTER_FORMAT} (reads {OLDEST_CLUSTER_FORMAT}..={CLUSTER_FORMAT}; writes {CLUSTER_FORMAT} \
         once every member speaks it)\nsnapshot version {SNAPSHOT_VERSION} (reads \
         {OLDEST_SNAPSHOT_VERSION}..={SNAPSHOT_VERSION})"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_versions_and_the_formats_that_write_them_agree() {
        assert_eq!(snapshot_version(CLUSTER_FORMAT), SNAPSHOT_VERSION);
        assert_eq!(snapshot_version(OLDEST_CLUSTER_FORMAT), OLDEST_SNAPSHOT_VERSION);
        for format in OLDEST_CLUSTER_FORMAT..=CLUSTER_FORMAT {
            assert_eq!(snapshot_needs(snapshot_version(format)), format);
        }
        assert!(snapshot_needs(SNAPSHOT_VERSION + 1) > CLUSTER_FORMAT);
    }
}
