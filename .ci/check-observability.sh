#!/usr/bin/env bash
# Checks the monitoring files against the metrics the service really exports:
# deploy/prometheus/alerts.yml (alerting rules), deploy/prometheus/alerts.test.yml (their unit
# tests), deploy/prometheus/prometheus.yml (example scrape configuration) and
# deploy/grafana/switchyard.json (dashboard).
#
#   bash .ci/check-observability.sh
#
# What it checks:
#   promtool     `promtool check rules` on the rules, `promtool check config` on the scrape
#                configuration (which also loads its rule_files, relative to it), and
#                `promtool test rules` on the unit tests. promtool comes from PATH (or
#                PROMTOOL=/path/to/promtool); when there is none, Debian's `prometheus` package is
#                installed (apt-get, with sudo unless root; `apt-get update` only if that fails).
#   metric names the exported families are the `const X: &str = "switchyard_…"` lines of
#                src/metrics.rs, histograms those used with `histogram!`/`describe_histogram!`.
#                Every `switchyard_…` name in a rule's expr and in every dashboard query (panel
#                targets and template variables) must be exported: a counter or gauge by its
#                name, a histogram only with _bucket, _sum or _count; a selector of any other
#                metric than Prometheus's `up` fails too. Label names in selectors,
#                by/without/on/ignoring/group_* clauses and legends must be labels the service
#                puts on those metrics (`"key" => …` in metrics.rs), or job, instance, le.
#   coverage     every exported family appears in the dashboard, or in LEFT_OUT below with a
#                reason; every alert has a test where it fires and one where it must not (a test
#                naming an alert that does not exist fails too: promtool would pass it).
#   rules        every alert has `for:`, a severity label (critical, warning or info), and
#                summary and description annotations; the jobs the rules select are jobs of the
#                scrape configuration.
#   dashboard    valid JSON, unique panel ids, every panel (rows aside: they hold no queries) has a
#                datasource and at least one target with an expr; the datasource is a template
#                variable of the dashboard; an `instance` variable exists.
#   scrape       the switchyard job's targets are the switchyard-N services of docker-compose.yml
#                on the port they listen on.
#
# Other files can be checked instead of the real ones (paths relative to where you run it):
#   RULES=… RULE_TESTS=… PROM_CONFIG=… DASHBOARD=… METRICS_RS=… COMPOSE=…
# The unit tests run against $RULES: the test file is copied to a temporary folder with $RULES
# under the name its rule_files gives (when it lists one file).
#
# Ends with "check-observability: N passed, N failed"; exits 1 when a check failed.
set -euo pipefail
caller=$PWD
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Paths given relative to where the script was started from.
absolute() {
  case "$1" in
    /*) printf '%s\n' "$1" ;;
    *) printf '%s\n' "$caller/$1" ;;
  esac
}
export CHECK_RULES CHECK_RULE_TESTS CHECK_PROM_CONFIG CHECK_DASHBOARD CHECK_METRICS_RS CHECK_COMPOSE
CHECK_RULES=$(if [[ -n "${RULES:-}" ]]; then absolute "$RULES"; else echo "$PWD/deploy/prometheus/alerts.yml"; fi)
CHECK_RULE_TESTS=$(if [[ -n "${RULE_TESTS:-}" ]]; then absolute "$RULE_TESTS"; else echo "$PWD/deploy/prometheus/alerts.test.yml"; fi)
CHECK_PROM_CONFIG=$(if [[ -n "${PROM_CONFIG:-}" ]]; then absolute "$PROM_CONFIG"; else echo "$PWD/deploy/prometheus/prometheus.yml"; fi)
CHECK_DASHBOARD=$(if [[ -n "${DASHBOARD:-}" ]]; then absolute "$DASHBOARD"; else echo "$PWD/deploy/grafana/switchyard.json"; fi)
CHECK_METRICS_RS=$(if [[ -n "${METRICS_RS:-}" ]]; then absolute "$METRICS_RS"; else echo "$PWD/src/metrics.rs"; fi)
CHECK_COMPOSE=$(if [[ -n "${COMPOSE:-}" ]]; then absolute "$COMPOSE"; else echo "$PWD/docker-compose.yml"; fi)

if ! command -v python3 >/dev/null 2>&1; then
  echo "check-observability: python3 is needed" >&2
  exit 2
fi

# promtool: PROMTOOL, else PATH, else Debian's prometheus package.
export CHECK_PROMTOOL=""
if [[ -n "${PROMTOOL:-}" ]]; then
  CHECK_PROMTOOL=$(absolute "$PROMTOOL")
elif command -v promtool >/dev/null 2>&1; then
  CHECK_PROMTOOL=$(command -v promtool)
else
  echo "check-observability: no promtool on PATH; installing Debian's prometheus package" >&2
  sudo=()
  if [[ $(id -u) -ne 0 ]]; then sudo=(sudo); fi
  install=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus)
  if ! "${install[@]}" >&2; then
    echo "check-observability: the install failed; running apt-get update and trying again" >&2
    "${sudo[@]}" apt-get update >&2 || true
    "${install[@]}" >&2 || true
  fi
  hash -r
  CHECK_PROMTOOL=$(command -v promtool || true)
fi

script=$(mktemp "${TMPDIR:-/tmp}/check-observability.XXXXXX.py")
trap 'rm -f "$script"' EXIT
cat >"$script" <<'PY'
import json, os, re, shutil, subprocess, sys, tempfile

RULES = os.environ["CHECK_RULES"]
RULE_TESTS = os.environ["CHECK_RULE_TESTS"]
PROM_CONFIG = os.environ["CHECK_PROM_CONFIG"]
DASHBOARD = os.environ["CHECK_DASHBOARD"]
METRICS_RS = os.environ["CHECK_METRICS_RS"]
COMPOSE = os.environ["CHECK_COMPOSE"]
PROMTOOL = os.environ.get("CHECK_PROMTOOL", "")
ROOT = os.getcwd()

# Exported families the dashboard does not show on purpose: name -> reason. Keep it short; a
# family listed here that the dashboard uses, or that the service no longer exports, fails.
LEFT_OUT = {
}

# Labels Prometheus adds to every scraped series (plus `le` on histogram buckets).
TARGET_LABELS = {"job", "instance"}
SEVERITIES = {"critical", "warning", "info"}
HIST_SUFFIXES = ("_bucket", "_sum", "_count")
PROBE_LABELS = {"up": set()}  # Prometheus's own series the rules may use

# The reporting helpers every check script shares (.ci/report.py), not compiled into .ci/.
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.getcwd(), ".ci"))
from report import fail, finish, note, ok, section  # noqa: E402

def rel(path):
    return os.path.relpath(path, ROOT) if path.startswith(ROOT + os.sep) else path

def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()

# ---------------------------------------------------------------------------------------------
# src/metrics.rs: families, their kind and their label keys
# ---------------------------------------------------------------------------------------------

def macro_calls(text, macro):
    """(CONST, argument text) of each `macro!(CONST …)` call, arguments up to the matching ')'."""
    out = []
    for m in re.finditer(r"\b" + macro + r"!\s*\(\s*([A-Z][A-Z0-9_]*)", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        out.append((m.group(1), text[m.end():i - 1]))
    return out

def exported_families():
    text = read(METRICS_RS)
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))
    consts = dict(re.findall(r'const\s+([A-Z][A-Z0-9_]*)\s*:\s*&str\s*=\s*"(switchyard_[a-z0-9_]+)"\s*;', code))
    families = {}
    for const, name in consts.items():
        families[name] = {"const": const, "kinds": set(), "labels": set(), "described": False}
    by_const = {f["const"]: f for f in families.values()}
    for kind in ("counter", "gauge", "histogram"):
        for macro in (kind, "describe_" + kind):
            for const, args in macro_calls(code, macro):
                fam = by_const.get(const)
                if fam is None:
                    continue
                fam["kinds"].add(kind)
                if macro.startswith("describe_"):
                    fam["described"] = True
                else:
                    fam["labels"].update(re.findall(r'"([a-zA-Z_][a-zA-Z0-9_]*)"\s*=>', args))
    return families

# ---------------------------------------------------------------------------------------------
# PromQL: metric names and label names (enough for the queries of these files)
# ---------------------------------------------------------------------------------------------

NAME_RE = re.compile(r"(?<![A-Za-z0-9_:])switchyard_[a-z0-9_]+")
STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')

def strip_comments(expr):
    """PromQL line comments (# to the end of the line, outside strings)."""
    out = []
    for line in expr.splitlines():
        cut, quote = None, None
        for i, ch in enumerate(line):
            if quote:
                if ch == quote and line[i - 1] != "\\":
                    quote = None
            elif ch in "\"'`":
                quote = ch
            elif ch == "#":
                cut = i
                break
        out.append(line if cut is None else line[:cut])
    return "\n".join(out)

def resolve_name(token, families):
    """(family, error): the exported family a series name belongs to, or why it is not one."""
    if token in families:
        fam = families[token]
        if "histogram" in fam["kinds"]:
            return None, f"{token} is a histogram: its series are {token}_bucket, _sum and _count"
        return token, None
    for suffix in HIST_SUFFIXES:
        if token.endswith(suffix):
            base = token[: -len(suffix)]
            if base in families:
                if "histogram" in families[base]["kinds"]:
                    return base, None
                return None, f"{token}: {suffix} on {base}, which is not a histogram"
    return None, f"{token} is not a metric the service exports"

def selectors(expr):
    """(metric name or None, [label names]) of each `name{…}` or bare `{…}` selector."""
    out = []
    masked = STRING_RE.sub(lambda m: '"' + "_" * (len(m.group(0)) - 2) + '"', expr)
    for m in re.finditer(r"([A-Za-z_:][A-Za-z0-9_:]*)?\s*\{([^{}]*)\}", masked):
        name = m.group(1)
        if name in ("by", "without", "on", "ignoring", "group_left", "group_right"):
            name = None
        labels = re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", m.group(2))
        out.append((name, labels))
    return out

def grouping_labels(expr):
    masked = STRING_RE.sub('""', expr)
    labels = []
    for m in re.finditer(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", masked):
        labels += [l.strip() for l in m.group(1).split(",") if l.strip()]
    return labels

def check_query(where, expr, families, used, extra_labels=()):
    """Checks one query's names and labels; adds the families it uses to `used`. Returns the
    number of problems."""
    problems = 0
    expr = strip_comments(expr)
    names = NAME_RE.findall(expr)
    query_labels = set(TARGET_LABELS)
    for token in names:
        fam, err = resolve_name(token, families)
        if err:
            fail(f"{where}: {err}")
            problems += 1
            continue
        used.add(fam)
        query_labels |= families[fam]["labels"]
        if token.endswith("_bucket"):
            query_labels.add("le")
    for name, labels in selectors(expr):
        if name is None:
            allowed = query_labels
        elif name in PROBE_LABELS:
            allowed = TARGET_LABELS | PROBE_LABELS[name]
        elif not NAME_RE.fullmatch(name):
            fail(f"{where}: {name} is neither a metric the service exports nor one Prometheus "
                 f"adds ({', '.join(sorted(PROBE_LABELS))})")
            problems += 1
            continue
        else:
            fam, err = resolve_name(name, families)
            if err:
                continue  # reported above
            allowed = TARGET_LABELS | families[fam]["labels"] | ({"le"} if name.endswith("_bucket") else set())
        for label in labels:
            if label not in allowed and label != "__name__":
                fail(f"{where}: label `{label}` on {name or 'a selector'}: the service exports "
                     f"{', '.join(sorted(allowed - TARGET_LABELS)) or 'no labels'} there (plus job, instance)")
                problems += 1
    if problems:
        return problems  # labels of a query with an unknown name would only repeat the error
    for label in sorted(set(grouping_labels(expr) + list(extra_labels))):
        if label not in query_labels:
            fail(f"{where}: label `{label}` is on none of the query's metrics "
                 f"({', '.join(sorted(query_labels))})")
            problems += 1
    return problems

# ---------------------------------------------------------------------------------------------
# The rule file, read line by line (no YAML library needed)
# ---------------------------------------------------------------------------------------------

def indent_of(line):
    return len(line) - len(line.lstrip(" "))

def block_value(lines, i, key_indent, inline):
    """The value of a key at lines[i]: inline text, and/or the lines indented deeper after it."""
    inline = inline.strip()
    parts = [] if inline in ("|", "|-", "|+", ">", ">-", ">+", "") else [inline]
    j = i + 1
    while j < len(lines):
        line = lines[j]
        if line.strip() and indent_of(line) <= key_indent:
            break
        parts.append(line.strip())
        j += 1
    value = "\n".join(parts).strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]
    return value

def parse_rules(path):
    """[{name, kind (alert/record), line, expr, block (its lines)}]."""
    lines = read(path).splitlines()
    rules = []
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)-\s+(alert|record):\s*(\S+)\s*$", line)
        if m:
            rules.append({"name": m.group(3).strip("\"'"), "kind": m.group(2), "line": i + 1,
                          "indent": len(m.group(1)), "start": i, "expr": None})
    for n, rule in enumerate(rules):
        end = len(lines)
        for j in range(rule["start"] + 1, len(lines)):
            line = lines[j]
            if line.strip() and not line.lstrip().startswith("#") and indent_of(line) <= rule["indent"]:
                end = j
                break
        rule["block"] = lines[rule["start"]:end]
        for j in range(rule["start"], end):
            m = re.match(r"^(\s*)(?:-\s+)?expr:(.*)$", lines[j])
            if m:
                rule["expr"] = block_value(lines, j, indent_of(lines[j]) + (2 if lines[j].lstrip().startswith("-") else 0), m.group(2))
    return rules

def yaml_list_after(lines, key):
    """Items of a top-level `key:` block list (or inline [a, b])."""
    items = []
    for i, line in enumerate(lines):
        m = re.match(r"^" + re.escape(key) + r":\s*(.*)$", line)
        if not m:
            continue
        inline = m.group(1).split("#")[0].strip()
        if inline.startswith("["):
            return [x.strip().strip("\"'") for x in inline.strip("[]").split(",") if x.strip()]
        for nxt in lines[i + 1:]:
            if not nxt.strip() or nxt.lstrip().startswith("#"):
                continue
            im = re.match(r"^\s+-\s+(.+?)\s*$", nxt)
            if not im:
                break
            items.append(im.group(1).split(" #")[0].strip().strip("\"'"))
        break
    return items

# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------

def run(cmd, cwd=None):
    p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.returncode, p.stdout.strip()

def show(output, limit=40):
    lines = output.splitlines()
    for line in lines[:limit]:
        note(line)
    if len(lines) > limit:
        note(f"… ({len(lines) - limit} more lines)")

def check_promtool():
    section("promtool")
    if not PROMTOOL or not os.access(PROMTOOL, os.X_OK):
        fail("no promtool (not on PATH, and installing Debian's prometheus package failed): "
             "the rules, the configuration and the unit tests were not checked")
        return
    _, version = run([PROMTOOL, "--version"])
    note(f"{PROMTOOL}: {version.splitlines()[0] if version else '?'}")

    code, out = run([PROMTOOL, "check", "rules", RULES])
    if code == 0:
        found = re.search(r"(\d+) rules? found", out)
        ok(f"promtool check rules {rel(RULES)}" + (f" ({found.group(1)} rules)" if found else ""))
    else:
        fail(f"promtool check rules {rel(RULES)} (exit {code}):")
        show(out)

    # rule_files are relative to the configuration file: promtool resolves them so.
    code, out = run([PROMTOOL, "check", "config", PROM_CONFIG])
    if code == 0:
        ok(f"promtool check config {rel(PROM_CONFIG)} (with its rule_files)")
    else:
        fail(f"promtool check config {rel(PROM_CONFIG)} (exit {code}):")
        show(out)

    # The tests, next to a copy of $RULES under the name their rule_files gives.
    tests_lines = read(RULE_TESTS).splitlines()
    listed = yaml_list_after(tests_lines, "rule_files")
    with tempfile.TemporaryDirectory(prefix="check-observability.") as tmp:
        staged = os.path.join(tmp, os.path.basename(RULE_TESTS))
        shutil.copy(RULE_TESTS, staged)
        if len(listed) == 1 and not os.path.isabs(listed[0]):
            target = os.path.join(tmp, listed[0])
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy(RULES, target)
            where = tmp
            label = f"promtool test rules {rel(RULE_TESTS)} (against {rel(RULES)})"
        else:
            staged = RULE_TESTS
            where = None
            label = f"promtool test rules {rel(RULE_TESTS)} (its rule_files: {', '.join(listed)})"
        code, out = run([PROMTOOL, "test", "rules", staged], cwd=where)
    if code == 0:
        ok(label)
    else:
        fail(f"{label} (exit {code}):")
        show(out.replace(tmp + os.sep, ""), limit=80)

def check_metrics_rs(families):
    section(f"exported metrics ({rel(METRICS_RS)})")
    if not families:
        fail("no `const X: &str = \"switchyard_…\"` line found")
        return False
    good = True
    for name, fam in sorted(families.items()):
        if len(fam["kinds"]) != 1:
            fail(f"{name} ({fam['const']}): used as {', '.join(sorted(fam['kinds'])) or 'no metric at all'}")
            good = False
    if good:
        kinds = {}
        for name, fam in families.items():
            kinds.setdefault(next(iter(fam["kinds"])), []).append(name)
        ok(f"{len(families)} families: " + ", ".join(f"{len(v)} {k}s" for k, v in sorted(kinds.items())))
    return good

def check_rules(families, config_jobs):
    section(f"alert rules ({rel(RULES)})")
    rules = parse_rules(RULES)
    alerts = [r for r in rules if r["kind"] == "alert"]
    if not alerts:
        fail("no alert found")
        return rules, set()
    used = set()
    problems = 0
    jobs = set()
    for rule in rules:
        where = f"{rel(RULES)}: {rule['kind']} {rule['name']} (line {rule['line']})"
        if not rule["expr"]:
            fail(f"{where}: no expr")
            problems += 1
            continue
        problems += check_query(where, rule["expr"], families, used)
        jobs |= set(re.findall(r'\bjob\s*=\s*"([^"]+)"', rule["expr"]))
        if rule["kind"] != "alert":
            continue
        block = "\n".join(rule["block"])
        missing = [what for what, pattern in (
            ("for:", r"^\s+for:\s*\S"),
            ("labels.severity", r"^\s+severity:\s*\S"),
            ("annotations.summary", r"^\s+summary:\s*\S"),
            ("annotations.description", r"^\s+description:\s*\S"),
        ) if not re.search(pattern, block, re.M)]
        if missing:
            fail(f"{where}: missing {', '.join(missing)}")
            problems += 1
        sev = re.search(r"^\s+severity:\s*[\"']?([A-Za-z]+)", block, re.M)
        if sev and sev.group(1) not in SEVERITIES:
            fail(f"{where}: severity {sev.group(1)!r} is not one of {', '.join(sorted(SEVERITIES))}")
            problems += 1
    names = [r["name"] for r in alerts]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        fail(f"alert names used twice: {', '.join(dupes)}")
        problems += 1
    if not problems:
        ok(f"{len(alerts)} alerts, each with for, severity, summary and description; "
           f"every metric and label they name is exported ({len(used)} families)")
    if config_jobs is not None:
        unknown = sorted(jobs - config_jobs)
        if unknown:
            fail(f"the rules select job(s) {', '.join(unknown)}, which {rel(PROM_CONFIG)} does not scrape "
                 f"(its jobs: {', '.join(sorted(config_jobs))})")
        else:
            ok(f"the jobs the rules select ({', '.join(sorted(jobs)) or 'none'}) are scraped by {rel(PROM_CONFIG)}")
    return rules, used

def check_tests(rules):
    section(f"alert unit tests ({rel(RULE_TESTS)})")
    lines = read(RULE_TESTS).splitlines()
    cases = {}  # alertname -> {"fires": n, "quiet": n}
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)(?:-\s+)?alertname:\s*(\S+)\s*$", line)
        if not m:
            continue
        name = m.group(2).strip("\"'")
        quiet = None
        for nxt in lines[i + 1:]:
            em = re.match(r"^\s*(?:-\s+)?exp_alerts:\s*(.*)$", nxt)
            if em:
                value = em.group(1).split("#")[0].strip()
                quiet = value == "[]"
                break
            if re.match(r"^\s*-\s+(?:eval_time|alertname):", nxt):
                break
        entry = cases.setdefault(name, {"fires": 0, "quiet": 0})
        if quiet is None or quiet:
            entry["quiet"] += 1  # no exp_alerts means none expected
        else:
            entry["fires"] += 1
    alerts = [r["name"] for r in rules if r["kind"] == "alert"]
    problems = 0
    for name in alerts:
        entry = cases.get(name, {"fires": 0, "quiet": 0})
        if not entry["fires"]:
            fail(f"{name}: no test case where it fires")
            problems += 1
        if not entry["quiet"]:
            fail(f"{name}: no test case where it must not fire (exp_alerts: [])")
            problems += 1
    for name in sorted(set(cases) - set(alerts)):
        fail(f"{rel(RULE_TESTS)} tests alert {name}, which {rel(RULES)} does not define "
             "(promtool passes such a test whatever happens)")
        problems += 1
    if not problems:
        total = sum(c["fires"] + c["quiet"] for c in cases.values())
        ok(f"every alert ({len(alerts)}) has a firing case and a quiet case ({total} cases)")

def walk_panels(panels):
    for p in panels or []:
        yield p
        yield from walk_panels(p.get("panels"))

def check_dashboard(families):
    section(f"dashboard ({rel(DASHBOARD)})")
    try:
        dash = json.loads(read(DASHBOARD))
    except (OSError, ValueError) as e:
        fail(f"cannot read the dashboard as JSON: {e}")
        return None
    ok(f"valid JSON: \"{dash.get('title')}\", schemaVersion {dash.get('schemaVersion')}, uid {dash.get('uid')}")
    variables = {v.get("name"): v for v in dash.get("templating", {}).get("list", [])}
    ds_vars = {name for name, v in variables.items() if v.get("type") == "datasource"}
    if "instance" in variables:
        ok("an `instance` template variable: " + str(variables["instance"].get("definition") or variables["instance"].get("query")))
    else:
        fail("no `instance` template variable")
    if ds_vars:
        ok(f"datasource template variable(s): {', '.join(sorted(ds_vars))}")
    else:
        fail("no datasource template variable")

    def ds_ok(ds):
        uid = ds.get("uid") if isinstance(ds, dict) else ds
        m = re.fullmatch(r"\$\{?([A-Za-z0-9_]+)\}?", uid or "")
        return bool(m and m.group(1) in ds_vars)

    used = set()
    problems = 0
    ids = {}
    panels = list(walk_panels(dash.get("panels")))
    for p in panels:
        ids.setdefault(p.get("id"), []).append(p.get("title"))
    dupes = {i: t for i, t in ids.items() if len(t) > 1 or i is None}
    if dupes:
        for i, titles in dupes.items():
            fail(f"panel id {i} is used by {len(titles)} panels: {', '.join(map(str, titles))}"
                 if i is not None else f"panels without an id: {', '.join(map(str, titles))}")
        problems += 1
    data_panels = [p for p in panels if p.get("type") != "row"]
    for p in data_panels:
        where = f"{rel(DASHBOARD)}: panel {p.get('id')} \"{p.get('title')}\""
        if not p.get("datasource"):
            fail(f"{where}: no datasource")
            problems += 1
        elif not ds_ok(p["datasource"]):
            fail(f"{where}: datasource {p['datasource']!r} is not a datasource variable of the dashboard")
            problems += 1
        targets = p.get("targets") or []
        if not targets:
            fail(f"{where}: no target")
            problems += 1
        for t in targets:
            expr = t.get("expr")
            if not expr:
                fail(f"{where}: target {t.get('refId')} has no expr")
                problems += 1
                continue
            if t.get("datasource") and not ds_ok(t["datasource"]):
                fail(f"{where}: target {t.get('refId')}'s datasource is not a datasource variable")
                problems += 1
            legend = re.findall(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}", t.get("legendFormat") or "")
            problems += check_query(f"{where} target {t.get('refId')}", expr, families, used, legend)
    for name, v in variables.items():
        if v.get("type") != "query":
            continue
        query = v.get("query")
        query = query.get("query") if isinstance(query, dict) else query
        if query:
            problems += check_query(f"{rel(DASHBOARD)}: variable {name}", query, families, used)
    if not problems:
        ok(f"{len(data_panels)} panels (and {len(panels) - len(data_panels)} rows): unique ids, each with a "
           f"datasource variable and targets; every metric and label they name is exported")
    return used

def check_coverage(families, dashboard_used, rule_used):
    section("coverage of the exported families")
    if dashboard_used is None:
        fail("the dashboard could not be read")
        return
    problems = 0
    for name, reason in sorted(LEFT_OUT.items()):
        if name not in families:
            fail(f"LEFT_OUT names {name}, which the service does not export")
            problems += 1
        elif name in dashboard_used:
            fail(f"LEFT_OUT names {name}, which the dashboard uses: drop it from the list")
            problems += 1
        elif not reason.strip():
            fail(f"LEFT_OUT gives no reason for {name}")
            problems += 1
    missing = sorted(set(families) - dashboard_used - set(LEFT_OUT))
    for name in missing:
        fail(f"{name} is exported but the dashboard does not use it (add a panel, or list it in "
             "LEFT_OUT in .ci/check-observability.sh with a reason)")
        problems += 1
    if not problems:
        ok(f"every family is on the dashboard ({len(dashboard_used)})"
           + (f" or left out on purpose ({len(LEFT_OUT)})" if LEFT_OUT else ""))
    for name, reason in sorted(LEFT_OUT.items()):
        note(f"left out: {name}: {reason}")
    note("alerted on: " + ", ".join(sorted(rule_used)))

def scrape_jobs():
    """{job_name: [targets]} of the scrape configuration (comments ignored)."""
    jobs, current = {}, None
    for line in read(PROM_CONFIG).splitlines():
        code = line.split("#", 1)[0].rstrip()
        if not code.strip():
            continue
        m = re.match(r"^\s*-\s+job_name:\s*[\"']?([^\"'\s]+)", code)
        if m:
            current = m.group(1)
            jobs[current] = []
            continue
        if current is not None:
            jobs[current] += re.findall(r"[\"']?([A-Za-z0-9._-]+:\d+)[\"']?", code)
    return jobs

def check_scrape():
    section(f"scrape configuration ({rel(PROM_CONFIG)}) and {rel(COMPOSE)}")
    try:
        jobs = scrape_jobs()
    except OSError as e:
        fail(f"cannot read {rel(PROM_CONFIG)}: {e}")
        return None
    if "switchyard" not in jobs:
        fail("no scrape job named switchyard")
        return set(jobs)
    try:
        compose = read(COMPOSE)
    except OSError as e:
        fail(f"cannot read {rel(COMPOSE)}: {e}")
        return set(jobs)
    replicas = re.findall(r"^  (switchyard-\d+):", compose, re.M)
    port = re.search(r"SWITCHYARD__SERVER__PORT:\s*[\"']?(\d+)", compose)
    port = port.group(1) if port else "8080"
    want = {f"{r}:{port}" for r in replicas}
    have = set(jobs["switchyard"])
    if not replicas:
        fail(f"no switchyard-N service in {rel(COMPOSE)}")
    elif want == have:
        ok(f"job switchyard scrapes the compose replicas: {', '.join(sorted(have))}")
    else:
        fail(f"job switchyard scrapes {', '.join(sorted(have)) or 'nothing'}; {rel(COMPOSE)} runs "
             f"{', '.join(sorted(want))}")
    return set(jobs)

families = exported_families()
check_promtool()
if check_metrics_rs(families):
    config_jobs = check_scrape()
    rules, rule_used = check_rules(families, config_jobs)
    check_tests(rules)
    dashboard_used = check_dashboard(families)
    check_coverage(families, dashboard_used, rule_used)
finish("check-observability", skips=False)
PY
# One line, so that bash reads nothing more of this file once the checks have run.
status=0; python3 "$script" || status=$?; exit "$status"
