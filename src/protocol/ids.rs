//! Object ids: a prefix naming the kind, then a UUIDv7 in lowercase hex (SPEC §4), so ids sort
//! by creation time.

pub const RESPONSE: &str = "resp";
pub const MESSAGE: &str = "msg";
pub const FUNCTION_CALL: &str = "fc";
pub const FUNCTION_CALL_OUTPUT: &str = "fco";
pub const CALL: &str = "call";
pub const CUSTOM_TOOL_CALL: &str = "ctc";
pub const LOCAL_SHELL_CALL: &str = "lsh";
pub const MCP_CALL: &str = "mcp";
pub const MCP_LIST_TOOLS: &str = "mcpl";
pub const MCP_APPROVAL_REQUEST: &str = "mcpr";
pub const MCP_APPROVAL_RESPONSE: &str = "mcpa";
pub const REASONING: &str = "rs";
/// A compaction item, and the `response.compaction` object that returns it.
pub const COMPACTION: &str = "cmp";
pub const COMPACTION_RESULT: &str = "cmpr";
pub const ADDITIONAL_TOOLS: &str = "at";
pub const API_KEY: &str = "key";
pub const CONVERSATION: &str = "conv";

/// A new conversation id: `conv_` and 48 hex digits (a UUIDv7, so ids sort by creation time,
/// then 64 random bits), the length OpenAI's have.
pub fn new_conversation() -> String {
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!(
        "{CONVERSATION}_{}{}",
        uuid::Uuid::now_v7().simple(),
        &random[..16]
    )
}

/// A new id of the given kind, e.g. `new(RESPONSE)` = `resp_0193…`.
pub fn new(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::now_v7().simple())
}

/// Fills an empty id in place.
pub fn assign(id: &mut String, prefix: &str) {
    if id.is_empty() {
        *id = new(prefix);
    }
}

/// How maps keyed by run ids hash them where they are looked up per event (the event writer,
/// the SQLite store): foldhash instead of SipHash, which took 2.6 % of a text run's
/// instructions. The ids are the service's own, not chosen by clients.
pub type RunIdHasher = foldhash::fast::RandomState;
