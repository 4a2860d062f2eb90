//! What every role that follows the log shares (the engine, the ui's reader, the sink and the notifier): the
//! membership watch and the log follower merged into one stream of events (`subscription`), the snapshot a reader
//! starts from and jumps to (`snapshots`), and for a role that is a member of a bucket, its key writer
//! (`heartbeat`); for the engine, the sink and the notifier, all of it with their own I/O answers as one loop
//! (`reading`).

mod heartbeat;
mod reading;
pub mod snapshots;
mod subscription;

pub use reading::{Reading, RoleHandle, RoleQuery, Wake};
pub use subscription::{Buckets, Followed, Subscription};
