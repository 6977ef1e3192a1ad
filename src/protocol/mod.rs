//! Wire types: requests, the Response object, items and stream events. Serde, and the JSON
//! Schemas of the OpenAPI document derived from them; nothing here knows about HTTP, SQL or
//! the run loop.

pub mod conversation;
pub mod events;
pub mod field;
pub mod ids;
pub mod items;
pub mod limits;
pub mod request;
pub mod response;
pub mod schema;
pub mod tools;
pub mod transcript;
