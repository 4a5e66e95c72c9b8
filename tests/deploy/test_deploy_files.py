"""The deployment files hold together as an operator would use them: the Compose stack is
accepted by docker-compose and starts its services in the order the database roles need;
the Prometheus and Alertmanager files it mounts load with promtool and amtool; its
PostgreSQL init script makes roles that `db upgrade`, `db grant --apply` and `config
check` accept; the Kubernetes objects validate against Kubernetes' schemas (the Prometheus
Operator's custom resources, which no schema here knows, by their structure and by
promtool and amtool, the AlertmanagerConfig also by equality with deploy/alertmanager.yml);
the systemd units verify; the nginx example passes Slack's one path to a real serve and
nothing else; every command these files and docs/operations.md run is one queuebot's
command line accepts.

Tools: docker-compose (required under QUEUEBOT_REQUIRE_DEPLOY=1, which CI sets), promtool
and amtool (required under QUEUEBOT_REQUIRE_PROMTOOL=1), psql and PostgreSQL (required
under QUEUEBOT_REQUIRE_POSTGRES=1); kubectl, systemd-analyze, and nginx with openssl are
used where present and their parts skip elsewhere (CI installs neither kubectl nor
nginx)."""

from __future__ import annotations

import os
import re
import secrets
import shlex
import shutil
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import kubernetes_validate
import psycopg
import pytest
import yaml
from sqlalchemy.engine import make_url

from bot.cli_parser import SERVE_ENVIRONMENT, build_parser
from services.config.load import parse_file_config
from services.db.migrate import head_revision
from testkit import web
from testkit.ports import free_port
from tests.conftest import _pg_conninfo, create_pg_database, drop_pg_database, need_postgres
from tests.helpers.processes import clean_environ
from tests.unit.test_prometheus_rules import receivers_of

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "compose.yaml"
COMPOSE_DIR = DEPLOY / "compose"
KUBE = DEPLOY / "kubernetes"
SYSTEMD = DEPLOY / "systemd"
RULES = DEPLOY / "prometheus" / "rules.yml"
PROMETHEUS = DEPLOY / "prometheus" / "prometheus.yml"
ALERTMANAGER = DEPLOY / "alertmanager.yml"
OPERATIONS = ROOT / "docs" / "operations.md"

REQUIRE_DEPLOY = os.environ.get("QUEUEBOT_REQUIRE_DEPLOY") == "1"
REQUIRE_PROMTOOL = os.environ.get("QUEUEBOT_REQUIRE_PROMTOOL") == "1"
REQUIRE_PG = os.environ.get("QUEUEBOT_REQUIRE_POSTGRES") == "1"

# Kubernetes kinds kubernetes-validate has schemas for; the rest are the Operator's.
CUSTOM_KINDS = {"PrometheusRule", "ServiceMonitor", "AlertmanagerConfig"}
SECRET_MOUNTS = "/run/secrets/"
# Secrets the manifests may only take from a Secret, never as a literal value.
SECRET_VARIABLES = {
    "QUEUEBOT_DATABASE_URL",
    "QUEUEBOT_QUEUE_DATABASE_URL",
    "QUEUEBOT_AUDIT_KEY",
    "QUEUEBOT_ALERT_TOKEN",
    "QUEUEBOT_HOUSEKEEP_WEBHOOK_URL",
    "SLACK_BOT_TOKEN",
    "SLACK_SIGNING_SECRET",
    "SLACK_APP_TOKEN",
    "DISCORD_BOT_TOKEN",
}


def tool(name: str, *, required: bool, why_required: str) -> str:
    found = shutil.which(name)
    if found is None:
        if required:
            pytest.fail(f"{why_required} but {name} is not installed")
        pytest.skip(f"{name} is not installed")
    return found


def run(*args: str | Path, cwd: Path = ROOT, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        env=env,
        timeout=120,
    )
    said = done.stdout + done.stderr
    assert done.returncode == 0, f"{args} exited {done.returncode}: {said}"
    return said


def cli_accepts(argv: list[str]) -> None:
    """queuebot's own parser takes this command line (exits 2 on one it does not know)."""
    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:
        if exc.code == 0:  # --help
            return
        pytest.fail(f"queuebot's command line refuses {shlex.join(argv)} (exit {exc.code})")


def _top_commands() -> set[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return set(sub.choices)  # type: ignore[arg-type]


def rule_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(RULES.read_text())["groups"]
    return groups


def rule_count() -> int:
    return sum(len(group["rules"]) for group in rule_groups())


# ---------------------------------------------------------------------------------------
# Docker Compose


@pytest.fixture(scope="module")
def compose_config(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`docker-compose config` of deploy/compose.yaml, with the operator's env files made
    from the examples beside it (as docs/operations.md says to), in a copy of the tree."""
    binary = tool(
        "docker-compose",
        required=REQUIRE_DEPLOY,
        why_required="QUEUEBOT_REQUIRE_DEPLOY=1",
    )
    tree = tmp_path_factory.mktemp("compose")
    shutil.copytree(DEPLOY, tree / "deploy")
    # the secrets as docs/operations.md says to make them: the script, then the three
    # only the operator has
    made = run("bash", tree / "deploy" / "compose" / "make-secrets.sh", env=_no_secrets_env())
    assert "make-secrets: 7 made in" in made, made
    folder = tree / "deploy" / "compose" / "secrets"
    assert folder.stat().st_mode & 0o777 == 0o700
    for name in ("slack-bot-token", "slack-signing-secret", "paging-routing-key"):
        (folder / name).write_text(secrets.token_hex(16) + "\n")
        (folder / name).chmod(0o444)
    compose = tree / "deploy" / "compose.yaml"
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPOSE_")}
    run(binary, "-f", compose, "config", "-q", cwd=tree, env=env)
    rendered: dict[str, Any] = yaml.safe_load(
        run(binary, "-f", compose, "config", cwd=tree, env=env)
    )
    rendered["_tree"] = str(tree)
    return rendered


def _no_secrets_env() -> dict[str, str]:
    return clean_environ()


def _user(url: str) -> str | None:
    return make_url(url).username


def compose_secret(config: dict[str, Any], service: str, variable: str) -> str:
    """The value a service's NAME_FILE variable names: the file of the Compose secret
    mounted at that path (/run/secrets/NAME), which the service must mount."""
    path = config["services"][service]["environment"][f"{variable}_FILE"]
    name = path.removeprefix("/run/secrets/")
    mounted = config["services"][service]["secrets"]
    assert name in [m if isinstance(m, str) else m["source"] for m in mounted], (service, name)
    return Path(config["secrets"][name]["file"]).read_text().rstrip("\n")


LOCKED = {"user", "read_only", "tmpfs", "cap_drop", "security_opt"}


def test_compose_migrates_and_grants_as_the_owner_before_serve_starts_as_the_runtime_role(
    compose_config: dict[str, Any],
) -> None:
    services = compose_config["services"]
    assert set(services) >= {
        "postgres",
        "migrate",
        "grant",
        "queuebot",
        "prometheus",
        "alertmanager",
    }
    migrate, grant, serve = services["migrate"], services["grant"], services["queuebot"]
    assert migrate["command"] == ["db", "upgrade"]
    assert migrate["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert grant["command"][:2] == ["db", "grant"] and "--apply" in grant["command"]
    assert grant["depends_on"] == {"migrate": {"condition": "service_completed_successfully"}}
    assert serve["depends_on"] == {
        "migrate": {"condition": "service_completed_successfully"},
        "grant": {"condition": "service_completed_successfully"},
    }
    owner = _user(compose_secret(compose_config, "migrate", "QUEUEBOT_DATABASE_URL"))
    runtime = _user(compose_secret(compose_config, "queuebot", "QUEUEBOT_DATABASE_URL"))
    assert owner == "queuebot_owner"
    assert owner == _user(compose_secret(compose_config, "grant", "QUEUEBOT_DATABASE_URL"))
    assert runtime == grant["command"][2] == "queuebot_runtime"
    for service in (migrate, grant, serve):
        cli_accepts(service["command"])
        assert service["image"] == "queuebot:latest"
        assert service["environment"]["QUEUEBOT_CONFIG"] == "/etc/queuebot/queuebot.toml"
    # Serve is published for the proxy on this host only, and nothing else is published.
    assert [name for name, s in services.items() if s.get("ports")] == ["queuebot"]
    assert serve["ports"] == ["127.0.0.1:8080:8080/tcp"]
    assert serve["read_only"] is True and serve["cap_drop"] == ["ALL"]
    assert serve["security_opt"] == ["no-new-privileges:true"] and serve["user"] == "10001:10001"
    # the one-shot services are locked down as serve is
    for service in (migrate, grant):
        assert {key: service[key] for key in LOCKED} == {key: serve[key] for key in LOCKED}
    assert services["postgres"]["image"] == "postgres:16"


# Secrets of the stack besides queuebot's own: PostgreSQL's image and its init script's.
STACK_SECRETS = {"POSTGRES_PASSWORD", "QUEUEBOT_OWNER_PASSWORD", "QUEUEBOT_RUNTIME_PASSWORD"}


def test_compose_gives_every_secret_as_a_file_and_none_in_an_environment(
    compose_config: dict[str, Any],
) -> None:
    """What `docker inspect` and /proc/1/environ of each container would show holds no
    secret: no service has a secret variable or an env_file, each NAME_FILE names a secret
    the service mounts, and no secret's value is anywhere in the rendered stack."""
    values = {
        name: Path(secret["file"]).read_text().strip()
        for name, secret in compose_config["secrets"].items()
    }
    assert all(values.values()), values
    rendered = yaml.safe_dump({k: v for k, v in compose_config.items() if k != "secrets"})
    for name, value in values.items():
        assert value not in rendered, name
        assert Path(compose_config["secrets"][name]["file"]).stat().st_mode & 0o777 == 0o444
    for name, service in compose_config["services"].items():
        assert "env_file" not in service, name
        environment = service.get("environment", {})
        assert not set(environment) & (SECRET_VARIABLES | STACK_SECRETS), name
        for variable in environment:
            if variable.endswith("_FILE"):
                assert variable.removesuffix("_FILE") in SECRET_VARIABLES | STACK_SECRETS
                compose_secret(compose_config, name, variable.removesuffix("_FILE"))
    serve = compose_config["services"]["queuebot"]["environment"]
    assert {
        "QUEUEBOT_DATABASE_URL_FILE",
        "QUEUEBOT_AUDIT_KEY_FILE",
        "QUEUEBOT_ALERT_TOKEN_FILE",
    } <= set(serve)
    # the token serve asks for is the one Alertmanager sends
    [token] = [
        s
        for s in compose_config["services"]["alertmanager"]["secrets"]
        if s["source"] == "alert-token"
    ]
    assert (
        compose_secret(compose_config, "queuebot", "QUEUEBOT_ALERT_TOKEN")
        == values[token["source"]]
    )
    # the URLs carry the passwords the init script gives the roles
    for role in ("owner", "runtime"):
        url = make_url(values[f"{role}-database-url"])
        assert url.password == values[f"{role}-password"], role


def test_compose_names_only_variables_queuebot_reads(compose_config: dict[str, Any]) -> None:
    """A misspelt variable would be silently ignored by queuebot."""
    for name in ("migrate", "grant", "queuebot"):
        for variable in compose_config["services"][name]["environment"]:
            assert variable.removesuffix("_FILE") in SERVE_ENVIRONMENT, (name, variable)
    ignored = (COMPOSE_DIR / ".gitignore").read_text().split()
    assert "/secrets/" in ignored


def test_compose_mounts_the_checked_prometheus_and_alertmanager_files(
    compose_config: dict[str, Any],
) -> None:
    tree = Path(compose_config["_tree"])
    services = compose_config["services"]

    def mounted(service: str, target: str) -> Path:
        for volume in services[service]["volumes"]:
            source, _, rest = volume.partition(":")
            if rest.split(":")[0] == target:
                return Path(os.path.relpath(source, tree / "deploy"))
        raise AssertionError(f"{service} mounts nothing at {target}")

    assert mounted("prometheus", "/etc/prometheus") == Path("prometheus")
    assert mounted("alertmanager", "/etc/alertmanager/alertmanager.yml") == Path("alertmanager.yml")
    assert "--config.file=/etc/prometheus/prometheus.yml" in services["prometheus"]["command"]
    # Alertmanager reads the token where the shipped receiver's credentials_file says, and
    # the paging key where the operators' receiver's routing_key_file says.
    receivers = {r["name"]: r for r in yaml.safe_load(ALERTMANAGER.read_text())["receivers"]}
    receiver = receivers["queuebot"]["webhook_configs"][0]
    token_path = receiver["http_config"]["authorization"]["credentials_file"]
    key_path = receivers["queuebot-operators"]["pagerduty_configs"][0]["routing_key_file"]
    assert services["alertmanager"]["secrets"] == [
        {"source": "alert-token", "target": token_path},
        {"source": "paging-routing-key", "target": key_path},
    ]
    assert receiver["url"] == "http://queuebot:8080/alerts/alertmanager"
    # The example queue the init script creates is the one the sample configuration names.
    assert mounted("postgres", "/queuebot/worker_queue.sql") == Path(
        "../services/estate/worker_queue/ddl/postgresql.sql"
    )


def test_the_prometheus_config_compose_mounts_loads_with_its_rules() -> None:
    promtool = tool(
        "promtool", required=REQUIRE_PROMTOOL, why_required="QUEUEBOT_REQUIRE_PROMTOOL=1"
    )
    said = run(promtool, "check", "config", PROMETHEUS)
    assert "SUCCESS: 1 rule files found" in said
    assert f"SUCCESS: {rule_count()} rules found" in said  # rules.yml resolved beside it
    config = yaml.safe_load(PROMETHEUS.read_text())
    [scrape] = config["scrape_configs"]
    assert scrape["metrics_path"] == "/metrics"
    assert scrape["dns_sd_configs"] == [
        {"names": ["queuebot"], "type": "A", "port": 8080, "refresh_interval": "30s"}
    ]
    targets = config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert targets == ["alertmanager:9093"]


def test_the_alertmanager_config_compose_mounts_loads() -> None:
    amtool = tool("amtool", required=REQUIRE_PROMTOOL, why_required="QUEUEBOT_REQUIRE_PROMTOOL=1")
    said = run(amtool, "check-config", ALERTMANAGER)
    assert "SUCCESS" in said and "- 2 receivers" in said  # queuebot and queuebot-operators


def filled_in(path: Path) -> str:
    """A sample configuration with its commented channels, people and roles taken in, as
    an operator does once they have their Slack ids."""
    text = path.read_text()
    head, marker, tail = text.partition("# Channels and people")
    assert marker, f"{path} has no channels and people to fill in"
    taken = re.sub(r'(?m)^# (\[[a-z.]+\].*|[a-z"][^=\n]* = .*)$', r"\1", tail)
    return head + marker + taken


def test_the_sample_configurations_are_valid_queuebot_files() -> None:
    for path in (COMPOSE_DIR / "queuebot.toml", KUBE / "queuebot.toml"):
        for text in (path.read_text(), filled_in(path)):
            config = parse_file_config(tomllib.loads(text), where=str(path))
            assert list(config.queue_map()) == ["workers"]
        assert len(parse_file_config(tomllib.loads(filled_in(path)), where="").channels) == 4
    compose = tomllib.loads((COMPOSE_DIR / "queuebot.toml").read_text())
    kube = tomllib.loads((KUBE / "queuebot.toml").read_text())
    # Compose has no timer: serve runs housekeeping. Kubernetes has its CronJob instead.
    assert compose["housekeeping"]["periodic"] is True
    assert kube["housekeeping"]["periodic"] is False


@pytest.fixture
def init_roles(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A fresh database set up by deploy/compose/initdb/10-queuebot-roles.sh, as the
    postgres image runs it on its first start (psql as the superuser), with role names of
    this test's own. Dropped afterwards."""
    need_postgres()
    psql = tool("psql", required=REQUIRE_PG, why_required="QUEUEBOT_REQUIRE_POSTGRES=1")
    url = create_pg_database("empty")
    suffix = secrets.token_hex(4)
    owner, runtime = f"qb_owner_{suffix}", f"qb_runtime_{suffix}"
    parts = make_url(url)
    env = {
        "PATH": f"{Path(psql).parent}:{os.environ.get('PATH', '')}",
        "PGHOST": parts.host or "127.0.0.1",
        "PGPORT": str(parts.port or 5432),
        "POSTGRES_USER": parts.username or "postgres",
        "POSTGRES_DB": parts.database or "",
        "QUEUEBOT_OWNER_ROLE": owner,
        "QUEUEBOT_RUNTIME_ROLE": runtime,
        "QUEUEBOT_QUEUE_DDL": str(ROOT / "services/estate/worker_queue/ddl/postgresql.sql"),
    }
    # the passwords in files, as deploy/compose.yaml mounts them
    passwords = {
        "owner": "owner-" + secrets.token_hex(8),
        "runtime": "runtime-" + secrets.token_hex(8),
    }
    for role, password in passwords.items():
        (tmp_path / f"{role}-password").write_text(password + "\n")
        env[f"QUEUEBOT_{role.upper()}_PASSWORD_FILE"] = str(tmp_path / f"{role}-password")
    try:
        run("bash", COMPOSE_DIR / "initdb" / "10-queuebot-roles.sh", env=env)
        yield {
            "owner_url": parts.set(username=owner, password=passwords["owner"]).render_as_string(
                hide_password=False
            ),
            "runtime_url": parts.set(
                username=runtime, password=passwords["runtime"]
            ).render_as_string(hide_password=False),
            "runtime": runtime,
            "dir": str(tmp_path),
        }
    finally:
        drop_pg_database(url)
        with psycopg.connect(
            _pg_conninfo(url.rsplit("/", 1)[0] + "/postgres"), autocommit=True
        ) as c:
            for role in (runtime, owner):
                c.execute(f'DROP ROLE IF EXISTS "{role}"')


def queuebot(*args: str, url: str, config: Path) -> subprocess.CompletedProcess[str]:
    base = clean_environ(discord=True)
    env = {
        **base,
        "PYTHONPATH": str(ROOT),
        "QUEUEBOT_DATABASE_URL": url,
        "QUEUEBOT_CONFIG": str(config),
        "QUEUEBOT_ALERT_TOKEN": "deploy-test-alert-token-0123",  # serve starts only with one
    }
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
        check=False,
    )


@pytest.mark.postgres
def test_the_compose_init_script_makes_roles_queuebot_runs_as(init_roles: dict[str, str]) -> None:
    """What the Compose stack does after PostgreSQL's first start: migrate and grant as
    the owner the script made, then check the configuration as the runtime role it made.
    (The test server trusts local connections, so the passwords themselves go unchecked.)"""
    config = Path(init_roles["dir"]) / "queuebot.toml"
    config.write_text(filled_in(COMPOSE_DIR / "queuebot.toml"))
    owner, runtime = init_roles["owner_url"], init_roles["runtime_url"]
    # serve started before the migration (the Kubernetes Job and Deployment start together)
    # cannot create the tables as the runtime role, and says what to do in one line.
    early = queuebot("serve", "--port", "0", url=runtime, config=config)
    assert early.returncode == 6, early.stdout + early.stderr
    assert early.stderr.strip().splitlines() == [
        f"queuebot: queuebot's tables in {make_url(runtime).render_as_string()} are not there "
        f"yet (newest {head_revision()}) and role {init_roles['runtime']!r} may not migrate "
        "them (permission denied for schema public): run `queuebot db upgrade` as their owner "
        "first"
    ]
    upgrade = queuebot("db", "upgrade", url=owner, config=config)
    assert upgrade.returncode == 0, upgrade.stderr
    grant = queuebot("db", "grant", init_roles["runtime"], "--apply", url=owner, config=config)
    assert grant.returncode == 0, grant.stderr
    assert "granted:" in grant.stdout
    check = queuebot("config", "check", url=runtime, config=config)
    said = check.stdout + check.stderr
    assert check.returncode == 0, said
    assert "problem:" not in said and "tables dev_r_worker_queue ok" in said
    assert "housekeeping: Parts A-F all run" in said
    # The runtime role owns nothing: it cannot migrate, so it cannot undo the triggers.
    with psycopg.connect(_pg_conninfo(runtime)) as conn:
        owned = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE tableowner = current_user"
        ).fetchone()
        assert owned == (0,)


# ---------------------------------------------------------------------------------------
# Kubernetes


class KubeLoader(yaml.SafeLoader):
    """YAML as Kubernetes reads it: a plain `=` is a string (kustomize writes the
    AlertmanagerConfig's `matchType: "="` unquoted), not YAML 1.1's value key, which
    PyYAML's SafeLoader cannot construct."""


KubeLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:value"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def kube_objects() -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((KUBE / "kustomization.yaml").read_text())
    objects: list[dict[str, Any]] = []
    for resource in kustomization["resources"]:
        objects.extend(d for d in yaml.safe_load_all((KUBE / resource).read_text()) if d)
    return objects


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def pod_specs(objects: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for o in objects:
        if o["kind"] in ("Deployment", "Job"):
            yield o["metadata"]["name"], o["spec"]["template"]["spec"]
        elif o["kind"] == "CronJob":
            yield o["metadata"]["name"], o["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*spec.get("initContainers", []), *spec["containers"]]


def secret_key(spec: dict[str, Any], container: dict[str, Any], variable: str) -> str | None:
    """The key of the Secret `queuebot` a container reads for ``variable``: the file its
    ``variable_FILE`` names, in a read-only volume of that Secret projecting that key."""
    env = {e["name"]: e for e in container["env"]}
    entry = env.get(f"{variable}_FILE")
    if entry is None:
        return None
    path = Path(entry["value"])
    assert str(path).startswith(SECRET_MOUNTS), path
    mount = {m["mountPath"]: m for m in container["volumeMounts"]}[str(path.parent)]
    assert mount["readOnly"] is True, mount
    [volume] = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "queuebot", volume
    [item] = [i for i in volume["secret"]["items"] if i["path"] == path.name]
    key: str = item["key"]
    return key


def pod_labels(o: dict[str, Any]) -> dict[str, str]:
    template = (
        o["spec"]["jobTemplate"]["spec"]["template"]
        if o["kind"] == "CronJob"
        else o["spec"]["template"]
    )
    labels: dict[str, str] = template["metadata"]["labels"]
    return labels


def validate_builtin(objects: list[dict[str, Any]]) -> str:
    version = kubernetes_validate.latest_version()
    for o in objects:
        if o["kind"] not in CUSTOM_KINDS:
            kubernetes_validate.validate(o, version, strict=True)
    return version


def test_kubernetes_objects_validate_against_the_newest_schemas() -> None:
    objects = kube_objects()
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == sorted(
        [
            "Deployment",
            "Service",
            "NetworkPolicy",
            "PodDisruptionBudget",
            "Job",
            "CronJob",
            "CronJob",
            *CUSTOM_KINDS,
        ]
    )
    version = validate_builtin(objects)
    assert tuple(int(p) for p in version.split(".")[:2]) >= (1, 37)
    # and the guide's examples (the Ingress for Slack's one path)
    examples = re.findall(r"```yaml\n(.*?)```", OPERATIONS.read_text(), flags=re.S)
    assert examples
    validate_builtin([yaml.safe_load(example) for example in examples])


def test_kubectl_kustomize_renders_the_base_with_its_generated_config_map() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (CI does not install it)")
    rendered = [d for d in yaml.load_all(run(kubectl, "kustomize", KUBE), Loader=KubeLoader) if d]
    [config_map] = by_kind(rendered, "ConfigMap")
    name = config_map["metadata"]["name"]
    assert re.fullmatch(r"queuebot-config-[a-z0-9]{10}", name)
    assert config_map["data"]["queuebot.toml"] == (KUBE / "queuebot.toml").read_text()
    for workload, spec in pod_specs(rendered):
        [volume] = [v for v in spec["volumes"] if v["name"] == "config"]
        assert volume["configMap"]["name"] == name, workload
        for container in containers(spec):
            assert container["image"] == "queuebot:latest", workload
    # The AlertmanagerConfig comes out as written (kustomize leaves its "=" unquoted).
    assert by_kind(rendered, "AlertmanagerConfig") == [alertmanager_config()]
    validate_builtin(rendered)


def test_the_deployment_runs_two_probed_locked_down_replicas() -> None:
    objects = kube_objects()
    [deployment] = by_kind(objects, "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]["spec"]
    [serve] = pod["containers"]
    assert serve["args"] == ["serve", "--host", "0.0.0.0", "--port", "8080"]
    assert serve["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert serve["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert serve["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    assert set(serve["resources"]) == {"requests", "limits"}
    [pdb] = by_kind(objects, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    labels = spec["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    [service] = by_kind(objects, "Service")
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    for workload, pod_spec in pod_specs(objects):
        context = pod_spec["securityContext"]
        assert context["runAsNonRoot"] is True and context["runAsUser"] == 10001, workload
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}, workload
        assert pod_spec["automountServiceAccountToken"] is False, workload
        assert {v["name"]: v for v in pod_spec["volumes"]}["tmp"]["emptyDir"], workload
        for container in containers(pod_spec):
            locked = container["securityContext"]
            assert locked["readOnlyRootFilesystem"] is True, workload
            assert locked["allowPrivilegeEscalation"] is False, workload
            assert locked["capabilities"] == {"drop": ["ALL"]}, workload
            mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
            assert "/tmp" in mounts and mounts["/etc/queuebot"]["readOnly"] is True, workload


def test_the_jobs_run_commands_queuebot_has_as_the_right_role() -> None:
    objects = kube_objects()
    commands: dict[str, tuple[list[str], str]] = {}
    for _, spec in pod_specs(objects):
        for container in containers(spec):
            key = secret_key(spec, container, "QUEUEBOT_DATABASE_URL")
            assert key is not None, container["name"]
            commands[container["name"]] = (container["args"], key)
    assert commands["upgrade"] == (["db", "upgrade"], "owner-database-url")
    assert commands["grant"] == (
        ["db", "grant", "queuebot_runtime", "--apply"],
        "owner-database-url",
    )
    assert commands["housekeep"] == (["housekeep"], "database-url")
    assert commands["queuebot"][1] == "database-url"
    # prune deletes and audits only what db grant gives the runtime role
    assert commands["prune"] == (["db", "prune", "--older-than", "30d"], "database-url")
    [migrate] = by_kind(objects, "Job")
    assert [c["name"] for c in migrate["spec"]["template"]["spec"]["initContainers"]] == ["upgrade"]
    for cronjob in by_kind(objects, "CronJob"):
        assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    for args, _ in commands.values():
        cli_accepts(args)


def test_secrets_come_only_as_files_of_the_operators_secret_and_are_documented() -> None:
    """No secret value in the repository and none in a pod's environment: every secret
    variable is its NAME_FILE form, naming a file of a read-only volume of the Secret
    `queuebot`; a pod's volumes project only the keys it reads (serve never sees the
    owner's URL); docs/operations.md names every key."""
    guide = OPERATIONS.read_text()
    keys: set[str] = set()
    for workload, spec in pod_specs(kube_objects()):
        projected: set[str] = set()
        for volume in spec["volumes"]:
            if "secret" in volume:
                assert volume["secret"]["secretName"] == "queuebot", (workload, volume)
                projected |= {item["key"] for item in volume["secret"]["items"]}
        read: set[str] = set()
        for container in containers(spec):
            for env in container["env"]:
                name = env["name"]
                assert "valueFrom" not in env, (workload, name)  # no secretKeyRef at all
                assert name not in SECRET_VARIABLES, (workload, name)
                assert name.removesuffix("_FILE") in SERVE_ENVIRONMENT, (workload, name)
                if name.endswith("_FILE"):
                    assert name.removesuffix("_FILE") in SECRET_VARIABLES, (workload, name)
                    key = secret_key(spec, container, name.removesuffix("_FILE"))
                    assert key is not None
                    read.add(key)
        # the volumes hold what is read, and the optional chat keys it may be told to read
        optional = {"slack-app-token", "discord-bot-token", "housekeep-webhook-url"}
        assert read <= projected and projected - read <= optional, (workload, projected - read)
        keys |= projected
    assert keys >= {"database-url", "owner-database-url", "audit-key", "alert-token"}
    for key in keys:
        assert f"`{key}`" in guide, f"docs/operations.md does not name the Secret key {key}"
    deployment = by_kind(kube_objects(), "Deployment")[0]["spec"]["template"]["spec"]
    [serve] = deployment["containers"]
    assert secret_key(deployment, serve, "QUEUEBOT_ALERT_TOKEN") == "alert-token"
    assert secret_key(deployment, serve, "QUEUEBOT_DATABASE_URL") == "database-url"


def test_the_network_policy_admits_the_http_port_only_and_lets_out_dns_the_database_https() -> None:
    """Every queuebot pod is selected; in, only the port named http (8080), only from the
    ingress controller's and the monitoring namespace; out, only DNS, PostgreSQL and HTTPS
    outside the private ranges. The guide says what it assumes."""
    objects = kube_objects()
    [policy] = by_kind(objects, "NetworkPolicy")
    validate_builtin([policy])
    spec = policy["spec"]
    for o in objects:
        if o["kind"] in ("Deployment", "Job", "CronJob"):
            assert spec["podSelector"]["matchLabels"].items() <= pod_labels(o).items(), o["kind"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    [ingress] = spec["ingress"]
    [serve] = by_kind(objects, "Deployment")[0]["spec"]["template"]["spec"]["containers"]
    assert serve["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    assert ingress["ports"] == [{"port": "http", "protocol": "TCP"}]
    assert [set(peer) for peer in ingress["from"]] == [{"namespaceSelector"}] * 2
    sources = {
        p["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
        for p in ingress["from"]
    }
    assert sources == {"ingress-nginx", "monitoring"}
    allowed = {
        (port["port"], port["protocol"]) for rule in spec["egress"] for port in rule["ports"]
    }
    assert allowed == {(53, "UDP"), (53, "TCP"), (5432, "TCP"), (443, "TCP")}
    [https] = [r for r in spec["egress"] if r["ports"] == [{"port": 443, "protocol": "TCP"}]]
    [block] = https["to"]
    assert block["ipBlock"]["cidr"] == "0.0.0.0/0"
    assert {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"} <= set(block["ipBlock"]["except"])
    guide = OPERATIONS.read_text()
    for namespace in ("ingress-nginx", "monitoring", "kube-system"):
        assert f"`{namespace}`" in guide, namespace


def test_the_prometheus_rule_holds_the_shipped_rules_and_loads() -> None:
    """PrometheusRule is the Operator's: no Kubernetes schema knows it. Checked by its
    structure (the fields the Operator's CRD defines), by equality with rules.yml, and by
    promtool loading its spec.groups as the rule file the Operator hands to Prometheus."""
    [rule] = by_kind(kube_objects(), "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(rule) == {"apiVersion", "kind", "metadata", "spec"}
    assert set(rule["spec"]) == {"groups"}
    assert rule["spec"]["groups"] == rule_groups()
    for group in rule["spec"]["groups"]:
        assert set(group) <= {"name", "interval", "rules", "limit", "labels", "query_offset"}
        for r in group["rules"]:
            assert set(r) <= {
                "alert",
                "record",
                "expr",
                "for",
                "keep_firing_for",
                "labels",
                "annotations",
            }
            assert ("alert" in r) != ("record" in r) and "expr" in r
    generated = run("bash", ROOT / "scripts" / "sync-prometheusrule.sh", "--stdout")
    assert (KUBE / "prometheusrule.yaml").read_text() == generated, (
        "deploy/kubernetes/prometheusrule.yaml is not rules.yml's: run "
        "scripts/sync-prometheusrule.sh"
    )
    promtool = tool(
        "promtool", required=REQUIRE_PROMTOOL, why_required="QUEUEBOT_REQUIRE_PROMTOOL=1"
    )
    rules_file = Path(os.environ.get("TMPDIR", "/tmp")) / f"qb-prometheusrule-{os.getpid()}.yml"
    rules_file.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    try:
        said = run(promtool, "check", "rules", rules_file)
    finally:
        rules_file.unlink()
    assert f"SUCCESS: {rule_count()} rules found" in said


def test_the_service_monitor_scrapes_the_services_metrics_port() -> None:
    """ServiceMonitor is the Operator's too: checked by its structure against the Service."""
    objects = kube_objects()
    [monitor] = by_kind(objects, "ServiceMonitor")
    [service] = by_kind(objects, "Service")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(monitor["spec"]) == {"selector", "endpoints"}
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    ports = {p["name"] for p in service["spec"]["ports"]}
    [endpoint] = monitor["spec"]["endpoints"]
    assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout", "scheme"}
    assert endpoint["port"] in ports and endpoint["path"] == "/metrics"
    assert endpoint["scrapeTimeout"] < endpoint["interval"]  # both "Ns" here


# The fields of the Operator's AlertmanagerConfig (monitoring.coreos.com/v1alpha1) by type,
# from its CRD: a field outside these is one the API server would prune or refuse.
AMCFG_FIELDS = {
    "spec": {"route", "receivers", "inhibitRules", "muteTimeIntervals"},
    "route": {
        "receiver",
        "groupBy",
        "groupWait",
        "groupInterval",
        "repeatInterval",
        "matchers",
        "continue",
        "routes",
        "muteTimeIntervals",
        "activeTimeIntervals",
    },
    "matcher": {"name", "value", "matchType", "regex"},
    "receiver": {
        "name",
        "opsgenieConfigs",
        "pagerdutyConfigs",
        "discordConfigs",
        "slackConfigs",
        "webhookConfigs",
        "wechatConfigs",
        "emailConfigs",
        "victoropsConfigs",
        "pushoverConfigs",
        "snsConfigs",
        "telegramConfigs",
        "webexConfigs",
        "msteamsConfigs",
        "msteamsv2Configs",
        "rocketchatConfigs",
        "mattermostConfigs",
    },
    "webhookConfig": {"sendResolved", "url", "urlSecret", "httpConfig", "maxAlerts", "timeout"},
    "httpConfig": {
        "authorization",
        "basicAuth",
        "oauth2",
        "bearerTokenSecret",
        "tlsConfig",
        "proxyURL",
        "proxyUrl",
        "noProxy",
        "proxyFromEnvironment",
        "proxyConnectHeader",
        "followRedirects",
        "enableHttp2",
    },
    "authorization": {"type", "credentials"},
    "secretKeySelector": {"name", "key", "optional"},
    "pagerdutyConfig": {
        "sendResolved",
        "routingKey",
        "serviceKey",
        "url",
        "client",
        "clientURL",
        "description",
        "severity",
        "class",
        "group",
        "component",
        "details",
        "pagerDutyImageConfigs",
        "pagerDutyLinkConfigs",
        "httpConfig",
        "source",
        "timeout",
    },
}


def alertmanager_config() -> dict[str, Any]:
    [config] = by_kind(kube_objects(), "AlertmanagerConfig")
    return config


def _check_route(route: dict[str, Any], receivers: set[str]) -> None:
    assert set(route) <= AMCFG_FIELDS["route"], set(route) - AMCFG_FIELDS["route"]
    assert route["receiver"] in receivers
    for matcher in route.get("matchers", []):
        assert set(matcher) <= AMCFG_FIELDS["matcher"], matcher
        assert matcher["matchType"] in ("=", "!=", "=~", "!~")
    for child in route.get("routes", []):
        _check_route(child, receivers)


def secret_refs(spec: dict[str, Any]) -> list[dict[str, str]]:
    """Every SecretKeySelector the spec names (the webhook's bearer token, the paging key)."""
    refs = []
    for receiver in spec["receivers"]:
        for webhook in receiver.get("webhookConfigs", []):
            refs.append(webhook["httpConfig"]["authorization"]["credentials"])
        for pagerduty in receiver.get("pagerdutyConfigs", []):
            refs.append(pagerduty["routingKey"])
    return refs


SecretFile = Callable[[dict[str, str]], str]


def alertmanager_form(spec: dict[str, Any], secret_file: SecretFile) -> dict[str, Any]:
    """The AlertmanagerConfig's route and receivers in Alertmanager's own configuration
    form, as the Operator writes them, but with each secret read from the file
    secret_file(ref) names instead of written in."""
    keys = {
        "receiver": "receiver",
        "groupBy": "group_by",
        "groupWait": "group_wait",
        "groupInterval": "group_interval",
        "repeatInterval": "repeat_interval",
        "continue": "continue",
    }

    def route(r: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {keys[k]: v for k, v in r.items() if k in keys}
        if "matchers" in r:
            out["matchers"] = [f'{m["name"]}{m["matchType"]}"{m["value"]}"' for m in r["matchers"]]
        if "routes" in r:
            out["routes"] = [route(child) for child in r["routes"]]
        assert set(r) - {"matchers", "routes"} <= set(keys), r
        return out

    def webhook(w: dict[str, Any]) -> dict[str, Any]:
        assert set(w) <= {"url", "sendResolved", "maxAlerts", "httpConfig"}, w
        authorization = w["httpConfig"]["authorization"]
        return {
            "url": w["url"],
            "send_resolved": w["sendResolved"],
            "max_alerts": w["maxAlerts"],
            "http_config": {
                "authorization": {
                    "type": authorization["type"],
                    "credentials_file": secret_file(authorization["credentials"]),
                }
            },
        }

    def pagerduty(p: dict[str, Any]) -> dict[str, Any]:
        assert set(p) <= {"routingKey", "sendResolved", "description", "severity"}, p
        return {
            "routing_key_file": secret_file(p["routingKey"]),
            "send_resolved": p["sendResolved"],
            "description": p["description"],
            "severity": p["severity"],
        }

    receivers = []
    for r in spec["receivers"]:
        assert set(r) <= {"name", "webhookConfigs", "pagerdutyConfigs"}, r
        receiver: dict[str, Any] = {"name": r["name"]}
        if "webhookConfigs" in r:
            receiver["webhook_configs"] = [webhook(w) for w in r["webhookConfigs"]]
        if "pagerdutyConfigs" in r:
            receiver["pagerduty_configs"] = [pagerduty(p) for p in r["pagerdutyConfigs"]]
        receivers.append(receiver)
    return {"route": route(spec["route"]), "receivers": receivers}


def as_the_operator_loads_it(
    config: dict[str, Any], namespace: str, secret_file: SecretFile
) -> dict[str, Any]:
    """An Alertmanager configuration holding the AlertmanagerConfig as the Operator adds it
    (strategy OnNamespace): under a root of its own with the receiver "null", its top route
    given continue: true and the matcher namespace="<its namespace>", its receivers named
    <namespace>/<name>/<receiver>."""
    own = alertmanager_form(config["spec"], secret_file)
    prefix = f"{namespace}/{config['metadata']['name']}/"

    def renamed(route: dict[str, Any]) -> dict[str, Any]:
        out = {**route, "receiver": prefix + route["receiver"]}
        if "routes" in route:
            out["routes"] = [renamed(child) for child in route["routes"]]
        return out

    top = renamed(own["route"])
    top["matchers"] = [f'namespace="{namespace}"', *top.get("matchers", [])]
    top["continue"] = True
    return {
        "route": {"receiver": "null", "routes": [top]},
        "receivers": [
            {"name": "null"},
            *({**r, "name": prefix + r["name"]} for r in own["receivers"]),
        ],
    }


def test_the_alertmanager_config_uses_only_its_crds_fields() -> None:
    """AlertmanagerConfig is the Operator's: checked by its structure against the fields
    of its CRD (the API server keeps no field it does not know)."""
    config = alertmanager_config()
    assert config["apiVersion"] == "monitoring.coreos.com/v1alpha1"
    assert set(config) == {"apiVersion", "kind", "metadata", "spec"}
    assert set(config["metadata"]) == {"name", "labels"}  # namespace: where it is applied
    spec = config["spec"]
    assert set(spec) <= AMCFG_FIELDS["spec"]
    names = [r["name"] for r in spec["receivers"]]
    assert len(names) == len(set(names))
    _check_route(spec["route"], set(names))
    for receiver in spec["receivers"]:
        assert set(receiver) <= AMCFG_FIELDS["receiver"], receiver
        for webhook in receiver.get("webhookConfigs", []):
            assert set(webhook) <= AMCFG_FIELDS["webhookConfig"], webhook
            assert set(webhook["httpConfig"]) <= AMCFG_FIELDS["httpConfig"]
            assert set(webhook["httpConfig"]["authorization"]) <= AMCFG_FIELDS["authorization"]
            assert isinstance(webhook["maxAlerts"], int) and webhook["maxAlerts"] >= 0
        for pagerduty in receiver.get("pagerdutyConfigs", []):
            assert set(pagerduty) <= AMCFG_FIELDS["pagerdutyConfig"], pagerduty
    for ref in secret_refs(spec):
        assert set(ref) <= AMCFG_FIELDS["secretKeySelector"] and {"name", "key"} <= set(ref)


def test_the_alertmanager_config_posts_to_the_service_with_the_secrets_token() -> None:
    """Its webhook is the Service's in-cluster address, its bearer token the Secret key
    serve checks (QUEUEBOT_ALERT_TOKEN), and every secret it names is a key of the Secret
    `queuebot` that docs/operations.md lists."""
    objects = kube_objects()
    spec = alertmanager_config()["spec"]
    [service] = by_kind(objects, "Service")
    [port] = service["spec"]["ports"]
    receivers = {r["name"]: r for r in spec["receivers"]}
    [webhook] = receivers["queuebot"]["webhookConfigs"]
    name = service["metadata"]["name"]
    # Alertmanager runs in another namespace: the URL names the Service's (FILL IN).
    assert re.fullmatch(
        rf"http://{name}\.[a-z0-9-]+\.svc:{port['port']}/alerts/alertmanager", webhook["url"]
    ), webhook["url"]
    [deployment] = by_kind(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    [serve] = pod["containers"]
    assert webhook["httpConfig"]["authorization"]["credentials"] == {
        "name": "queuebot",
        "key": secret_key(pod, serve, "QUEUEBOT_ALERT_TOKEN"),
    }
    assert webhook["httpConfig"]["authorization"]["type"] == "Bearer"
    guide = OPERATIONS.read_text()
    refs = secret_refs(spec)
    assert {r["key"] for r in refs} == {"alert-token", "paging-routing-key"}
    for ref in refs:
        assert ref["name"] == "queuebot", ref
        assert f"`{ref['key']}`" in guide, f"docs/operations.md does not name {ref['key']}"


def test_the_alertmanager_config_routes_as_the_alertmanager_file() -> None:
    """Translated to Alertmanager's form, with each secret in the file deploy/alertmanager.yml
    reads it from (where deploy/compose.yaml mounts it), its route and receivers are that
    file's: the two cannot drift apart. The URL alone differs: the in-cluster address."""
    shipped = yaml.safe_load(ALERTMANAGER.read_text())
    shipped_receivers = {r["name"]: r for r in shipped["receivers"]}
    files = {
        "alert-token": shipped_receivers["queuebot"]["webhook_configs"][0]["http_config"][
            "authorization"
        ]["credentials_file"],
        "paging-routing-key": shipped_receivers["queuebot-operators"]["pagerduty_configs"][0][
            "routing_key_file"
        ],
    }
    translated = alertmanager_form(alertmanager_config()["spec"], lambda ref: files[ref["key"]])
    assert translated["route"] == shipped["route"]
    [ours] = [r for r in translated["receivers"] if r["name"] == "queuebot"]
    ours_url = ours["webhook_configs"][0].pop("url")
    theirs_url = shipped_receivers["queuebot"]["webhook_configs"][0].pop("url")
    assert theirs_url == "http://queuebot:8080/alerts/alertmanager"
    assert re.fullmatch(r"http://queuebot\.[a-z0-9-]+\.svc:8080/alerts/alertmanager", ours_url)
    assert translated["receivers"] == shipped["receivers"]


def test_amtool_loads_the_alertmanager_config_and_routes_each_alert_where_it_should(
    tmp_path: Path,
) -> None:
    """The AlertmanagerConfig as the Operator adds it to an Alertmanager's configuration
    (its secrets in files written here) loads with amtool, and its routes send every rule
    of rules.yml, labelled with the namespace, to queuebot, and those of component
    queuebot to the paging receiver too; an alert without the namespace label, or of
    another namespace, reaches neither."""
    amtool = tool("amtool", required=REQUIRE_PROMTOOL, why_required="QUEUEBOT_REQUIRE_PROMTOOL=1")
    namespace = "jobs"

    def secret_file(ref: dict[str, str]) -> str:
        path = tmp_path / ref["name"] / ref["key"]
        path.parent.mkdir(exist_ok=True)
        path.write_text(secrets.token_hex(16))
        return str(path)

    config_file = tmp_path / "alertmanager.yml"
    config_file.write_text(
        yaml.safe_dump(as_the_operator_loads_it(alertmanager_config(), namespace, secret_file))
    )
    said = run(amtool, "check-config", config_file)
    assert "SUCCESS" in said and "- 3 receivers" in said  # null, queuebot, queuebot-operators

    def receivers(*labels: str) -> str:
        return ",".join(receivers_of(*labels, config=config_file))

    queuebot = f"{namespace}/queuebot/queuebot"
    both = f"{namespace}/queuebot/queuebot-operators,{queuebot}"
    ns = f"namespace={namespace}"
    assert (
        receivers("alertname=QueuebotDown", "component=queuebot", "severity=critical", ns) == both
    )
    assert receivers("alertname=FailedJobsAccumulating", "queue=workers", ns) == queuebot
    for group in rule_groups():
        for rule in group["rules"]:
            labels = rule.get("labels", {})
            paged = labels.get("component") == "queuebot" and labels["severity"] == "critical"
            expected = both if paged else queuebot
            said = receivers(
                f"alertname={rule['alert']}", *(f"{k}={v}" for k, v in labels.items()), ns
            )
            assert said == expected, rule["alert"]
    # The alerts carry the namespace: every rule keeps it
    # (tests/unit/test_prometheus_rules.py, test_every_rule_keeps_the_namespace).
    # an alert without the namespace label, or of another namespace, reaches neither
    assert receivers("alertname=QueuebotDown", "component=queuebot") == "null"
    assert receivers("alertname=QueuebotDown", "component=queuebot", "namespace=other") == "null"


# ---------------------------------------------------------------------------------------
# systemd


def unit(path: Path) -> dict[str, list[str]]:
    """A unit file's settings (repeatable ones in order), comments left out."""
    settings: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    return settings


def test_the_serve_housekeeping_and_prune_units_agree() -> None:
    serve = unit(SYSTEMD / "queuebot.service")
    housekeep = unit(SYSTEMD / "queuebot-housekeep.service")
    prune = unit(SYSTEMD / "queuebot-prune.service")
    for key in ("User", "Group", "EnvironmentFile"):
        assert serve[key] == housekeep[key] == prune[key], key
    prune_cmd = shlex.split(prune["ExecStart"][0])
    assert prune_cmd == [
        "/opt/queuebot/.venv/bin/queuebot", "db", "prune", "--older-than", "30d"
    ]  # fmt: skip
    cli_accepts(prune_cmd[1:])
    assert serve["User"] == ["queuebot"]
    assert serve["EnvironmentFile"] == ["/etc/queuebot/queuebot.env"]
    serve_cmd, housekeep_cmd = (
        shlex.split(serve["ExecStart"][0]),
        shlex.split(housekeep["ExecStart"][0]),
    )
    assert serve_cmd[0] == housekeep_cmd[0] == "/opt/queuebot/.venv/bin/queuebot"
    assert serve_cmd[1:] == ["serve", "--host", "127.0.0.1", "--port", "8080"]
    cli_accepts(serve_cmd[1:])
    cli_accepts(housekeep_cmd[1:])
    assert serve["Restart"] == ["on-failure"]
    assert (
        serve["ReadWritePaths"]
        == ["/var/lib/queuebot"]
        == ["/var/lib/" + d for d in serve["StateDirectory"]]
    )
    for settings in (serve, housekeep):
        for key in ("NoNewPrivileges", "PrivateTmp", "ProtectHome"):
            assert settings[key] == ["true"], key
        assert settings["ProtectSystem"] == ["strict"]


@pytest.fixture(scope="module")
def installed_units(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The units with ExecStart pointing at this checkout's installed queuebot (systemd
    checks that the program exists), in a folder of their own."""
    installed = shutil.which("queuebot", path=str(Path(sys.executable).parent))
    if installed is None:
        pytest.skip("queuebot is not installed beside this Python")
    folder = tmp_path_factory.mktemp("units")
    for path in SYSTEMD.iterdir():
        text = path.read_text().replace("/opt/queuebot/.venv/bin/queuebot", installed)
        (folder / path.name).write_text(text)
    return folder


def test_systemd_analyze_verifies_the_units(installed_units: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    services = ["queuebot.service", "queuebot-housekeep.service", "queuebot-prune.service"]
    timers = ["queuebot-housekeep.timer", "queuebot-prune.timer"]
    run(analyze, "verify", *services, *timers, cwd=installed_units)
    for name in services[:2]:
        # systemd's own exposure score: 0 (locked down) to 10 (exposed); "OK" is under 4.
        # --threshold is in tenths of it: a score above 2.0 makes the command fail.
        said = run(
            analyze, "security", "--offline=true", "--threshold=20", name, cwd=installed_units
        )
        assert "Overall exposure level" in said


# ---------------------------------------------------------------------------------------
# The operator's guide


def test_every_queuebot_command_in_the_guide_exists() -> None:
    guide = OPERATIONS.read_text()
    blocks = re.findall(r"```(?:sh|console|bash)\n(.*?)```", guide, flags=re.S)
    commands = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
                words = words[1:]  # VAR=value before the command
            if words and Path(words[0]).name == "queuebot":
                commands.append(words[1:])
            elif words[:2] == ["docker", "run"]:  # docker run ... IMAGE COMMAND
                commands.append(words[words.index("queuebot:latest") + 1 :])
    assert len(commands) >= 10, commands
    # and the commands named in the text: `queuebot db prune --older-than 30d`
    known = set(_top_commands())
    for span in re.findall(r"`queuebot ([^`]+)`", guide):
        words = shlex.split(span)
        if words[0] in known:
            commands.append(words)
    for argv in commands:
        cli_accepts(argv[: _end(argv)])


def _end(argv: list[str]) -> int:
    """Where a shell pipe or redirection cuts the command line off."""
    for i, word in enumerate(argv):
        if word in ("|", ">", ">>", "&&", ";") or word.startswith((">", "|")):
            return i
    return len(argv)


def test_the_readme_links_the_operators_guide() -> None:
    assert "(docs/operations.md)" in (ROOT / "README.md").read_text()


# ---------------------------------------------------------------------------------------
# The reverse proxy


def answers(url: str) -> bool:
    try:
        return web.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def listens(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def serve_behind_nginx(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The real `queuebot serve` (SQLite, no chat platform) behind nginx running
    deploy/nginx/queuebot.conf as shipped, but for its addresses: a free port instead of
    443, a self-signed certificate, and serve's port as the upstream."""
    nginx = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin")
    openssl = shutil.which("openssl")
    if nginx is None or openssl is None:
        pytest.skip("nginx or openssl is not installed")
    db = tmp_path / "queuebot.db"
    env = {
        **clean_environ(),
        "PYTHONPATH": str(ROOT),
        "QUEUEBOT_DATABASE_URL": f"sqlite:///{db}",
        "QUEUEBOT_ALERT_TOKEN": "deploy-test-alert-token-0123",
    }
    env.pop("DISCORD_BOT_TOKEN", None)
    run(sys.executable, "-m", "bot.cli", "db", "upgrade", env=env, cwd=tmp_path)
    upstream, proxy = free_port(), free_port()
    run(
        openssl,
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=queuebot.example.com",
        "-keyout",
        tmp_path / "key.pem",
        "-out",
        tmp_path / "cert.pem",
    )
    conf = (DEPLOY / "nginx" / "queuebot.conf").read_text()
    for shipped, here in (
        ("server 127.0.0.1:8080;", f"server 127.0.0.1:{upstream};"),
        ("listen 443 ssl;", f"listen 127.0.0.1:{proxy} ssl;"),
        ("/etc/ssl/certs/queuebot.example.com.pem", str(tmp_path / "cert.pem")),
        ("/etc/ssl/private/queuebot.example.com.key", str(tmp_path / "key.pem")),
    ):
        assert conf.count(shipped) == 1, shipped
        conf = conf.replace(shipped, here)
    (tmp_path / "queuebot.conf").write_text(conf)
    (tmp_path / "nginx.conf").write_text(
        f"daemon off;\npid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/error.log;\n"
        "events {}\nhttp {\n"
        f"  access_log off;\n  client_body_temp_path {tmp_path}/body;\n"
        f"  proxy_temp_path {tmp_path}/proxy;\n"
        f"  include {tmp_path}/queuebot.conf;\n}}\n"
    )
    nginx_args = [nginx, "-p", str(tmp_path), "-e", str(tmp_path / "error.log")]
    run(*nginx_args, "-t", "-c", tmp_path / "nginx.conf")
    with (
        subprocess.Popen(
            [sys.executable, "-m", "bot.cli", "serve", "--port", str(upstream)],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ) as serve,
        subprocess.Popen(
            [*nginx_args, "-c", str(tmp_path / "nginx.conf")], stderr=subprocess.DEVNULL
        ) as proxy_process,
    ):
        try:
            deadline = time.monotonic() + 60
            while not (answers(f"http://127.0.0.1:{upstream}/healthz") and listens(proxy)):
                assert serve.poll() is None and proxy_process.poll() is None, "one exited"
                assert time.monotonic() < deadline, "serve or nginx did not come up in 60 s"
                time.sleep(0.2)
            yield f"https://127.0.0.1:{proxy}", f"http://127.0.0.1:{upstream}"
        finally:
            proxy_process.terminate()
            serve.terminate()
            proxy_process.wait(timeout=10)
            serve.wait(timeout=30)


def test_the_proxy_passes_slacks_one_path_and_nothing_else(
    serve_behind_nginx: tuple[str, str],
) -> None:
    outside, inside = serve_behind_nginx
    with httpx.Client(verify=False, timeout=10) as client:  # the test's self-signed cert
        # Slack's path reaches queuebot (which answers that Slack is off here).
        slack = client.post(f"{outside}/slack/events", content=b"token=x")
        assert slack.status_code == 503 and "Slack's HTTP endpoint is off" in slack.text
        # POST only, and no body past queuebot's own limit.
        assert client.get(f"{outside}/slack/events").status_code == 403
        big = client.post(f"{outside}/slack/events", content=b"x" * (300 * 1024))
        assert big.status_code == 413
        # Alertmanager's path only from Alertmanager's network (not this address).
        assert client.post(f"{outside}/alerts/alertmanager", content=b"{}").status_code == 403
        # Health, readiness and metrics answer on queuebot's port, never through the proxy.
        for path in ("/healthz", "/readyz", "/metrics", "/"):
            assert client.get(f"{outside}{path}").status_code == 404, path
        assert client.get(f"{inside}/healthz").status_code == 200
        assert client.get(f"{inside}/metrics").status_code == 200
