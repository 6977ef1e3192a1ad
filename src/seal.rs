//! Sealed reasoning (`include: ["reasoning.encrypted_content"]`, SPEC §13): a reasoning item a
//! client keeps on its side (`store: false`, as Codex runs) carries its reasoning sealed in
//! `encrypted_content`, and gives it back on a later request, where it is opened and shown to
//! the model again (when the provider takes reasoning back).
//!
//! XChaCha20-Poly1305 (authenticated: a changed blob does not open), a random 24-byte nonce per
//! blob, and the tenant as associated data, so that one tenant's blob never opens for another.
//! The key is derived (SHA-256) from `[reasoning] encryption_key`, which every replica shares;
//! `previous_encryption_keys` still open blobs sealed before a rotation. Without a configured
//! key the process makes one of its own: its blobs open only in this process, and elsewhere
//! are dropped with a warning — a conversation never gets stuck on one.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use sha2::{Digest, Sha256};

use crate::config::ReasoningConfig;

/// What every sealed blob starts with: the format's version.
const PREFIX: &str = "sy1.";
const NONCE_LEN: usize = 24;

pub struct ReasoningSeal {
    /// The first seals; all open.
    keys: Vec<XChaCha20Poly1305>,
}

impl std::fmt::Debug for ReasoningSeal {
    /// Not the keys.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ReasoningSeal({} keys)", self.keys.len())
    }
}

impl ReasoningSeal {
    /// The seal of the configured keys; `None` in the second place, or `Some(warning)` when
    /// no key is configured and the process made its own.
    pub fn from_config(config: &ReasoningConfig) -> (ReasoningSeal, Option<&'static str>) {
        let configured = config
            .encryption_key
            .iter()
            .chain(&config.previous_encryption_keys)
            // An empty value is an unset one (docker-compose writes `${VAR:-}` so).
            .filter(|secret| !secret.expose().is_empty())
            .map(|secret| cipher(secret.expose().as_bytes()))
            .collect::<Vec<_>>();
        if !configured.is_empty() {
            return (ReasoningSeal { keys: configured }, None);
        }
        let key = XChaCha20Poly1305::generate_key(&mut OsRng);
        let warning = "no [reasoning] encryption_key is set: reasoning sealed in encrypted_content opens only in this process (set one key on every replica)";
        (
            ReasoningSeal {
                keys: vec![XChaCha20Poly1305::new(&key)],
            },
            Some(warning),
        )
    }

    /// `text` sealed for `tenant`.
    pub fn seal(&self, tenant: &str, text: &str) -> String {
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        let payload = Payload {
            msg: text.as_bytes(),
            aad: tenant.as_bytes(),
        };
        // Encryption fails only for messages beyond the cipher's limit (256 GiB).
        let sealed = self.keys[0].encrypt(&nonce, payload).unwrap_or_default();
        let mut bytes = nonce.to_vec();
        bytes.extend_from_slice(&sealed);
        format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes))
    }

    /// The text of a blob sealed for `tenant` with one of the keys, if it is one.
    pub fn open(&self, tenant: &str, blob: &str) -> Option<String> {
        let bytes = URL_SAFE_NO_PAD.decode(blob.strip_prefix(PREFIX)?).ok()?;
        if bytes.len() < NONCE_LEN {
            return None;
        }
        let (nonce, sealed) = bytes.split_at(NONCE_LEN);
        let nonce = XNonce::from_slice(nonce);
        self.keys.iter().find_map(|key| {
            let payload = Payload {
                msg: sealed,
                aad: tenant.as_bytes(),
            };
            let text = key.decrypt(nonce, payload).ok()?;
            String::from_utf8(text).ok()
        })
    }
}

/// A cipher keyed by the SHA-256 of a configured key (any string an operator chooses).
fn cipher(secret: &[u8]) -> XChaCha20Poly1305 {
    let key: [u8; 32] = Sha256::digest(secret).into();
    XChaCha20Poly1305::new(&key.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;

    fn seal(current: &str, previous: &[&str]) -> ReasoningSeal {
        let config = ReasoningConfig {
            encryption_key: Some(Secret::new(current)),
            previous_encryption_keys: previous.iter().map(|k| Secret::new(*k)).collect(),
        };
        ReasoningSeal::from_config(&config).0
    }

    #[test]
    fn a_blob_opens_for_its_tenant_with_the_current_or_a_previous_key_only() {
        let old = seal("old key", &[]);
        let blob = old.seal("t1", "I should add 2 and 2.");
        assert!(blob.starts_with("sy1."), "{blob}");
        assert_ne!(
            blob,
            old.seal("t1", "I should add 2 and 2."),
            "a fresh nonce each time"
        );
        assert_eq!(
            old.open("t1", &blob).as_deref(),
            Some("I should add 2 and 2.")
        );
        assert_eq!(old.open("t2", &blob), None, "another tenant's blob");
        let rotated = seal("new key", &["old key"]);
        assert_eq!(
            rotated.open("t1", &blob).as_deref(),
            Some("I should add 2 and 2.")
        );
        assert_eq!(seal("other", &[]).open("t1", &blob), None);
        let mut tampered = blob.clone();
        tampered.replace_range(10..11, if &blob[10..11] == "A" { "B" } else { "A" });
        assert_eq!(old.open("t1", &tampered), None);
        assert_eq!(old.open("t1", "sy1.short"), None);
        assert_eq!(old.open("t1", "gAAAAABo-openai-blob"), None);
    }

    #[test]
    fn without_a_configured_key_the_process_seals_with_its_own_and_says_so() {
        let (seal, warning) = ReasoningSeal::from_config(&ReasoningConfig::default());
        assert!(warning.is_some());
        let empty = ReasoningConfig {
            encryption_key: Some(Secret::new("")),
            previous_encryption_keys: Vec::new(),
        };
        assert!(
            ReasoningSeal::from_config(&empty).1.is_some(),
            "empty is unset"
        );
        let blob = seal.seal("t", "x");
        assert_eq!(seal.open("t", &blob).as_deref(), Some("x"));
    }
}
