//! The ui role: its HTTP API and status page (`api`, its notification policy `policy`, `openapi`, `page/`), the live feed of changes (`stream`),
//! what it asks of the loop that holds the log and how the answers render (`views`), the log reader of a ui
//! without an engine (`reader`), and the inbox its writes through ingress hear their answers on (`inbox`).

pub mod api;
mod inbox;
pub(crate) mod openapi;
pub mod policy;
pub mod reader;
pub mod stream;
pub mod views;

pub use api::{Api, Writes};
pub use inbox::Inbox;
pub use stream::{Changes, Feed};
pub use views::{Backend, UiRequest};
