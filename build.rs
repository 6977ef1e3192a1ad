//! The migrations are embedded by `sqlx::migrate!`: a new file in them must rebuild the crate.
//! `--version` names the commit built: `SWITCHYARD_COMMIT` when set (an image built without
//! its `.git`), else the checkout's `HEAD`, else "unknown".
use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=migrations");
    println!("cargo:rerun-if-env-changed=SWITCHYARD_COMMIT");
    let commit = std::env::var("SWITCHYARD_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(head_commit)
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=SWITCHYARD_COMMIT={}", commit.trim());
}

/// The checkout's HEAD (12 hex digits), watching the files that change with it.
fn head_commit() -> Option<String> {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let dir = git(&["rev-parse", "--absolute-git-dir"])?;
    let mut watched = vec![
        Path::new(&dir).join("HEAD"),
        Path::new(&dir).join("packed-refs"),
    ];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(Path::new(&dir).join(branch));
    }
    for path in watched.iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    git(&["rev-parse", "--short=12", "HEAD"])
}
