//! Secrets out of what is shown: a URL's password and query values (a tool URL may carry
//! `?api_key=…`), wherever a URL appears in a message, inline header values, and what looks
//! like a key in text another service wrote. Used for `check-config`, log lines and the
//! errors clients and the model see.

use std::borrow::Cow;

const HIDDEN: &str = "***";

/// Query parameters of database and provider URLs that are settings, not secrets: shown as
/// they are.
const SETTINGS: &[&str] = &[
    "sslmode",
    "sslrootcert",
    "sslcert",
    "connect_timeout",
    "application_name",
    "statement-cache-capacity",
    "mode",
    // Azure OpenAI's API version.
    "api-version",
];

/// A URL with its password and every query value hidden (`https://u:***@h/p?key=***`),
/// but for database settings such as `sslmode`.
/// Text that does not parse as a URL is returned with anything between `://` and `@`
/// hidden.
pub fn url(text: &str) -> String {
    match url::Url::parse(text) {
        Ok(mut parsed) => {
            if parsed.password().is_some() {
                let _ = parsed.set_password(Some(HIDDEN));
            }
            if parsed.query().is_some() {
                let pairs: Vec<(String, String)> = parsed
                    .query_pairs()
                    .map(|(k, v)| match SETTINGS.contains(&k.as_ref()) {
                        true => (k.into_owned(), v.into_owned()),
                        false => (k.into_owned(), HIDDEN.to_string()),
                    })
                    .collect();
                parsed.query_pairs_mut().clear().extend_pairs(pairs);
            }
            // `***` is written percent-encoded in a query; shown plain.
            parsed.to_string().replace("%2A%2A%2A", HIDDEN)
        }
        Err(_) => match (text.find("://"), text.rfind('@')) {
            (Some(scheme), Some(at)) if at > scheme => {
                format!("{}{HIDDEN}{}", &text[..scheme + 3], &text[at..])
            }
            _ => text.to_string(),
        },
    }
}

/// `text` with every `http://` or `https://` URL in it passed through [`url`].
pub fn urls_in(text: &str) -> Cow<'_, str> {
    if !text.contains("://") {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = ["http://", "https://"]
        .iter()
        .filter_map(|scheme| rest.find(scheme))
        .min()
    {
        out.push_str(&rest[..start]);
        let tail = &rest[start..];
        let end = tail
            .find(|c: char| c.is_whitespace() || matches!(c, ')' | '"' | '\'' | '>' | ']' | ','))
            .unwrap_or(tail.len());
        // A full stop after a URL ends the sentence.
        let end = tail[..end].trim_end_matches(['.', ';', '!', '?']).len();
        out.push_str(&url(&tail[..end]));
        rest = &tail[end..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// Prefixes of API keys as providers issue them (OpenAI and compatible `sk-`, Groq `gsk_`,
/// xAI `xai-`, Hugging Face `hf_`, Google `AIza`, GitHub `ghp_`).
const KEY_PREFIXES: &[&str] = &["sk-", "sk_", "gsk_", "xai-", "hf_", "AIza", "ghp_"];

/// How long a run of letters and digits (with both) must be to pass for a key or a hash
/// rather than a word or a model name: model names split into short runs
/// (`Llama-3.1-8B-Instruct`), keys and hex digests do not.
const TOKEN_RUN: usize = 20;

/// `text` written by another service (an upstream's error message), safe to show a client:
/// URLs as [`urls_in`] shows them, and every word that looks like a credential hidden — a
/// known key prefix, the word after `Bearer`, or a long run of mixed letters and digits.
pub fn secrets_in(text: &str) -> String {
    let text = urls_in(text);
    let mut out = String::with_capacity(text.len());
    let mut after_bearer = false;
    let mut rest = text.as_ref();
    while !rest.is_empty() {
        let start = rest.find(is_token_char).unwrap_or(rest.len());
        out.push_str(&rest[..start]);
        rest = &rest[start..];
        // A full stop after a word ends the sentence; it is not part of the word.
        let end = rest.find(|c| !is_token_char(c)).unwrap_or(rest.len());
        let word = rest[..end].trim_end_matches('.');
        let end = if word.is_empty() { end } else { word.len() };
        if !word.is_empty() && (after_bearer || looks_like_a_key(word)) {
            out.push_str(HIDDEN);
        } else {
            out.push_str(&rest[..end]);
        }
        after_bearer = word.eq_ignore_ascii_case("bearer");
        rest = &rest[end..];
    }
    out
}

/// Characters of a key or token word (base64, base64url, hex, and the separators keys use).
fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '+' | '/' | '=' | '.')
}

fn looks_like_a_key(word: &str) -> bool {
    if word.len() > 8 && KEY_PREFIXES.iter().any(|p| word.starts_with(p)) {
        return true;
    }
    word.split(|c: char| !c.is_ascii_alphanumeric()).any(|run| {
        run.len() >= TOKEN_RUN
            && run.chars().any(|c| c.is_ascii_digit())
            && run.chars().any(|c| c.is_ascii_alphabetic())
    })
}

/// A configured header value as shown: a reference to an environment variable (`${VAR}`,
/// resolved at start-up) as it is, any other value hidden.
pub fn header_value(value: &str) -> String {
    let reference = value.trim().starts_with("${") && value.trim().ends_with('}');
    let bearer_reference = value.split_once(' ').is_some_and(|(scheme, rest)| {
        scheme.len() < 16 && rest.starts_with("${") && rest.ends_with('}')
    });
    if reference || bearer_reference {
        value.to_string()
    } else {
        HIDDEN.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_and_query_values_are_hidden_wherever_a_url_appears() {
        assert_eq!(
            url("https://user:pw@tools.internal:8443/search?api_key=sk-123&q=x"),
            "https://user:***@tools.internal:8443/search?api_key=***&q=***"
        );
        assert_eq!(
            url("postgres://app:secret@db/main"),
            "postgres://app:***@db/main"
        );
        assert_eq!(url("http://h/p"), "http://h/p");
        assert_eq!(
            url("postgres://app:secret@db/main?sslmode=verify-full&sslrootcert=/ca.pem&password=x"),
            "postgres://app:***@db/main?sslmode=verify-full&sslrootcert=%2Fca.pem&password=***"
        );
        assert_eq!(
            urls_in("error sending request for url (http://h/t?api_key=sk-1): refused"),
            "error sending request for url (http://h/t?api_key=***): refused"
        );
        assert_eq!(urls_in("no url here"), "no url here");
    }

    #[test]
    fn inline_header_values_are_hidden_and_references_shown() {
        assert_eq!(header_value("Bearer sk-live-123"), "***");
        assert_eq!(header_value("${WEATHER_TOKEN}"), "${WEATHER_TOKEN}");
        assert_eq!(
            header_value("Bearer ${WEATHER_TOKEN}"),
            "Bearer ${WEATHER_TOKEN}"
        );
    }

    #[test]
    fn keys_tokens_and_urls_in_text_are_hidden_and_words_and_model_names_kept() {
        assert_eq!(
            secrets_in("Incorrect API key provided: sk-proj-abc123XYZ. See https://h/keys?k=v."),
            "Incorrect API key provided: ***. See https://h/keys?k=***."
        );
        assert_eq!(
            secrets_in("sent Authorization: Bearer abc.def and gsk_0123456789 too"),
            "sent Authorization: Bearer *** and *** too"
        );
        assert_eq!(
            secrets_in(
                "digest 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08, the token limit"
            ),
            "digest ***, the token limit"
        );
        assert_eq!(
            secrets_in(
                "key AIzaSyD-1234567890abcdefghij rejected; id 3q2+7wZ9kLmN0pQrStUvWxYz1234=="
            ),
            "key *** rejected; id ***"
        );
        let plain = "The model `meta-llama/Llama-3.1-8B-Instruct` does not support 'max_tokens' \
                     (gpt-4o-mini-2024-07-18, claude-3-5-sonnet-20241022).";
        assert_eq!(secrets_in(plain), plain);
    }
}
