//! Secrets out of what is shown: a URL's password and query values (a tool URL may carry
//! `?api_key=…`), wherever a URL appears in a message, and inline header values. Used for
//! `check-config`, log lines and the errors clients and the model see.

use std::borrow::Cow;

const HIDDEN: &str = "***";

/// Query parameters of database URLs that are settings, not secrets: shown as they are.
const SETTINGS: &[&str] = &[
    "sslmode",
    "sslrootcert",
    "sslcert",
    "connect_timeout",
    "application_name",
    "statement-cache-capacity",
    "mode",
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
        out.push_str(&url(&tail[..end]));
        rest = &tail[end..];
    }
    out.push_str(rest);
    Cow::Owned(out)
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
}
