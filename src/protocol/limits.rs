//! What one request may ask for: the `[limits]` section of the configuration, read by the
//! request's validation and by the check of its tools.

use serde::Deserialize;

/// Limits on what one request may ask for (the `[limits]` section of the configuration); each
/// one exceeded is a 400 naming the field.
#[derive(Clone, Debug, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct RequestLimits {
    /// Tools a request declares (a namespace's tools and an `additional_tools` item's count).
    pub max_tools: usize,
    /// Bytes of one tool's parameter schema (as JSON).
    pub max_schema_bytes: usize,
    /// Nesting of one tool's parameter schema.
    pub max_schema_depth: usize,
    /// Items of `input`.
    pub max_input_items: usize,
    /// Bytes of `input` (as JSON).
    pub max_input_bytes: usize,
    /// Bytes of `instructions`.
    pub max_instructions_bytes: usize,
    /// Pairs of `metadata`, and the characters of a key and of a value (the standard's 16,
    /// 64 and 512).
    pub metadata_max_pairs: usize,
    pub metadata_max_key_chars: usize,
    pub metadata_max_value_chars: usize,
    /// Bytes of a server tool's output: a longer one is cut, with a marker saying so.
    pub max_tool_output_bytes: usize,
}

impl Default for RequestLimits {
    fn default() -> RequestLimits {
        RequestLimits {
            max_tools: 128,
            max_schema_bytes: 65_536,
            max_schema_depth: 32,
            max_input_items: 2_048,
            max_input_bytes: 4_194_304,
            max_instructions_bytes: 262_144,
            metadata_max_pairs: 16,
            metadata_max_key_chars: 64,
            metadata_max_value_chars: 512,
            max_tool_output_bytes: 1_048_576,
        }
    }
}
