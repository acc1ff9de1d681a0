"""Per-process server state: settings, the active config + engine, TLS state, readiness, reloads.

The engine and its config live in one immutable :class:`Active` pair that a reload swaps in a
single assignment, so a request never mixes an old config with a new engine.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson

from gpuguard.webhook.config import DEFAULT_MAX_BODY_BYTES
from gpuguard.webhook.objects import ApiLookup
from gpuguard.webhook.server import filewatch, logs, metrics, scale, tls
from gpuguard.webhook.server.limits import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
    DEFAULT_READ_TIMEOUT,
    DEFAULT_REQUESTER_CONCURRENCY,
    DEFAULT_REQUESTER_QUEUE,
    DEFAULT_REQUESTER_QUEUE_BYTES,
)
from gpuguard.webhook.server.namespaces import NamespaceLabels, profiles_use_labels
from gpuguard.webhook.server.onepass import ValidationCache

if TYPE_CHECKING:
    from gpuguard.webhook.config import Config
    from gpuguard.webhook.engine.core import Engine
    from gpuguard.webhook.server.certwatch import SelfManagedCerts
    from gpuguard.webhook.server.envelope import AdmissionRequest
    from gpuguard.webhook.server.nodewatch import NodeWatch
    from gpuguard.workloads.inventory import Inventory


@dataclass(frozen=True)
class ServeSettings:
    """What ``gpuguard serve`` was asked for; JSON-serialisable so spawned workers get it too."""

    config_path: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None  # a replacement certificate must chain to this CA ...
    tls_server_names: tuple[str, ...] = ()  # ... and name these hosts (default: the startup cert's)
    host: str = "0.0.0.0"
    port: int = 8443
    workers: int = 1
    max_body_bytes: int | None = None  # None: the config's value, else DEFAULT_MAX_BODY_BYTES
    reload_interval: float = filewatch.DEFAULT_INTERVAL
    shutdown_timeout: int = 20
    keep_alive_timeout: int = 100
    read_timeout: float = DEFAULT_READ_TIMEOUT
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_connections_per_client: int = DEFAULT_MAX_CONNECTIONS_PER_CLIENT
    requester_concurrency: int = DEFAULT_REQUESTER_CONCURRENCY  # reviews of one requester judged at a time
    requester_queue: int = DEFAULT_REQUESTER_QUEUE  # ... and waiting, past which it is refused (429)
    requester_queue_bytes: int = DEFAULT_REQUESTER_QUEUE_BYTES  # ... and the bodies waiting
    log_level: str = "info"
    namespace_labels: bool = False  # look namespace labels up in the API (profiles may select by label)
    kubeconfig: str | None = None
    dra_claims: bool = False  # watch DRA claim templates and claims to count the devices pods claim
    node_inventory: bool = False  # watch Nodes: the inventory behind affinity, sizing and schedulable
    nodepool_refresh: float = 30.0  # seconds between reads of Karpenter NodePools (with node_inventory)

    @property
    def reads_the_cluster(self) -> bool:
        """Whether the server reads the cluster at all (a watch or lookups it was started with): only then does it
        list what policies read per namespace (its ResourceQuotas), so a server without cluster access never
        loads the API client for them."""
        return self.namespace_labels or self.dra_claims or self.node_inventory

    def to_json(self) -> str:
        return orjson.dumps(dataclasses.asdict(self)).decode()

    @classmethod
    def from_json(cls, text: str) -> ServeSettings:
        data = orjson.loads(text)
        data["tls_server_names"] = tuple(data.get("tls_server_names") or ())
        return cls(**data)


@dataclass(frozen=True)
class Active:
    """The config and the engine built from it, swapped together on reload."""

    config: Config
    engine: Engine


def build_active(config_path: str | None) -> Active:
    """Load the config (``None``: the shipped default) and build its engine; ConfigError propagates."""
    from gpuguard.webhook.config import load_config
    from gpuguard.webhook.engine.core import Engine

    config = load_config(config_path)
    return Active(config, Engine(config))


class ServerState:
    """Per-process server state: the active engine, the TLS state, readiness."""

    def __init__(self, settings: ServeSettings, active: Active) -> None:
        self.settings = settings
        self.active = active
        self.tls: tls.TlsState | None = None
        self.namespaces: NamespaceLabels | None = None
        self.nodes: NodeWatch | None = None  # --node-inventory: the engine's node groups follow it
        self.workloads = scale.WorkloadReader(settings.kubeconfig)  # what a `kubectl scale` scales
        self.objects = ApiLookup(settings.kubeconfig)  # TrainJob runtimes, read before the engine
        self.certs: SelfManagedCerts | None = None  # --self-managed-certs: the Secret and webhooks kept in step
        # A create's validating answer, found by its mutating review (one evaluation per create); None: off.
        self.one_pass: ValidationCache | None = ValidationCache()

    async def namespace_labels(self, req: AdmissionRequest) -> dict[str, str]:
        if self.namespaces is None or not profiles_use_labels(self.active.config):
            return {}
        return await self.namespaces.get(req.namespace)

    def apply_nodes(self, nodes: Inventory) -> None:
        """The node watch's new summary: the engine in force decides with it from the next review on."""
        self.active.engine.set_nodes(nodes)

    def max_body_bytes(self) -> int:
        if self.settings.max_body_bytes:
            return self.settings.max_body_bytes
        configured = getattr(self.active.config, "max_body_bytes", None)
        return configured if isinstance(configured, int) and configured > 0 else DEFAULT_MAX_BODY_BYTES

    def failure_open(self) -> bool:
        return getattr(self.active.config, "failure_mode", "closed") == "open"

    def not_ready(self) -> list[str]:
        """Why /readyz fails: TLS not loaded, the serving certificate expired, or it is close to
        expiry while its replacement was refused (the config is loaded before the app exists)."""
        if self.settings.tls_cert and self.tls is None:
            return ["TLS certificate not loaded"]
        problems = self.tls.problems() if self.tls is not None else []
        if self.certs is not None:
            problems += self.certs.problems()
        return problems

    async def reload_config(self) -> None:
        """Swap in the edited config; on any error keep the engine in force and say why."""
        from gpuguard.webhook.config import ConfigError

        log = logs.server_logger()
        try:
            active = await asyncio.to_thread(build_active, self.settings.config_path)
        except ConfigError as exc:
            metrics.CONFIG_RELOADS.labels(result="error").inc()
            log.error("config not reloaded; the previous config stays in force", extra={"error": str(exc)})
            return
        except Exception as exc:
            metrics.CONFIG_RELOADS.labels(result="error").inc()
            log.error("config not reloaded; the previous config stays in force",
                      extra=logs.exception_summary(exc))
            return
        if self.nodes is not None:
            active.engine.set_nodes(self.nodes.inventory)  # a new config keeps the cluster's nodes
        self.active = active
        metrics.CONFIG_RELOADS.labels(result="success").inc()
        log.info("config reloaded", extra={"config": self.settings.config_path})
