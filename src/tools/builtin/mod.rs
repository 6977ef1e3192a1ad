//! The compiled-in handlers (tool server `builtin`, SPEC §12).
//!
//! To add one: implement [`crate::tools::ToolHandler`] in a file here and list it in
//! [`handlers`]. Its schema is checked at start-up and its name must be unique.

mod calculator;
mod current_time;
mod fetch_url;

use std::sync::Arc;

use crate::config::ToolsConfig;
use crate::tools::ToolHandler;

pub use calculator::Calculator;
pub use current_time::CurrentTime;
pub use fetch_url::FetchUrl;

/// Every compiled-in handler.
pub fn handlers(config: &ToolsConfig) -> Vec<Arc<dyn ToolHandler>> {
    vec![
        Arc::new(CurrentTime),
        Arc::new(Calculator),
        Arc::new(FetchUrl::new(config.fetch_url.clone())),
    ]
}
