//! Reading the layered configuration into [`Config`] with messages an operator can act on:
//! each names the full key (`llm.models`, not `LLM`), where the value came from (the file, or
//! the `SWITCHYARD__…` variable), and for a mistyped key the closest known one.

use std::fmt;
use std::path::Path;

use figment::error::Kind;
use figment::providers::{Env, Format, Serialized, Toml};
use figment::value::Value;
use figment::{Figment, Source};

use super::{Config, ConfigError, DEFAULT_TOML, ENV_PREFIX, ENV_SEPARATOR, Origin};

/// At most this many problems are read from one configuration: each is fixed up (an unknown
/// key dropped, a bad value replaced by its default) and the configuration read again.
const MAX_PROBLEMS: usize = 64;

impl Origin {
    /// Where the value at `path` was set: a file or an environment variable; nothing for the
    /// compiled-in defaults or a key that is not set.
    pub(super) fn source(&self, path: &[String]) -> Option<Setter> {
        let figment = self.0.as_deref()?;
        let root = figment.find_value("").ok()?;
        let found = lookup(&root, path)?;
        let metadata = figment.get_metadata(found.tag())?;
        match &metadata.source {
            Some(Source::File(file)) => Some(Setter::File(file.display().to_string())),
            _ if metadata.name.contains("environment variable") => {
                let prefix = metadata
                    .name
                    .strip_prefix('`')
                    .and_then(|rest| rest.split_once('`'))
                    .map(|(prefix, _)| prefix)
                    .unwrap_or("");
                Some(Setter::Env(env_name(prefix, path)))
            }
            _ => None,
        }
    }
}

/// Who set a value.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Setter {
    File(String),
    Env(String),
}

impl fmt::Display for Setter {
    /// As it follows a key in a message: ` in /etc/switchyard.toml`,
    /// ` (from SWITCHYARD__SERVER__PORT)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Setter::File(file) => write!(f, " in {file}"),
            Setter::Env(name) => write!(f, " (from {name})"),
        }
    }
}

/// ` in FILE`, ` (from VAR)` or nothing.
pub(super) fn where_set(setter: Option<Setter>) -> String {
    setter.map(|s| s.to_string()).unwrap_or_default()
}

/// The variable that sets `path`: the one in the environment if it is there (its name in the
/// case it was written), else the conventional spelling.
fn env_name(prefix: &str, path: &[String]) -> String {
    let wanted = format!("{prefix}{}", path.join(ENV_SEPARATOR));
    std::env::vars_os()
        .filter_map(|(name, _)| name.into_string().ok())
        .find(|name| name.eq_ignore_ascii_case(&wanted))
        .unwrap_or_else(|| wanted.to_ascii_uppercase())
}

/// A key as the configuration file writes it: `tool_servers.weather.tools[0].url`, with a
/// segment that is not a bare TOML key quoted (`fallbacks."gpt-4.1".model`). A segment of
/// digits after the first is taken for a list's index.
pub fn key<S: AsRef<str>>(path: &[S]) -> String {
    let mut out = String::new();
    for segment in path {
        let segment = segment.as_ref();
        if !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit()) && !out.is_empty() {
            out.push_str(&format!("[{segment}]"));
            continue;
        }
        if !out.is_empty() {
            out.push('.');
        }
        let bare = !segment.is_empty()
            && segment
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if bare {
            out.push_str(segment);
        } else {
            out.push_str(&format!("{segment:?}"));
        }
    }
    out
}

/// The problems of a configuration; when they all could be fixed up, also the configuration
/// as read with them fixed, and the keys they were at.
pub(super) type Problems = (Vec<String>, Option<Box<(Config, Vec<String>)>>);

/// Reads `figment` into a [`Config`], or says everything that is wrong with it. Serde stops
/// at the first problem, so each one is fixed up in a copy of the values (an unknown key
/// dropped, a value of the wrong type replaced by its default) and the copy read again, until
/// it reads or a problem cannot be fixed up (a required key without a default).
pub(super) fn extract(figment: &Figment) -> Result<Config, Problems> {
    let origin = Origin::of(figment.clone());
    let mut values = figment
        .find_value("")
        .map_err(|e| (e.into_iter().map(|e| unreadable(&e)).collect(), None))?;
    let defaults = Figment::from(Toml::string(DEFAULT_TOML))
        .find_value("")
        .ok();
    let mut problems = Vec::new();
    let mut keys = Vec::new();
    while problems.len() < MAX_PROBLEMS {
        let attempt = if problems.is_empty() {
            figment.extract::<Config>()
        } else {
            Figment::from(Serialized::defaults(&values)).extract::<Config>()
        };
        let error = match attempt {
            Ok(config) if problems.is_empty() => return Ok(Config { origin, ..config }),
            Ok(config) => {
                return Err((
                    problems,
                    Some(Box::new((Config { origin, ..config }, keys))),
                ));
            }
            Err(error) => error,
        };
        let mut fixed = true;
        for error in error {
            problems.push(describe(&origin, &error));
            keys.push(key(&error.path));
            let fix = match &error.kind {
                Kind::UnknownField(..) => remove(&mut values, &error.path),
                Kind::MissingField(_) => false,
                _ => defaults
                    .as_ref()
                    .and_then(|d| lookup(d, &error.path))
                    .is_some_and(|default| replace(&mut values, &error.path, default.clone())),
            };
            fixed &= fix;
        }
        if !fixed {
            return Err((problems, None));
        }
    }
    Err((problems, None))
}

/// A source that could not be read (a file that is not TOML), naming the file as it was given:
/// figment's own message shows it relative to the working directory when that is shorter.
fn unreadable(error: &figment::Error) -> String {
    match error.metadata.as_ref().and_then(|m| m.source.as_ref()) {
        Some(Source::File(file)) => format!("{} in {}", error.kind, file.display()),
        _ => error.to_string(),
    }
}

/// One message for one problem serde found.
fn describe(origin: &Origin, error: &figment::Error) -> String {
    let path = &error.path;
    match &error.kind {
        Kind::UnknownField(field, expected) => {
            let setter = origin.source(path);
            let parent = &path[..path.len().saturating_sub(1)];
            let hint = match closest(field, expected) {
                Some(known) => {
                    let mut suggested = parent.to_vec();
                    suggested.push(known.to_string());
                    match &setter {
                        Some(Setter::Env(_)) => format!(
                            "; did you mean {} ({ENV_PREFIX}{})?",
                            key(&suggested),
                            suggested.join(ENV_SEPARATOR).to_ascii_uppercase()
                        ),
                        _ => format!("; did you mean {}?", key(&suggested)),
                    }
                }
                None if parent.is_empty() => {
                    format!("; the sections are {}", expected.join(", "))
                }
                None => format!("; the keys of {} are {}", key(parent), expected.join(", ")),
            };
            format!("unknown key {}{}{hint}", key(path), where_set(setter))
        }
        Kind::UnknownVariant(found, expected) => {
            format!(
                "{}{}: {found:?} is not one of {}{}",
                key(path),
                where_set(origin.source(path)),
                expected.join(", "),
                did_you_mean(found, expected)
            )
        }
        Kind::MissingField(field) => {
            let mut full = path.clone();
            full.push(field.to_string());
            format!(
                "{} is missing{}: it has no default and must be set",
                key(&full),
                where_set(origin.source(path))
            )
        }
        Kind::InvalidType(found, expected) | Kind::InvalidValue(found, expected) => format!(
            "{}{}: expected {}, found {found}",
            key(path),
            where_set(origin.source(path)),
            plain_expected(expected)
        ),
        other => format!("{}{}: {other}", key(path), where_set(origin.source(path))),
    }
}

/// What serde says it expected, in the configuration's words (`struct LlmSection` is a table).
fn plain_expected(expected: &str) -> String {
    if expected.starts_with("struct ") || expected == "a map" {
        "a table".to_string()
    } else {
        expected.to_string()
    }
}

/// The known name closest to a mistyped one, if it is close enough to be what was meant: at
/// most one edit in four (a swapped pair of letters is one edit), `-` and `_` alike.
fn closest<'a>(typed: &str, known: &[&'a str]) -> Option<&'a str> {
    let normal = |s: &str| s.to_ascii_lowercase().replace('-', "_");
    let typed = normal(typed);
    known
        .iter()
        .map(|k| (strsim::osa_distance(&typed, &normal(k)), *k))
        .filter(|(distance, k)| *distance <= (k.len() / 4).max(1))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, k)| k)
}

/// `; did you mean KNOWN?` for the known name closest to `typed`, or nothing.
pub fn did_you_mean(typed: &str, known: &[&str]) -> String {
    closest(typed, known)
        .map(|known| format!("; did you mean {known}?"))
        .unwrap_or_default()
}

fn lookup<'v>(value: &'v Value, path: &[String]) -> Option<&'v Value> {
    path.iter().try_fold(value, |value, segment| match value {
        Value::Dict(_, dict) => dict.get(segment),
        Value::Array(_, items) => items.get(segment.parse::<usize>().ok()?),
        _ => None,
    })
}

fn lookup_mut<'v>(value: &'v mut Value, path: &[String]) -> Option<&'v mut Value> {
    path.iter().try_fold(value, |value, segment| match value {
        Value::Dict(_, dict) => dict.get_mut(segment),
        Value::Array(_, items) => items.get_mut(segment.parse::<usize>().ok()?),
        _ => None,
    })
}

/// Drops the key at `path`; whether it was there.
fn remove(values: &mut Value, path: &[String]) -> bool {
    let Some((last, parent)) = path.split_last() else {
        return false;
    };
    match lookup_mut(values, parent) {
        Some(Value::Dict(_, dict)) => dict.remove(last).is_some(),
        _ => false,
    }
}

/// Puts `value` at `path`; whether there was a value to replace.
fn replace(values: &mut Value, path: &[String], value: Value) -> bool {
    match lookup_mut(values, path) {
        Some(slot) => {
            *slot = value;
            true
        }
        None => false,
    }
}

impl Config {
    /// Loads the defaults, the optional file, then the `SWITCHYARD__…` environment variables.
    /// Only reading happens here (unknown keys and values of the wrong type are errors); what
    /// the values mean is checked by [`Config::validate`].
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        Config::load_with_env(path, Env::prefixed(ENV_PREFIX).split(ENV_SEPARATOR))
    }

    /// Loads the defaults and the given overrides only (tests use this to stay independent
    /// of the process environment).
    pub fn load_with_env(path: Option<&Path>, env: Env) -> Result<Config, ConfigError> {
        let mut figment = Figment::from(Toml::string(DEFAULT_TOML));
        if let Some(path) = path {
            if !path.exists() {
                return Err(ConfigError::MissingFile(path.display().to_string()));
            }
            figment = figment.merge(Toml::file_exact(path));
        }
        extract(&figment.merge(env)).map_err(|(mut errors, fixed)| {
            // What else is wrong, in the same pass: the values that could be read, checked as
            // `serve` checks them, the unreadable ones standing in as their defaults (a finding
            // about one of those keys would be about the default, not what was written).
            let mut warnings = Vec::new();
            if let Some((config, keys)) = fixed.map(|fixed| *fixed) {
                let about_stand_in =
                    |finding: &String| keys.iter().any(|k| finding.contains(k.as_str()));
                let findings = config.validate();
                errors.extend(findings.errors.into_iter().filter(|f| !about_stand_in(f)));
                warnings.extend(findings.warnings.into_iter().filter(|f| !about_stand_in(f)));
            }
            ConfigError::Invalid { errors, warnings }
        })
    }

    /// The defaults alone.
    pub fn defaults() -> Result<Config, ConfigError> {
        Config::load_with_env(None, Env::raw().only(&[]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(dotted: &str) -> Vec<String> {
        dotted.split('.').map(String::from).collect()
    }

    #[test]
    fn keys_are_written_as_in_the_file() {
        assert_eq!(key(&path("llm.models")), "llm.models");
        assert_eq!(
            key(&path("tool_servers.weather.tools.0.url")),
            "tool_servers.weather.tools[0].url"
        );
        assert_eq!(
            key(&["fallbacks", "gpt-4.1", "model"]),
            "fallbacks.\"gpt-4.1\".model"
        );
    }

    #[test]
    fn a_mistyped_name_is_matched_to_the_closest_known_one_and_a_stranger_to_none() {
        let known = ["host", "port", "body_limit_bytes", "drain_delay_ms"];
        assert_eq!(closest("prot", &known), Some("port"));
        assert_eq!(closest("hots", &known), Some("host"));
        assert_eq!(
            closest("body-limit-bytes", &known),
            Some("body_limit_bytes")
        );
        assert_eq!(closest("drain_delay", &known), Some("drain_delay_ms"));
        assert_eq!(closest("colour", &known), None);
        assert_eq!(closest("modles", &["models", "base_url"]), Some("models"));
    }
}
