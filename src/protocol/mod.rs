//! Wire types: requests, the Response object, items and stream events. Serde only; nothing
//! here knows about HTTP, SQL or the run loop.

pub mod events;
pub mod ids;
pub mod items;
pub mod request;
pub mod response;
pub mod tools;
pub mod transcript;
