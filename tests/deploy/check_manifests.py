#!/usr/bin/env python3
"""Checks deploy/ (the Dockerfile and the Kubernetes manifests) against the ds-serve it deploys.

    check_manifests.py --ds-serve PATH/TO/ds-serve --deploy-dir deploy [--self-test]

The routes come from `ds-serve --list-routes`; the options (names, value types, choices and
defaults: a port not given is ds-serve's default) from `ds-serve --help`. Checks:
every YAML document has a kind/apiVersion this deployment expects; the server container's
command line (the image's ENTRYPOINT/CMD with the container's command/args, as Kubernetes
combines them) uses options ds-serve has, none twice, --host 0.0.0.0; its containerPorts are
the ports ds-serve listens on and the ports the Dockerfile EXPOSEs; every httpGet probe path is
a GET route of --list-routes (compared literally: `{name}` matches only `{name}`), readiness on
/v2/health/ready, liveness and startup on /v2/health/live, on the REST port, by a declared
port; file options lie on mounted volumes; the grace period outlasts preStop plus the drain;
the Services select the pods and their targetPorts exist on the container, gRPC ports with
appProtocol grpc; the HPA scales the Deployment on CPU and on a Pods metric that
prometheus-adapter-rules.yaml derives from dsinfer_queue_requests; the PDB selects the pods;
kustomization.yaml lists every manifest; the runtime stage's `apt-get install` names the Debian
package of every shared library ds-serve links directly (`readelf -d`, then `dpkg -S` on this
machine; skipped, saying so, where either tool is missing), apart from the base image's libc6,
libgcc-s1, libstdc++6 and zlib1g. Exit status 1 with one line per failure.

--self-test then checks mutated copies of deploy/ (a wrong probe path, an undeclared probe
port, ...) and fails unless each mutation is caught.
"""

import argparse
import json
import posixpath
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    import yaml
except ImportError:  # pragma: no cover
    sys.exit("check_manifests: PyYAML is missing (Debian package python3-yaml)")

EXPECTED_API_VERSIONS = {
    "Deployment": {"apps/v1"},
    "Service": {"v1"},
    "HorizontalPodAutoscaler": {"autoscaling/v2"},
    "PodDisruptionBudget": {"policy/v1"},
    "PersistentVolumeClaim": {"v1"},
    "Kustomization": {"kustomize.config.k8s.io/v1beta1"},
}
ADAPTER_VALUES_FILE = "prometheus-adapter-rules.yaml"  # Helm values, not a Kubernetes object
KUSTOMIZATION_FILE = "kustomization.yaml"
QUEUE_GAUGE = "dsinfer_queue_requests"
READY_PATH = "/v2/health/ready"
LIVE_PATH = "/v2/health/live"
# ds-serve's listening ports: option, fallback default (when --help shows none), the
# containerPort name that must carry it.
PORT_OPTIONS = (("--http-port", 8000, "http"), ("--grpc-port", 8001, "grpc"),
                ("--metrics-port", 8002, "metrics"))
FILE_OPTIONS = ("--model-repository", "--auth-token-file", "--tls-cert", "--tls-key")
DEFAULT_DRAIN_TIMEOUT_S = 30
DEFAULT_GRACE_PERIOD_S = 30  # Kubernetes' default terminationGracePeriodSeconds
SERVER_NAME = "ds-serve"


class Checker:
    def __init__(self):
        self.errors = []
        self.checked = 0

    def expect(self, ok, where, message):
        self.checked += 1
        if not ok:
            self.errors.append(f"{where}: {message}")
        return ok


# ---- ds-serve itself ----------------------------------------------------------------------

def query_server(binary):
    """(routes as a set of (METHOD, PATH), its options per parse_help) of the ds-serve binary."""
    def run(arg):
        try:
            proc = subprocess.run([binary, arg], capture_output=True, text=True, timeout=60)
        except OSError as e:
            sys.exit(f"check_manifests: cannot run {binary} {arg}: {e}")
        if proc.returncode != 0:
            sys.exit(f"check_manifests: `{binary} {arg}` exited with {proc.returncode}:\n"
                     f"{proc.stderr}")
        return proc.stdout

    routes = set()
    for n, line in enumerate(run("--list-routes").splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2 or not parts[0].isupper() or not parts[1].startswith("/"):
            sys.exit(f"check_manifests: --list-routes line {n} is not `METHOD /path`: {line!r}")
        routes.add((parts[0], parts[1]))
    if not routes:
        sys.exit("check_manifests: `ds-serve --list-routes` printed no route")
    return routes, parse_help(run("--help")), linked_packages(binary)


# Packages every debian:bookworm-slim image holds already.
BASE_PACKAGES = {"libc6", "libgcc-s1", "libstdc++6", "zlib1g"}
SANITIZER_RUNTIMES = ("libasan.", "libubsan.", "libtsan.", "liblsan.")


def linked_packages(binary):
    """{soname: Debian package} of the shared libraries the binary names itself (DT_NEEDED),
    as this machine's dpkg knows them; None where readelf, ldd or dpkg is missing."""
    def output(cmd):
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        except OSError:
            return None
        return proc.stdout if proc.returncode == 0 else None

    dynamic, resolved = output(["readelf", "-d", binary]), output(["ldd", binary])
    if dynamic is None or resolved is None or output(["dpkg", "--version"]) is None:
        return None
    paths = {}
    for line in resolved.splitlines():  # `  libfoo.so.1 => /lib/.../libfoo.so.1 (0x...)`
        parts = line.split()
        if len(parts) >= 3 and parts[1] == "=>":
            paths[parts[0]] = parts[2]
    packages = {}
    for soname in re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic):
        path = paths.get(soname)
        if path is None or soname.startswith(SANITIZER_RUNTIMES):
            continue  # the loader itself; a sanitizer build's runtimes (no image has those)
        owner = None
        for candidate in (path, str(Path(path).resolve())):
            found = output(["dpkg", "-S", candidate])
            if found:
                owner = found.split(":", 1)[0].strip()
                break
        packages[soname] = owner
    return packages


# ---- the Dockerfile -----------------------------------------------------------------------

class Image:
    """The final stage of the Dockerfile: what Kubernetes starts."""

    def __init__(self, path, checker):
        self.where = path.name
        self.entrypoint, self.cmd, self.exposed, self.user = [], [], set(), None
        self.packages = set()  # what the final stage's RUN lines apt-get install
        instructions = []
        pending = ""
        for raw in path.read_text().splitlines():
            line = raw.strip()
            if line.startswith("#") or (pending and not line):
                continue  # comments, and blank lines inside a continuation, are dropped
            if not line:
                continue
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            instructions.append(pending + line)
            pending = ""
        if pending:
            instructions.append(pending)
        parsed = [(i.split(None, 1)[0].upper(), (i.split(None, 1) + [""])[1].strip())
                  for i in instructions]
        froms = [n for n, (keyword, _) in enumerate(parsed) if keyword == "FROM"]
        if not checker.expect(bool(froms), self.where, "no FROM instruction"):
            return
        for keyword, rest in parsed[froms[-1]:]:
            if keyword in ("ENTRYPOINT", "CMD"):
                value = self._exec_form(keyword, rest, checker)
                if keyword == "ENTRYPOINT":
                    self.entrypoint, self.cmd = value, []  # a new ENTRYPOINT resets CMD
                else:
                    self.cmd = value
            elif keyword == "EXPOSE":
                for token in rest.split():
                    port = token.split("/")[0]
                    if checker.expect(port.isdigit(), self.where, f"EXPOSE {token}: not a port"):
                        self.exposed.add(int(port))
            elif keyword == "USER":
                self.user = rest
            elif keyword == "RUN":
                for command in rest.split("&&"):
                    words = command.split()
                    if words[:2] == ["apt-get", "install"]:
                        self.packages.update(w for w in words[2:] if not w.startswith("-"))
        checker.expect(bool(self.entrypoint), self.where, "the final stage has no ENTRYPOINT")
        uid = (self.user or "0").split(":")[0]
        checker.expect(uid.isdigit() and int(uid) != 0, self.where,
                       f"USER {self.user!r}: must be a numeric, non-root uid (runAsNonRoot "
                       "can verify only a number)")

    def _exec_form(self, keyword, rest, checker):
        # The shell form runs /bin/sh -c as PID 1, which does not pass SIGTERM on: no drain.
        try:
            value = json.loads(rest)
        except ValueError:
            value = None
        if not checker.expect(isinstance(value, list) and all(isinstance(v, str) for v in value),
                              self.where, f"{keyword} must be in exec (JSON array) form so that "
                              "ds-serve gets SIGTERM itself, got: " + rest):
            return []
        return value


# ---- the command line ---------------------------------------------------------------------

def effective_argv(container, image):
    """argv as Kubernetes builds it from the container's command/args and the image."""
    command, args = container.get("command"), container.get("args")
    if command is not None:
        return [str(a) for a in command] + [str(a) for a in (args or [])]
    return list(image.entrypoint) + [str(a) for a in (args if args is not None else image.cmd)]


def parse_help(help_text):
    """{option: (type, default, takes several values, choices)} from CLI11's `--help`, whose
    lines read `  --http-port INT=8000   REST port`, `  --load-model TEXT ...   ...` or
    `  --model-control-mode TEXT:{none,poll,explicit}=none` (the description starts after two
    spaces). A flag has no type."""
    options = {}
    for m in re.finditer(r"^[ ]*(?:-\w,)?(--[\w-]+)(?: ((?:[^ \n]| (?! ))*))?", help_text, re.M):
        spec = m.group(2) or ""
        kind = re.match(r"[A-Z]+", spec)
        choices = re.search(r"\{([^}]*)\}", spec)
        options[m.group(1)] = (kind.group(0) if kind else None,
                               spec.rsplit("=", 1)[1] if "=" in spec else None,
                               spec.endswith("..."),
                               set(choices.group(1).split(",")) if choices else None)
    if "--model-repository" not in options:
        sys.exit("check_manifests: `ds-serve --help` lists no --model-repository: not ds-serve?")
    return options


def parse_options(argv, cli, where, checker):
    """{name: [values]} of argv[1:]; `--name value`, `--name=value`, flags, multi-value."""
    options = {}
    i = 1
    while i < len(argv):
        token = argv[i]
        if not token.startswith("--"):
            checker.expect(False, where, f"unexpected positional argument {token!r}")
            i += 1
            continue
        name, _, inline = token.partition("=")
        kind, _, multi, _ = cli.get(name, ("TEXT", None, False, None))
        i += 1
        if inline or "=" in token:
            values = [inline]
        elif kind is None:  # a flag
            values = [None]
        elif multi:
            values = []
            while i < len(argv) and not argv[i].startswith("-"):
                values.append(argv[i])
                i += 1
        elif i < len(argv):
            values = [argv[i]]
            i += 1
        else:
            values = []
        checker.expect(bool(values), where, f"{name} has no value")
        options.setdefault(name, []).append(values)
    return options


def value_ok(kind, choices, value):
    if "$(" in value:  # expanded by the kubelet from the container's env
        return True
    if choices is not None:
        return value in choices
    try:
        if kind == "INT":
            int(value)
        elif kind == "UINT":
            return int(value) >= 0
        elif kind == "FLOAT":
            float(value)
    except ValueError:
        return False
    return True


def check_command_line(argv, where, cli, checker):
    """The options of ds-serve's command line (name -> last value), checked against --help."""
    checker.expect(bool(argv) and posixpath.basename(argv[0]) == SERVER_NAME, where,
                   f"the container does not run {SERVER_NAME}: {argv}")
    options = parse_options(argv, cli, where, checker)
    for name, occurrences in options.items():
        if not checker.expect(name in cli, where, f"{name} is not an option of `ds-serve --help`"):
            continue
        kind, _, multi, choices = cli[name]
        checker.expect(multi or len(occurrences) == 1, where,
                       f"{name} is given {len(occurrences)} times (ds-serve rejects a repeated "
                       "option)")
        checker.expect(kind is not None or name not in ("--list-routes", "--help", "--version"),
                       where, f"{name} makes ds-serve exit instead of serving")
        for value in (v for values in occurrences for v in values if v is not None):
            checker.expect(value_ok(kind, choices, value), where,
                           f"{name} {value!r}: not a valid {kind}"
                           + (f" (one of {sorted(choices)})" if choices else ""))
    single = {name: occurrences[-1][-1] for name, occurrences in options.items()
              if occurrences[-1]}
    checker.expect(single.get("--host") == "0.0.0.0", where,
                   f"--host is {single.get('--host', cli.get('--host', (0, '?'))[1])}: a "
                   "container must listen on --host 0.0.0.0")
    checker.expect("--model-repository" in single, where, "no --model-repository")
    checker.expect(("--tls-cert" in single) == ("--tls-key" in single), where,
                   "--tls-cert and --tls-key go together")
    return single


def option_value(options, cli, name, fallback):
    """The option's value on the command line, else ds-serve's default (its --help), else ours."""
    if name in options:
        return str(options[name])
    default = cli.get(name, (None, None, False, None))[1]
    return str(default if default is not None else fallback)


def listening_ports(options, cli, where, checker):
    """{'http': 8000, ...}: the ports ds-serve listens on, by containerPort name."""
    ports = {}
    for option, fallback, port_name in PORT_OPTIONS:
        value = option_value(options, cli, option, fallback)
        if checker.expect(value.isdigit() and 0 < int(value) < 65536, where,
                          f"{option} is {value}: a container needs a fixed port (0 is "
                          "ephemeral, -1 is off); set it in the ENTRYPOINT or args"):
            ports[port_name] = int(value)
    return ports


# ---- Kubernetes objects -------------------------------------------------------------------

def load_manifests(kube_dir, checker):
    """{file name: [documents]} for every *.yaml / *.yml file."""
    files = {}
    for path in sorted(list(kube_dir.glob("*.yaml")) + list(kube_dir.glob("*.yml"))):
        try:
            files[path.name] = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
            checker.expect(bool(files[path.name]), path.name, "no YAML document")
        except yaml.YAMLError as e:
            checker.expect(False, path.name, f"not valid YAML: {e}")
    checker.expect(bool(files), str(kube_dir), "no YAML file")
    return files


def name_of(doc):
    return (doc.get("metadata") or {}).get("name", "?")


def labels_match(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def resolve_port(port, container_ports):
    """The containerPort entry a probe's or Service's port (name or number) designates."""
    for p in container_ports:
        if (isinstance(port, int) and p.get("containerPort") == port) or \
                (isinstance(port, str) and p.get("name") == port):
            return p
    return None


def server_containers(pod_spec):
    return [c for c in pod_spec.get("containers", [])
            if c.get("name") == SERVER_NAME or
            re.search(r"(^|/)" + SERVER_NAME + r"([:@]|$)", str(c.get("image", "")))]


def grace_needed(container, drain_s):
    """preStop's seconds (a sleep) + the drain timeout."""
    pre_stop = container.get("lifecycle", {}).get("preStop", {})
    sleep_s = 0
    if "sleep" in pre_stop:
        sleep_s = int(pre_stop["sleep"].get("seconds", 0))
    elif "exec" in pre_stop:
        cmd = [str(c) for c in pre_stop["exec"].get("command", [])]
        if len(cmd) == 2 and posixpath.basename(cmd[0]) == "sleep" and cmd[1].isdigit():
            sleep_s = int(cmd[1])
    return sleep_s + drain_s


def check_probes(container, where, routes, ports, tls, checker):
    container_ports = container.get("ports", [])
    get_routes = {path for method, path in routes if method == "GET"}
    wanted = {"readinessProbe": READY_PATH, "livenessProbe": LIVE_PATH, "startupProbe": LIVE_PATH}
    for kind, wanted_path in wanted.items():
        probe = container.get(kind)
        if not checker.expect(isinstance(probe, dict), where, f"no {kind}"):
            continue
        w = f"{where} {kind}"
        checker.expect("grpc" not in probe, w, "ds-serve does not implement gRPC health checking; "
                       "probe the REST port (httpGet) or use tcpSocket")
        if "httpGet" in probe:
            get = probe["httpGet"]
            path = get.get("path", "/")
            checker.expect(path in get_routes, w,
                           f"httpGet.path {path} is not a GET route of `ds-serve --list-routes` "
                           "(placeholders are matched literally)")
            checker.expect(path == wanted_path, w, f"httpGet.path {path}: should be {wanted_path}")
            target = resolve_port(get.get("port"), container_ports)
            if checker.expect(target is not None, w,
                              f"httpGet.port {get.get('port')!r}: no containerPort by that "
                              "name or number"):
                checker.expect(target.get("containerPort") == ports.get("http"), w,
                               f"httpGet.port {get.get('port')!r} is not the REST port "
                               f"({ports.get('http')}), where the health routes are served")
            scheme = get.get("scheme", "HTTP")
            checker.expect(scheme == ("HTTPS" if tls else "HTTP"), w,
                           f"scheme {scheme} but ds-serve runs {'with' if tls else 'without'} TLS")
        elif "tcpSocket" in probe:
            port = probe["tcpSocket"].get("port")
            checker.expect(resolve_port(port, container_ports) is not None, w,
                           f"tcpSocket.port {port!r}: no containerPort by that name or number")
            checker.expect(kind != "readinessProbe", w, "readiness must ask /v2/health/ready "
                           "(a draining server still accepts TCP connections)")
        else:
            checker.expect("exec" in probe, w, "no httpGet, tcpSocket or exec handler")


def check_volumes(container, pod_spec, options, where, pvc_names, checker):
    volumes = {v.get("name"): v for v in pod_spec.get("volumes", [])}
    mounts = container.get("volumeMounts", [])
    for mount in mounts:
        checker.expect(mount.get("name") in volumes, where,
                       f"volumeMount {mount.get('name')!r} names no volume of the pod")
    for name in FILE_OPTIONS:
        if name not in options:
            continue
        path = posixpath.normpath(str(options[name]))
        covering = [m for m in mounts if posixpath.commonpath(
            [path, posixpath.normpath(m.get("mountPath", "/-"))]) == posixpath.normpath(
            m.get("mountPath", "/-"))]
        checker.expect(bool(covering), where, f"{name} {path} is on no mounted volume")
    for v in volumes.values():
        claim = v.get("persistentVolumeClaim", {}).get("claimName")
        if claim is not None:
            checker.expect(claim in pvc_names, where,
                           f"volume {v.get('name')!r}: PersistentVolumeClaim {claim!r} is not "
                           "defined in deploy/kubernetes/")


def adapter_metrics(kube_dir, checker):
    """{custom metric name: seriesQuery} that prometheus-adapter-rules.yaml exposes."""
    path = kube_dir / ADAPTER_VALUES_FILE
    if not checker.expect(path.exists(), ADAPTER_VALUES_FILE, "missing"):
        return {}
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    rules = docs[0].get("rules", {}).get("custom") if len(docs) == 1 and isinstance(
        docs[0], dict) else None
    if not checker.expect(isinstance(rules, list) and rules, ADAPTER_VALUES_FILE,
                          "expected Helm values with a non-empty rules.custom list"):
        return {}
    exposed = {}
    for n, rule in enumerate(rules):
        w = f"{ADAPTER_VALUES_FILE} rules.custom[{n}]"
        if not checker.expect(isinstance(rule, dict), w, "not a mapping"):
            continue
        overrides = rule.get("resources", {}).get("overrides", {})
        checker.expect(overrides.get("pod", {}).get("resource") == "pod" and
                       overrides.get("namespace", {}).get("resource") == "namespace", w,
                       "resources.overrides must map the labels namespace and pod (a Pods "
                       "metric is per pod)")
        checker.expect("<<.Series>>" in str(rule.get("metricsQuery", "")) and
                       "<<.GroupBy>>" in str(rule.get("metricsQuery", "")), w,
                       "metricsQuery must use <<.Series>> and group by <<.GroupBy>>")
        name = rule.get("name", {}).get("as")
        if checker.expect(bool(name), w, "name.as missing"):
            exposed[name] = str(rule.get("seriesQuery", ""))
    return exposed


def check_manifests(deploy_dir, routes, cli, libs):
    checker = Checker()
    kube_dir = deploy_dir / "kubernetes"
    dockerfile = deploy_dir / "Dockerfile"
    if not checker.expect(dockerfile.exists(), str(deploy_dir), "no Dockerfile"):
        return checker
    image = Image(dockerfile, checker)
    files = load_manifests(kube_dir, checker)
    for soname, package in sorted((libs or {}).items()):
        if checker.expect(package is not None, "Dockerfile",
                          f"no Debian package owns {soname} here, which ds-serve links"):
            checker.expect(package in BASE_PACKAGES or package in image.packages, "Dockerfile",
                           f"the runtime stage installs no {package} (ds-serve links {soname})")

    by_kind = {}
    for name, docs in files.items():
        if name == ADAPTER_VALUES_FILE:
            continue
        for n, doc in enumerate(docs):
            w = f"{name} document {n + 1}"
            if not checker.expect(isinstance(doc, dict), w, "not a mapping"):
                continue
            kind, api = doc.get("kind"), doc.get("apiVersion")
            if not checker.expect(kind in EXPECTED_API_VERSIONS, w, f"unexpected kind {kind!r}"):
                continue
            checker.expect(api in EXPECTED_API_VERSIONS[kind], w,
                           f"{kind} apiVersion {api!r}, expected "
                           f"{' or '.join(sorted(EXPECTED_API_VERSIONS[kind]))}")
            if kind != "Kustomization":
                checker.expect(name_of(doc) != "?", w, "no metadata.name")
            by_kind.setdefault(kind, []).append((name, doc))

    # The image alone: --host 0.0.0.0 and the exposed ports, whatever the manifests add.
    image_options = check_command_line(image.entrypoint + image.cmd, "Dockerfile ENTRYPOINT+CMD",
                                       cli, checker)
    checker.expect(image.exposed == set(listening_ports(image_options, cli, "Dockerfile", checker)
                                        .values()), "Dockerfile",
                   f"EXPOSE {sorted(image.exposed)} is not the ports ds-serve listens on")

    pvc_names = {name_of(d) for _, d in by_kind.get("PersistentVolumeClaim", [])}
    deployments = {}  # name -> (pod labels, server container, listening ports)
    for fname, dep in by_kind.get("Deployment", []):
        dname = name_of(dep)
        w = f"{fname} Deployment/{dname}"
        template = dep.get("spec", {}).get("template", {})
        labels = template.get("metadata", {}).get("labels", {})
        pod_spec = template.get("spec", {})
        checker.expect(labels_match(dep.get("spec", {}).get("selector", {}).get("matchLabels"),
                                    labels), w, "spec.selector.matchLabels do not select the "
                       "template's labels")
        servers = server_containers(pod_spec)
        if not checker.expect(len(servers) == 1, w, f"expected one {SERVER_NAME} container, "
                              f"found {len(servers)}"):
            continue
        container = servers[0]
        cw = f"{w} container {container.get('name')}"
        options = check_command_line(effective_argv(container, image), cw, cli, checker)
        ports = listening_ports(options, cli, cw, checker)
        declared = container.get("ports", [])
        names = [p.get("name") for p in declared if p.get("name")]
        checker.expect(len(names) == len(set(names)), cw, "containerPort names repeat")
        for port_name, number in ports.items():
            p = resolve_port(port_name, declared)
            checker.expect(p is not None and p.get("containerPort") == number, cw,
                           f"containerPort named {port_name} must be {number} (where ds-serve "
                           f"listens), got {p.get('containerPort') if p else 'none'}")
        checker.expect({p.get("containerPort") for p in declared} == image.exposed, cw,
                       f"containerPorts {sorted(p.get('containerPort') for p in declared)} differ "
                       f"from the Dockerfile's EXPOSE {sorted(image.exposed)}")
        check_probes(container, cw, routes, ports, "--tls-cert" in options, checker)
        check_volumes(container, pod_spec, options, cw, pvc_names, checker)

        grace = pod_spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_PERIOD_S)
        drain = option_value(options, cli, "--drain-timeout-s", DEFAULT_DRAIN_TIMEOUT_S)
        needed = grace_needed(container, int(drain) if drain.isdigit() else 0)
        checker.expect(grace > needed, w, f"terminationGracePeriodSeconds {grace} must exceed "
                       f"preStop + --drain-timeout-s = {needed} s, or in-flight requests are "
                       "killed")
        security = {**pod_spec.get("securityContext", {}), **container.get("securityContext", {})}
        checker.expect(security.get("runAsNonRoot") is True and security.get("runAsUser") != 0,
                       cw, "must run as non-root (runAsNonRoot: true)")
        requests = container.get("resources", {}).get("requests", {})
        checker.expect("cpu" in requests and "memory" in requests, cw,
                       "resources.requests needs cpu (the HPA's utilization is relative to it) "
                       "and memory")
        checker.expect("memory" in container.get("resources", {}).get("limits", {}), cw,
                       "resources.limits.memory missing")
        scrape_port = template.get("metadata", {}).get("annotations", {}).get(
            "prometheus.io/port")
        if scrape_port is not None:
            checker.expect(str(scrape_port) == str(ports.get("metrics")), w,
                           f"prometheus.io/port {scrape_port} is not the metrics port")
        deployments[dname] = (labels, container, ports)

    checker.expect(bool(deployments), str(kube_dir), "no usable Deployment")

    def selected_deployment(selector):
        return next((d for d, (labels, _, _) in deployments.items()
                     if labels_match(selector, labels)), None)

    covered_by_clusterip = set()
    for fname, svc in by_kind.get("Service", []):
        w = f"{fname} Service/{name_of(svc)}"
        spec = svc.get("spec", {})
        dname = selected_deployment(spec.get("selector"))
        if not checker.expect(dname is not None, w, "spec.selector selects no Deployment's pods"):
            continue
        _, container, ports = deployments[dname]
        port_names = [p.get("name") for p in spec.get("ports", [])]
        checker.expect(len(port_names) == len(set(port_names)) and all(port_names), w,
                       "every port needs a distinct name")
        for p in spec.get("ports", []):
            target = p.get("targetPort", p.get("port"))
            resolved = resolve_port(target, container.get("ports", []))
            if not checker.expect(resolved is not None, w,
                                  f"port {p.get('name')}: targetPort {target!r} is no "
                                  "containerPort of the ds-serve container"):
                continue
            if resolved.get("containerPort") == ports.get("grpc"):
                checker.expect(p.get("appProtocol") == "grpc", w,
                               f"port {p.get('name')} carries gRPC: appProtocol must be grpc")
            if spec.get("clusterIP") != "None":
                covered_by_clusterip.add(resolved.get("containerPort"))
    for port_name in ("http", "grpc", "metrics"):
        number = next(iter(deployments.values()))[2].get(port_name) if deployments else None
        checker.expect(number in covered_by_clusterip, "Services",
                       f"no ClusterIP Service port targets the {port_name} port")

    exposed_metrics = adapter_metrics(kube_dir, checker)
    for fname, hpa in by_kind.get("HorizontalPodAutoscaler", []):
        w = f"{fname} HorizontalPodAutoscaler/{name_of(hpa)}"
        spec = hpa.get("spec", {})
        ref = spec.get("scaleTargetRef", {})
        checker.expect(ref.get("kind") == "Deployment" and ref.get("apiVersion") == "apps/v1" and
                       ref.get("name") in deployments, w,
                       f"scaleTargetRef {ref} is not the Deployment "
                       f"{' or '.join(sorted(deployments)) or '(none)'}")
        checker.expect(1 <= spec.get("minReplicas", 1) <= spec.get("maxReplicas", 0), w,
                       "needs 1 <= minReplicas <= maxReplicas")
        metrics = spec.get("metrics", [])
        checker.expect(any(m.get("type") == "Resource" and
                           m.get("resource", {}).get("name") == "cpu" for m in metrics), w,
                       "no CPU utilization metric")
        pods_metrics = [m.get("pods", {}).get("metric", {}).get("name")
                        for m in metrics if m.get("type") == "Pods"]
        for name in pods_metrics:
            checker.expect(name in exposed_metrics, w, f"Pods metric {name!r} is not exposed by "
                           f"the adapter rules ({ADAPTER_VALUES_FILE}: "
                           f"{sorted(exposed_metrics) or 'none'})")
        checker.expect(any(QUEUE_GAUGE in exposed_metrics.get(n, "") for n in pods_metrics), w,
                       f"no Pods metric derived from {QUEUE_GAUGE}")
    checker.expect(bool(by_kind.get("HorizontalPodAutoscaler")), str(kube_dir), "no HPA")

    for fname, pdb in by_kind.get("PodDisruptionBudget", []):
        checker.expect(selected_deployment(pdb.get("spec", {}).get("selector", {})
                                           .get("matchLabels")) is not None,
                       f"{fname} PodDisruptionBudget/{name_of(pdb)}",
                       "spec.selector selects no Deployment's pods")

    kustomizations = by_kind.get("Kustomization", [])
    if checker.expect(len(kustomizations) == 1, str(kube_dir), "expected one kustomization.yaml"):
        fname, kust = kustomizations[0]
        listed = set(kust.get("resources", []))
        for resource in sorted(listed):
            checker.expect((kube_dir / resource).is_file(), fname, f"resource {resource} missing")
        for name in files:
            if name not in (KUSTOMIZATION_FILE, ADAPTER_VALUES_FILE):
                checker.expect(name in listed, fname, f"{name} is not in resources")
        repositories = {re.sub(r"(@.*|:[^/:]*)$", "", str(c.get("image", "")))
                        for _, (_, c, _) in deployments.items()}
        for entry in kust.get("images", []):
            checker.expect(entry.get("name") in repositories, fname,
                           f"images entry {entry.get('name')!r} matches no container image")
    return checker


# ---- --self-test: mutations the check must catch ------------------------------------------

def _edit_yaml(directory, file_name, kind, edit):
    path = directory / "kubernetes" / file_name
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    hits = [d for d in docs if d.get("kind") == kind]
    if not hits:
        raise RuntimeError(f"self-test: no {kind} in {file_name}")
    edit(hits[0])
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))


def _edit_text(directory, file_name, pattern, replacement):
    path = directory / file_name
    text, count = re.subn(pattern, replacement, path.read_text(), flags=re.MULTILINE)
    if count == 0:
        raise RuntimeError(f"self-test: {pattern!r} not found in {file_name}")
    path.write_text(text)


def _container(dep):
    return server_containers(dep["spec"]["template"]["spec"])[0]


MUTATIONS = [
    ("readiness probe on a path ds-serve does not serve", "not a GET route",
     lambda d: _edit_yaml(d, "deployment.yaml", "Deployment",
                          lambda x: _container(x)["readinessProbe"]["httpGet"]
                          .__setitem__("path", "/v2/health/readyz"))),
    ("readiness probe on a model route with a concrete name", "not a GET route",
     lambda d: _edit_yaml(d, "deployment.yaml", "Deployment",
                          lambda x: _container(x)["readinessProbe"]["httpGet"]
                          .__setitem__("path", "/v2/models/digits/ready"))),
    ("liveness probe on the readiness route", "should be /v2/health/live",
     lambda d: _edit_yaml(d, "deployment.yaml", "Deployment",
                          lambda x: _container(x)["livenessProbe"]["httpGet"]
                          .__setitem__("path", READY_PATH))),
    ("liveness probe on an undeclared port name", "no containerPort by that name",
     lambda d: _edit_yaml(d, "deployment.yaml", "Deployment",
                          lambda x: _container(x)["livenessProbe"]["httpGet"]
                          .__setitem__("port", "rest"))),
    ("startup probe on the gRPC port", "is not the REST port",
     lambda d: _edit_yaml(d, "deployment.yaml", "Deployment",
                          lambda x: _container(x)["startupProbe"]["httpGet"]
                          .__setitem__("port", "grpc"))),
    ("containerPort http moved off ds-serve's port", "containerPort named http must be",
     lambda d: _edit_yaml(d, "deployment.yaml", "Deployment",
                          lambda x: resolve_port("http", _container(x)["ports"])
                          .__setitem__("containerPort", 8080))),
    ("--host given a second time in args", "given 2 times",
     lambda d: _edit_yaml(d, "deployment.yaml", "Deployment",
                          lambda x: _container(x).setdefault("args", [])
                          .append("--host=127.0.0.1"))),
    ("an option ds-serve does not have", "not an option of",
     lambda d: _edit_yaml(d, "deployment.yaml", "Deployment",
                          lambda x: _container(x).setdefault("args", [])
                          .append("--model-control=poll"))),
    ("grace period shorter than preStop + drain", "terminationGracePeriodSeconds",
     lambda d: _edit_yaml(d, "deployment.yaml", "Deployment",
                          lambda x: x["spec"]["template"]["spec"]
                          .__setitem__("terminationGracePeriodSeconds", 30))),
    ("Service targetPort that the container lacks", "is no containerPort",
     lambda d: _edit_yaml(d, "service.yaml", "Service",
                          lambda x: x["spec"]["ports"][1].__setitem__("targetPort", "grpcs"))),
    ("gRPC Service port without appProtocol grpc", "appProtocol must be grpc",
     lambda d: _edit_yaml(d, "service.yaml", "Service",
                          lambda x: x["spec"]["ports"][1].pop("appProtocol"))),
    ("HPA scaling another Deployment", "scaleTargetRef",
     lambda d: _edit_yaml(d, "hpa.yaml", "HorizontalPodAutoscaler",
                          lambda x: x["spec"]["scaleTargetRef"].__setitem__("name", "ds-serv"))),
    ("HPA on a Pods metric the adapter does not expose", "is not exposed by the adapter",
     lambda d: _edit_yaml(d, "hpa.yaml", "HorizontalPodAutoscaler",
                          lambda x: [m["pods"]["metric"].__setitem__("name", "queue")
                                     for m in x["spec"]["metrics"] if m["type"] == "Pods"])),
    ("HPA with an autoscaling/v1 apiVersion", "apiVersion",
     lambda d: _edit_yaml(d, "hpa.yaml", "HorizontalPodAutoscaler",
                          lambda x: x.__setitem__("apiVersion", "autoscaling/v1"))),
    ("Dockerfile ENTRYPOINT without --host 0.0.0.0", "--host is",
     lambda d: _edit_text(d, "Dockerfile", r'"--host", "0\.0\.0\.0", ', "")),
    ("Dockerfile EXPOSE without the metrics port", "EXPOSE",
     lambda d: _edit_text(d, "Dockerfile", r"^(EXPOSE .*) 8002\b", r"\1")),
    ("Dockerfile ENTRYPOINT in shell form", "exec (JSON array) form",
     lambda d: _edit_text(d, "Dockerfile", r"^ENTRYPOINT \[[^\]]*\]",
                          "ENTRYPOINT /usr/local/bin/ds-serve --host 0.0.0.0")),
    ("Dockerfile ENTRYPOINT with an ephemeral REST port", "needs a fixed port",
     lambda d: _edit_text(d, "Dockerfile", r'"--http-port", "8000"', '"--http-port", "0"')),
    ("the runtime stage without the allocator ds-serve links", "the runtime stage installs no",
     lambda d: _edit_text(d, "Dockerfile", r" libtcmalloc-minimal4", "")),
]


def self_test(deploy_dir, routes, cli, libs):
    failures = []
    with tempfile.TemporaryDirectory(prefix="check_manifests.") as tmp:
        for title, expected, mutate in MUTATIONS:
            copy_dir = Path(tmp) / "deploy"
            shutil.rmtree(copy_dir, ignore_errors=True)
            shutil.copytree(deploy_dir, copy_dir)
            try:
                mutate(copy_dir)
            except (RuntimeError, KeyError, IndexError, TypeError, AttributeError) as e:
                failures.append(f"mutation '{title}' could not be applied: {e!r}")
                continue
            if libs is None and expected.startswith("the runtime stage installs no"):
                print(f"self-test: {title}: skipped (no readelf, ldd or dpkg here)")
                continue
            errors = check_manifests(copy_dir, routes, cli, libs).errors
            caught = [e for e in errors if expected in e]
            print(f"self-test: {title}: {'caught' if caught else 'NOT CAUGHT'}"
                  + (f" ({caught[0]})" if caught else ""))
            if not caught:
                failures.append(f"mutation '{title}' was not caught (wanted an error containing "
                                f"{expected!r}; got {errors or 'none'})")
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ds-serve", required=True, help="the ds-serve binary")
    parser.add_argument("--deploy-dir", required=True, type=Path,
                        help="the deploy/ directory (Dockerfile, kubernetes/)")
    parser.add_argument("--self-test", action="store_true",
                        help="also check that mutated copies of deploy/ fail")
    args = parser.parse_args()

    routes, cli, libs = query_server(args.ds_serve)
    if libs is None:
        print("check_manifests: readelf, ldd or dpkg missing: the runtime stage's packages are "
              "not checked against ds-serve's libraries")
    checker = check_manifests(args.deploy_dir, routes, cli, libs)
    for error in checker.errors:
        print(f"FAIL {error}")
    if checker.errors:
        print(f"check_manifests: {len(checker.errors)} of {checker.checked} checks failed")
        return 1
    print(f"check_manifests: {checker.checked} checks passed ({len(routes)} routes from "
          f"{args.ds_serve} --list-routes)")
    if args.self_test:
        failures = self_test(args.deploy_dir, routes, cli, libs)
        for failure in failures:
            print(f"FAIL self-test: {failure}")
        if failures:
            return 1
        print(f"check_manifests: self-test: all {len(MUTATIONS)} mutations caught")
    return 0


if __name__ == "__main__":
    sys.exit(main())
