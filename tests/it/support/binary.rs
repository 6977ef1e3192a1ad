//! The real switchyard binary (the one cargo builds for these tests) as a separate process:
//! `Binary::new()`, what it is given (database, fake upstream, variables, configuration
//! file), then `.spawn()` for an instance that serves, `.run(args)` for a command run to its
//! end, or `.start(args)` for one the test waits for itself.
//!
//! Only what a test gives (and a dummy `OPENAI_API_KEY`) reaches the process: none of the
//! caller's `SWITCHYARD*` or `OPENAI_*` variables. `TEST_BINARY_LOGS=1` shows what the
//! instances log.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Lines};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fake_llm::FakeLlm;
use tempfile::TempDir;

use super::backends::Database;

/// How the tests run an instance, under what a test sets: it listens on port 0 and logs at
/// `info`; open mode; no upstream retries and no drain delay; short leases, so that a run of a
/// killed instance is taken over within a second.
const INSTANCE: [(&str, &str); 7] = [
    ("SWITCHYARD__SERVER__PORT", "0"),
    ("SWITCHYARD__AUTH__MODE", "open"),
    ("SWITCHYARD__LLM__RETRIES", "0"),
    ("SWITCHYARD__SERVER__DRAIN_DELAY_MS", "0"),
    ("SWITCHYARD__RUNS__LEASE_TTL_MS", "1000"),
    ("SWITCHYARD__RUNS__SWEEP_INTERVAL_MS", "200"),
    ("RUST_LOG", "info"),
];

/// The variable that names the database.
const DATABASE_URL: &str = "SWITCHYARD__DATABASE__URL";

/// The binary, and what to start it with.
#[derive(Clone)]
#[must_use]
pub struct Binary {
    config_file: Option<PathBuf>,
    /// In the order given (a later value of a variable wins).
    env: Vec<(String, OsString)>,
    current_dir: Option<PathBuf>,
}

/// The id of the first key `switchyard keys list` printed (`list`: its output; the first line
/// is the header, each key's line starts with its id).
pub fn first_listed_key(list: &str) -> &str {
    list.lines()
        .nth(1)
        .and_then(|line| line.split_whitespace().next())
        .unwrap_or_else(|| panic!("no key in the list:\n{list}"))
}

/// What a command printed, and how it exited.
pub struct Output {
    /// The exit code (-1 when a signal ended it).
    pub code: i32,
    /// Standard output (lossy UTF-8).
    pub stdout: String,
    /// Standard error, where the logs of a command go (lossy UTF-8).
    pub stderr: String,
}

/// A configuration file in a folder of its own, removed when dropped.
pub struct ConfigFile {
    /// The file's path, as given to `--config`.
    pub path: String,
    _dir: TempDir,
}

impl ConfigFile {
    /// Writes `toml` to a new file.
    pub fn new(toml: &str) -> ConfigFile {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("switchyard.toml");
        std::fs::write(&path, toml).unwrap();
        ConfigFile {
            path: path.display().to_string(),
            _dir: dir,
        }
    }
}

impl Binary {
    /// The binary with nothing set but a key for the default provider (`OPENAI_API_KEY`), so
    /// that a missing key is not the problem unless a test says so.
    pub fn new() -> Binary {
        Binary {
            config_file: None,
            env: vec![("OPENAI_API_KEY".into(), "sk-test".into())],
            current_dir: None,
        }
    }

    /// On this database (`SWITCHYARD__DATABASE__URL`). Without one, an instance gets a fresh
    /// SQLite file of its own; a command gets none.
    pub fn database(self, url: &str) -> Binary {
        self.env(DATABASE_URL, url)
    }

    /// With `llm` as the default provider.
    pub fn upstream(self, llm: &FakeLlm) -> Binary {
        self.env("SWITCHYARD__LLM__BASE_URL", llm.base_url())
            .env("SWITCHYARD__LLM__API_KEY", "test")
    }

    /// With this environment variable (`SWITCHYARD__SECTION__KEY` overrides the configuration).
    pub fn env(mut self, key: &str, value: impl Into<OsString>) -> Binary {
        self.env.push((key.to_string(), value.into()));
        self
    }

    /// With these environment variables.
    pub fn envs(self, pairs: &[(&str, &str)]) -> Binary {
        pairs
            .iter()
            .fold(self, |binary, (key, value)| binary.env(key, *value))
    }

    /// With `--config path`.
    pub fn config_file(mut self, path: impl AsRef<Path>) -> Binary {
        self.config_file = Some(path.as_ref().to_path_buf());
        self
    }

    /// Started in this working directory.
    pub fn current_dir(mut self, dir: &Path) -> Binary {
        self.current_dir = Some(dir.to_path_buf());
        self
    }

    /// Runs a command (`check-config`, `migrate`, `keys list`, …) to its end.
    pub fn run(&self, args: &[&str]) -> Output {
        let output = self.command(&[], args).output().unwrap();
        Output {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Starts a command with its output piped, and leaves waiting for it to the test (one
    /// that should refuse to start, say).
    pub fn start(&self, args: &[&str]) -> Child {
        self.command(&[], args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Starts `serve` as the tests run an instance ([`INSTANCE`], under what the test set);
    /// returns it once it listens, with its address and what it logs.
    pub fn spawn(&self) -> Instance {
        let mut binary = self.clone();
        let given = self.env.iter().any(|(key, _)| key == DATABASE_URL);
        let database = (!given).then(Database::sqlite);
        if let Some(database) = &database {
            binary = binary.database(&database.url);
        }
        let mut child = binary
            .command(&INSTANCE, &[])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let logs = Logs::default();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let address = logs.read_until_address(&mut lines);
        logs.keep_reading(lines, child.id());
        Instance {
            child,
            address,
            logs,
            _database: database,
        }
    }

    /// The command: the caller's switchyard and OpenAI variables removed, then `defaults`,
    /// then what the test set.
    fn command(&self, defaults: &[(&str, &str)], args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_switchyard"));
        for (key, _) in std::env::vars_os() {
            let name = key.to_string_lossy();
            if name.starts_with("SWITCHYARD") || name.starts_with("OPENAI_") {
                command.env_remove(&key);
            }
        }
        command.envs(defaults.iter().copied());
        command.envs(self.env.iter().map(|(key, value)| (key, value)));
        if let Some(path) = &self.config_file {
            command.arg("--config").arg(path);
        }
        if let Some(dir) = &self.current_dir {
            command.current_dir(dir);
        }
        command.args(args);
        command
    }
}

/// A running instance of the binary; SIGKILLed when dropped if it still runs.
pub struct Instance {
    child: Child,
    /// Where it listens: `127.0.0.1:PORT`.
    pub address: String,
    /// Everything it has logged (standard output), from its first line.
    pub logs: Logs,
    /// The SQLite file it made for itself, if it was given no database.
    _database: Option<Database>,
}

impl Instance {
    /// `path` on the instance: `http://127.0.0.1:PORT/path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    /// Sends SIGTERM: a graceful stop.
    pub fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Sends SIGKILL (if it still runs), and reaps it.
    pub fn kill(&mut self) {
        if self.child.try_wait().unwrap().is_none() {
            self.child.kill().unwrap();
        }
        let _ = self.child.wait();
    }

    /// Its exit status, once it has exited, if it does within `within`; by then its logs hold
    /// what it logged (its output ends with it, unless a process it started still holds it,
    /// which is waited for only until `within` has passed).
    pub async fn exited(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        while !self.logs.ended() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Some(status)
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What an instance has logged so far, line by line.
#[derive(Clone, Default)]
pub struct Logs {
    lines: Arc<Mutex<Vec<String>>>,
    /// Whether its output has ended (the process exited).
    ended: Arc<AtomicBool>,
}

impl Logs {
    /// The lines so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Waits (up to 5 s) for a line that `matches`, and returns it.
    pub async fn wait_for(&self, matches: impl Fn(&str) -> bool) -> String {
        for _ in 0..250 {
            if let Some(line) = self.lines().into_iter().find(|l| matches(l)) {
                return line;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("no such log line in:\n{}", self.lines().join("\n"));
    }

    fn ended(&self) -> bool {
        self.ended.load(Ordering::SeqCst)
    }

    /// Keeps the lines up to the one that says where the instance listens; that address.
    fn read_until_address(&self, lines: &mut Lines<BufReader<ChildStdout>>) -> String {
        for line in lines.by_ref().map_while(Result::ok) {
            let address = line.find("address=").and_then(|at| {
                let value = line[at + 8..].split_whitespace().next()?;
                Some(value.trim_matches('"').to_string())
            });
            self.lines.lock().unwrap().push(line);
            if let Some(address) = address {
                return address;
            }
        }
        panic!(
            "the instance did not print its address (did it exit?):\n{}",
            self.lines().join("\n")
        );
    }

    /// Keeps reading in a thread of its own, so that the instance never blocks on a full pipe.
    /// `TEST_BINARY_LOGS=1` shows the lines.
    fn keep_reading(&self, lines: Lines<BufReader<ChildStdout>>, pid: u32) {
        let echo = std::env::var_os("TEST_BINARY_LOGS").is_some();
        let logs = self.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                if echo {
                    eprintln!("[switchyard {pid}] {line}");
                }
                logs.lines.lock().unwrap().push(line);
            }
            logs.ended.store(true, Ordering::SeqCst);
        });
    }
}
