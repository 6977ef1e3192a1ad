#!/usr/bin/env bash
# Checks the Kubernetes manifests in deploy/kubernetes/ without a cluster.
#
#   bash .ci/check-kubernetes.sh
#   K8S_DIR=/tmp/broken-copy bash .ci/check-kubernetes.sh     # another copy of the folder
#
# Settings (environment):
#   K8S_DIR             the manifests' folder (default deploy/kubernetes)
#   KUBERNETES_VERSION  the Kubernetes version whose schemas they are checked against (1.30.0)
#   SWITCHYARD_BIN      a switchyard binary (default target/release/switchyard; without one the
#                       binary's checks are skipped)
#   KUBERNETES_VALIDATE_VENV   where the pinned tools are installed (default
#                       ${XDG_CACHE_HOME:-$HOME/.cache}/switchyard-ci/kubernetes-validate-venv)
#
# What it checks:
#   schemas      every manifest (kustomization.yaml aside, secret.example.yaml included) against
#                Kubernetes' own schemas with kubernetes-validate, strict: an unknown or misspelt
#                field is an error. The same as `kubernetes-validate --strict -k 1.30.0 FILE`,
#                through its library: the command only warns (and exits 0) when it has no schema
#                for a kind, which is also what an apiVersion typo looks like, so here that is a
#                failure. Custom resources have no schema there: the ServiceMonitor is checked
#                against a JSON schema written below (jsonschema, strict too) for the fields of
#                prometheus-operator's monitoring.coreos.com/v1 that it may use.
#   kustomize    kustomization.yaml's resources exist, every manifest is one of them except
#                *.example.yaml (never: applying it would overwrite real Secrets), the label
#                app.kubernetes.io/name, an `images:` entry for the Deployment's image, the
#                namespace of namespace.yaml. With kustomize or kubectl on PATH, also the build,
#                its output validated as above.
#   wiring       the container's --config path is the ConfigMap's file as mounted, the TOML
#                reads (tomllib); terminationGracePeriodSeconds > server.shutdown_grace_seconds
#                (as the pod sees it: env > ConfigMap > config/default.toml), and covers the
#                whole stop (preStop, drain delay, grace, hand-over, connections, MCP servers);
#                the port `http` is server.port on all interfaces; probes ask /healthz and
#                /readyz (routes in src/api/mod.rs) on the named port; the Service targets that
#                port and selects the pods; so do the Deployment's and the PDB's selectors; the
#                ServiceMonitor selects the Service and one of its ports, at a route the
#                service has; every env name is a setting (SWITCHYARD__A__B: key b of section a
#                in config/default.toml) or a variable src/ reads; every Secret reference is in
#                secret.example.yaml with a placeholder value; the pod runs as the Dockerfile's
#                UID, non-root, read-only, no privilege escalation, no capabilities, seccomp
#                RuntimeDefault (Pod Security "restricted" where namespace.yaml enforces it);
#                a preStop command exists in the runtime image.
#   binary       with a switchyard binary: `check-config` with the ConfigMap's file and the
#                pod's environment (Secrets as in secret.example.yaml) succeeds, and without the
#                optional upstream key it stops naming OPENAI_API_KEY; then `serve` (on SQLite in
#                a temporary folder, on loopback, no upstream request) answers the probes' paths,
#                /metrics without a key, /readyz 503 once SIGTERM arrives, and stops in time.
#
# Ends with "check-kubernetes: N passed, N failed, N skipped"; exits 1 when a check failed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# --- the pinned tools, in a virtual environment of their own (installed once, then reused) -----
pins=(kubernetes-validate==1.37.0 jsonschema==4.26.0 PyYAML==6.0.4)
venv="${KUBERNETES_VALIDATE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/switchyard-ci/kubernetes-validate-venv}"

# tomllib needs Python 3.11.
python=""
for candidate in python3 python3.13 python3.12 python3.11 /usr/bin/python3; do
  if command -v "$candidate" >/dev/null 2>&1 \
     && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    python="$candidate"
    break
  fi
done
if [[ -z "$python" ]]; then
  echo "check-kubernetes: needs python3 >= 3.11 (tomllib)" >&2
  exit 2
fi

if [[ "$(cat "$venv/.switchyard-pins" 2>/dev/null || true)" != "${pins[*]}" ]] \
   || ! "$venv/bin/python" -c 'import tomllib, kubernetes_validate, jsonschema, yaml' >/dev/null 2>&1; then
  if [[ -e "$venv" && ! -f "$venv/pyvenv.cfg" ]]; then
    echo "check-kubernetes: $venv exists and is not a virtual environment; not touching it" >&2
    exit 2
  fi
  echo "check-kubernetes: installing ${pins[*]} into $venv"
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${pins[@]}"
  printf '%s' "${pins[*]}" >"$venv/.switchyard-pins"
fi

script=$(mktemp "${TMPDIR:-/tmp}/check-kubernetes.XXXXXX.py")
trap 'rm -f "$script"' EXIT
cat >"$script" <<'PY'
import copy, glob, json, os, re, shutil, signal, socket, subprocess, sys, tempfile, time, tomllib
import urllib.error, urllib.request

import jsonschema
import kubernetes_validate
import yaml

ROOT = os.getcwd()
K8S_DIR = os.path.abspath(os.environ.get("K8S_DIR") or os.path.join(ROOT, "deploy/kubernetes"))
VERSION = os.environ.get("KUBERNETES_VERSION") or "1.30.0"
SHOWN_DIR = os.path.relpath(K8S_DIR, ROOT) if K8S_DIR.startswith(ROOT + os.sep) else K8S_DIR

# The reporting helpers every check script shares (.ci/report.py), not compiled into .ci/.
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.getcwd(), ".ci"))
from report import check, fail, finish, note, ok, section, skip  # noqa: E402

def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()

def subset(small, big):
    """Every label of `small` is in `big` with the same value (a selector matching labels)."""
    return bool(small) and all(big.get(k) == v for k, v in small.items())

# ---------------------------------------------------------------------------------------------
# The ServiceMonitor's schema: prometheus-operator's monitoring.coreos.com/v1 CRD, only for the
# fields a ServiceMonitor of this service may use, strict (anything else is an error).
# ---------------------------------------------------------------------------------------------

DURATION = r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
NAME = {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$", "maxLength": 253}
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
SECRET_KEY = {"type": "object", "additionalProperties": False, "required": ["key"],
              "properties": {"name": {"type": "string"}, "key": {"type": "string"},
                             "optional": {"type": "boolean"}}}
RELABELING = {"type": "object", "additionalProperties": False, "properties": {
    "action": {"type": "string"}, "modulus": {"type": "integer"}, "regex": {"type": "string"},
    "replacement": {"type": "string"}, "separator": {"type": "string"},
    "sourceLabels": {"type": "array", "items": {"type": "string", "pattern": r"^[a-zA-Z_][a-zA-Z0-9_]*$"}},
    "targetLabel": {"type": "string"}}}
SERVICEMONITOR_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {"type": "object", "additionalProperties": False, "required": ["name"],
                     "properties": {"name": NAME, "namespace": NAME, "labels": STRING_MAP,
                                    "annotations": STRING_MAP}},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector", "endpoints"],
            "properties": {
                "selector": {"type": "object", "additionalProperties": False, "properties": {
                    "matchLabels": STRING_MAP,
                    "matchExpressions": {"type": "array", "items": {
                        "type": "object", "additionalProperties": False, "required": ["key", "operator"],
                        "properties": {"key": {"type": "string"},
                                       "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                                       "values": {"type": "array", "items": {"type": "string"}}}}}}},
                "namespaceSelector": {"type": "object", "additionalProperties": False, "properties": {
                    "any": {"type": "boolean"},
                    "matchNames": {"type": "array", "items": {"type": "string"}}}},
                "jobLabel": {"type": "string"},
                "targetLabels": {"type": "array", "items": {"type": "string"}},
                "podTargetLabels": {"type": "array", "items": {"type": "string"}},
                "endpoints": {"type": "array", "minItems": 1, "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["port"],
                    "properties": {
                        "port": {"type": "string", "minLength": 1},
                        "path": {"type": "string", "pattern": "^/"},
                        "scheme": {"enum": ["http", "https"]},
                        "interval": {"type": "string", "pattern": DURATION},
                        "scrapeTimeout": {"type": "string", "pattern": DURATION},
                        "honorLabels": {"type": "boolean"},
                        "bearerTokenSecret": SECRET_KEY,
                        "authorization": {"type": "object", "additionalProperties": False, "properties": {
                            "type": {"type": "string"}, "credentials": SECRET_KEY}},
                        "relabelings": {"type": "array", "items": RELABELING},
                        "metricRelabelings": {"type": "array", "items": RELABELING},
                    }}},
            },
        },
    },
}

def duration_seconds(text):
    m = re.fullmatch(DURATION, text or "")
    if not m or text == "0":
        return 0
    units = [(3, 365 * 86400), (5, 7 * 86400), (7, 86400), (9, 3600), (11, 60), (13, 1), (15, 0.001)]
    return sum(int(m.group(g)) * f for g, f in units if m.group(g))

# ---------------------------------------------------------------------------------------------
# The repository: defaults, routes, Dockerfile, what src/ reads
# ---------------------------------------------------------------------------------------------

DEFAULT_TOML = read(os.path.join(ROOT, "config/default.toml"))
DEFAULTS = tomllib.loads(DEFAULT_TOML)

def default_keys():
    """Every key of config/default.toml, also those of its commented-out examples
    (`# encryption_key = …` under `[reasoning]`), as tuples (section…, key)."""
    keys, table = set(), []
    for raw in DEFAULT_TOML.splitlines():
        body = raw.strip().lstrip("#").strip()
        m = re.match(r'^\[\[?\s*([A-Za-z0-9_.\-"]+)\s*\]\]?\s*(#.*)?$', body)
        if m:
            table = [p.strip('"') for p in m.group(1).split(".")]
            keys.add(tuple(table))
            continue
        m = re.match(r"^([A-Za-z0-9_\-]+)\s*=", body)
        if m:
            keys.add(tuple(table + [m.group(1)]))
    return keys

KNOWN_KEYS = default_keys()
# Tables whose keys are names the operator chooses (providers.NAME.base_url, …).
NAMED_TABLES = {("providers",), ("mcp_servers",), ("tool_servers",), ("fallbacks",), ("tools", "hosted")}

def lookup(tree, path):
    for part in path:
        if not isinstance(tree, dict) or part not in tree:
            return None
        tree = tree[part]
    return tree

def src_reads(name):
    """Files of src/ that name the variable as a string literal."""
    found = []
    for path in glob.glob(os.path.join(ROOT, "src/**/*.rs"), recursive=True):
        if f'"{name}"' in read(path):
            found.append(os.path.relpath(path, ROOT))
    return found

def routes():
    text = read(os.path.join(ROOT, "src/api/mod.rs"))
    return set(re.findall(r'\.route\(\s*"([^"]+)"', text))

def rust_const_seconds(path, name, fallback):
    """A `const NAME: Duration = Duration::from_secs(N)` (or from_millis) of the sources."""
    try:
        text = read(os.path.join(ROOT, path))
    except OSError:
        return fallback, False
    m = re.search(rf"const {name}: Duration = Duration::from_(secs|millis)\((\d+)\)", text)
    if not m:
        return fallback, False
    value = int(m.group(2))
    return (value if m.group(1) == "secs" else value / 1000), True

def dockerfile_runtime():
    """The last stage of the Dockerfile: its base image, ENV, USER and useradd's --uid."""
    text = read(os.path.join(ROOT, "Dockerfile"))
    joined = re.sub(r"\\\n", " ", text)
    stages = re.split(r"(?im)^FROM\s+", joined)
    last = stages[-1]
    base = last.split()[0] if last.split() else ""
    env = {}
    for m in re.finditer(r"(?m)^ENV\s+(.+)$", last):
        for k, v in re.findall(r'([A-Za-z_][A-Za-z0-9_]*)=("[^"]*"|\S*)', m.group(1)):
            env[k] = v.strip('"')
    user = re.findall(r"(?m)^USER\s+(\S+)", last)
    uid = re.search(r"useradd\b[^\n]*?--uid[ =](\d+)", last)
    return {"base": base, "env": env, "user": user[-1] if user else None,
            "uid": int(uid.group(1)) if uid else None}

# ---------------------------------------------------------------------------------------------
# The manifests
# ---------------------------------------------------------------------------------------------

def manifest_files():
    files = sorted(glob.glob(os.path.join(K8S_DIR, "*.yaml")) + glob.glob(os.path.join(K8S_DIR, "*.yml")))
    return [f for f in files if os.path.basename(f) not in ("kustomization.yaml", "kustomization.yml")]

def load_docs(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d]

def describe(doc):
    return f"{doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"

def validate_doc(doc, where):
    """Strict schema validation of one resource; True when it passes."""
    if doc.get("kind") == "ServiceMonitor" and doc.get("apiVersion") == "monitoring.coreos.com/v1":
        validator = jsonschema.Draft202012Validator(SERVICEMONITOR_SCHEMA)
        errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
        if errors:
            for e in errors:
                fail(f"{where}: {describe(doc)}: {'.'.join(map(str, e.path)) or '(top)'}: {e.message}")
            return False
        ok(f"{where}: {describe(doc)} matches the ServiceMonitor schema written in this check "
           f"(no Kubernetes schema for custom resources)")
        return True
    try:
        against = kubernetes_validate.validate(doc, VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        fail(f"{where}: {describe(doc)}: {'.'.join(map(str, e.path)) or '(top)'}: {e.message}")
        return False
    except kubernetes_validate.SchemaNotFoundError as e:
        fail(f"{where}: {describe(doc)}: {e.message} (a typo in apiVersion or kind, or a custom "
             f"resource this check has no schema for)")
        return False
    except Exception as e:  # VersionNotSupportedError, a malformed document
        fail(f"{where}: {describe(doc)}: cannot be validated: {getattr(e, 'message', e)}")
        return False
    ok(f"{where}: {describe(doc)} valid against Kubernetes {against} (strict)")
    return True

section(f"schemas: {SHOWN_DIR}/ against Kubernetes {VERSION}, strict (kubernetes-validate {kubernetes_validate.__version__})")
DOCS = []  # (file name, document)
if not os.path.isdir(K8S_DIR):
    fail(f"{K8S_DIR} is not a folder")
for path in manifest_files():
    name = os.path.basename(path)
    try:
        docs = load_docs(path)
    except yaml.YAMLError as e:
        fail(f"{name}: not YAML: {e}")
        continue
    if not docs:
        fail(f"{name}: no document")
    for doc in docs:
        if not isinstance(doc, dict) or "kind" not in doc or "apiVersion" not in doc:
            fail(f"{name}: a document without apiVersion and kind")
            continue
        validate_doc(doc, name)
        DOCS.append((name, doc))

def of_kind(kind, example=False):
    return [(f, d) for f, d in DOCS if d.get("kind") == kind and f.endswith(".example.yaml") == example]

def one(kind):
    found = of_kind(kind)
    if len(found) != 1:
        fail(f"expected one {kind} in the manifests (examples aside), found {len(found)}")
        return None
    return found[0][1]

# ---------------------------------------------------------------------------------------------
# kustomization.yaml
# ---------------------------------------------------------------------------------------------

section("kustomization.yaml")
KUSTOMIZATION = None
kpath = os.path.join(K8S_DIR, "kustomization.yaml")
if not os.path.exists(kpath):
    fail("no kustomization.yaml")
else:
    KUSTOMIZATION = yaml.safe_load(read(kpath)) or {}
    k = KUSTOMIZATION
    check(k.get("apiVersion") == "kustomize.config.k8s.io/v1beta1" and k.get("kind") == "Kustomization",
          "apiVersion kustomize.config.k8s.io/v1beta1, kind Kustomization",
          f"apiVersion/kind are {k.get('apiVersion')}/{k.get('kind')}")
    known = {"apiVersion", "kind", "namespace", "labels", "commonLabels", "commonAnnotations",
             "resources", "images", "namePrefix", "nameSuffix", "configMapGenerator",
             "secretGenerator", "generatorOptions", "patches", "replicas", "components"}
    unknown = sorted(set(k) - known)
    check(not unknown, "only known kustomization fields", f"unknown kustomization fields: {unknown}")
    resources = k.get("resources") or []
    missing = [r for r in resources if not os.path.exists(os.path.join(K8S_DIR, r))]
    check(resources and not missing, f"{len(resources)} resources, each exists",
          f"resources missing: {missing}" if missing else "no resources")
    files = [os.path.basename(f) for f in manifest_files()]
    listed = {os.path.normpath(r) for r in resources}
    unlisted = [f for f in files if not f.endswith(".example.yaml") and f not in listed]
    check(not unlisted, "every manifest is a resource",
          f"manifests not listed in resources (never applied): {unlisted}")
    examples = [f for f in files if f.endswith(".example.yaml")]
    applied = [f for f in examples if f in listed]
    check(not applied, f"examples left out of resources ({', '.join(examples) or 'none'}): "
          f"`apply -k` never writes their placeholders",
          f"{applied} listed in resources: applying would overwrite the real Secrets with placeholders")
    pairs = {}
    for entry in k.get("labels") or []:
        pairs.update(entry.get("pairs") or {})
    pairs.update(k.get("commonLabels") or {})
    check(pairs.get("app.kubernetes.io/name") == "switchyard",
          "labels: app.kubernetes.io/name: switchyard", f"labels/commonLabels lack app.kubernetes.io/name: switchyard ({pairs})")
    ns_docs = of_kind("Namespace")
    if ns_docs:
        ns_name = ns_docs[0][1]["metadata"]["name"]
        check(k.get("namespace") == ns_name, f"namespace {ns_name}, as namespace.yaml",
              f"kustomization namespace {k.get('namespace')!r} is not namespace.yaml's {ns_name!r}")

# ---------------------------------------------------------------------------------------------
# The Deployment and the service's configuration
# ---------------------------------------------------------------------------------------------

section("the Deployment, its ConfigMap and the service's settings")
DEP = one("Deployment")
DOCKER = dockerfile_runtime()
POD = CONTAINER = None
TOML = {}
TOML_TEXT = None
ENV_LITERAL = {}
SECRET_ENV = {}   # env name -> (secret, key, optional)
if DEP:
    POD = DEP["spec"]["template"]["spec"]
    containers = POD.get("containers") or []
    CONTAINER = next((c for c in containers if c.get("name") == "switchyard"), containers[0] if containers else None)
    for e in CONTAINER.get("env") or []:
        if "value" in e:
            ENV_LITERAL[e["name"]] = str(e["value"])
        ref = ((e.get("valueFrom") or {}).get("secretKeyRef"))
        if ref:
            SECRET_ENV[e["name"]] = (ref.get("name"), ref.get("key"), bool(ref.get("optional")))

    # --- image and kustomize's images: entry
    image = CONTAINER.get("image", "")
    # kustomize matches an `images:` entry by the image's name without its tag or digest.
    image_name = re.sub(r":[^/:]*$", "", image.split("@")[0])
    if KUSTOMIZATION is not None:
        names = [i.get("name") for i in KUSTOMIZATION.get("images") or []]
        check(image_name in names, f"kustomization images: sets the container's image {image_name!r}",
              f"no kustomization images: entry named {image_name!r} (the container's image); have {names}")

    # --- --config and the ConfigMap as mounted
    args = [str(a) for a in (CONTAINER.get("command") or []) + (CONTAINER.get("args") or [])]
    config_path = None
    for i, a in enumerate(args):
        if a == "--config" and i + 1 < len(args):
            config_path = args[i + 1]
        elif a.startswith("--config="):
            config_path = a.split("=", 1)[1]
    check(config_path, f"the container passes --config {config_path}", f"no --config in the container's arguments {args}")
    check("serve" in args or not [a for a in args if not a.startswith("-") and a != config_path],
          "it runs `serve`", f"the arguments {args} run another subcommand than serve")
    volumes = {v["name"]: v for v in POD.get("volumes") or []}
    cm_name = cm_key = None
    for m in CONTAINER.get("volumeMounts") or []:
        vol = volumes.get(m["name"]) or {}
        if "configMap" not in vol or not config_path:
            continue
        mount = m["mountPath"].rstrip("/")
        if m.get("subPath"):
            if config_path == mount:
                cm_name, sub = vol["configMap"]["name"], m["subPath"]
                items = {i["path"]: i["key"] for i in vol["configMap"].get("items") or []}
                cm_key = items.get(sub, sub) if items else sub
        elif config_path.startswith(mount + "/"):
            rel = config_path[len(mount) + 1:]
            items = vol["configMap"].get("items")
            if items:
                cm_key = next((i["key"] for i in items if i["path"] == rel), None)
            else:
                cm_key = rel if "/" not in rel else None
            cm_name = vol["configMap"]["name"]
    cms = {d["metadata"]["name"]: d for f, d in of_kind("ConfigMap")}
    if check(cm_name and cm_key, f"--config {config_path} is key {cm_key!r} of ConfigMap {cm_name!r} as mounted",
             f"--config {config_path} is not a file of a mounted ConfigMap (mounts: "
             f"{[(m['name'], m['mountPath']) for m in CONTAINER.get('volumeMounts') or []]})"):
        cm = cms.get(cm_name)
        if check(cm is not None and cm_key in (cm.get("data") or {}), f"ConfigMap {cm_name} has {cm_key}",
                 f"ConfigMap {cm_name!r} (in {SHOWN_DIR}) has no key {cm_key!r}"):
            TOML_TEXT = cm["data"][cm_key]
            try:
                TOML = tomllib.loads(TOML_TEXT)
                ok(f"{cm_key} is TOML ({', '.join(sorted(TOML)) or 'no tables'})")
            except tomllib.TOMLDecodeError as e:
                fail(f"{cm_key} is not TOML: {e}")
                TOML_TEXT = None

    # --- env names the service knows
    for name in [e["name"] for e in CONTAINER.get("env") or []]:
        if name.startswith("SWITCHYARD__"):
            path = tuple(name[len("SWITCHYARD__"):].lower().split("__"))
            if path in KNOWN_KEYS:
                ok(f"env {name} is the setting {'.'.join(path)} (config/default.toml)")
            elif any(path[:len(t)] == t and len(path) > len(t) + 1 for t in NAMED_TABLES):
                ok(f"env {name} sets {'.'.join(path)} in a table of named entries (check-config judges it)")
            else:
                fail(f"env {name}: config/default.toml has no key {'.'.join(path)}: the service stops at start")
        else:
            where = src_reads(name)
            check(where, f"env {name} is read by {', '.join(where)}",
                  f"env {name}: nothing in src/ reads a variable of that name")

    def effective(section_, key):
        """(value, where) as the pod sees it: its env, the image's ENV, the ConfigMap, the defaults."""
        env_name = f"SWITCHYARD__{section_.upper()}__{key.upper()}"
        if env_name in ENV_LITERAL:
            return ENV_LITERAL[env_name], f"env {env_name}"
        if env_name in SECRET_ENV:
            return None, f"env {env_name} (from a Secret)"
        if env_name in DOCKER["env"]:
            return DOCKER["env"][env_name], f"the image's ENV {env_name}"
        value = lookup(TOML, [section_, key])
        if value is not None:
            return value, f"the ConfigMap's {section_}.{key}"
        return lookup(DEFAULTS, [section_, key]), f"config/default.toml's {section_}.{key}"

    # --- port and address
    ports = {p.get("name"): p for p in CONTAINER.get("ports") or []}
    http = ports.get("http")
    port, port_from = effective("server", "port")
    host, host_from = effective("server", "host")
    if check(http, "container port named http", f"no container port named http ({list(ports)})"):
        check(str(http.get("containerPort")) == str(port),
              f"port http is {http.get('containerPort')}, server.port from {port_from}",
              f"port http is {http.get('containerPort')} but server.port is {port} ({port_from})")
    check(host in ("0.0.0.0", "::"), f"listens on {host} ({host_from}): the kubelet's probes and the Service reach it",
          f"server.host is {host} ({host_from}): probes and the Service cannot reach a pod listening there")

    # --- shutdown: terminationGracePeriodSeconds against what the service does after SIGTERM
    grace, grace_from = effective("server", "shutdown_grace_seconds")
    drain_ms, drain_from = effective("server", "drain_delay_ms")
    tgps = POD.get("terminationGracePeriodSeconds", 30)
    if check(isinstance(grace, int) and tgps > grace,
             f"terminationGracePeriodSeconds {tgps} > server.shutdown_grace_seconds {grace} ({grace_from})",
             f"terminationGracePeriodSeconds {tgps} is not longer than server.shutdown_grace_seconds {grace} "
             f"({grace_from}): runs would be killed while the service still drains"):
        pre = 0
        prestop = ((CONTAINER.get("lifecycle") or {}).get("preStop") or {})
        cmd = (prestop.get("exec") or {}).get("command") or []
        if cmd and os.path.basename(cmd[0]) == "sleep" and len(cmd) > 1:
            pre = float(cmd[1])
        if "sleep" in prestop:
            pre = float(prestop["sleep"].get("seconds", 0))
        handover, f1 = rust_const_seconds("src/engine/maintenance.rs", "HANDOVER_WAIT", 10)
        conns, f2 = rust_const_seconds("src/app.rs", "CONNECTION_DRAIN", 5)
        mcp, f3 = rust_const_seconds("src/tools/mcp/mod.rs", "SHUTDOWN_WAIT", 10)
        if not (f1 and f2 and f3):
            note("a shutdown constant was not found in src/ (renamed?): using its last known value")
        has_mcp_commands = any("command" in (v or {}) for v in (TOML.get("mcp_servers") or {}).values())
        budget = pre + int(drain_ms) / 1000 + grace + handover + conns + (mcp if has_mcp_commands else 0)
        check(tgps >= budget,
              f"and it covers the whole stop: {pre:g} s preStop + {int(drain_ms) / 1000:g} s drain delay + {grace} s grace "
              f"+ {handover:g} s hand-over + {conns:g} s connections"
              + (f" + {mcp:g} s MCP commands" if has_mcp_commands else "") + f" = {budget:g} s",
              f"terminationGracePeriodSeconds {tgps} is shorter than the service's stop at worst ({budget:g} s: "
              f"{pre:g} preStop + {int(drain_ms) / 1000:g} drain + {grace} grace + {handover:g} hand-over + {conns:g} connections"
              + (f" + {mcp:g} MCP" if has_mcp_commands else "") + ")")

    # --- probes
    known_routes = routes()
    for probe, want in (("startupProbe", "/healthz"), ("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        p = CONTAINER.get(probe)
        if p is None:
            (skip if probe == "startupProbe" else fail)(f"no {probe}")
            continue
        get = p.get("httpGet") or {}
        check(get.get("path") == want and get.get("port") == "http" and want in known_routes,
              f"{probe}: GET {want} on port http (a route of src/api/mod.rs)",
              f"{probe}: GET {get.get('path')} on port {get.get('port')}; want {want} on the named port http"
              + ("" if want in known_routes else f" ({want} is not a route of src/api/mod.rs)"))
    if CONTAINER.get("startupProbe"):
        sp = CONTAINER["startupProbe"]
        patience = sp.get("periodSeconds", 10) * sp.get("failureThreshold", 3)
        check(patience >= 120, f"startupProbe waits up to {patience} s for migrations before liveness applies",
              f"startupProbe gives up after {patience} s: a migration at start can take longer")

    # --- rollout
    strategy = DEP["spec"].get("strategy") or {}
    ru = strategy.get("rollingUpdate") or {}
    replicas = DEP["spec"].get("replicas", 1)
    check(replicas >= 2, f"{replicas} replicas", f"{replicas} replica(s): no pod serves while one restarts")
    check(strategy.get("type", "RollingUpdate") == "RollingUpdate" and str(ru.get("maxUnavailable")) == "0"
          and str(ru.get("maxSurge")) not in ("0", "None"),
          f"RollingUpdate maxUnavailable {ru.get('maxUnavailable')}, maxSurge {ru.get('maxSurge')}",
          f"strategy {strategy}: want RollingUpdate with maxUnavailable 0 and a surge")
    pod_labels = DEP["spec"]["template"]["metadata"].get("labels") or {}
    check(subset(DEP["spec"]["selector"].get("matchLabels") or {}, pod_labels),
          "the Deployment's selector matches its pod labels", "the Deployment's selector does not match its pod labels")
    spread = [c.get("topologyKey") for c in POD.get("topologySpreadConstraints") or []]
    anti = ((POD.get("affinity") or {}).get("podAntiAffinity") or {})
    anti_keys = [t.get("topologyKey") for t in anti.get("requiredDuringSchedulingIgnoredDuringExecution") or []] + \
                [t.get("podAffinityTerm", {}).get("topologyKey") for t in anti.get("preferredDuringSchedulingIgnoredDuringExecution") or []]
    check("kubernetes.io/hostname" in spread + anti_keys, "pods spread across nodes (kubernetes.io/hostname)",
          "no topologySpreadConstraints or podAntiAffinity on kubernetes.io/hostname")
    for c in POD.get("topologySpreadConstraints") or []:
        check(subset((c.get("labelSelector") or {}).get("matchLabels") or {}, pod_labels),
              f"spread on {c.get('topologyKey')} selects these pods", f"spread on {c.get('topologyKey')} selects other pods")

    # --- resources
    res = CONTAINER.get("resources") or {}
    req, lim = res.get("requests") or {}, res.get("limits") or {}
    check(req.get("cpu") and req.get("memory") and lim.get("memory"),
          f"resources: requests {req}, limits {lim}", f"resources incomplete: requests {req}, limits {lim}")

    # --- security
    psc, csc = POD.get("securityContext") or {}, CONTAINER.get("securityContext") or {}
    def sc(key):
        return csc.get(key, psc.get(key))
    uid = sc("runAsUser")
    check(sc("runAsNonRoot") is True and uid is not None and uid != 0,
          f"runAsNonRoot with runAsUser {uid}", f"runAsNonRoot {sc('runAsNonRoot')}, runAsUser {uid}: the image's "
          f"USER is a name ({DOCKER['user']}), so the kubelet needs a numeric runAsUser to verify non-root")
    check(DOCKER["uid"] is None or uid == DOCKER["uid"], f"runAsUser {uid} is the Dockerfile's useradd --uid",
          f"runAsUser {uid} is not the Dockerfile's user ({DOCKER['uid']})")
    check(csc.get("allowPrivilegeEscalation") is False, "allowPrivilegeEscalation false", "allowPrivilegeEscalation is not false")
    check("ALL" in ((csc.get("capabilities") or {}).get("drop") or []) and not (csc.get("capabilities") or {}).get("add"),
          "every capability dropped", "capabilities: want drop [ALL] and nothing added")
    seccomp = (sc("seccompProfile") or {}).get("type")
    check(seccomp in ("RuntimeDefault", "Localhost"), f"seccompProfile {seccomp}", f"seccompProfile {seccomp}: want RuntimeDefault")
    check(csc.get("readOnlyRootFilesystem") is True, "readOnlyRootFilesystem", "the root filesystem is writable")
    if csc.get("readOnlyRootFilesystem"):
        url = ENV_LITERAL.get("SWITCHYARD__DATABASE__URL")
        if url is None and "SWITCHYARD__DATABASE__URL" in SECRET_ENV:
            sname, skey, _ = SECRET_ENV["SWITCHYARD__DATABASE__URL"]
            shown = next((((d.get("stringData") or {}).get(skey)) for f, d in of_kind("Secret", example=True)
                          if d["metadata"]["name"] == sname), None)
            url = f"{str(shown).split(':', 1)[0]}:// in Secret {sname}, as secret.example.yaml shows it" if shown else f"Secret {sname}"
        elif url is None:
            url = lookup(TOML, ["database", "url"]) or lookup(DEFAULTS, ["database", "url"])
        check(not str(url).startswith("sqlite:"),
              f"the database is PostgreSQL ({url}): switchyard writes no file, the root filesystem can be read-only",
              f"database.url {url} is SQLite: it needs a writable volume (and one pod per file)")
    if POD.get("hostNetwork") or POD.get("hostPID") or POD.get("hostIPC") or csc.get("privileged"):
        fail("host namespaces or privileged")
    ns_docs = of_kind("Namespace")
    if ns_docs and (ns_docs[0][1]["metadata"].get("labels") or {}).get("pod-security.kubernetes.io/enforce") == "restricted":
        allowed = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
        kinds = {k for v in POD.get("volumes") or [] for k in v if k != "name"}
        check(kinds <= allowed, f"volume types {sorted(kinds)} allowed by Pod Security restricted",
              f"volume types {sorted(kinds - allowed)} are refused in a restricted namespace")

    # --- preStop needs its program in the image
    prestop = ((CONTAINER.get("lifecycle") or {}).get("preStop") or {})
    cmd = (prestop.get("exec") or {}).get("command") or []
    if cmd:
        shell_less = re.search(r"(distroless|scratch|chainguard/static)", DOCKER["base"] or "")
        debianish = re.match(r"(docker\.io/)?(library/)?(debian|ubuntu)[:@]", DOCKER["base"] or "")
        check(debianish and not shell_less and os.path.basename(cmd[0]) in ("sleep", "sh", "bash"),
              f"preStop {cmd} exists in the runtime image {DOCKER['base']} (coreutils)",
              f"preStop {cmd}: not known to exist in the runtime image {DOCKER['base']}")
    else:
        skip("no preStop hook")

    # --- Secrets: documented in secret.example.yaml, placeholders only
    examples = {d["metadata"]["name"]: d for f, d in of_kind("Secret", example=True)}
    for env_name, (sname, skey, optional) in SECRET_ENV.items():
        ex = examples.get(sname)
        data = dict((ex or {}).get("stringData") or {})
        data.update({k: "(base64)" for k in (ex or {}).get("data") or {}})
        check(skey in data, f"env {env_name} <- Secret {sname} key {skey}{' (optional)' if optional else ''}, in secret.example.yaml",
              f"env {env_name} reads Secret {sname} key {skey}, which secret.example.yaml does not show")
    for sname, ex in examples.items():
        for key, value in (ex.get("stringData") or {}).items():
            value = str(value)
            secretish = re.sub(r"^[a-z]+://[^:/@]*:([^@]*)@.*$", r"\1", value) if "://" in value else value
            check(re.search(r"replace|change|example|placeholder", secretish, re.I),
                  f"secret.example.yaml {sname}.{key} holds a placeholder",
                  f"secret.example.yaml {sname}.{key} looks like a real secret: write a placeholder")
    applied_secrets = [d["metadata"]["name"] for f, d in of_kind("Secret")]
    check(not applied_secrets, "no Secret among the applied manifests",
          f"Secrets {applied_secrets} in applied manifests: keep secrets out of git")

# ---------------------------------------------------------------------------------------------
# Service, PodDisruptionBudget, ServiceMonitor
# ---------------------------------------------------------------------------------------------

section("Service, PodDisruptionBudget, ServiceMonitor")
SVC = one("Service")
if SVC and DEP:
    pod_labels = DEP["spec"]["template"]["metadata"].get("labels") or {}
    container_ports = {p.get("name"): p for p in CONTAINER.get("ports") or []}
    check(subset(SVC["spec"].get("selector") or {}, pod_labels), "the Service selects the Deployment's pods",
          f"the Service's selector {SVC['spec'].get('selector')} does not match the pod labels {pod_labels}")
    sports = {p.get("name"): p for p in SVC["spec"].get("ports") or []}
    http = sports.get("http")
    if check(http, "the Service has a port named http", f"no Service port named http ({list(sports)})"):
        check(http.get("targetPort") == "http" and "http" in container_ports,
              f"Service port http ({http.get('port')}) targets the container port named http",
              f"Service port http targets {http.get('targetPort')!r}; want the container's named port http")
    check(SVC["spec"].get("sessionAffinity", "None") == "None",
          "no session affinity (streams reattach on any pod)", "sessionAffinity set: not needed, and it unbalances pods")
PDB = one("PodDisruptionBudget")
if PDB and DEP:
    pod_labels = DEP["spec"]["template"]["metadata"].get("labels") or {}
    check(subset((PDB["spec"].get("selector") or {}).get("matchLabels") or {}, pod_labels),
          "the PDB selects the Deployment's pods", "the PDB's selector does not match the pod labels")
    spec = PDB["spec"]
    replicas = DEP["spec"].get("replicas", 1)
    if "minAvailable" in spec:
        check(isinstance(spec["minAvailable"], int) and spec["minAvailable"] < replicas,
              f"minAvailable {spec['minAvailable']} < {replicas} replicas: a drain can proceed",
              f"minAvailable {spec['minAvailable']} with {replicas} replicas blocks every drain")
    else:
        check(str(spec.get("maxUnavailable")) not in ("0", "0%", "None"), f"maxUnavailable {spec.get('maxUnavailable')}",
              f"maxUnavailable {spec.get('maxUnavailable')} blocks every drain")
SMS = of_kind("ServiceMonitor")
if not SMS:
    skip("no ServiceMonitor")
for _, sm in SMS:
    if not SVC:
        break
    check(subset((sm["spec"].get("selector") or {}).get("matchLabels") or {}, SVC["metadata"].get("labels") or {}),
          "the ServiceMonitor selects the Service's labels",
          f"the ServiceMonitor's selector {sm['spec'].get('selector')} does not match the Service's labels")
    sports = {p.get("name") for p in SVC["spec"].get("ports") or []}
    for ep in sm["spec"].get("endpoints") or []:
        path = ep.get("path", "/metrics")
        check(ep.get("port") in sports, f"scrapes the Service's port {ep.get('port')}",
              f"endpoint port {ep.get('port')!r}: the Service's ports are {sorted(sports)}")
        check(path in routes(), f"scrapes {path}, a route of src/api/mod.rs",
              f"endpoint path {path!r} is not a route of src/api/mod.rs")
        if ep.get("interval") and ep.get("scrapeTimeout"):
            check(duration_seconds(ep["scrapeTimeout"]) <= duration_seconds(ep["interval"]),
                  f"scrapeTimeout {ep['scrapeTimeout']} <= interval {ep['interval']}",
                  f"scrapeTimeout {ep['scrapeTimeout']} > interval {ep['interval']}: the operator rejects it")
        if ep.get("bearerTokenSecret") or ep.get("authorization"):
            note("credentials configured: /metrics needs none (it serves without a key, like /healthz)")

# ---------------------------------------------------------------------------------------------
# kustomize build (optional tool)
# ---------------------------------------------------------------------------------------------

section("kustomize build")
builder = None
if shutil.which("kustomize"):
    builder = ["kustomize", "build", K8S_DIR]
elif shutil.which("kubectl"):
    builder = ["kubectl", "kustomize", K8S_DIR]
if builder is None:
    skip("neither kustomize nor kubectl on PATH: the build is not run")
elif KUSTOMIZATION is not None:
    try:
        p = subprocess.run(builder, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        p = None
    if p is None or p.returncode != 0:
        fail(f"`{' '.join(builder[:2])}` failed: {(p.stderr.strip() if p else 'timed out after 120 s')}")
    else:
        built = [d for d in yaml.safe_load_all(p.stdout) if d]
        ok(f"`{' '.join(builder[:2])}` renders {len(built)} resources")
        for doc in built:
            validate_doc(doc, "built")
        ns = KUSTOMIZATION.get("namespace")
        if ns:
            outside = [describe(d) for d in built if d.get("kind") != "Namespace" and (d.get("metadata") or {}).get("namespace") != ns]
            check(not outside, f"every resource in namespace {ns}", f"not in namespace {ns}: {outside}")
        unlabelled = [describe(d) for d in built if ((d.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/name") != "switchyard"]
        check(not unlabelled, "every resource labelled app.kubernetes.io/name=switchyard", f"unlabelled: {unlabelled}")
        for d in built:
            if d.get("kind") == "Deployment":
                images = [c["image"] for c in d["spec"]["template"]["spec"]["containers"]]
                entry = (KUSTOMIZATION.get("images") or [{}])[0]
                want = f"{entry.get('newName', entry.get('name'))}:{entry.get('newTag')}" if entry.get("newTag") else entry.get("newName")
                check(want in images, f"the Deployment runs {want}", f"the Deployment runs {images}, not {want}")

# ---------------------------------------------------------------------------------------------
# The service's own view: check-config, then the probes' paths answered by a real process
# ---------------------------------------------------------------------------------------------

section("switchyard check-config and serve, with the pod's configuration")
binary = os.environ.get("SWITCHYARD_BIN") or os.path.join(ROOT, "target/release/switchyard")
if not os.access(binary, os.X_OK):
    skip("no switchyard binary (build it, or SWITCHYARD_BIN=/path): check-config and serve not run")
elif not (DEP and TOML_TEXT is not None):
    skip("no Deployment with a readable ConfigMap: check-config not run")
else:
    tmp = tempfile.mkdtemp(prefix="check-kubernetes.")
    try:
        config_file = os.path.join(tmp, "switchyard.toml")
        with open(config_file, "w", encoding="utf-8") as f:
            f.write(TOML_TEXT)
        examples = {d["metadata"]["name"]: d for fl, d in of_kind("Secret", example=True)}
        pod_env = {"PATH": os.environ.get("PATH", ""), "HOME": tmp}
        pod_env.update(DOCKER["env"])
        pod_env.update(ENV_LITERAL)
        for env_name, (sname, skey, optional) in SECRET_ENV.items():
            value = ((examples.get(sname) or {}).get("stringData") or {}).get(skey)
            if value is None and env_name == "SWITCHYARD__DATABASE__URL":
                value = "postgres://switchyard:REPLACE_ME@postgres:5432/switchyard"
            if value is not None:
                pod_env[env_name] = str(value)
        note(f"environment: {', '.join(sorted(k for k in pod_env if k not in ('PATH', 'HOME')))} "
             f"(Secrets' values from secret.example.yaml)")
        p = subprocess.run([binary, "--config", config_file, "check-config"], env=pod_env,
                           capture_output=True, text=True, timeout=60)
        check(p.returncode == 0, "`switchyard check-config` accepts the ConfigMap's file and the pod's environment",
              f"check-config exit {p.returncode}: {p.stderr.strip()}")
        for line in p.stderr.strip().splitlines():
            note(line)
        # Without the optional Secret keys (switchyard-upstream not created): the default
        # provider is OpenAI unless the file names another, and then the start must stop and say
        # which variable is missing.
        optional_names = [n for n, (_, _, opt) in SECRET_ENV.items() if opt]
        if "OPENAI_API_KEY" in optional_names and not (TOML.get("llm") or {}).get("base_url") \
                and not (TOML.get("llm") or {}).get("api_key") and not (TOML.get("llm") or {}).get("api_key_env"):
            bare = {k: v for k, v in pod_env.items() if k not in optional_names}
            p = subprocess.run([binary, "--config", config_file, "check-config"], env=bare,
                               capture_output=True, text=True, timeout=60)
            check(p.returncode == 2 and "OPENAI_API_KEY" in p.stderr,
                  "without the optional upstream Secret, check-config refuses and names OPENAI_API_KEY",
                  f"without the optional upstream Secret: exit {p.returncode}, said {p.stderr.strip() or p.stdout.strip()}")

        if TOML.get("mcp_servers"):
            skip("the ConfigMap has [mcp_servers]: serve is not started here (it would start their commands)")
        else:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                free = s.getsockname()[1]
            run_env = dict(pod_env)
            run_env.update({
                # Loopback, a database of its own, and no request to any upstream.
                "SWITCHYARD__SERVER__HOST": "127.0.0.1",
                "SWITCHYARD__SERVER__PORT": str(free),
                "SWITCHYARD__DATABASE__URL": f"sqlite://{tmp}/switchyard.db",
                "SWITCHYARD__LLM__BASE_URL": "http://127.0.0.1:9/v1",
                "SWITCHYARD__LLM__PROBE_AT_START": "false",
            })
            base = f"http://127.0.0.1:{free}"

            def get(path, timeout=3):
                try:
                    with urllib.request.urlopen(base + path, timeout=timeout) as r:
                        return r.status, r.headers.get("content-type", ""), r.read().decode("utf-8", "replace")
                except urllib.error.HTTPError as e:
                    return e.code, e.headers.get("content-type", ""), e.read().decode("utf-8", "replace")
                except (urllib.error.URLError, OSError):
                    return None, "", ""

            log = open(os.path.join(tmp, "serve.log"), "w")
            proc = subprocess.Popen([binary, "--config", config_file, "serve"], env=run_env,
                                    stdout=log, stderr=subprocess.STDOUT)
            try:
                deadline = time.time() + 30
                while time.time() < deadline and get("/healthz", 1)[0] != 200 and proc.poll() is None:
                    time.sleep(0.1)
                log.flush()
                if not check(get("/healthz")[0] == 200, f"serve answers on {base} (SQLite in a temporary folder)",
                             (f"serve exited with {proc.poll()}: " if proc.poll() is not None else "serve did not answer within 30 s: ")
                             + read(log.name)[-800:].strip()):
                    raise RuntimeError("not serving")
                for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                    path = ((CONTAINER.get(probe) or {}).get("httpGet") or {}).get("path")
                    if path:
                        status = get(path)[0]
                        check(status == 200, f"{probe} GET {path}: 200", f"{probe} GET {path}: {status}")
                for _, sm in SMS:
                    for ep in sm["spec"].get("endpoints") or []:
                        path = ep.get("path", "/metrics")
                        status, ctype, body = get(path)
                        check(status == 200 and ctype.startswith("text/plain") and "switchyard_" in body,
                              f"GET {path} without a key: 200, Prometheus text (no bearer token needed)",
                              f"GET {path} without a key: {status} {ctype}")
                if (TOML.get("auth") or {}).get("mode", "keys") == "keys":
                    status = get("/v1/models")[0]
                    check(status == 401, "GET /v1/models without a key: 401 (the API needs keys, /metrics does not)",
                          f"GET /v1/models without a key: {status}")
                started = time.time()
                proc.send_signal(signal.SIGTERM)
                drain_s = int(effective("server", "drain_delay_ms")[0]) / 1000
                if drain_s >= 0.3:
                    status = None
                    while time.time() - started < drain_s * 0.8:
                        status = get("/readyz", 1)[0]
                        if status == 503:
                            break
                        time.sleep(0.05)
                    check(status == 503, "after SIGTERM, /readyz answers 503 while requests are still served",
                          f"after SIGTERM, /readyz answered {status}")
                try:
                    code = proc.wait(timeout=POD.get("terminationGracePeriodSeconds", 30))
                    took = time.time() - started
                    check(code == 0, f"stops on SIGTERM in {took:.1f} s (no runs), exit 0",
                          f"exit {code} after SIGTERM: {read(log.name)[-800:]}")
                except subprocess.TimeoutExpired:
                    fail("did not stop within terminationGracePeriodSeconds after SIGTERM")
            except RuntimeError:
                pass
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                log.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

finish("check-kubernetes")
PY
# One line, so that bash reads nothing more of this file once the checks have run.
status=0; "$venv/bin/python" "$script" "$@" || status=$?; exit "$status"
