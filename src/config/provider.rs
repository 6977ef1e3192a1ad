//! The words a provider's configuration uses to say what kind of server it is (SPEC §14):
//! its profile, where its models put their reasoning, and when reasoning is sent back. What
//! each word does to the requests lives with the client, in `llm/profile.rs`.

use serde::{Deserialize, Serialize};

/// Which provider's documented dialect of chat completions a provider speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    Openai,
    Azure,
    Deepseek,
    Vllm,
    Ollama,
    Llamacpp,
    Openrouter,
    Gemini,
    Anthropic,
    Generic,
}

impl Profile {
    pub const ALL: [Profile; 10] = [
        Profile::Openai,
        Profile::Azure,
        Profile::Deepseek,
        Profile::Vllm,
        Profile::Ollama,
        Profile::Llamacpp,
        Profile::Openrouter,
        Profile::Gemini,
        Profile::Anthropic,
        Profile::Generic,
    ];

    /// The profile of a provider that names none: the one whose public endpoint `base_url`
    /// is, else `generic` (a server run by the operator: vLLM, Ollama, llama.cpp, …).
    pub fn for_url(base_url: &str) -> Profile {
        let host = url::Url::parse(base_url)
            .ok()
            .and_then(|u| u.host_str().map(str::to_ascii_lowercase))
            .unwrap_or_default();
        let known = [
            ("api.openai.com", Profile::Openai),
            (".openai.azure.com", Profile::Azure),
            (".services.ai.azure.com", Profile::Azure),
            ("api.deepseek.com", Profile::Deepseek),
            ("openrouter.ai", Profile::Openrouter),
            ("generativelanguage.googleapis.com", Profile::Gemini),
            ("api.anthropic.com", Profile::Anthropic),
        ];
        known
            .iter()
            .find(|(suffix, _)| host == suffix.trim_start_matches('.') || host.ends_with(suffix))
            .map_or(Profile::Generic, |(_, profile)| *profile)
    }

    /// The name written in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            Profile::Openai => "openai",
            Profile::Azure => "azure",
            Profile::Deepseek => "deepseek",
            Profile::Vllm => "vllm",
            Profile::Ollama => "ollama",
            Profile::Llamacpp => "llamacpp",
            Profile::Openrouter => "openrouter",
            Profile::Gemini => "gemini",
            Profile::Anthropic => "anthropic",
            Profile::Generic => "generic",
        }
    }
}

/// Where a provider's streamed reasoning is read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasoningFormat {
    /// A delta's `reasoning_content` (DeepSeek, llama.cpp, older vLLM) or `reasoning` (vLLM,
    /// Ollama, OpenRouter), whichever it carries.
    Fields,
    /// Those fields, and `<think>…</think>` at the start of the content (models served
    /// without a reasoning parser).
    ThinkTags,
    /// None: whatever the model sends is answer text.
    None,
}

/// Which of its earlier reasoning a model is sent again, on the assistant message it preceded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SendBack {
    Never,
    /// The reasoning since the last user message: the turns of one tool-calling loop (as
    /// Qwen3's chat template renders it).
    TurnLoop,
    /// The reasoning of every assistant message that called tools, in every later request;
    /// such a message without reasoning carries an empty one (DeepSeek's thinking mode).
    ToolCalls,
    Always,
}

/// How a provider's models are offered tools and write their calls (SPEC §15).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolProtocol {
    /// The chat-completions `tools` field and `tool_calls`.
    #[default]
    Native,
    /// Definitions in the system prompt; calls as `<tool_call>{…}</tool_call>` in the text.
    Hermes,
    /// Definitions in the system prompt; calls as `<<<[TOOL_REQUEST]>>>` blocks in the text.
    Vcp,
    /// Definitions in the system prompt; the whole reply a JSON envelope.
    Json,
}
