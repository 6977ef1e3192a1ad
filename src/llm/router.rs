//! Which client serves which model: one chat-completions client per configured provider,
//! each behind its retries and concurrency cap, and the configured fallbacks.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::resilient::{Fallback, Resilient, RetryPolicy};
use super::{LlmClient, LlmError, openai};
use crate::config::Config;

/// Which client serves which model.
pub struct ModelRouter {
    routes: HashMap<String, Arc<dyn LlmClient>>,
    /// The provider whose models include `"*"`, serving every model nobody lists.
    fallback: Option<Arc<dyn LlmClient>>,
    /// Listed models with their provider's name, in configuration order.
    listed: Vec<(String, String)>,
}

impl ModelRouter {
    /// Builds one chat-completions client per configured provider.
    pub fn from_config(config: &Config) -> Result<ModelRouter, LlmError> {
        let mut router = ModelRouter::empty();
        let llm = &config.llm;
        let retry = RetryPolicy {
            retries: llm.retries,
            initial: Duration::from_millis(llm.retry_initial_ms),
            max: Duration::from_millis(llm.retry_max_ms),
        };
        for provider in config.providers() {
            let chat: Arc<dyn LlmClient> =
                Arc::new(openai::ChatCompletionsClient::new(&provider, llm)?);
            let client = Resilient::new(
                chat,
                &provider.name,
                retry,
                provider.max_concurrent_requests,
                Duration::from_millis(llm.first_byte_timeout_ms),
            );
            router.add(&provider.name, &provider.models, Arc::new(client));
        }
        for (model, fallback) in &config.fallbacks {
            let (Some(primary), Some(other)) = (router.route(model), router.route(&fallback.model))
            else {
                continue;
            };
            let client = Fallback {
                primary,
                fallback: other,
                model: fallback.model.clone(),
            };
            router.routes.insert(model.clone(), Arc::new(client));
        }
        Ok(router)
    }

    pub fn empty() -> ModelRouter {
        ModelRouter {
            routes: HashMap::new(),
            fallback: None,
            listed: Vec::new(),
        }
    }

    /// Routes `models` to `client`; `"*"` makes it the fallback.
    pub fn add(&mut self, provider: &str, models: &[String], client: Arc<dyn LlmClient>) {
        for model in models {
            if model == "*" {
                self.fallback = Some(client.clone());
            } else {
                self.routes.insert(model.clone(), client.clone());
                self.listed.push((model.clone(), provider.to_string()));
            }
        }
    }

    pub fn route(&self, model: &str) -> Option<Arc<dyn LlmClient>> {
        self.routes
            .get(model)
            .cloned()
            .or_else(|| self.fallback.clone())
    }

    /// Whether a provider routes every model nobody lists (its models include `"*"`).
    pub fn routes_any(&self) -> bool {
        self.fallback.is_some()
    }

    /// `(model, provider)` pairs for `GET /v1/models`.
    pub fn models(&self) -> &[(String, String)] {
        &self.listed
    }
}
