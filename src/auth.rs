//! Who is calling. Every `/v1` request carries `Authorization: Bearer <api key>`; a key
//! belongs to a tenant, and its policy says which models and tool servers it may use, how
//! many requests a minute it may send and how many runs it may have running at once. Only a
//! hash of each key is stored. In open mode (local use) there are no keys: every request is
//! the default tenant's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::store::{ApiKeyRecord, DEFAULT_TENANT, RunStore, StoreError};

/// The prefix of every key this service issues.
pub const KEY_PREFIX: &str = "sk-sy-";

/// How long a key found in the store is trusted without looking again: a revoked key stops
/// working on every instance within this time.
const KEY_CACHE_TTL: Duration = Duration::from_secs(5);
/// How long an unknown key is remembered as unknown (no new key can have its hash).
const UNKNOWN_CACHE_TTL: Duration = Duration::from_secs(60);
/// Entries kept before the cache is cleared (so random keys cannot fill memory).
const CACHE_MAX: usize = 10_000;

/// The caller of a request: its tenant, and the key it used (none in open mode).
#[derive(Clone, Debug)]
pub struct Caller {
    pub tenant_id: String,
    pub key: Option<Arc<ApiKey>>,
}

impl Caller {
    /// The caller in open mode.
    pub fn open() -> Caller {
        Caller {
            tenant_id: DEFAULT_TENANT.to_string(),
            key: None,
        }
    }

    pub fn key_id(&self) -> Option<&str> {
        self.key.as_ref().map(|k| k.id.as_str())
    }

    /// The key's policy, or none (everything allowed).
    pub fn policy(&self) -> Option<&KeyPolicy> {
        self.key.as_ref().map(|k| &k.policy)
    }
}

/// A key as the service knows it (never its secret).
#[derive(Clone, Debug)]
pub struct ApiKey {
    pub id: String,
    pub tenant_id: String,
    pub name: String,
    pub policy: KeyPolicy,
}

/// The entry of a key's `tool_servers` list that lets it name MCP servers by URL (it cannot be
/// a configured label: validation refuses it as one).
pub const REQUEST_SERVERS: &str = "@request";

/// What a key may do. Absent lists allow everything.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KeyPolicy {
    /// Tool servers the key may enable (`None`: all).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_servers: Option<Vec<String>>,
    /// Server tools the key may not use, whichever server they are on (e.g. `fetch_url`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub denied_tools: Vec<String>,
    /// Models the key may use (`None`: all the service routes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub models: Option<Vec<String>>,
    /// Requests a minute, per instance (`None`: unlimited).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests_per_minute: Option<u32>,
    /// Runs executing at once, per instance (`None`: unlimited).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_concurrent_runs: Option<u32>,
}

impl KeyPolicy {
    pub fn allows_model(&self, model: &str) -> bool {
        self.models
            .as_ref()
            .is_none_or(|models| models.iter().any(|m| m == model))
    }

    pub fn allows_server(&self, label: &str) -> bool {
        self.tool_servers
            .as_ref()
            .is_none_or(|servers| servers.iter().any(|s| s == label))
    }

    /// Whether the key may name MCP servers by URL in its requests: with a `tool_servers`
    /// list, only when it holds [`REQUEST_SERVERS`] (the operator's `[tools.request_mcp]`
    /// decides first).
    pub fn allows_request_servers(&self) -> bool {
        self.allows_server(REQUEST_SERVERS)
    }

    pub fn allows_tool(&self, name: &str) -> bool {
        !self.denied_tools.iter().any(|t| t == name)
    }
}

/// A new key's secret, shown once: 256 random bits after the prefix.
pub fn new_secret() -> String {
    format!("{KEY_PREFIX}{}", os_random_hex(32))
}

/// `bytes` random bytes from the operating system's generator, in lowercase hex: for secrets
/// (ids come from a faster generator it seeds).
pub fn os_random_hex(bytes: usize) -> String {
    use chacha20poly1305::aead::OsRng;
    use chacha20poly1305::aead::rand_core::RngCore;
    let mut random = vec![0u8; bytes];
    OsRng.fill_bytes(&mut random);
    hex(&random)
}

/// How a secret is stored and looked up.
pub fn hash(secret: &str) -> String {
    hex(&Sha256::digest(secret.as_bytes()))
}

/// Lowercase hex, written a digit at a time: a `format!` per byte cost each request 16,000
/// instructions (1.7 % of a text run).
fn hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    out
}

/// The start of a secret, to recognise a key in lists and logs.
pub fn prefix_of(secret: &str) -> String {
    secret.chars().take(KEY_PREFIX.len() + 6).collect()
}

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("You didn't provide an API key. Send it as 'Authorization: Bearer <key>'.")]
    Missing,
    #[error("Incorrect API key provided: {0}.")]
    Invalid(String),
    #[error("Too many requests for this API key; retry after {} s.", .0.as_secs().max(1))]
    RateLimited(Duration),
    #[error("the API keys cannot be read: {0}")]
    Store(#[from] StoreError),
}

/// The key's record as an [`ApiKey`], if it is valid.
pub fn api_key(record: ApiKeyRecord) -> Result<ApiKey, StoreError> {
    let policy = serde_json::from_str(&record.policy)
        .map_err(|e| StoreError::corrupt(format!("policy of key {}: {e}", record.id)))?;
    Ok(ApiKey {
        id: record.id,
        tenant_id: record.tenant_id,
        name: record.name,
        policy,
    })
}

/// Looks keys up (cached briefly), and meters each key's request rate.
pub struct Authenticator {
    store: Arc<dyn RunStore>,
    open: bool,
    /// By hash: what was found, and when.
    cache: Mutex<HashMap<String, Lookup>>,
    /// Per key: the request times of the current minute's window.
    rates: Mutex<HashMap<String, Window>>,
}

/// A key looked up by its hash (`None`: no such key), and when.
type Lookup = (Option<Arc<ApiKey>>, Instant);

/// A fixed one-minute window of a key's requests.
struct Window {
    started: Instant,
    count: u32,
}

impl Authenticator {
    pub fn new(store: Arc<dyn RunStore>, open: bool) -> Authenticator {
        Authenticator {
            store,
            open,
            cache: Mutex::new(HashMap::new()),
            rates: Mutex::new(HashMap::new()),
        }
    }

    pub fn is_open(&self) -> bool {
        self.open
    }

    /// The caller of a request with this `Authorization` header.
    pub async fn authenticate(&self, authorization: Option<&str>) -> Result<Caller, AuthError> {
        let caller = self.identify(authorization).await?;
        if let Some(key) = &caller.key {
            self.admit(key)?;
        }
        Ok(caller)
    }

    /// The caller of a request with this `Authorization` header, without counting it against
    /// the key's request rate: the run inspector's reads (a page open on a key refreshes every
    /// second, and must not use up the rate of the clients that share the key).
    pub async fn identify(&self, authorization: Option<&str>) -> Result<Caller, AuthError> {
        if self.open {
            return Ok(Caller::open());
        }
        let secret = authorization
            .and_then(|value| value.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|secret| !secret.is_empty())
            .ok_or(AuthError::Missing)?;
        let hash = hash(secret);
        let key = match self.cached(&hash) {
            Some(key) => key,
            None => {
                let found = match self.store.key_by_hash(&hash).await? {
                    Some(record) if record.revoked_at.is_none() => Some(Arc::new(api_key(record)?)),
                    _ => None,
                };
                self.remember(hash, found.clone());
                found
            }
        };
        let key = key.ok_or_else(|| AuthError::Invalid(masked(secret)))?;
        Ok(Caller {
            tenant_id: key.tenant_id.clone(),
            key: Some(key),
        })
    }

    fn cached(&self, hash: &str) -> Option<Option<Arc<ApiKey>>> {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let (key, at) = cache.get(hash)?;
        let ttl = match key {
            Some(_) => KEY_CACHE_TTL,
            None => UNKNOWN_CACHE_TTL,
        };
        (at.elapsed() < ttl).then(|| key.clone())
    }

    fn remember(&self, hash: String, key: Option<Arc<ApiKey>>) {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= CACHE_MAX {
            cache.clear();
        }
        cache.insert(hash, (key, Instant::now()));
    }

    /// Counts a request of the key against its rate; the wait before the next one is
    /// admitted when it is over.
    fn admit(&self, key: &ApiKey) -> Result<(), AuthError> {
        let Some(limit) = key.policy.requests_per_minute else {
            return Ok(());
        };
        let minute = Duration::from_secs(60);
        let mut rates = self.rates.lock().unwrap_or_else(|e| e.into_inner());
        let window = rates.entry(key.id.clone()).or_insert(Window {
            started: Instant::now(),
            count: 0,
        });
        if window.started.elapsed() >= minute {
            *window = Window {
                started: Instant::now(),
                count: 0,
            };
        }
        if window.count >= limit {
            return Err(AuthError::RateLimited(
                minute.saturating_sub(window.started.elapsed()),
            ));
        }
        window.count += 1;
        Ok(())
    }

    /// A key by its id (for a run resumed under the key that created it), revoked or not.
    pub async fn key_by_id(&self, id: &str) -> Result<Option<ApiKey>, StoreError> {
        self.store.key_by_id(id).await?.map(api_key).transpose()
    }
}

/// Makes a key of `tenant_id` (the tenant too, if it is new) and returns it with its secret,
/// which is not stored: shown once.
pub async fn create_key(
    store: &dyn RunStore,
    tenant_id: &str,
    name: &str,
    policy: &KeyPolicy,
) -> Result<(ApiKeyRecord, String), StoreError> {
    let secret = new_secret();
    let record = ApiKeyRecord {
        id: crate::protocol::ids::new(crate::protocol::ids::API_KEY),
        tenant_id: tenant_id.to_string(),
        name: name.to_string(),
        hash: hash(&secret),
        prefix: prefix_of(&secret),
        policy: serde_json::to_string(policy)
            .map_err(|e| StoreError::rejected(format!("cannot encode a policy: {e}")))?,
        created_at: crate::time::UnixMillis::now(),
        revoked_at: None,
    };
    store.create_key(&record).await?;
    Ok((record, secret))
}

/// A secret as shown back in an error: its start and end only.
fn masked(secret: &str) -> String {
    let chars: Vec<char> = secret.chars().collect();
    if chars.len() <= 12 {
        return "***".into();
    }
    let start: String = chars[..8].iter().collect();
    let end: String = chars[chars.len() - 4..].iter().collect();
    format!("{start}***{end}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_hashes_to_the_lowercase_hex_of_its_sha256() {
        // FIPS 180-2's example: SHA-256("abc").
        assert_eq!(
            hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn a_policy_allows_what_it_does_not_restrict() {
        let policy = KeyPolicy::default();
        assert!(policy.allows_model("any") && policy.allows_server("builtin"));
        let policy: KeyPolicy = serde_json::from_str(
            r#"{"tool_servers": ["builtin"], "denied_tools": ["fetch_url"], "models": ["m"]}"#,
        )
        .unwrap();
        assert!(policy.allows_server("builtin") && !policy.allows_server("weather"));
        assert!(!policy.allows_tool("fetch_url") && policy.allows_tool("calculator"));
        assert!(policy.allows_model("m") && !policy.allows_model("other"));
        assert!(!policy.allows_request_servers());
        assert!(KeyPolicy::default().allows_request_servers());
        let policy: KeyPolicy = serde_json::from_str(r#"{"tool_servers": ["@request"]}"#).unwrap();
        assert!(policy.allows_request_servers() && !policy.allows_server("builtin"));
    }

    #[test]
    fn secrets_are_random_hashed_and_masked() {
        let (a, b) = (new_secret(), new_secret());
        assert_ne!(a, b);
        assert!(a.starts_with(KEY_PREFIX) && a.len() == KEY_PREFIX.len() + 64);
        assert_eq!(hash(&a).len(), 64);
        assert_ne!(hash(&a), hash(&b));
        let shown = masked(&a);
        assert!(
            shown.starts_with("sk-sy-") && shown.contains("***") && !shown.contains(&a[10..60])
        );
    }
}
