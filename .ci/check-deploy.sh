#!/usr/bin/env bash
# Checks the container deployment without a Docker engine: Dockerfile, .dockerignore,
# docker-compose.yml with .env.example (and its Prometheus service), docker-compose.tls.yml,
# deploy/nginx.conf, deploy/nginx-tls.conf and deploy/switchyard.toml.
#
#   bash .ci/check-deploy.sh            # static checks (a few seconds)
#   bash .ci/check-deploy.sh --build    # also runs the Dockerfile's build stages with the local
#                                       # toolchain in a temporary folder (a release build)
#
# What it checks:
#   Dockerfile   every workspace member (cargo metadata) has its Cargo.toml copied and a stub for
#                each of its targets in the dependency stage (cargo loads the whole workspace:
#                a missing member breaks `cargo build --locked`); the build stage touches the real
#                sources before building; --locked; the same profile settings in both stages (else
#                the cached dependencies are rebuilt); stripped binaries; the runtime stage copies
#                every binary compose runs, has a HEALTHCHECK with `switchyard probe`, a non-root
#                user. .dockerignore keeps what the build needs and leaves .env out.
#   compose      parses (PyYAML, else a minimal text check); every service has image or build; one
#                build per image, the other services reuse it without pulling; every ${VAR} is
#                documented in .env.example and required ones have a value there; no password,
#                secret or key written in the file (nor as a default); the database URL agrees
#                with the PostgreSQL service once interpolated; replicas get --config with a
#                mounted file that exists, a probe health check, the operator's settings (log
#                level/format, upstream URL and key, auth mode), a stop grace longer than the
#                shutdown grace; the `fake` profile runs fake-llm and .env.example says how to
#                point switchyard at it. With `docker compose` installed, also `config -q` (with
#                the monitoring profile, and with docker-compose.tls.yml).
#   prometheus   a service of an official Prometheus image pinned to a release (not `latest`), in
#                a profile; its --config.file and every rule_files entry (relative to it) are
#                mounted read-only from files of the repository, the config being
#                deploy/prometheus/prometheus.yml; its data on a named volume; its ports on
#                127.0.0.1 only; it starts after the replicas; its job `switchyard` scrapes
#                exactly the replicas on their port (not nginx), at /metrics over http.
#   nginx.conf   balanced blocks and terminated directives; upstream names re-resolved (`resolve`
#                with a zone and Docker's resolver 127.0.0.11, or a variable proxy_pass with a
#                resolver); the upstream lists exactly the compose replicas on their port; the
#                nginx image is new enough for `resolve`; SSE: proxy_buffering off, HTTP/1.1,
#                long read timeout, no gzip/cache; body limit above switchyard's; /metrics
#                answered 404. With an nginx binary (on PATH, or NGINX_BIN=/path/to/nginx):
#                `nginx -t`; else skipped (also when it is older than 1.27.3, without `resolve`).
#   HTTPS        docker-compose.tls.yml parses, overrides only services of docker-compose.yml,
#                its variables are documented in .env.example; it mounts its nginx config on the
#                target of docker-compose.yml's (replacing it) and every file it mounts exists,
#                read-only, but the certificate files, which must be git-ignored, untracked, and
#                named in the README next to them. Its nginx config (the file it
#                mounts) gets every nginx.conf check above, plus: the servers that proxy listen
#                with ssl on the published HTTPS port, plain HTTP only redirects to https:// on
#                that port, ssl_certificate and _key in the mounted folder, ssl_protocols
#                without SSLv3/TLSv1/TLSv1.1, forward-secret AEAD ssl_ciphers, a shared
#                ssl_session_cache, no http2 (WebSocket), X-Forwarded-Proto passed on; and its
#                resolver, upstream, WebSocket map and locations are the same as nginx.conf's.
#                `nginx -t` as above, with a throwaway self-signed certificate (openssl).
#   config       with a switchyard binary (SWITCHYARD_BIN, else target/release/switchyard):
#                `check-config` with each replica's --config file and environment; else skipped.
#
# Other files can be checked instead of the real ones, e.g. a broken copy (paths relative to where
# it is run from; the paths inside them, such as mounts, stay relative to the repository):
#   COMPOSE=… COMPOSE_TLS=… ENV_EXAMPLE=… NGINX_CONF=… NGINX_TLS_CONF=… PROM_CONFIG=…
# NGINX_TLS_CONF defaults to the file docker-compose.tls.yml mounts, PROM_CONFIG to the file the
# prometheus service loads.
#
# Ends with "check-deploy: N passed, N failed, N skipped"; exits 1 when a check failed.
set -euo pipefail
caller=$PWD
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The files to check: the real ones unless a variable above names another.
absolute() {
  case "$1" in
    /*) printf '%s\n' "$1" ;;
    *) printf '%s\n' "$caller/$1" ;;
  esac
}
for name in COMPOSE COMPOSE_TLS ENV_EXAMPLE NGINX_CONF NGINX_TLS_CONF PROM_CONFIG; do
  value=""
  if [[ -n "${!name:-}" ]]; then value=$(absolute "${!name}"); fi
  export "CHECK_$name=$value"
done

# A python3 with PyYAML if there is one (the compose checks are fuller with it).
python=""
for candidate in python3 /usr/bin/python3; do
  if command -v "$candidate" >/dev/null 2>&1; then
    [[ -z "$python" ]] && python="$candidate"
    if "$candidate" -c 'import yaml' >/dev/null 2>&1; then python="$candidate"; break; fi
  fi
done
if [[ -z "$python" ]]; then
  echo "check-deploy: python3 is needed" >&2
  exit 2
fi

script=$(mktemp "${TMPDIR:-/tmp}/check-deploy.XXXXXX.py")
trap 'rm -f "$script"' EXIT
cat >"$script" <<'PY'
import glob, json, os, posixpath, re, shlex, shutil, subprocess, sys, tempfile, time
from urllib.parse import urlsplit

ROOT = os.getcwd()
# The files checked (absolute when given in the environment, else relative to ROOT).
COMPOSE = os.environ.get("CHECK_COMPOSE") or "docker-compose.yml"
COMPOSE_TLS = os.environ.get("CHECK_COMPOSE_TLS") or "docker-compose.tls.yml"
ENV_EXAMPLE = os.environ.get("CHECK_ENV_EXAMPLE") or ".env.example"
NGINX_CONF = os.environ.get("CHECK_NGINX_CONF") or "deploy/nginx.conf"
NGINX_TLS_CONF = os.environ.get("CHECK_NGINX_TLS_CONF") or None
PROM_CONFIG = os.environ.get("CHECK_PROM_CONFIG") or None
ARGS = sys.argv[1:]
BUILD = "--build" in ARGS
for a in ARGS:
    if a not in ("--build",):
        print(f"usage: bash .ci/check-deploy.sh [--build] (unknown argument {a!r})", file=sys.stderr)
        sys.exit(2)

# The reporting helpers every check script shares (.ci/report.py), not compiled into .ci/.
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.getcwd(), ".ci"))
from report import check, fail, finish, note, ok, section, skip  # noqa: E402

def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()

def exists(path):
    return os.path.exists(os.path.join(ROOT, path))

def rel(path):
    """A path as the messages show it: relative to the repository when inside it."""
    full = os.path.normpath(os.path.join(ROOT, path))
    return os.path.relpath(full, ROOT) if full.startswith(ROOT + os.sep) else full

# ---------------------------------------------------------------------------------------------
# The workspace
# ---------------------------------------------------------------------------------------------

def workspace():
    """Members as dicts: name, dir (relative, "." for the root), manifest, targets [(kinds, src)]."""
    try:
        out = subprocess.run(
            ["cargo", "metadata", "--no-deps", "--format-version", "1", "--offline"],
            cwd=ROOT, check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        detail = getattr(e, "stderr", "") or str(e)
        fail(f"cargo metadata failed: {detail.strip().splitlines()[-1] if detail.strip() else e}")
        return None
    meta = json.loads(out)
    root = meta["workspace_root"]
    ids = set(meta["workspace_members"])
    members = []
    for pkg in meta["packages"]:
        if pkg["id"] not in ids:
            continue
        manifest = os.path.relpath(pkg["manifest_path"], root)
        targets = [(t["kind"], os.path.relpath(t["src_path"], root)) for t in pkg["targets"]]
        named = [(t["kind"], os.path.relpath(t["src_path"], root), t["name"]) for t in pkg["targets"]]
        members.append({"name": pkg["name"], "dir": os.path.dirname(manifest) or ".",
                        "manifest": manifest, "targets": targets, "named_targets": named})
    return members

# ---------------------------------------------------------------------------------------------
# Dockerfile
# ---------------------------------------------------------------------------------------------

def dockerfile_instructions(text):
    """(line, INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out, buf, start = [], [], None
    lines = text.splitlines()
    for no, line in enumerate(lines, 1):
        stripped = line.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if start is None:
            start = no
        if line.rstrip().endswith("\\"):
            buf.append(line.rstrip()[:-1])
            continue
        buf.append(line)
        joined = " ".join(part.strip() for part in buf).strip()
        buf = []
        word, _, rest = joined.partition(" ")
        out.append((start, word.upper(), rest.strip()))
        start = None
    return out

def parse_stages(text):
    stages = []
    for no, instr, args in dockerfile_instructions(text):
        if instr == "FROM":
            words = [w for w in args.split() if not w.startswith("--")]
            base = words[0] if words else ""
            name = words[2] if len(words) >= 3 and words[1].lower() == "as" else None
            stages.append({"line": no, "base": base, "name": name, "index": len(stages),
                           "instructions": []})
        elif stages:
            stages[-1]["instructions"].append((no, instr, args))
    return stages

def stage_by_ref(stages, ref):
    for s in stages:
        if s["name"] == ref or str(s["index"]) == ref:
            return s
    return None

def lineage(stages, stage):
    """The stage's ancestors within the file, oldest first, then the stage."""
    chain = [stage]
    while True:
        parent = stage_by_ref(stages, chain[0]["base"])
        if parent is None or parent in chain:
            break
        chain.insert(0, parent)
    return chain

def json_or_words(args):
    args = args.strip()
    if args.startswith("["):
        try:
            return json.loads(args)
        except ValueError:
            pass
    return args.split()

def parse_copy(args):
    words = json_or_words(args) if not args.strip().startswith("--") else None
    flags = {}
    if words is None:
        parts = args.split()
        while parts and parts[0].startswith("--"):
            k, _, v = parts.pop(0)[2:].partition("=")
            flags[k] = v
        rest = " ".join(parts)
        words = json_or_words(rest)
    return flags, words[:-1], words[-1] if words else ""

def shell_commands(script):
    """Simple commands of a shell script, as token lists (quotes respected)."""
    lex = shlex.shlex(script, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    try:
        tokens = list(lex)
    except ValueError:
        return [script.split()]
    commands, current = [], []
    for tok in tokens:
        if tok in ("&&", "||", ";", "|", "&", "(", ")"):
            if current:
                commands.append(current)
            current = []
        else:
            current.append(tok)
    if current:
        commands.append(current)
    return commands

def created_files(commands):
    """Files a shell script creates with `touch F` or `... > F`."""
    files = []
    for cmd in commands:
        i = 0
        redirect_targets = set()
        while i < len(cmd):
            if cmd[i] in (">", ">>") and i + 1 < len(cmd):
                files.append(cmd[i + 1])
                redirect_targets.add(i + 1)
                i += 2
                continue
            i += 1
        if cmd and cmd[0] == "touch":
            for j, tok in enumerate(cmd[1:], 1):
                if tok in (">", ">>") or j in redirect_targets:
                    break
                if not tok.startswith("-"):
                    files.append(tok)
    return [f for f in files if not f.startswith("/dev/")]

def cargo_invocations(commands):
    return [cmd for cmd in commands if len(cmd) >= 2 and cmd[0] == "cargo"]

def option_values(cmd, *names):
    out = []
    for i, tok in enumerate(cmd):
        for name in names:
            if tok == name and i + 1 < len(cmd):
                out.append(cmd[i + 1])
            elif name.startswith("--") and tok.startswith(name + "="):
                out.append(tok.split("=", 1)[1])
            elif not name.startswith("--") and tok.startswith(name) and len(tok) > len(name):
                out.append(tok[len(name):])
    return out

MEMBERS = []

def bins_of(cargo_cmd):
    """The binaries a `cargo build` makes: its --bin options, else every bin target of its
    -p packages (all members with --workspace), else those of the root package."""
    bins = option_values(cargo_cmd, "--bin")
    if bins:
        return bins
    packages = option_values(cargo_cmd, "-p", "--package")
    if "--workspace" in cargo_cmd or "--all" in cargo_cmd:
        chosen = MEMBERS
    elif packages:
        chosen = [m for m in MEMBERS if m["name"] in packages]
    else:
        chosen = [m for m in MEMBERS if m["dir"] == "."][:1]
    return [name for m in chosen for kinds, _, name in m.get("named_targets", []) if "bin" in kinds]

def env_assignments(args):
    """ENV K=V K2="V 2" (or the old ENV K V) as a dict."""
    try:
        words = shlex.split(args)
    except ValueError:
        words = args.split()
    if words and "=" not in words[0]:
        return {words[0]: " ".join(words[1:])}
    out = {}
    for w in words:
        k, _, v = w.partition("=")
        out[k] = v
    return out

def walk_stage(stages, stage):
    """Walks a stage's lineage: yields (stage, line, instr, args, state) with the state before
    the instruction: workdir, env, full_copy (the build context was copied)."""
    state = {"workdir": "/", "env": {}, "full_copy": False}
    for st in lineage(stages, stage):
        for no, instr, args in st["instructions"]:
            yield st, no, instr, args, dict(state, env=dict(state["env"]))
            if instr == "WORKDIR":
                state["workdir"] = os.path.normpath(os.path.join(state["workdir"], args.strip()))
            elif instr == "ENV":
                state["env"].update(env_assignments(args))
            elif instr in ("COPY", "ADD"):
                flags, sources, _ = parse_copy(args)
                if "from" not in flags and any(os.path.normpath(s) == "." for s in sources):
                    state["full_copy"] = True

def copy_destinations(flags, sources, dest, workdir):
    """{source: destination path} for a COPY of files."""
    dest_abs = os.path.normpath(os.path.join(workdir, dest))
    as_dir = dest.endswith("/") or len(sources) > 1
    return {os.path.normpath(s): (os.path.join(dest_abs, os.path.basename(os.path.normpath(s)))
                                  if as_dir else dest_abs) for s in sources}

def release_profile_env(env):
    return {k: v for k, v in env.items() if k.startswith("CARGO_PROFILE_") or k in ("RUSTFLAGS", "CARGO_BUILD_RUSTFLAGS")}

def check_dockerfile(members, compose_info):
    section("Dockerfile")
    if not exists("Dockerfile"):
        fail("no Dockerfile")
        return None
    stages = parse_stages(read("Dockerfile"))
    if not stages:
        fail("Dockerfile has no FROM")
        return None
    final = stages[-1]

    # The dependency stage: the first `cargo build` (or `cargo chef cook`) before the build
    # context is copied.
    deps = None
    builds = []
    for st in stages:
        for owner, no, instr, args, state in walk_stage(stages, st):
            if owner is not st or instr != "RUN":
                continue
            cmds = shell_commands(args)
            for cmd in cargo_invocations(cmds):
                entry = {"stage": st, "line": no, "cmd": cmd, "cmds": cmds, "state": state}
                is_chef = cmd[1] == "chef"
                if cmd[1] == "build" or (is_chef and "cook" in cmd):
                    if not state["full_copy"] and deps is None:
                        deps = entry
                    elif state["full_copy"] and cmd[1] == "build":
                        builds.append(entry)
    if deps is None:
        fail("no dependency stage: no `cargo build` runs before the sources are copied "
             "(every source change would rebuild every dependency)")
        return stages
    ok(f"dependency stage `{deps['stage']['name'] or deps['stage']['index']}` builds at line {deps['line']}")

    # What the dependency stage has copied and created before its build.
    copied, created = {}, set()
    for owner, no, instr, args, state in walk_stage(stages, deps["stage"]):
        if no >= deps["line"] and owner is deps["stage"]:
            break
        if instr in ("COPY", "ADD"):
            flags, sources, dest = parse_copy(args)
            if "from" in flags:
                continue
            copied.update(copy_destinations(flags, sources, dest, state["workdir"]))
        elif instr == "RUN":
            for f in created_files(shell_commands(args)):
                created.add(os.path.normpath(os.path.join(state["workdir"], f)))
    # The build command's own RUN may create stubs before it runs.
    for f in created_files(deps["cmds"]):
        created.add(os.path.normpath(os.path.join(deps["state"]["workdir"], f)))
    workdir = deps["state"]["workdir"]

    chef = deps["cmd"][1] == "chef"
    if chef:
        ok("cargo-chef: the recipe carries every workspace member (no list to keep up to date)")
        planners = [st for st in stages
                    if any(i == "RUN" and "chef" in a and "prepare" in a for _, i, a in st["instructions"])]
        check(planners, "a stage runs `cargo chef prepare`", "cargo chef cook without a `cargo chef prepare` stage")
    elif members is not None:
        want_targets = set()
        for m in members:
            manifest = os.path.normpath(m["manifest"])
            dest = os.path.normpath(os.path.join(workdir, manifest))
            if copied.get(manifest) == dest:
                ok(f"member {m['name']!r}: {manifest} copied")
            else:
                fail(f"member {m['name']!r} ({m['dir']}): the dependency stage does not copy {manifest} "
                     f"to {dest}; cargo loads every member listed in Cargo.toml, so `cargo build --locked` "
                     f"fails there. Add: COPY {manifest} {manifest}")
            stubs = [src for kinds, src in m["targets"] if set(kinds) & {"lib", "bin", "rlib", "cdylib", "dylib", "staticlib", "proc-macro"}]
            missing = []
            for src in stubs:
                path = os.path.normpath(os.path.join(workdir, src))
                want_targets.add(path)
                if path not in created and copied.get(os.path.normpath(src)) != path:
                    missing.append(src)
            if missing:
                fail(f"member {m['name']!r}: no stub for {', '.join(missing)} in the dependency stage "
                     f"(cargo needs each target's source file: create it, e.g. "
                     f"echo 'fn main() {{}}' > {missing[0]}  or  touch {missing[0]})")
            elif stubs:
                ok(f"member {m['name']!r}: stubs for {', '.join(stubs)}")
            # An explicit build script must exist too (an implicit build.rs may be left out).
            try:
                import tomllib
                with open(os.path.join(ROOT, m["manifest"]), "rb") as f:
                    build = tomllib.load(f).get("package", {}).get("build")
                if isinstance(build, str):
                    path = os.path.normpath(os.path.join(workdir, m["dir"], build))
                    check(path in created or path in copied.values(),
                          f"member {m['name']!r}: its build script {build} is there",
                          f"member {m['name']!r}: package.build = {build!r} is neither copied nor stubbed in the dependency stage")
            except ImportError:
                pass
        extra = sorted(p for p in created if p.endswith(".rs") and p not in want_targets)
        check(not extra, "no stub beyond the members' targets",
              f"stubs that are no target of any member (they would stay in the build as extra targets): {', '.join(extra)}")
        member_manifests = {os.path.normpath(m["manifest"]) for m in members}
        stray = sorted(s for s in copied if s.endswith("Cargo.toml") and s not in member_manifests)
        check(not stray, "no manifest copied that is not a member's",
              f"manifests copied that are no workspace member: {', '.join(stray)}")
        check(copied.get("Cargo.lock") == os.path.join(workdir, "Cargo.lock"),
              "Cargo.lock copied before the dependency build", "the dependency stage does not copy Cargo.lock")

    # The build of the real sources.
    copies_from = {}
    for no, instr, args in final["instructions"]:
        if instr in ("COPY", "ADD"):
            flags, sources, dest = parse_copy(args)
            if "from" in flags:
                copies_from.setdefault(flags["from"], []).extend(sources)
    build = None
    for ref in copies_from:
        st = stage_by_ref(stages, ref)
        if st is None:
            continue
        chain = lineage(stages, st)
        cands = [b for b in builds if b["stage"] in chain]
        if cands:
            build = cands[-1]
    if not check(build is not None, f"build stage `{build['stage']['name'] if build else ''}` builds the copied sources",
                 "the runtime stage copies from no stage that builds after copying the sources"):
        return stages
    # Sources touched between the full copy and the build (same RUN or an earlier one).
    touched = False
    for owner, no, instr, args, state in walk_stage(stages, build["stage"]):
        if no > build["line"] and owner is build["stage"]:
            break
        if instr == "RUN" and state["full_copy"]:
            for cmd in shell_commands(args):
                if cmd and (cmd[0] == "touch" or ("-exec" in cmd and "touch" in cmd)):
                    touched = True
    check(touched, "the build stage touches the copied sources before building (no stub shipped)",
          "the build stage does not touch the copied sources: their modification times can be older "
          "than the stub build, and cargo would keep the stubs")
    all_cargo = [deps] + builds
    unlocked = [b["line"] for b in all_cargo if not chef and b["cmd"][1] == "build" and "--locked" not in b["cmd"]]
    check(not unlocked, "every cargo build uses --locked", f"cargo build without --locked at line(s) {unlocked}")
    if not chef:
        dbins, bbins = sorted(bins_of(deps["cmd"])), sorted(bins_of(build["cmd"]))
        check(dbins == bbins, f"both stages build the same binaries ({', '.join(bbins) or 'default'})",
              f"the dependency stage builds {dbins} but the build stage {bbins}: the dependencies of the "
              f"others are compiled on every source change")
        check(("--release" in deps["cmd"]) == ("--release" in build["cmd"]), "both builds use the same profile",
              "--release in one build and not the other")
    denv, benv = release_profile_env(deps["state"]["env"]), release_profile_env(build["state"]["env"])
    check(denv == benv, "the same CARGO_PROFILE_*/RUSTFLAGS settings in both builds",
          f"profile settings differ ({denv} vs {benv}): the cached dependencies would be rebuilt")
    # Stripped binaries.
    strip_env = benv.get("CARGO_PROFILE_RELEASE_STRIP", "")
    strip_cfg = any("profile.release.strip" in tok for tok in build["cmd"])
    strip_cmd = any(instr == "RUN" and any(c and c[0] == "strip" for c in shell_commands(args))
                    for _, _, instr, args, _ in walk_stage(stages, stage_by_ref(stages, list(copies_from)[0]) or build["stage"]))
    try:
        import tomllib
        with open(os.path.join(ROOT, "Cargo.toml"), "rb") as f:
            strip_toml = tomllib.load(f).get("profile", {}).get("release", {}).get("strip")
    except ImportError:
        strip_toml = None
    check(strip_env in ("true", "symbols", "debuginfo") or strip_cfg or strip_cmd or strip_toml not in (None, False, "none"),
          "the shipped binaries are stripped" + (f" (CARGO_PROFILE_RELEASE_STRIP={strip_env})" if strip_env else ""),
          "nothing strips the binaries (CARGO_PROFILE_RELEASE_STRIP, --config profile.release.strip=true, or strip)")
    # The runtime stage.
    built = set(bins_of(build["cmd"]))
    shipped = {os.path.basename(s) for srcs in copies_from.values() for s in srcs}
    target_dir = os.path.join(build["state"]["workdir"], "target", "release")
    for ref, srcs in copies_from.items():
        for s in srcs:
            b = os.path.basename(s)
            if b in built:
                check(os.path.dirname(os.path.normpath(s)) == target_dir, f"runtime copies {b} from {target_dir}",
                      f"runtime copies {s}, but the build puts {b} in {target_dir}")
    needed = {"switchyard"} | set(compose_info.get("entrypoints", set()))
    for b in sorted(needed):
        check(b in shipped and (b in built or not built),
              f"the image ships {b}" + (" (used by docker-compose.yml)" if b != "switchyard" else ""),
              f"the image does not ship {b}" + (f" (docker-compose.yml runs it)" if b != "switchyard" else "")
              + (f"; build it in both stages (-p its package, or --bin {b})" if b not in built else ""))
    health = [a for _, i, a in final["instructions"] if i == "HEALTHCHECK"]
    check(health and "probe" in health[-1] and "switchyard" in health[-1],
          "HEALTHCHECK runs `switchyard probe`", "the runtime stage has no HEALTHCHECK running `switchyard probe`")
    users = [a.strip() for _, i, a in final["instructions"] if i == "USER"]
    check(users and users[-1] not in ("root", "0", "0:0"), f"runs as user {users[-1] if users else ''}",
          "the runtime stage runs as root (no USER)")
    entry = [a for _, i, a in final["instructions"] if i == "ENTRYPOINT"]
    check(entry and "switchyard" in entry[-1], "ENTRYPOINT is switchyard", "ENTRYPOINT does not run switchyard")
    return stages

# ---------------------------------------------------------------------------------------------
# .dockerignore
# ---------------------------------------------------------------------------------------------

def ignore_patterns():
    pats = []
    if not exists(".dockerignore"):
        return pats
    for line in read(".dockerignore").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        neg = line.startswith("!")
        if neg:
            line = line[1:].strip()
        line = os.path.normpath(line).lstrip("/")
        pats.append((neg, glob_regex(line)))
    return pats

def glob_regex(pat):
    out, i = "", 0
    while i < len(pat):
        c = pat[i]
        if pat.startswith("**", i):
            i += 2
            if i < len(pat) and pat[i] == "/":
                out += "(?:.*/)?"
                i += 1
            else:
                out += ".*"
            continue
        if c == "*":
            out += "[^/]*"
        elif c == "?":
            out += "[^/]"
        elif c == "[":
            j = pat.find("]", i)
            if j == -1:
                out += re.escape(c)
            else:
                out += pat[i:j + 1]
                i = j
        elif c == "\\" and i + 1 < len(pat):
            i += 1
            out += re.escape(pat[i])
        else:
            out += re.escape(c)
        i += 1
    return re.compile("^" + out + "$")

def ignored(path, pats):
    path = os.path.normpath(path)
    parts = path.split("/")
    candidates = ["/".join(parts[:k]) for k in range(1, len(parts) + 1)]
    result = False
    for neg, rx in pats:
        if any(rx.match(c) for c in candidates):
            result = not neg
    return result

def check_dockerignore(members):
    section(".dockerignore")
    pats = ignore_patterns()
    if not exists(".dockerignore"):
        skip("no .dockerignore (the whole folder, target/ and .env included, goes to the build)")
        return
    needed = ["Cargo.toml", "Cargo.lock"]
    for extra in ("build.rs", "config/default.toml"):
        if exists(extra):
            needed.append(extra)
    # Migrations, and the inspector's templates and assets (compiled into the binary).
    for folder in ("migrations", "templates", "assets"):
        if exists(folder):
            for d, _, files in os.walk(os.path.join(ROOT, folder)):
                needed += [os.path.relpath(os.path.join(d, f), ROOT) for f in files]
    for m in members or []:
        needed.append(m["manifest"])
        needed += [src for _, src in m["targets"]]
    bad = sorted({p for p in needed if ignored(p, pats)})
    check(not bad, f"keeps the {len(set(needed))} files the build needs (manifests, targets, lock, config, migrations, templates, assets)",
          f".dockerignore leaves out files the build needs: {', '.join(bad)}")
    check(ignored(".env", pats), ".env (secrets) stays out of the build context",
          ".env is not in .dockerignore: the stack's secrets would be sent to the builder")
    check(ignored("target", pats), "target/ stays out of the build context", "target/ is sent to the builder")

# ---------------------------------------------------------------------------------------------
# docker-compose.yml and .env.example
# ---------------------------------------------------------------------------------------------

def parse_env_file(path):
    """(active {K: V}, documented {K}) of a .env file: `K=V` lines, and `# K=V` lines."""
    active, documented = {}, set()
    for line in read(path).splitlines():
        s = line.strip()
        m = re.match(r"^(#\s*)?(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$", s)
        if not m:
            continue
        documented.add(m.group(2))
        if m.group(1):
            continue
        v = m.group(3).strip()
        if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
            v = v[1:-1]
        elif " #" in v:
            v = v.split(" #", 1)[0].rstrip()
        active[m.group(2)] = v
    return active, documented

class Missing(Exception):
    pass

def expansions(s):
    """(name, operator, word) of every ${…}/$VAR in s (not $$)."""
    out, i = [], 0
    while i < len(s):
        if s[i] == "$":
            if s.startswith("$$", i):
                i += 2
                continue
            if s.startswith("${", i):
                depth, j = 1, i + 2
                while j < len(s) and depth:
                    if s.startswith("${", j):
                        depth += 1
                        j += 2
                        continue
                    if s[j] == "}":
                        depth -= 1
                    j += 1
                body = s[i + 2:j - 1]
                m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)(:?[-?+])?(.*)$", body, re.S)
                if m:
                    out.append((m.group(1), m.group(2) or "", m.group(3), i, j))
                    out += [e for e in expansions(m.group(3))]
                i = j
                continue
            m = re.match(r"\$([A-Za-z_][A-Za-z0-9_]*)", s[i:])
            if m:
                out.append((m.group(1), "", "", i, i + len(m.group(0))))
                i += len(m.group(0))
                continue
        i += 1
    return out

def interpolate(s, env):
    out, i = "", 0
    while i < len(s):
        if s.startswith("$$", i):
            out += "$"
            i += 2
            continue
        if s[i] == "$":
            found = [e for e in expansions(s[i:]) if e[3] == 0]
            if found:
                name, op, word, _, end = found[0]
                val = env.get(name)
                if op == ":-":
                    val = val if val else interpolate(word, env)
                elif op == "-":
                    val = val if val is not None else interpolate(word, env)
                elif op in (":?", "?"):
                    if val is None or (op == ":?" and val == ""):
                        raise Missing(f"{name}: {interpolate(word, env) or 'required'}")
                elif op == ":+":
                    val = interpolate(word, env) if val else ""
                elif op == "+":
                    val = interpolate(word, env) if val is not None else ""
                out += val or ""
                i += end
                continue
        out += s[i]
        i += 1
    return out

def interpolate_tree(node, env):
    if isinstance(node, dict):
        return {k: interpolate_tree(v, env) for k, v in node.items()}
    if isinstance(node, list):
        return [interpolate_tree(v, env) for v in node]
    if isinstance(node, str):
        return interpolate(node, env)
    return node

def strings(node):
    if isinstance(node, dict):
        for v in node.values():
            yield from strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from strings(v)
    elif isinstance(node, str):
        yield node

def env_dict(service):
    env = service.get("environment") or {}
    if isinstance(env, list):
        out = {}
        for item in env:
            k, sep, v = str(item).partition("=")
            out[k] = v if sep else None
        return out
    return {k: (None if v is None else str(v)) for k, v in env.items()}

def as_list(cmd):
    if cmd is None:
        return []
    if isinstance(cmd, str):
        return shlex.split(cmd)
    return [str(c) for c in cmd]

def duration_seconds(text):
    total, found = 0.0, False
    for num, unit in re.findall(r"(\d+(?:\.\d+)?)(h|ms|m|s|us|ns)", str(text)):
        found = True
        total += float(num) * {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}[unit]
    return total if found else None

def default_toml():
    try:
        import tomllib
        with open(os.path.join(ROOT, "config/default.toml"), "rb") as f:
            return tomllib.load(f)
    except Exception:
        return {}

SECRET_KEY = re.compile(r"(PASSWORD|PASSWD|SECRET|TOKEN|API_KEY|PRIVATE_KEY)", re.I)

def secret_value_ok(raw):
    """A secret's value in compose: empty, or one ${VAR} with no default other than empty."""
    if raw is None or raw == "":
        return True
    exps = [e for e in expansions(raw) if e[3] == 0 and e[4] == len(raw)]
    if not exps:
        return False
    name, op, word, _, _ = exps[0]
    if op in (":-", "-"):
        return word == ""
    return op in ("", ":?", "?")

def check_compose():
    section(f"{rel(COMPOSE)} and {rel(ENV_EXAMPLE)}")
    info = {"entrypoints": set(), "replicas": [], "services": {}, "port": None}
    if not exists(COMPOSE):
        fail(f"no {rel(COMPOSE)}")
        return info
    raw_text = read(COMPOSE)
    env_example_ok = check(exists(ENV_EXAMPLE), f"{rel(ENV_EXAMPLE)} exists", f"no {rel(ENV_EXAMPLE)} to copy to .env")
    active, documented = parse_env_file(ENV_EXAMPLE) if env_example_ok else ({}, set())
    info["active"], info["documented"] = active, documented
    try:
        import yaml
    except ImportError:
        skip("PyYAML is not installed: minimal text checks only (pip install pyyaml for the full ones)")
        check(len(re.findall(r"^\s+build:", raw_text, re.M)) == 1, "one build: section", "not exactly one build: section")
        bad = re.findall(r"^\s*-?\s*\w*(?:PASSWORD|SECRET|TOKEN|API_KEY)\w*\s*[:=]\s*(?!\$\{)(\S+)", raw_text, re.M)
        check(not bad, "no literal password, secret or key", f"literal secrets: {bad}")
        names = {m.group(1) for m in re.finditer(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", raw_text)}
        undoc = sorted(names - documented)
        check(not undoc, "every ${VAR} is documented in .env.example", f"not in .env.example: {', '.join(undoc)}")
        return info
    try:
        doc = yaml.safe_load(raw_text)
    except yaml.YAMLError as e:
        fail(f"{rel(COMPOSE)} is not valid YAML: {e}")
        return info
    services = (doc or {}).get("services") or {}
    if not check(isinstance(services, dict) and services, f"parses: {len(services)} services ({', '.join(services)})",
                 "no services"):
        return info
    info["services"] = services
    info["doc"] = doc

    # Variables.
    used = {}
    for s in strings(doc):
        for name, op, word, _, _ in expansions(s):
            used.setdefault(name, set()).add(op)
    undocumented = sorted(n for n in used if n not in documented)
    check(not undocumented, f"all {len(used)} variables are documented in .env.example",
          f"variables used but not in .env.example: {', '.join(undocumented)}")
    required = sorted(n for n, ops in used.items() if ops & {":?", "?"})
    no_value = [n for n in required if not active.get(n)]
    check(not no_value, f"required variables have a value in .env.example ({', '.join(required) or 'none'})",
          f"required but without a value in .env.example: {', '.join(no_value)}")
    for svc, s in services.items():
        for ef in (s.get("env_file") or []) if isinstance(s.get("env_file"), list) else [s.get("env_file")] if s.get("env_file") else []:
            path = ef["path"] if isinstance(ef, dict) else ef
            check(exists(path + ".example") or exists(path), f"{svc}: env_file {path} has {path}.example",
                  f"{svc}: env_file {path} exists neither as {path} nor as {path}.example")

    # Secrets written into the file.
    leaks = []
    for svc, s in services.items():
        for k, v in env_dict(s).items():
            if SECRET_KEY.search(k) and not k.endswith("_FILE") and not secret_value_ok(v):
                leaks.append(f"{svc}.{k}")
    for s in strings(doc):
        for m in re.finditer(r"[a-z][a-z0-9+.-]*://[^/\s:@]+:([^@\s]+)@", s):
            if not secret_value_ok(m.group(1)):
                leaks.append(f"password in URL {m.group(0)}")
    leaks = list(dict.fromkeys(leaks))
    check(not leaks, "no password, secret or key written in the file (nor as a ${VAR:-default})",
          f"hard-coded secrets: {', '.join(leaks)}")

    try:
        resolved = interpolate_tree(doc, active)
    except Missing as e:
        fail(f"does not interpolate with .env.example's values: {e}")
        return info
    ok("interpolates with .env.example's values")
    info["resolved"] = resolved
    rservices = resolved["services"]
    pw_vars = [n for n in used if "PASSWORD" in n.upper()]
    for n in pw_vars:
        try:
            interpolate_tree(doc, {k: v for k, v in active.items() if k != n})
            fail(f"without {n} in .env the file still interpolates: a default password is hidden somewhere")
        except Missing:
            ok(f"refuses to start without {n}")

    # Images and builds.
    for svc, s in services.items():
        check(s.get("image") or s.get("build"), f"{svc}: image {s.get('image') or '(built)'}",
              f"{svc}: neither image nor build")
    builders = {svc: s for svc, s in services.items() if s.get("build") is not None}
    by_image = {}
    for svc, s in services.items():
        if s.get("image"):
            by_image.setdefault(s["image"], []).append(svc)
    built_image = None
    repo_builders = []
    for svc, s in builders.items():
        ctx = s["build"] if isinstance(s["build"], str) else (s["build"] or {}).get("context", ".")
        dockerfile = "Dockerfile" if isinstance(s["build"], str) else (s["build"] or {}).get("dockerfile", "Dockerfile")
        if os.path.normpath(ctx) == "." and os.path.normpath(dockerfile) == "Dockerfile":
            repo_builders.append(svc)
            built_image = built_image or s.get("image")
    check(len(repo_builders) == 1, f"the repository's Dockerfile is built once, by {', '.join(repo_builders)}",
          f"the repository's Dockerfile is built by {len(repo_builders)} services ({', '.join(repo_builders)}): "
          f"build it in one service with an image: name, and let the others use that image")
    check(len(builders) == len({(s.get("image") or svc) for svc, s in builders.items()}) and
          all(len([b for b in builders if services[b].get("image") == img]) <= 1 for img in by_image),
          f"each image is built by one service ({', '.join(builders) or 'none'})",
          "an image is built by several services (it would be built once per service)")
    if check(built_image is not None, f"the repository's image is named: {built_image}",
             "the service that builds the repository's Dockerfile has no image: name for the others to reuse"):
        users = [svc for svc in by_image.get(built_image, []) if svc not in builders]
        for svc in users:
            check(services[svc].get("pull_policy") in ("never", "build"),
                  f"{svc}: reuses {built_image} without pulling (pull_policy: {services[svc].get('pull_policy')})",
                  f"{svc}: uses {built_image} without pull_policy: never; compose would try to pull it from a registry")
    same_image = [svc for svc in services if (built_image and services[svc].get("image") == built_image)
                  or svc in repo_builders]
    replicas = [svc for svc in same_image if not services[svc].get("entrypoint")]
    others = [svc for svc in same_image if services[svc].get("entrypoint")]
    info["replicas"] = replicas
    for svc in others:
        ep = as_list(services[svc]["entrypoint"])
        if ep:
            info["entrypoints"].add(os.path.basename(ep[0]))
    check(len(replicas) >= 1, f"switchyard replicas: {', '.join(replicas)}", "no service runs switchyard")

    # Bind mounts.
    for svc, s in services.items():
        for v in s.get("volumes") or []:
            src = v.split(":")[0] if isinstance(v, str) else (v.get("source") if v.get("type") == "bind" else None)
            if src and (src.startswith(".") or src.startswith("/")):
                check(exists(src), f"{svc}: mounts {src}", f"{svc}: mounts {src}, which does not exist")

    # The replicas.
    defaults = default_toml()
    grace = (defaults.get("server") or {}).get("shutdown_grace_seconds", 30)
    db_services = {svc for svc, s in services.items() if str(s.get("image", "")).startswith("postgres")}
    ports = set()
    for svc in replicas:
        s, r = services[svc], rservices[svc]
        env, renv = env_dict(s), env_dict(r)
        cmd = as_list(r.get("command"))
        if "--config" in cmd and cmd.index("--config") + 1 < len(cmd):
            path = cmd[cmd.index("--config") + 1]
            mounts = {}
            for v in r.get("volumes") or []:
                if isinstance(v, str) and ":" in v:
                    parts = v.split(":")
                    mounts[parts[1]] = parts[0]
            src = mounts.get(path)
            check(src and exists(src), f"{svc}: --config {path} is {src}",
                  f"{svc}: --config {path} is not a mounted file of the repository")
            info.setdefault("config_files", {})[svc] = src
        else:
            fail(f"{svc}: not started with --config (mount deploy/switchyard.toml and pass it)")
        hc = r.get("healthcheck") or {}
        test = " ".join(as_list(hc.get("test")))
        check(("probe" in test and "switchyard" in test) or (not hc),
              f"{svc}: health check `{test or 'the image HEALTHCHECK (switchyard probe)'}`",
              f"{svc}: health check does not run switchyard probe: {test}")
        check(renv.get("SWITCHYARD__SERVER__HOST") in ("0.0.0.0", "::"),
              f"{svc}: listens on {renv.get('SWITCHYARD__SERVER__HOST')}",
              f"{svc}: SWITCHYARD__SERVER__HOST is not 0.0.0.0 (nginx could not reach it)")
        ports.add(str(renv.get("SWITCHYARD__SERVER__PORT") or (defaults.get("server") or {}).get("port", 8080)))
        wanted = ["RUST_LOG", "SWITCHYARD_LOG_FORMAT", "OPENAI_API_KEY", "OPENAI_BASE_URL", "SWITCHYARD__AUTH__MODE"]
        missing = [k for k in wanted if not (env.get(k) and expansions(env[k]))]
        check(not missing, f"{svc}: passes through {', '.join(wanted)}",
              f"{svc}: does not take these from the environment/.env: {', '.join(missing)}")
        url = renv.get("SWITCHYARD__DATABASE__URL", "")
        u = urlsplit(url)
        if check(u.scheme in ("postgres", "postgresql") and u.hostname in services,
                 f"{svc}: database {u.scheme}://{u.username}:***@{u.hostname}{u.path}",
                 f"{svc}: SWITCHYARD__DATABASE__URL is not a postgres URL to a compose service: {url!r}"):
            pg = env_dict(rservices[u.hostname])
            check(u.password == pg.get("POSTGRES_PASSWORD") and u.username == pg.get("POSTGRES_USER", "postgres")
                  and u.path.lstrip("/") == pg.get("POSTGRES_DB", pg.get("POSTGRES_USER", "postgres")),
                  f"{svc}: its database URL matches {u.hostname}'s user, password and database",
                  f"{svc}: its database URL does not match {u.hostname}'s POSTGRES_USER/PASSWORD/DB")
            check(re.fullmatch(r"[A-Za-z0-9._~-]+", u.password or "") is not None,
                  f"{svc}: .env.example's password needs no escaping in the URL",
                  f"{svc}: the password from .env.example has characters that must be %-escaped in a URL")
            dep = s.get("depends_on") or {}
            cond = dep.get(u.hostname, {}).get("condition") if isinstance(dep, dict) else None
            check(cond == "service_healthy", f"{svc}: starts once {u.hostname} is healthy",
                  f"{svc}: does not wait for {u.hostname} to be healthy")
        sg = duration_seconds(s.get("stop_grace_period", "10s"))
        check(sg is not None and sg > grace, f"{svc}: stop_grace_period {s.get('stop_grace_period')} > shutdown grace {grace}s",
              f"{svc}: stop_grace_period {s.get('stop_grace_period', '10s (default)')} is not longer than server.shutdown_grace_seconds ({grace})")
    check(len(ports) <= 1, f"replicas listen on port {', '.join(ports)}", f"replicas on different ports {ports}")
    info["port"] = next(iter(ports), None)

    # The fake profile.
    fakes = [svc for svc, s in services.items() if "fake" in (s.get("profiles") or [])]
    if check(fakes, f"profile `fake`: {', '.join(fakes)}", "no service in a `fake` profile (trying the stack without an OpenAI key)"):
        for svc in fakes:
            r = rservices[svc]
            argv = as_list(r.get("entrypoint")) + as_list(r.get("command"))
            runs_fake = any(os.path.basename(a) == "fake-llm" for a in argv)
            listen = argv[argv.index("--listen") + 1] if "--listen" in argv and argv.index("--listen") + 1 < len(argv) else ""
            check(runs_fake and listen.startswith("0.0.0.0:"), f"{svc}: runs fake-llm --listen {listen}",
                  f"{svc}: does not run fake-llm listening on 0.0.0.0 ({' '.join(argv)})")
            if runs_fake and ":" in listen:
                url = f"http://{svc}:{listen.rsplit(':', 1)[1]}/v1"
                check(url in read(ENV_EXAMPLE) and url in raw_text,
                      f"{svc}: .env.example and docker-compose.yml say OPENAI_BASE_URL={url}",
                      f"{svc}: .env.example / docker-compose.yml do not document OPENAI_BASE_URL={url}")
            if svc in same_image:
                check(r.get("healthcheck"), f"{svc}: has its own health check (the image's probes switchyard)",
                      f"{svc}: inherits the image's HEALTHCHECK (switchyard probe), which fails for fake-llm: set healthcheck")

    # nginx.
    ngx = [svc for svc, s in services.items() if str(s.get("image", "")).split(":")[0].endswith("nginx")]
    info["nginx"] = None
    for svc in ngx:
        mounts = [v for v in services[svc].get("volumes") or [] if isinstance(v, str) and "nginx.conf" in v]
        check(mounts, f"{svc}: mounts {mounts[0].split(':')[0] if mounts else ''}", f"{svc}: does not mount deploy/nginx.conf")
        info["nginx"] = {"service": svc, "image": services[svc].get("image")}
        dep = services[svc].get("depends_on") or {}
        dep = list(dep) if isinstance(dep, (dict, list)) else []
        check(set(replicas) <= set(dep), f"{svc}: starts after the replicas", f"{svc}: does not depend on every replica")

    # `docker compose config` where there is one (it needs no engine).
    try:
        has_compose = subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0
    except OSError:
        has_compose = False
    if has_compose:
        files = ["-f", os.path.join(ROOT, COMPOSE)]
        for extra in ([], ["--profile", "fake"], ["--profile", "monitoring"], ["-f", os.path.join(ROOT, COMPOSE_TLS)]):
            p = subprocess.run(["docker", "compose", "--project-directory", ROOT, "--env-file", os.path.join(ROOT, ENV_EXAMPLE),
                                *files, *extra, "config", "-q"], cwd=ROOT, capture_output=True, text=True)
            shown = " ".join(rel(a) if os.path.isabs(a) else a for a in extra)
            check(p.returncode == 0, f"docker compose {shown + ' ' if shown else ''}config -q", f"docker compose {shown} config: {p.stderr.strip()}")
    else:
        skip("`docker compose` is not installed: compose's own validation (config -q) not run")
    return info

# ---------------------------------------------------------------------------------------------
# nginx.conf
# ---------------------------------------------------------------------------------------------

def nginx_parse(text):
    """A tree of (name, args, children|None, line); raises ValueError with a line number."""
    tokens, i, line = [], 0, 1
    while i < len(text):
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif c == "#":
            while i < len(text) and text[i] != "\n":
                i += 1
        elif c in "{};":
            tokens.append((c, line, False))
            i += 1
        elif c in "'\"":
            j, buf = i + 1, ""
            while j < len(text) and text[j] != c:
                if text[j] == "\\" and j + 1 < len(text):
                    j += 1
                if text[j] == "\n":
                    line += 1
                buf += text[j]
                j += 1
            if j >= len(text):
                raise ValueError(f"line {line}: unterminated quote")
            tokens.append((buf, line, True))
            i = j + 1
        else:
            j = i
            while j < len(text) and not text[j].isspace() and text[j] not in "{};#'\"":
                if text[j] == "$" and j + 1 < len(text) and text[j + 1] == "{":
                    k = text.find("}", j)
                    j = k + 1 if k != -1 else j + 1
                    continue
                j += 1
            tokens.append((text[i:j], line, False))
            i = j
    pos = 0

    def block(depth):
        nonlocal pos
        out, words, start = [], [], None
        while pos < len(tokens):
            tok, ln, quoted = tokens[pos]
            pos += 1
            if tok == ";" and not quoted:
                if not words:
                    raise ValueError(f"line {ln}: unexpected ';'")
                out.append((words[0], words[1:], None, start))
                words = []
            elif tok == "{" and not quoted:
                if not words:
                    raise ValueError(f"line {ln}: a block without a name")
                children = block(depth + 1)
                out.append((words[0], words[1:], children, start))
                words = []
            elif tok == "}" and not quoted:
                if words:
                    raise ValueError(f"line {ln}: directive {words[0]!r} is not terminated by ';'")
                if depth == 0:
                    raise ValueError(f"line {ln}: unexpected '}}'")
                return out
            else:
                if not words:
                    start = ln
                words.append(tok)
        if words:
            raise ValueError(f"line {start}: directive {words[0]!r} is not terminated by ';'")
        if depth:
            raise ValueError("unexpected end of file: a '{' is not closed")
        return out

    return block(0)

def find(tree, name):
    return [d for d in tree if d[0] == name]

def size_bytes(s):
    m = re.fullmatch(r"(\d+)([kKmMgG]?)", s or "")
    if not m:
        return None
    return int(m.group(1)) * {"": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}[m.group(2).lower()]

def nginx_seconds(s):
    m = re.fullmatch(r"(\d+)(ms|s|m|h|d)?", s or "")
    if not m:
        return None
    return int(m.group(1)) * {"ms": 0.001, "s": 1, None: 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]

def version_tuple(v):
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])

def nginx_test(path, uses_resolve, tls=None):
    """`nginx -t` with an nginx binary, when there is one. With `tls` (the certificate and key
    paths the configuration names, and the folders they are mounted from), a throwaway
    self-signed pair stands in for them."""
    binary = os.environ.get("NGINX_BIN") or shutil.which("nginx")
    if not binary:
        skip("nginx is not installed: `nginx -t` not run (NGINX_BIN=/path/to/nginx to use one)")
        return
    # nginx reads $NGINX itself (sockets inherited on a binary upgrade): not ours to pass on.
    ngx_env = {k: v for k, v in os.environ.items() if k != "NGINX"}
    v = subprocess.run([binary, "-v"], capture_output=True, text=True, env=ngx_env)
    version = re.search(r"nginx/(\S+)", v.stderr + v.stdout)
    version = version.group(1) if version else "?"
    if uses_resolve and version_tuple(version) < (1, 27, 3):
        skip(f"{binary} is nginx {version}, older than 1.27.3 (no `resolve`): `nginx -t` not run")
        return
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "logs"))
        text = read(path)
        if tls and tls.get("pairs"):
            if not shutil.which("openssl"):
                skip("openssl is not installed: no stand-in certificate, `nginx -t` not run")
                return
            # The folders the certificates are mounted in become folders of the temporary tree.
            for target in sorted(tls.get("dirs") or [], key=len, reverse=True):
                text = text.replace(target.rstrip("/") + "/", os.path.join(tmp, "tls", target.strip("/")) + "/")
            for cert, key in tls["pairs"]:
                local = [os.path.join(tmp, "tls", p.strip("/")) for p in (cert, key)]
                for d in {os.path.dirname(x) for x in local}:
                    os.makedirs(d, exist_ok=True)
                p = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                                    "-subj", "/CN=localhost", "-keyout", local[1], "-out", local[0]],
                                   capture_output=True, text=True)
                if p.returncode != 0:
                    skip(f"openssl could not make a stand-in certificate ({p.stderr.strip()[:120]}): `nginx -t` not run")
                    return
        with open(os.path.join(tmp, "nginx.conf"), "w", encoding="utf-8") as f:
            f.write(text)
        p = subprocess.run([binary, "-t", "-q", "-p", tmp + "/", "-c", os.path.join(tmp, "nginx.conf"), "-e", "stderr"],
                           capture_output=True, text=True, env=ngx_env)
        out = (p.stderr + p.stdout).strip().replace(os.path.join(tmp, "nginx.conf"), rel(path)).replace(tmp + "/", "deploy/")
        msg = " ".join(l for l in out.splitlines()
                       if "[notice]" not in l)
        with_cert = " (with a stand-in self-signed certificate)" if tls and tls.get("pairs") else ""
        check(p.returncode == 0, f"nginx {version} -t accepts it{with_cert}", f"nginx {version} -t: {msg}")

def effective(name, *scopes):
    """The arguments of the innermost `name` directive among nested scopes (outermost first)."""
    for scope in reversed(scopes):
        found = find(scope, name)
        if found:
            return found[-1][1]
    return None

def proxying_locations(srv):
    return [loc for loc in find(srv, "location") if loc[2] is not None and find(loc[2], "proxy_pass")]

def listen_ports(srv):
    """[(port, parameters)] of a server's `listen` directives."""
    out = []
    for d in find(srv, "listen"):
        if not d[1]:
            continue
        addr = d[1][0]
        port = addr.rsplit(":", 1)[1] if ":" in addr and not addr.endswith("]") else addr
        out.append((port if port.isdigit() else "80", d[1][1:]))
    return out

def canonical(nodes):
    """Directives without their line numbers, to compare two configurations."""
    return [(name, tuple(args), canonical(children) if children is not None else None)
            for name, args, children, _ in nodes]

def check_nginx(info, path=None, tls=None, plain=None):
    """Every check of an nginx configuration for the compose stack; with `tls` (what
    docker-compose.tls.yml mounts and publishes) also the TLS ones, and with `plain` (the
    summary of deploy/nginx.conf) that the proxying is the same. Returns a summary."""
    path = path or NGINX_CONF
    section(rel(path))
    if not exists(path):
        fail(f"no {rel(path)}")
        return None
    try:
        tree = nginx_parse(read(path))
    except ValueError as e:
        fail(f"{rel(path)}: {e}")
        nginx_test(path, "resolve" in read(path))
        return None
    # Directives with a fixed number of arguments: more means a missing ';' before the next line.
    arity = {"proxy_buffering": 1, "proxy_cache": 1, "proxy_http_version": 1, "proxy_read_timeout": 1,
             "proxy_send_timeout": 1, "proxy_connect_timeout": 1, "client_max_body_size": 1,
             "keepalive": 1, "gzip": 1, "server_tokens": 1, "worker_processes": 1,
             "worker_connections": 1, "worker_rlimit_nofile": 1, "resolver_timeout": 1,
             "proxy_next_upstream_tries": 1, "proxy_pass": 1, "proxy_set_header": 2,
             "proxy_request_buffering": 1, "include": 1, "zone": 2, "chunked_transfer_encoding": 1,
             "ssl_certificate": 1, "ssl_certificate_key": 1, "ssl_ciphers": 1, "ssl_prefer_server_ciphers": 1,
             "ssl_session_timeout": 1, "ssl_session_tickets": 1, "http2": 1, "return": 2, "add_header": 3}
    bad = []

    def walk(nodes):
        for name, args, children, line in nodes:
            if name in arity and children is None and len(args) > arity[name]:
                bad.append(f"line {line}: {name} takes {arity[name]} argument(s), got {len(args)} (a missing ';'?)")
            if children:
                walk(children)
    walk(tree)
    if bad:
        fail("; ".join(bad))
        nginx_test(path, "resolve" in read(path))
        return None
    ok("blocks balanced, every directive terminated")
    http = find(tree, "http")
    if not check(len(http) == 1 and find(tree, "events"), "events and http blocks", "needs one events and one http block"):
        return None
    http = http[0][2]
    resolvers = [d[1] for d in find(http, "resolver")]
    upstreams = {d[1][0]: d[2] for d in find(http, "upstream") if d[1]}
    servers_blocks = [d[2] for d in find(http, "server")]
    uses_resolve = False
    upstream_hosts = {}
    for name, body in upstreams.items():
        servers = find(body, "server")
        dyn = [s for s in servers if "resolve" in s[1]]
        uses_resolve |= bool(dyn)
        if dyn:
            check(find(body, "zone"), f"upstream {name}: has a zone (needed by `resolve`)",
                  f"upstream {name}: `resolve` needs a `zone` in the upstream")
        static = [s[1][0] for s in servers if "resolve" not in s[1] and not re.match(r"^[\d.:\[\]]+$", s[1][0])
                  and not s[1][0].startswith("unix:")]
        check(not static, f"upstream {name}: every name is re-resolved (server … resolve)",
              f"upstream {name}: {', '.join(static)} resolved once at start only (add `resolve`): a recreated "
              f"replica with a new address would never be reached")
        for s in servers:
            host, _, port = s[1][0].rpartition(":")
            upstream_hosts[host or s[1][0]] = port or "80"
        if dyn and not (resolvers or find(body, "resolver")):
            fail(f"upstream {name}: `resolve` needs a resolver (in http or the upstream)")
    all_resolvers = resolvers + [d[1] for b in upstreams.values() for d in find(b, "resolver")]
    if all_resolvers:
        check(any("127.0.0.11" in r for r in all_resolvers), "resolver is Docker's DNS 127.0.0.11",
              f"resolver {all_resolvers} is not Docker's embedded DNS (127.0.0.11)")
        valid = [a.split("=", 1)[1] for r in all_resolvers for a in r if a.startswith("valid=")]
        check(valid and nginx_seconds(valid[0]) is not None and nginx_seconds(valid[0]) <= 60,
              f"answers cached for {valid[0] if valid else '?'} (valid=)",
              "resolver without a short valid= (answers would be kept for their TTL)")
    elif not uses_resolve:
        fail("no resolver: replica addresses are looked up once, when nginx starts")

    # The nginx image must know `resolve` (open source since 1.27.3).
    image = (info.get("nginx") or {}).get("image") or ""
    tag = image.split(":", 1)[1] if ":" in image else "latest"
    if uses_resolve:
        vt = version_tuple(tag)
        if len(vt) >= 2:
            full = vt + (999,) * (3 - len(vt))  # a tag like 1.28 follows that branch's newest release
            check(full >= (1, 27, 3), f"{image} supports `server … resolve` (>= 1.27.3)",
                  f"{image} is older than 1.27.3: open-source nginx rejects `server … resolve`")
        else:
            skip(f"nginx image tag {tag!r}: cannot tell whether it is >= 1.27.3")

    # The upstream is the compose replicas.
    replicas = set(info.get("replicas") or [])
    if replicas:
        names = set(upstream_hosts)
        check(names == replicas, f"upstream servers are the replicas ({', '.join(sorted(names))})",
              f"upstream servers {sorted(names)} differ from the compose replicas {sorted(replicas)}")
        port = info.get("port")
        wrong = [h for h, p in upstream_hosts.items() if port and p != port]
        check(not wrong, f"upstream port {port} is the replicas' port", f"upstream port differs from the replicas' {port}: {wrong}")

    # SSE and friends, in every location that proxies to an upstream.
    limit = (default_toml().get("server") or {}).get("body_limit_bytes", 8388608)
    heartbeat = (default_toml().get("server") or {}).get("heartbeat_seconds", 15)

    locations = 0
    for srv in servers_blocks:
        if not proxying_locations(srv):
            continue  # a server that only redirects or answers by itself
        body_size = effective("client_max_body_size", http, srv)
        b = size_bytes(body_size[0]) if body_size else 1024 ** 2
        check(b is not None and b > limit, f"client_max_body_size {body_size[0] if body_size else '1m'} > switchyard's {limit} bytes",
              f"client_max_body_size {body_size[0] if body_size else '1m (default)'} is not above server.body_limit_bytes "
              f"({limit}): nginx, not switchyard, would answer 413")
        for loc in find(srv, "location"):
            lbody = loc[2]
            pp = find(lbody, "proxy_pass")
            if not pp:
                continue
            locations += 1
            where = f"location {' '.join(loc[1])}"
            target = pp[0][1][0]
            m = re.match(r"https?://([^/:$]+)", target)
            if "$" in target:
                check(all_resolvers, f"{where}: variable proxy_pass with a resolver", f"{where}: variable proxy_pass without a resolver")
            elif m:
                check(m.group(1) in upstreams, f"{where}: proxy_pass to upstream {m.group(1)}",
                      f"{where}: proxy_pass {target} names no upstream")
            scopes = (http, srv, lbody)
            check(effective("proxy_buffering", *scopes) == ["off"], f"{where}: proxy_buffering off (SSE)",
                  f"{where}: proxy_buffering is not off: SSE events would be held back")
            check(effective("proxy_http_version", *scopes) == ["1.1"], f"{where}: proxy_http_version 1.1",
                  f"{where}: proxy_http_version is not 1.1 (needed for keepalive, streaming and WebSocket)")
            rt = effective("proxy_read_timeout", *scopes)
            secs = nginx_seconds(rt[0]) if rt else 60
            check(secs and secs >= 4 * heartbeat, f"{where}: proxy_read_timeout {rt[0] if rt else '60s'}",
                  f"{where}: proxy_read_timeout {rt[0] if rt else '60s'} is too short for streams with {heartbeat}s pings")
            gz = effective("gzip", *scopes)
            check(gz in (None, ["off"]), f"{where}: no gzip", f"{where}: gzip on buffers SSE")
            cache = effective("proxy_cache", *scopes)
            check(cache in (None, ["off"]), f"{where}: no proxy cache", f"{where}: proxy_cache on")
            headers = {h[1][0].lower(): h[1][1:] for h in find(lbody, "proxy_set_header") if h[1]}
            conn = headers.get("connection")
            check(conn is not None and (conn in ([""], ['""']) or any("$" in c for c in conn)),
                  f"{where}: Connection header set ({conn[0] if conn and conn[0] else 'empty'}: keepalive to replicas)",
                  f"{where}: Connection header not cleared or mapped: upstream keepalive does not work")
            check("upgrade" in headers, f"{where}: passes WebSocket upgrades", f"{where}: no `proxy_set_header Upgrade` (WebSocket transport)")
        # Metrics are per replica: Prometheus scrapes each one, never the balancer.
        listen = ", ".join(p + (" ssl" if "ssl" in params else "") for p, params in listen_ports(srv)) or "80"
        metrics = [loc for loc in find(srv, "location") if "".join(loc[1]) == "=/metrics" and loc[2] is not None]
        answer = find(metrics[0][2], "return") if metrics else []
        check(answer and answer[0][1][:1] == ["404"], f"server on {listen}: /metrics answered 404 (not proxied)",
              f"server on {listen}: /metrics is not answered 404 by nginx (`location = /metrics {{ return 404; }}`): "
              "clients would see one replica's metrics, picked at random")
    check(locations, f"{locations} proxying location(s)", "no location proxies to switchyard")

    summary = {"tree": tree, "http": http, "servers": servers_blocks, "upstreams": upstreams, "path": path}
    pairs = check_nginx_tls(summary, tls, plain) if tls is not None else None
    nginx_test(path, uses_resolve, {"pairs": pairs, "dirs": tls.get("dirs")} if tls is not None else None)
    return summary

WEAK_PROTOCOLS = {"SSLv2", "SSLv3", "TLSv1", "TLSv1.1"}

def check_nginx_tls(summary, tls, plain):
    """The TLS checks of deploy/nginx-tls.conf. Returns the (certificate, key) paths it names."""
    http, servers = summary["http"], summary["servers"]
    pairs = []
    ssl_servers = [srv for srv in servers if any("ssl" in params for _, params in listen_ports(srv))]
    if not check(ssl_servers, f"listen … ssl on {', '.join(p for srv in ssl_servers for p, pa in listen_ports(srv) if 'ssl' in pa)}",
                 "no server listens with ssl (`listen 8443 ssl;`)"):
        return pairs
    clear = [", ".join(p for p, _ in listen_ports(srv)) for srv in servers if proxying_locations(srv) and srv not in ssl_servers]
    check(not clear, "every server that proxies to switchyard listens with ssl",
          f"the server on {'; '.join(clear)} proxies to switchyard without ssl: API keys would cross the network in the clear")
    ssl_ports = {p for srv in ssl_servers for p, params in listen_ports(srv) if "ssl" in params}
    published = tls.get("https_targets") or []
    check(published and set(published) <= ssl_ports,
          f"{rel(COMPOSE_TLS)} publishes container port {', '.join(published)}, where nginx listens with ssl",
          f"{rel(COMPOSE_TLS)} publishes container port(s) {', '.join(published) or 'none'}, but nginx listens with ssl on "
          f"{', '.join(sorted(ssl_ports))}")

    # Plain HTTP (the port docker-compose.yml publishes) redirects to the published HTTPS port.
    for port in tls.get("plain_targets") or []:
        srvs = [srv for srv in servers if srv not in ssl_servers and port in [p for p, _ in listen_ports(srv)]]
        if not srvs:
            ok(f"plain HTTP port {port} (published by {rel(COMPOSE)}) is not served")
            continue
        srv = srvs[0]
        returns = find(srv, "return") + [d for loc in find(srv, "location") if loc[2] for d in find(loc[2], "return")]
        redirects = [r[1] for r in returns if len(r[1]) == 2 and r[1][0] in ("301", "302", "307", "308")]
        url = redirects[0][1] if redirects else ""
        m = re.match(r"https://(?:\[[^\]]*\]|[^/:\[]+)(?::(\$[A-Za-z_][A-Za-z0-9_]*|\d+))?(?:[/$?]|$)", url)
        if not check(m and len(redirects) == len(returns) and not proxying_locations(srv),
                     f"plain HTTP on {port} only redirects ({redirects[0][0] if redirects else ''} {url})",
                     f"plain HTTP on {port} does not only redirect to https:// ({' '.join(returns[0][1]) if returns else 'no return'})"):
            continue
        to = m.group(1) or "443"
        if to.startswith("$"):
            maps = [d for d in find(http, "map") if len(d[1]) == 2 and d[1][1] == to]
            default = [d[1][0] for d in (maps[0][2] if maps else []) if d[0] == "default" and d[1]]
            to = default[0] if default else to
        want = tls.get("https_published") or []
        check(to in want and len(set(want)) == 1,
              f"the redirect goes to port {to}, where {rel(COMPOSE_TLS)} publishes HTTPS (by default and with {rel(ENV_EXAMPLE)})",
              f"the redirect goes to port {to}, but {rel(COMPOSE_TLS)} publishes HTTPS on {' / '.join(sorted(set(want))) or 'nothing'} "
              f"(its default and with {rel(ENV_EXAMPLE)}'s value): keep them equal")

    for srv in ssl_servers:
        where = "server on " + ", ".join(p for p, pa in listen_ports(srv) if "ssl" in pa)
        # Certificate and key: in a folder docker-compose.tls.yml mounts, git-ignored, described.
        pair = []
        for name in ("ssl_certificate", "ssl_certificate_key"):
            d = effective(name, http, srv)
            if not check(d, f"{where}: {name} {d[0] if d else ''}", f"{where}: no {name}"):
                continue
            pair.append(d[0])
            source = host_path(tls.get("mounts") or [], d[0])[0] if d[0].startswith("/") else None
            if not check(source,
                         f"{where}: {name} is {source} (the folder {rel(COMPOSE_TLS)} mounts on "
                         f"{posixpath.dirname(d[0])})",
                         f"{where}: {name} {d[0]} is not in a folder that {rel(COMPOSE_TLS)} mounts"):
                continue
            tls.setdefault("secrets", []).append(source)
        if len(pair) == 2:
            pairs.append(tuple(pair))
        # Protocols and ciphers.
        protocols = effective("ssl_protocols", http, srv)
        weak = sorted(set(protocols or []) & WEAK_PROTOCOLS)
        check(protocols and not weak and set(protocols) & {"TLSv1.2", "TLSv1.3"},
              f"{where}: ssl_protocols {' '.join(protocols or [])}",
              f"{where}: ssl_protocols {' '.join(weak) + ' allowed' if weak else 'not set (older nginx defaults include TLSv1 and TLSv1.1)' if not protocols else ' '.join(protocols)}: "
              "TLSv1.2 and TLSv1.3 only")
        ciphers = effective("ssl_ciphers", http, srv)
        enabled = [c for c in (ciphers[0].split(":") if ciphers else []) if c and c[0] not in "!-+"]
        weak = [c for c in enabled if not (c.startswith(("ECDHE-", "DHE-")) and ("GCM" in c or "CHACHA20" in c))]
        check(enabled and not weak, f"{where}: ssl_ciphers {len(enabled)} forward-secret AEAD suites",
              f"{where}: ssl_ciphers " + (f"allows {', '.join(weak)}" if weak else "not set (nginx's HIGH:!aNULL:!MD5 includes CBC suites)")
              + ": name ECDHE/DHE suites with GCM or CHACHA20 only")
        cache = effective("ssl_session_cache", http, srv)
        check(cache and any(a.startswith("shared:") for a in cache), f"{where}: ssl_session_cache {' '.join(cache or [])}",
              f"{where}: no shared ssl_session_cache ({' '.join(cache) if cache else 'none'}): every reconnect pays a full handshake")
        h2 = effective("http2", http, srv) == ["on"] or any("http2" in pa for _, pa in listen_ports(srv))
        check(not h2, f"{where}: HTTP/1.1 to clients (no http2: nginx carries no WebSocket over HTTP/2)",
              f"{where}: http2 is on: nginx does not carry WebSocket upgrades over HTTP/2 (the Responses WebSocket transport)")
        for loc in proxying_locations(srv):
            headers = {h[1][0].lower(): h[1][1:] for h in find(loc[2], "proxy_set_header") if h[1]}
            proto = headers.get("x-forwarded-proto")
            check(proto in (["$scheme"], ["https"]), f"{where}: location {' '.join(loc[1])}: X-Forwarded-Proto {proto[0] if proto else ''} "
                  "(switchyard marks the inspector's cookies Secure)",
                  f"{where}: location {' '.join(loc[1])}: X-Forwarded-Proto is not $scheme or https: the inspector's cookies lose Secure")
        hsts = [a for a in find(srv, "add_header") if a[1] and a[1][0].lower() == "strict-transport-security"]
        note(f"{where}: HSTS {'on: ' + ' '.join(hsts[0][1][1:]) if hsts else 'off (commented out: optional)'}")

    # Certificates and keys: never in git, described next to them.
    for source in dict.fromkeys(tls.get("secrets") or []):
        folder = os.path.dirname(source)
        readme = [os.path.join(folder, n) for n in ("README.md", "README") if exists(os.path.join(folder, n))]
        check(readme and os.path.basename(source) in read(readme[0]),
              f"{source} is described in {readme[0] if readme else ''} (how to make it)",
              f"{source} is named in no README in {folder}: say what goes there and how to make it")
        try:
            p = subprocess.run(["git", "check-ignore", "-q", "--", source], cwd=ROOT, capture_output=True, text=True)
        except OSError:
            p = None
        if p is None or p.returncode not in (0, 1):
            skip(f"{source}: git cannot tell whether it is ignored (not a checkout?)")
        else:
            check(p.returncode == 0, f"{source} is git-ignored", f"{source} is not git-ignored: a private key could be committed "
                  f"(a .gitignore in {folder} with `*`, `!.gitignore`, `!README.md`)")
    for folder in dict.fromkeys(os.path.dirname(s) for s in tls.get("secrets") or []):
        try:
            p = subprocess.run(["git", "ls-files", "--", folder], cwd=ROOT, capture_output=True, text=True)
        except OSError:
            p = None
        if p is None or p.returncode != 0:
            skip(f"{folder}: git ls-files failed: tracked files not checked")
            continue
        tracked = [f for f in p.stdout.split() if os.path.basename(f) not in (".gitignore", "README.md", "README")]
        check(not tracked, f"git tracks nothing in {folder} but its README and .gitignore",
              f"git tracks {', '.join(tracked)} in the certificate folder {folder}: only its README and .gitignore belong "
              "there (git rm --cached; a key that was ever committed must be replaced)")

    # The proxying must be nginx.conf's: copies of one another, checked to stay so.
    if plain is None:
        skip(f"{rel(NGINX_CONF)} could not be read: the proxying is not compared")
        return pairs
    def proxy_parts(s):
        h = s["http"]
        srvs = [srv for srv in s["servers"] if proxying_locations(srv)]
        return {
            "resolver": canonical(find(h, "resolver") + find(h, "resolver_timeout")),
            "WebSocket map": canonical([d for d in find(h, "map") if d[1][:1] == ["$http_upgrade"]]),
            "upstreams": canonical(find(h, "upstream")),
            "locations": [canonical(find(srv, "location")) for srv in srvs],
            "client_max_body_size": [effective("client_max_body_size", h, srv) for srv in srvs],
        }
    mine, theirs = proxy_parts(summary), proxy_parts(plain)
    differ = [k for k in mine if mine[k] != theirs[k]]
    check(not differ, f"resolver, WebSocket map, upstreams and locations are {rel(NGINX_CONF)}'s",
          f"{', '.join(differ)} differ from {rel(NGINX_CONF)}'s: change both files together")
    return pairs

# ---------------------------------------------------------------------------------------------
# docker-compose.tls.yml, and Prometheus in docker-compose.yml
# ---------------------------------------------------------------------------------------------

def volume_target(v):
    if isinstance(v, dict):
        return v.get("target")
    parts = str(v).split(":")
    return parts[1] if len(parts) > 1 else parts[0]

def bind_mounts(service):
    """[(source, target, read_only)] of a service's bind mounts (short or long syntax)."""
    out = []
    for v in service.get("volumes") or []:
        if isinstance(v, dict):
            if v.get("type") == "bind":
                out.append((v.get("source"), v.get("target"), bool(v.get("read_only"))))
            continue
        parts = str(v).split(":")
        if len(parts) > 1 and parts[0].startswith((".", "/")):
            out.append((parts[0], parts[1], len(parts) > 2 and "ro" in parts[2].split(",")))
    return out

def named_volumes(service):
    """{target: volume name} of a service's named volumes."""
    out = {}
    for v in service.get("volumes") or []:
        if isinstance(v, dict):
            if v.get("type") == "volume" and v.get("source"):
                out[v.get("target")] = v["source"]
            continue
        parts = str(v).split(":")
        if len(parts) > 1 and not parts[0].startswith((".", "/", "~")):
            out[parts[1]] = parts[0]
    return out

def host_path(mounts, container_path):
    """(source in the repository, read_only) of a path in the container, through the bind mount
    whose target holds it (the longest); (None, None) when none does."""
    best = None
    for source, target, ro in mounts:
        t = posixpath.normpath(target)
        if container_path == t or container_path.startswith(t.rstrip("/") + "/"):
            if best is None or len(t) > len(best[1]):
                best = (source, t, ro)
    if best is None:
        return None, None
    rest = container_path[len(best[1]):].lstrip("/")
    return os.path.normpath(os.path.join(best[0], rest) if rest else best[0]), best[2]

def published_ports(service):
    """[(host address or "", published, target)] of a service's ports."""
    out = []
    for p in service.get("ports") or []:
        if isinstance(p, dict):
            out.append((str(p.get("host_ip") or ""), str(p.get("published") or ""), str(p.get("target") or "")))
            continue
        parts = str(p).split("/")[0].rsplit(":", 2)
        parts = [""] * (3 - len(parts)) + parts
        out.append(tuple(parts))
    return out

def merge_service(base, over):
    """docker compose's merge of an override into a service, for the keys checked here."""
    out = dict(base)
    for k, v in (over or {}).items():
        if k == "volumes":
            merged = {volume_target(x): x for x in base.get("volumes") or []}
            merged.update({volume_target(x): x for x in v or []})
            out[k] = list(merged.values())
        elif k in ("ports", "expose"):
            out[k] = list(base.get(k) or []) + [x for x in v or [] if x not in (base.get(k) or [])]
        elif k == "environment":
            out[k] = {**env_dict(base), **env_dict(over)}
        elif isinstance(v, dict) and isinstance(base.get(k), dict):
            out[k] = {**base[k], **v}
        else:
            out[k] = v
    return out

def check_tls(info, plain):
    section(f"{rel(COMPOSE_TLS)} (HTTPS through nginx)")
    if not exists(COMPOSE_TLS):
        fail(f"no {rel(COMPOSE_TLS)}")
        return
    try:
        import yaml
    except ImportError:
        skip("PyYAML is not installed: the HTTPS override is not checked")
        return
    if not info.get("resolved"):
        skip(f"{rel(COMPOSE)} could not be read: the HTTPS override is not checked")
        return
    try:
        over = yaml.safe_load(read(COMPOSE_TLS)) or {}
    except yaml.YAMLError as e:
        fail(f"{rel(COMPOSE_TLS)} is not valid YAML: {e}")
        return
    osvcs = over.get("services") if isinstance(over, dict) else None
    base = info.get("services") or {}
    if not check(isinstance(osvcs, dict) and osvcs and set(osvcs) <= set(base),
                 f"parses: overrides {', '.join(osvcs or [])} of {rel(COMPOSE)}",
                 f"does not parse to services of {rel(COMPOSE)} to override: {sorted(set(osvcs or []) - set(base)) or 'none'}"):
        return
    active, documented = info.get("active") or {}, info.get("documented") or set()
    used = sorted({e[0] for s in strings(over) for e in expansions(s)})
    undocumented = [n for n in used if n not in documented]
    check(not undocumented, f"its variables are documented in {rel(ENV_EXAMPLE)} ({', '.join(used) or 'none'})",
          f"variables used but not in {rel(ENV_EXAMPLE)}: {', '.join(undocumented)}")
    try:
        rover, rdefault = interpolate_tree(over, active), interpolate_tree(over, {})
    except Missing as e:
        fail(f"does not interpolate with {rel(ENV_EXAMPLE)}'s values: {e}")
        return
    ngx = (info.get("nginx") or {}).get("service")
    if not check(ngx in osvcs, f"overrides {ngx}, the nginx service", f"does not override the nginx service ({ngx})"):
        return
    rbase = info["resolved"]["services"][ngx]
    o = rover["services"][ngx] or {}
    merged = merge_service(rbase, o)

    # Its nginx configuration takes the place of docker-compose.yml's.
    base_conf = [(s, t) for s, t, _ in bind_mounts(rbase) if t.endswith("nginx.conf")]
    target = base_conf[0][1] if base_conf else "/etc/nginx/nginx.conf"
    conf = [s for s, t, _ in bind_mounts(o) if posixpath.normpath(t) == posixpath.normpath(target)]
    check(conf, f"{ngx}: mounts {conf[0] if conf else ''} on {target}, in place of {base_conf[0][0] if base_conf else 'nginx.conf'}",
          f"{ngx}: mounts no nginx configuration on {target} (where {rel(COMPOSE)} mounts "
          f"{base_conf[0][0] if base_conf else 'its'}): nginx would keep serving plain HTTP only")
    # Every mount exists and is read-only, but the git-ignored certificates, not in the repository.
    mounts = bind_mounts(o)
    for source, t, ro in mounts:
        check(exists(source) and ro, f"{ngx}: mounts {source} on {t}, read-only",
              f"{ngx}: mounts {source} on {t}, " + ("which does not exist" if not exists(source) else "writable (add :ro)"))
    # Ports: HTTPS added, plain HTTP kept (it redirects).
    base_ports = published_ports(rbase)
    https = [p for p in published_ports(o)]
    https_targets = [t for _, _, t in https]
    check(https and set(published_ports(merged)) >= set(base_ports),
          f"{ngx}: publishes {', '.join(':'.join(x for x in p[:2] if x) + '->' + p[2] for p in https)} besides "
          f"{rel(COMPOSE)}'s {', '.join(p[1] + '->' + p[2] for p in base_ports)}",
          f"{ngx}: publishes no HTTPS port")
    defaults = [t[1] for t in published_ports(rdefault["services"][ngx] or {}) if t[2] in https_targets]
    tls = {
        "mounts": mounts,
        "dirs": [t for s, t, _ in mounts if exists(s) and os.path.isdir(os.path.join(ROOT, s))],
        "https_targets": https_targets,
        "https_published": [p[1] for p in https] + defaults,
        "plain_targets": [t for _, _, t in base_ports],
    }
    path = NGINX_TLS_CONF or (conf[0] if conf else None)
    if not path:
        return
    tls_info = dict(info)
    tls_info["nginx"] = {**(info.get("nginx") or {}), "image": merged.get("image")}
    check_nginx(tls_info, path, tls, plain)

def check_prometheus(info):
    section(f"Prometheus in {rel(COMPOSE)}")
    services, resolved = info.get("services") or {}, info.get("resolved")
    if not info.get("doc") or not resolved:
        skip(f"{rel(COMPOSE)} could not be read with PyYAML: Prometheus not checked")
        return
    import yaml
    proms = [svc for svc, s in services.items()
             if str(s.get("image", "")).split("@")[0].rsplit("/", 1)[-1].split(":")[0] == "prometheus"]
    if not check(proms, f"{', '.join(proms)}: runs Prometheus", "no service runs Prometheus (image prom/prometheus)"):
        return
    replicas = info.get("replicas") or []
    for svc in proms:
        s, r = services[svc], resolved["services"][svc]
        image = str(s.get("image"))
        tag = image.rsplit("/", 1)[-1].split(":", 1)[1].split("@")[0] if ":" in image.rsplit("/", 1)[-1] else ""
        check("@sha256:" in image or re.fullmatch(r"v?\d+\.\d+\.\d+", tag),
              f"{svc}: image {image} is pinned to a release",
              f"{svc}: image {image} is not pinned to a release (vX.Y.Z, or a digest): `{tag or 'latest'}` changes under you")
        profiles = s.get("profiles") or []
        check(profiles, f"{svc}: only with --profile {' or '.join(profiles)} (a plain `docker compose up` leaves it out)",
              f"{svc}: in no profile: every `docker compose up` starts it")
        env_text = read(ENV_EXAMPLE) if exists(ENV_EXAMPLE) else ""
        said = [p for p in profiles if re.search(r"^#?\s*COMPOSE_PROFILES=.*\b" + re.escape(p) + r"\b", env_text, re.M)]
        check(said, f"{svc}: {rel(ENV_EXAMPLE)} says how to enable it (COMPOSE_PROFILES={said[0] if said else ''})",
              f"{svc}: {rel(ENV_EXAMPLE)} does not show COMPOSE_PROFILES with {' or '.join(profiles) or 'its profile'}")

        argv = as_list(r.get("command"))
        def flag(name, default):
            for i, a in enumerate(argv):
                if a.startswith(name + "="):
                    return a.split("=", 1)[1]
                if a == name and i + 1 < len(argv):
                    return argv[i + 1]
            return default
        conf = flag("--config.file", "/etc/prometheus/prometheus.yml")
        data = flag("--storage.tsdb.path", "/prometheus")
        mounts = bind_mounts(r)
        source, ro = host_path(mounts, conf)
        if not check(source and exists(source) and os.path.isfile(os.path.join(ROOT, source)),
                     f"{svc}: --config.file {conf} is {source}",
                     f"{svc}: --config.file {conf} is not a mounted file of the repository (Prometheus would run the image's example)"):
            continue
        check(ro, f"{svc}: {source} is mounted read-only", f"{svc}: {source} is mounted writable (add :ro)")
        check(os.path.normpath(source) == "deploy/prometheus/prometheus.yml",
              f"{svc}: it is the configuration .ci/check-observability.sh checks (promtool)",
              f"{svc}: it loads {source}, not deploy/prometheus/prometheus.yml, which .ci/check-observability.sh checks")
        config_path = PROM_CONFIG or source
        try:
            pdoc = yaml.safe_load(read(config_path)) or {}
        except (OSError, yaml.YAMLError) as e:
            fail(f"{svc}: {rel(config_path)} cannot be read: {e}")
            continue
        rule_files = pdoc.get("rule_files") or []
        check(rule_files, f"{svc}: {rel(config_path)} loads rule_files {', '.join(rule_files)}",
              f"{svc}: {rel(config_path)} has no rule_files: no alert is evaluated")
        for rf in rule_files:
            inside = rf if rf.startswith("/") else posixpath.normpath(posixpath.join(posixpath.dirname(conf), rf))
            rsource, rro = host_path(mounts, inside)
            found = glob.glob(os.path.join(ROOT, rsource)) if rsource else []
            check(found and rro, f"{svc}: rule_files {rf} is {inside}, mounted read-only from {rsource}",
                  f"{svc}: rule_files {rf} ({inside} in the container) is "
                  + ("mounted writable (add :ro)" if found else "not a mounted file of the repository: the alerts would not load"))
        volume = named_volumes(r).get(posixpath.normpath(data))
        check(volume and volume in ((info["doc"].get("volumes") or {})),
              f"{svc}: its data ({data}) on the named volume {volume}",
              f"{svc}: {data} (--storage.tsdb.path) is not on a named volume of the file: the data goes with the container")
        ports = published_ports(r)
        loopback = ("127.0.0.1", "::1", "[::1]", "localhost")
        wide = [p for p in ports if p[0] not in loopback]
        check(not wide, f"{svc}: published on " + (", ".join(f"{a}:{p}->{t}" for a, p, t in ports) or "no port")
              + " only (its UI and API have no authentication)",
              f"{svc}: published on every address: {', '.join(':'.join(x for x in p[:2] if x) + '->' + p[2] for p in wide)} "
              "(bind it to 127.0.0.1)")
        dep = s.get("depends_on") or {}
        dep = list(dep) if isinstance(dep, (dict, list)) else []
        check(set(replicas) <= set(dep), f"{svc}: starts after the replicas", f"{svc}: does not depend on every replica")

        # Its job `switchyard` scrapes each replica on its port, not the balancer.
        jobs = {j.get("job_name"): j for j in pdoc.get("scrape_configs") or [] if isinstance(j, dict)}
        job = jobs.get("switchyard")
        if not check(job, f"{svc}: {rel(config_path)} has a job switchyard (the alerts select it)",
                     f"{svc}: {rel(config_path)} has no job named switchyard"):
            continue
        targets = {t for sc in job.get("static_configs") or [] for t in sc.get("targets") or []}
        want = {f"{rep}:{info.get('port') or '8080'}" for rep in replicas}
        check(targets == want, f"{svc}: job switchyard scrapes the replicas directly: {', '.join(sorted(targets))}",
              f"{svc}: job switchyard scrapes {', '.join(sorted(targets)) or 'nothing'}; the compose replicas are "
              f"{', '.join(sorted(want))}")
        ngx = (info.get("nginx") or {}).get("service")
        via = sorted(t for j in jobs.values() for sc in j.get("static_configs") or [] for t in sc.get("targets") or []
                     if ngx and t.split(":")[0] == ngx)
        check(job.get("metrics_path", "/metrics") == "/metrics" and job.get("scheme", "http") == "http" and not via,
              f"{svc}: at http://…/metrics, and no job scrapes {ngx} (it answers 404 for /metrics)",
              f"{svc}: scrapes {job.get('scheme', 'http')}://…{job.get('metrics_path', '/metrics')}"
              + (f" and {', '.join(via)} (nginx answers 404 for /metrics)" if via else "") + ": switchyard serves http://…:8080/metrics")

# ---------------------------------------------------------------------------------------------
# switchyard's own view of the replicas' configuration
# ---------------------------------------------------------------------------------------------

def check_config(info):
    section("deploy/switchyard.toml (switchyard check-config)")
    binary = os.environ.get("SWITCHYARD_BIN") or os.path.join(ROOT, "target/release/switchyard")
    if not os.access(binary, os.X_OK):
        skip("no switchyard binary (build it, or SWITCHYARD_BIN=/path): check-config not run")
        return
    try:
        import yaml
        doc = yaml.safe_load(read(COMPOSE))
        active, _ = parse_env_file(ENV_EXAMPLE)
    except Exception as e:
        skip(f"compose not readable ({e}): check-config not run")
        return
    # The .env an operator makes from .env.example: with a provider key filled in, or with the
    # fake profile's upstream (which needs no key). Both must start. The example left as it is
    # has no key for OpenAI: that start must stop, with a message that names the variable.
    setups = [
        ("with OPENAI_API_KEY set", {**active, "OPENAI_API_KEY": active.get("OPENAI_API_KEY") or "sk-example"}, True),
        ("with the fake profile's OPENAI_BASE_URL", {**active, "OPENAI_BASE_URL": "http://fake-llm:9001/v1"}, True),
    ]
    if not active.get("OPENAI_API_KEY") and not active.get("OPENAI_BASE_URL"):
        setups.append((".env.example unchanged (no provider key)", dict(active), False))
    for label, values, should_start in setups:
        resolved = interpolate_tree(doc, values)["services"]
        for svc in info.get("replicas") or []:
            r = resolved[svc]
            env = {"PATH": os.environ.get("PATH", "")}
            env.update({k: v for k, v in env_dict(r).items() if v is not None})
            cmd = as_list(r.get("command"))
            args = []
            if "--config" in cmd:
                src = (info.get("config_files") or {}).get(svc)
                if not src:
                    continue
                args = ["--config", os.path.join(ROOT, src)]
            p = subprocess.run([binary, *args, "check-config"], env=env, capture_output=True, text=True)
            if should_start:
                check(p.returncode == 0, f"{svc} {label}: `switchyard check-config` accepts its file and environment",
                      f"{svc} {label}: check-config: {p.stderr.strip()}")
            else:
                check(p.returncode != 0 and "OPENAI_API_KEY" in p.stderr,
                      f"{svc} {label}: check-config refuses it and names OPENAI_API_KEY",
                      f"{svc} {label}: check-config exit {p.returncode}, said: {p.stderr.strip() or p.stdout.strip()}")

# ---------------------------------------------------------------------------------------------
# --build: the Dockerfile's build stages with the local toolchain
# ---------------------------------------------------------------------------------------------

def emulate_build(stages):
    section("Dockerfile build stages, run locally (--build)")
    if not stages:
        fail("no Dockerfile to run")
        return
    final = stages[-1]
    froms = {}
    for no, instr, args in final["instructions"]:
        if instr in ("COPY", "ADD"):
            flags, sources, _ = parse_copy(args)
            if "from" in flags:
                froms.setdefault(flags["from"], []).extend(sources)
    if len(froms) != 1:
        skip(f"the runtime stage copies from {len(froms)} stages; only one is supported")
        return
    ref, wanted = next(iter(froms.items()))
    stage = stage_by_ref(stages, ref)
    pats = ignore_patterns()
    tmp = tempfile.mkdtemp(prefix="check-deploy-build.")
    note(f"in {tmp} (the host's toolchain stands in for {lineage(stages, stage)[0]['base']})")
    fsroot = os.path.join(tmp, "root")
    os.makedirs(fsroot)

    def host(path):
        return os.path.join(fsroot, path.lstrip("/"))

    def copy_context(sources, dest, workdir):
        as_dir = dest.endswith("/") or len(sources) > 1
        dest_abs = host(os.path.normpath(os.path.join(workdir, dest)))
        for src in sources:
            src = os.path.normpath(src)
            if src == ".":
                for d, dirs, files in os.walk(ROOT):
                    rel = os.path.relpath(d, ROOT)
                    dirs[:] = [x for x in dirs if not ignored(os.path.normpath(os.path.join(rel, x)), pats)]
                    for f in files:
                        r = os.path.normpath(os.path.join(rel, f))
                        if ignored(r, pats):
                            continue
                        out = os.path.join(dest_abs, r)
                        os.makedirs(os.path.dirname(out), exist_ok=True)
                        shutil.copy2(os.path.join(ROOT, r), out)
            else:
                if ignored(src, pats) or not exists(src):
                    raise RuntimeError(f"COPY {src}: not in the build context")
                out = os.path.join(dest_abs, os.path.basename(src)) if as_dir else dest_abs
                os.makedirs(os.path.dirname(out), exist_ok=True)
                shutil.copy2(os.path.join(ROOT, src), out)

    # The host's environment minus its cargo settings (the image has none but the Dockerfile's).
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("CARGO_") or k.startswith("RUSTC_") or k in ("RUSTFLAGS", "RUSTDOCFLAGS"))
           or k == "CARGO_HOME"}
    workdir = "/"
    started = time.time()
    try:
        for st in lineage(stages, stage):
            for no, instr, args in st["instructions"]:
                if instr == "WORKDIR":
                    workdir = os.path.normpath(os.path.join(workdir, args.strip()))
                    os.makedirs(host(workdir), exist_ok=True)
                elif instr == "ENV":
                    env.update(env_assignments(args))
                elif instr in ("COPY", "ADD"):
                    flags, sources, dest = parse_copy(args)
                    if "from" in flags:
                        raise RuntimeError(f"line {no}: COPY --from inside the build is not supported here")
                    copy_context(sources, dest, workdir)
                elif instr == "RUN":
                    script = " ".join(json_or_words(args)) if args.strip().startswith("[") else args
                    absolute = [t for c in shell_commands(script) for t in c
                                if t.startswith("/") and not t.startswith("/dev/")]
                    if absolute:
                        raise RuntimeError(f"line {no}: RUN uses absolute paths {absolute}; not run on this host")
                    note(f"line {no}: RUN {script[:90]}{'…' if len(script) > 90 else ''}")
                    t0 = time.time()
                    p = subprocess.run(["sh", "-c", script], cwd=host(workdir), env=env,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                    if p.returncode != 0:
                        tail = "\n".join(p.stdout.strip().splitlines()[-15:])
                        fail(f"line {no}: RUN failed (exit {p.returncode}):\n{tail}")
                        note(f"left in {tmp}")
                        return
                    ok(f"line {no}: RUN succeeded in {time.time() - t0:.0f}s")
                elif instr in ("ARG", "LABEL", "EXPOSE", "USER", "SHELL"):
                    pass
    except RuntimeError as e:
        fail(str(e))
        shutil.rmtree(tmp, ignore_errors=True)
        return
    for src in wanted:
        path = host(src)
        if not check(os.path.isfile(path), f"{src} was built", f"{src} is missing after the build"):
            continue
        desc = subprocess.run(["file", "-b", path], capture_output=True, text=True).stdout.strip() if shutil.which("file") else ""
        if desc:
            check("not stripped" not in desc, f"{os.path.basename(src)} is stripped ({os.path.getsize(path) // 1024} KiB)",
                  f"{os.path.basename(src)} is not stripped: {desc}")
        p = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
        out = (p.stdout + p.stderr).strip()
        check(out != "", f"{os.path.basename(src)} is the real program (`--version`: {out.splitlines()[0][:60]})",
              f"{os.path.basename(src)} prints nothing for --version: the stub was shipped, not the program")
    note(f"built in {time.time() - started:.0f}s")
    shutil.rmtree(tmp, ignore_errors=True)

# ---------------------------------------------------------------------------------------------

section("workspace (cargo metadata)")
members = workspace()
MEMBERS[:] = members or []
if members is not None:
    ok(f"{len(members)} members: " + ", ".join(f"{m['name']} ({m['dir']})" for m in members))
compose_info = check_compose()
check_prometheus(compose_info)
stages = check_dockerfile(members, compose_info)
check_dockerignore(members)
plain_nginx = check_nginx(compose_info)
check_tls(compose_info, plain_nginx)
check_config(compose_info)
if BUILD:
    emulate_build(stages)
finish("check-deploy")
PY
# One line, so that bash reads nothing more of this file once the checks have run.
status=0; "$python" "$script" "$@" || status=$?; exit "$status"
