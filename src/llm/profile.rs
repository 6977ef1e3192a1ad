//! What a provider's profile (SPEC §14) changes in the requests written to it and in how its
//! streamed replies are read: the field of the token limit, the sampling parameters its
//! reasoning models refuse, how it is told the reasoning effort, where its models' reasoning
//! arrives, which earlier reasoning it must be sent again, and how it is addressed and
//! authenticated. Each difference is taken from the provider's own documentation, cited
//! where it is decided; `fake-llm`'s personas refuse what the providers refuse, so a test fails
//! where a real provider would.

use crate::config::{Profile, ReasoningFormat, ResolvedProvider, Secret, SendBack, ToolProtocol};

/// How requests to one provider are written and its replies read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dialect {
    pub profile: Profile,
    /// The body field `max_output_tokens` is sent in.
    pub token_limit: &'static str,
    /// Its reasoning models refuse sampling parameters (sent only to other models).
    pub reasoning_models_refuse_sampling: bool,
    pub effort: EffortField,
    pub reasoning_format: ReasoningFormat,
    pub send_back: SendBack,
    /// The assistant message field earlier reasoning is sent back in.
    pub send_back_field: &'static str,
    pub auth: Auth,
    /// Azure's `api-version` query parameter.
    pub api_version: Option<String>,
    /// Its models are shown the images tools return (`image_url` parts of a user message);
    /// otherwise only the placeholder text in the tool message.
    pub images: bool,
    pub signatures: Signatures,
    /// Its reasoning blocks (OpenRouter's `reasoning_details`) are sent back with the reasoning.
    pub reasoning_details: bool,
    /// How its models are offered tools and write their calls (SPEC §15).
    pub tool_protocol: ToolProtocol,
}

/// What becomes of the signatures a provider puts on tool calls ([`super::signature`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signatures {
    /// Not sent: the provider makes none, and might refuse the field.
    Dropped,
    /// Sent back on their calls (`extra_content`) where they are known.
    SentBack,
    /// Sent back, and the first call of each step of the current turn carries one even when
    /// it is not known (Google's documented stand-in), since a missing one is refused.
    Required,
}

/// How the request's `reasoning.effort` is passed on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EffortField {
    /// `"reasoning_effort": "high"`.
    ReasoningEffort,
    /// `"reasoning": {"effort": "high"}` (OpenRouter's unified parameter).
    ReasoningObject,
}

/// How the provider's key is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Auth {
    /// `Authorization: Bearer KEY`.
    Bearer,
    /// `api-key: KEY` (Azure OpenAI).
    ApiKeyHeader,
}

impl Dialect {
    /// The dialect of `profile`, with its documented defaults.
    pub fn of(profile: Profile) -> Dialect {
        let mut dialect = Dialect {
            profile,
            token_limit: "max_tokens",
            reasoning_models_refuse_sampling: false,
            effort: EffortField::ReasoningEffort,
            reasoning_format: ReasoningFormat::Fields,
            send_back: SendBack::Never,
            send_back_field: "reasoning_content",
            auth: Auth::Bearer,
            api_version: None,
            images: true,
            signatures: Signatures::Dropped,
            reasoning_details: false,
            tool_protocol: ToolProtocol::Native,
        };
        match profile {
            // OpenAI: "max_tokens is now deprecated in favor of max_completion_tokens, and is
            // not compatible with o-series models" (API reference, Create chat completion); its
            // reasoning models refuse temperature, top_p and the penalties (guides/reasoning).
            // Chat completions never stream reasoning text from OpenAI's models.
            Profile::Openai | Profile::Azure => {
                dialect.token_limit = "max_completion_tokens";
                dialect.reasoning_models_refuse_sampling = true;
                dialect.reasoning_format = ReasoningFormat::None;
                if profile == Profile::Azure {
                    // Azure OpenAI authenticates with the `api-key` header
                    // (learn.microsoft.com/azure/ai-foundry/openai/reference).
                    dialect.auth = Auth::ApiKeyHeader;
                }
            }
            // DeepSeek (api-docs.deepseek.com/guides/thinking_mode): thinking mode streams
            // `reasoning_content`; "for turns that do perform tool calls, the reasoning_content
            // must be fully passed back to the API in all subsequent requests" (else a 400),
            // while that of other turns "will be ignored".
            // Its chat API takes text content only (api-docs.deepseek.com, Create Chat
            // Completion: a user message's content is a string): no images.
            Profile::Deepseek => {
                dialect.send_back = SendBack::ToolCalls;
                dialect.images = false;
            }
            // vLLM's reasoning parsers fill `reasoning` (`reasoning_content`, its old name, is
            // no longer read back: docs.vllm.ai features/reasoning_outputs); Ollama's OpenAI
            // compatibility reads and writes `reasoning` (ollama openai/openai.go). The chat
            // templates of the models they serve (Qwen3) render the reasoning of the current
            // tool-calling loop only.
            Profile::Vllm | Profile::Ollama => {
                dialect.send_back = SendBack::TurnLoop;
                dialect.send_back_field = "reasoning";
            }
            Profile::Openrouter => {
                // openrouter.ai/docs/use-cases/reasoning-tokens: `reasoning` in the stream,
                // "preserving reasoning blocks is useful specifically for tool calling", and
                // the request's `reasoning: {effort}` object.
                dialect.send_back = SendBack::TurnLoop;
                dialect.send_back_field = "reasoning";
                dialect.effort = EffortField::ReasoningObject;
                // "Preserving reasoning blocks": `reasoning_details` back on the assistant
                // message, as streamed (merged by `index`).
                dialect.reasoning_details = true;
            }
            // llama-server `--reasoning-format`: `deepseek` puts thoughts in
            // `reasoning_content`, `none` leaves `<think>` in the content; both are read.
            Profile::Llamacpp => {
                dialect.reasoning_format = ReasoningFormat::ThinkTags;
                dialect.send_back = SendBack::TurnLoop;
            }
            // An unknown server: reasoning in whichever form it comes, and nothing it might
            // refuse sent back (call signatures only come from a server that takes them).
            Profile::Generic => {
                dialect.reasoning_format = ReasoningFormat::ThinkTags;
                dialect.signatures = Signatures::SentBack;
            }
            // Gemini's OpenAI compatibility: `max_tokens`, `reasoning_effort`; thoughts only
            // when asked through `extra_body`, as `<thought>` text (not read here). Gemini 3
            // signs function calls and refuses a turn whose calls lost their signatures
            // (ai.google.dev/gemini-api/docs/thought-signatures).
            Profile::Gemini => dialect.signatures = Signatures::Required,
            // Anthropic's OpenAI SDK compatibility: `max_tokens` (also
            // `max_completion_tokens`); thinking is not returned in this API.
            Profile::Anthropic => dialect.reasoning_format = ReasoningFormat::None,
        }
        dialect
    }

    /// The dialect of a configured provider: its profile's, with the configured overrides.
    pub fn for_provider(provider: &ResolvedProvider) -> Dialect {
        let mut dialect = Dialect::of(provider.profile);
        if let Some(format) = provider.reasoning_format {
            dialect.reasoning_format = format;
        }
        if let Some(send_back) = provider.reasoning_send_back {
            dialect.send_back = send_back;
        }
        dialect.api_version = provider.api_version.clone();
        if let Some(images) = provider.images {
            dialect.images = images;
        }
        dialect.tool_protocol = provider.tool_protocol;
        dialect
    }

    /// Whether `model` is one of the provider's reasoning models that refuse sampling
    /// parameters: OpenAI's o-series and gpt-5 family (not `gpt-5-chat`, a chat model).
    pub fn refuses_sampling(&self, model: &str) -> bool {
        if !self.reasoning_models_refuse_sampling {
            return false;
        }
        let model = model.rsplit('/').next().unwrap_or(model);
        let o_series =
            model.len() > 1 && model.starts_with('o') && model.as_bytes()[1].is_ascii_digit();
        let gpt5 = model.starts_with("gpt-5") && !model.starts_with("gpt-5-chat");
        o_series || gpt5
    }

    /// The chat-completions URL of `model` at `base_url`: Azure's deployment URLs may name the
    /// model with `{model}`, and take the `api-version` parameter.
    pub fn url(&self, base_url: &str, model: &str) -> String {
        self.versioned(format!(
            "{}/chat/completions",
            base_url.replace("{model}", model)
        ))
    }

    /// `url` with the `api-version` parameter, where the provider takes one (Azure).
    pub fn versioned(&self, mut url: String) -> String {
        if let Some(version) = &self.api_version {
            url.push_str("?api-version=");
            url.push_str(version);
        }
        url
    }

    /// `request` carrying the provider's key the way it expects it, if it has one.
    pub fn authorize(
        &self,
        request: reqwest::RequestBuilder,
        key: Option<&Secret>,
    ) -> reqwest::RequestBuilder {
        match (key, self.auth) {
            (None, _) => request,
            (Some(key), Auth::Bearer) => request.bearer_auth(key.expose()),
            (Some(key), Auth::ApiKeyHeader) => request.header("api-key", key.expose()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_reasoning_models_are_told_apart_from_chat_models() {
        let openai = Dialect::of(Profile::Openai);
        for model in [
            "o1",
            "o3-mini",
            "o4-mini",
            "gpt-5",
            "gpt-5-mini",
            "openai/gpt-5-nano",
        ] {
            assert!(openai.refuses_sampling(model), "{model}");
        }
        for model in [
            "gpt-4o",
            "gpt-4.1-mini",
            "gpt-5-chat-latest",
            "omni-moderation",
        ] {
            assert!(!openai.refuses_sampling(model), "{model}");
        }
        assert!(!Dialect::of(Profile::Vllm).refuses_sampling("o3"));
    }

    #[test]
    fn azure_deployment_urls_name_the_model_and_the_api_version() {
        let mut azure = Dialect::of(Profile::Azure);
        azure.api_version = Some("2024-10-21".into());
        assert_eq!(
            azure.url(
                "https://r.openai.azure.com/openai/deployments/{model}",
                "gpt-4o"
            ),
            "https://r.openai.azure.com/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21"
        );
        assert_eq!(
            Dialect::of(Profile::Generic).url("http://h/v1", "m"),
            "http://h/v1/chat/completions"
        );
    }
}
