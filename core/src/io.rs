//! Why a request the core asked its driver to carry out failed: one type for every role's I/O answers (the
//! store, the log, a forward, a snapshot write, a progress record), so a core decides on the kind and never on a
//! driver's wording, and the simulator hands in the same values the shell does.

/// A failed request, as the driver tells it. The detail is for logs, `/healthz` reasons and counters; what a
/// core does depends only on the kind.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IoError {
    /// No answer within the driver's bound: the request may still have landed (a publish, a commit, a write).
    #[error("timeout")]
    Timeout,
    /// Nobody could take the request now (connection lost, the server or database restarting, no responders):
    /// the same again, later, may succeed.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The other side took the request and refused it (a constraint, an encoding, a value too long, a
    /// permission): the same again would fail again.
    #[error("refused: {0}")]
    Refused(String),
}

impl IoError {
    pub fn unavailable(detail: impl std::fmt::Display) -> IoError {
        IoError::Unavailable(detail.to_string())
    }

    pub fn refused(detail: impl std::fmt::Display) -> IoError {
        IoError::Refused(detail.to_string())
    }
}
