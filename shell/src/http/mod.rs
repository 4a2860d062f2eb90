//! The HTTP plumbing every process has: the listener on `-listen` with its limits and TLS (`serve`) and who
//! may do what (`guard`, the tokens).

pub mod guard;
pub mod serve;
