//! Each provider asked once for its model list (`GET {base_url}/models`, a few seconds at
//! most), so that a wrong configuration shows at start rather than at the first request: a
//! `base_url` without `/v1` (404), a wrong port (connection refused), a key the provider
//! refuses (401), a configured model the provider does not list. `serve` probes in the
//! background, without delaying start or readiness, and logs one warning per provider that
//! fails with its likely fix, and the metric `switchyard_upstream_probe`;
//! `check-config --probe` runs the same probes and prints one line per provider.

use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::profile::Dialect;
use crate::config::{Profile, ResolvedProvider};

/// How long a provider gets to answer its probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// What a probe found out, as the metric's `result` label names it (a closed set).
pub const RESULTS: [&str; 8] = [
    "ok",
    "model_missing",
    "not_found",
    "refused",
    "unauthorized",
    "unreachable",
    "timeout",
    "error",
];

/// One provider's probe.
#[derive(Clone, Debug)]
pub struct Probe {
    pub provider: String,
    /// Its `base_url`, secrets hidden.
    pub base_url: String,
    /// The URL asked, secrets hidden.
    pub url: String,
    pub outcome: Outcome,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// It listed `count` models; `missing` are configured models it does not list.
    Listed {
        count: usize,
        missing: Vec<String>,
    },
    /// It answered, but not with a model list: nothing more is checked.
    Answered,
    /// 404: no model list at this URL.
    NotFound,
    /// Nobody listens at that address and port.
    Refused,
    /// 401 or 403: the key was refused.
    Unauthorized(u16),
    /// Another connection failure (a host name that does not resolve, TLS), with its cause.
    Unreachable(String),
    Timeout,
    /// Any other HTTP status.
    Status(u16),
}

impl Probe {
    /// The `result` label: one of [`RESULTS`].
    pub fn result(&self) -> &'static str {
        match &self.outcome {
            Outcome::Listed { missing, .. } if !missing.is_empty() => "model_missing",
            Outcome::Listed { .. } | Outcome::Answered => "ok",
            Outcome::NotFound => "not_found",
            Outcome::Refused => "refused",
            Outcome::Unauthorized(_) => "unauthorized",
            Outcome::Unreachable(_) => "unreachable",
            Outcome::Timeout => "timeout",
            Outcome::Status(_) => "error",
        }
    }

    /// Whether the provider cannot serve requests as configured. A model it does not list is
    /// only a warning: some providers serve models they do not list.
    pub fn failed(&self) -> bool {
        !matches!(self.result(), "ok" | "model_missing")
    }

    /// What was found, and the likely fix.
    pub fn finding(&self) -> String {
        let url = &self.base_url;
        let models = format!("GET {}", self.url);
        match &self.outcome {
            Outcome::Listed { count, missing } if missing.is_empty() => {
                let plural = if *count == 1 { "" } else { "s" };
                format!("{url} answers and lists {count} model{plural}")
            }
            Outcome::Listed { missing, .. } => format!(
                "{url} does not list the configured model(s) {}: requests for them will fail \
                 unless it serves models it does not list (names are case-sensitive)",
                quoted(missing)
            ),
            Outcome::Answered => format!("{url} answers (not with a model list)"),
            Outcome::NotFound => format!(
                "{models} answered 404 Not Found: does base_url end in /v1 \
                 (e.g. http://127.0.0.1:11434/v1)?"
            ),
            Outcome::Refused => format!(
                "connection refused at {url}: is the port right, and is the server running?"
            ),
            Outcome::Unauthorized(status) => format!(
                "{models} answered {status}: the provider refused the API key; check the \
                 provider's api_key (or api_key_env, or OPENAI_API_KEY for the default one)"
            ),
            Outcome::Unreachable(cause) => {
                format!("cannot reach {url}: {cause}: is the host name right?")
            }
            Outcome::Timeout => format!(
                "no answer from {url} within {} s: is the host reachable?",
                PROBE_TIMEOUT.as_secs()
            ),
            Outcome::Status(status) => format!("{models} answered HTTP {status}"),
        }
    }

    /// One line for `check-config --probe`: `provider "NAME": RESULT: finding`.
    pub fn line(&self) -> String {
        format!(
            "provider {:?}: {}: {}",
            self.provider,
            self.result(),
            self.finding()
        )
    }

    /// Logs what was found (a warning unless all is well) and sets the metric.
    fn report(&self) {
        crate::metrics::upstream_probe(&self.provider, self.result(), &RESULTS);
        let (provider, result) = (&self.provider, self.result());
        match result {
            "ok" => tracing::info!(provider, result, "{}", self.finding()),
            _ => tracing::warn!(provider, result, "{}", self.finding()),
        }
    }
}

fn quoted(models: &[String]) -> String {
    let quoted: Vec<String> = models.iter().map(|m| format!("{m:?}")).collect();
    quoted.join(", ")
}

/// Probes every provider at once; the probes in the providers' order.
pub async fn probe_all(providers: &[ResolvedProvider]) -> Vec<Probe> {
    futures_util::future::join_all(providers.iter().map(probe)).await
}

/// Asks one provider for its model list, with its key.
pub async fn probe(provider: &ResolvedProvider) -> Probe {
    let dialect = Dialect::for_provider(provider);
    let (url, names_models) = models_url(&provider.base_url, &dialect);
    // Shown as configured: the URL parser would add a `/` to a bare host.
    let shown = |url: &str| {
        let hidden = crate::redact::url(url);
        match url.ends_with('/') {
            true => hidden,
            false => hidden.trim_end_matches('/').to_string(),
        }
    };
    Probe {
        provider: provider.name.clone(),
        base_url: shown(&provider.base_url),
        url: shown(&url),
        outcome: match ask(provider, &dialect, &url).await {
            // Azure's list names base models, not the deployments requests name.
            Outcome::Listed { count, .. } if !names_models => Outcome::Listed {
                count,
                missing: Vec::new(),
            },
            outcome => outcome,
        },
    }
}

/// Where a provider lists its models, and whether the list names what requests name. An
/// Azure deployment URL (`…/openai/deployments/{model}`) lists the resource's models at
/// `…/openai/models?api-version=…` (learn.microsoft.com/rest/api/azureopenai/models/list),
/// by base model rather than by deployment; any other base URL at `{base_url}/models`.
fn models_url(base_url: &str, dialect: &Dialect) -> (String, bool) {
    let (url, names_models) = match base_url.split_once("/deployments/") {
        Some((resource, _)) if dialect.profile == Profile::Azure => {
            (format!("{resource}/models"), false)
        }
        _ => (format!("{base_url}/models"), true),
    };
    (dialect.versioned(url), names_models)
}

async fn ask(provider: &ResolvedProvider, dialect: &Dialect, url: &str) -> Outcome {
    let client = reqwest::Client::builder().timeout(PROBE_TIMEOUT);
    // As the provider's requests go: an HTTP/2-only server may not speak HTTP/1.1.
    let client = match provider.http2 {
        true => client.http2_prior_knowledge(),
        false => client.http1_only(),
    };
    let client = match client.build() {
        Ok(client) => client,
        Err(e) => return Outcome::Unreachable(e.to_string()),
    };
    let request = dialect.authorize(client.get(url), provider.api_key.as_ref());
    let response = match request.send().await {
        Ok(response) => response,
        Err(e) if e.is_timeout() => return Outcome::Timeout,
        Err(e) if connection_refused(&e) => return Outcome::Refused,
        Err(e) => {
            let cause = super::openai::error_chain(&e);
            return Outcome::Unreachable(crate::redact::urls_in(&cause).into_owned());
        }
    };
    match response.status().as_u16() {
        200..=299 => match response.json::<Value>().await {
            Ok(listing) => listed(&listing, &provider.models),
            Err(e) if e.is_timeout() => Outcome::Timeout,
            Err(_) => Outcome::Answered,
        },
        404 => Outcome::NotFound,
        status @ (401 | 403) => Outcome::Unauthorized(status),
        status => Outcome::Status(status),
    }
}

/// Whether a connection failed because nobody listens there (`ECONNREFUSED`).
fn connection_refused(error: &reqwest::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        source = cause.source();
    }
    false
}

/// A model list (`{"data": [{"id": …}]}`) against the configured models. Gemini's ids carry
/// a `models/` prefix; `"*"` routes any model, and is not looked for.
fn listed(listing: &Value, configured: &[String]) -> Outcome {
    let Some(data) = listing.get("data").and_then(Value::as_array) else {
        return Outcome::Answered;
    };
    let ids: Vec<&str> = data
        .iter()
        .filter_map(|model| model.get("id").and_then(Value::as_str))
        .map(|id| id.strip_prefix("models/").unwrap_or(id))
        .collect();
    let missing = configured
        .iter()
        .filter(|model| *model != "*" && !ids.contains(&model.as_str()))
        .cloned()
        .collect();
    Outcome::Listed {
        count: ids.len(),
        missing,
    }
}

/// The probes `serve` runs at start, on a task of their own (stopped at shutdown).
pub struct Probes {
    stop: CancellationToken,
    tasks: TaskTracker,
}

impl Probes {
    /// Probes every provider in the background and reports each (log and metric).
    pub fn start(providers: Vec<ResolvedProvider>) -> Probes {
        let probes = Probes {
            stop: CancellationToken::new(),
            tasks: TaskTracker::new(),
        };
        let stop = probes.stop.clone();
        probes.tasks.spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => {}
                found = probe_all(&providers) => found.iter().for_each(Probe::report),
            }
        });
        probes.tasks.close();
        probes
    }

    /// Stops probes still waiting for an answer.
    pub async fn shutdown(&self) {
        self.stop.cancel();
        self.tasks.wait().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_listing_is_checked_against_the_configured_models_but_the_wildcard() {
        let listing = json!({"object": "list", "data": [{"id": "llama3.1"},
            {"id": "models/gemini-2.0-flash"}]});
        let configured = ["llama3.1", "gemini-2.0-flash", "Llama3.1", "*"].map(String::from);
        assert_eq!(
            listed(&listing, &configured),
            Outcome::Listed {
                count: 2,
                missing: vec!["Llama3.1".into()]
            }
        );
        assert_eq!(
            listed(&json!({"models": []}), &configured),
            Outcome::Answered
        );
    }

    #[test]
    fn an_azure_deployment_url_lists_the_resources_models_and_other_urls_their_own() {
        let mut azure = Dialect::of(Profile::Azure);
        azure.api_version = Some("2024-10-21".into());
        assert_eq!(
            models_url(
                "https://r.openai.azure.com/openai/deployments/{model}",
                &azure
            ),
            (
                "https://r.openai.azure.com/openai/models?api-version=2024-10-21".into(),
                false
            )
        );
        assert_eq!(
            models_url("http://127.0.0.1:8000/v1", &Dialect::of(Profile::Vllm)),
            ("http://127.0.0.1:8000/v1/models".into(), true)
        );
    }

    #[test]
    fn a_probe_names_its_result_and_the_likely_fix() {
        let probe = |outcome| Probe {
            provider: "local".into(),
            base_url: "http://127.0.0.1:11434".into(),
            url: "http://127.0.0.1:11434/models".into(),
            outcome,
        };
        let missing = probe(Outcome::Listed {
            count: 1,
            missing: vec!["gpt-4o".into()],
        });
        assert_eq!(missing.result(), "model_missing");
        assert!(!missing.failed());
        let not_found = probe(Outcome::NotFound);
        assert!(not_found.failed());
        assert_eq!(
            not_found.line(),
            "provider \"local\": not_found: GET http://127.0.0.1:11434/models answered 404 \
             Not Found: does base_url end in /v1 (e.g. http://127.0.0.1:11434/v1)?"
        );
        assert!(
            probe(Outcome::Refused)
                .finding()
                .contains("is the port right")
        );
        for outcome in [Outcome::Timeout, Outcome::Status(500), Outcome::Answered] {
            assert!(RESULTS.contains(&probe(outcome).result()));
        }
    }
}
