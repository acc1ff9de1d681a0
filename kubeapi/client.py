"""Kubernetes API clients: which credentials gpuguard uses, and the few API groups it calls.

Credentials are looked up in one order for every command (``serve --namespace-labels``,
``certs inject``, ``audit --cluster``), the order controller-runtime and most operators use:

1. ``--kubeconfig FILE`` / ``--context NAME`` when given;
2. the ``KUBECONFIG`` environment variable;
3. the pod's service account (in-cluster), when running in a pod;
4. ``~/.kube/config``.

In-cluster comes before ``~/.kube/config`` so that a kubeconfig baked into an image never
wins over the service account the Deployment was given, and after ``KUBECONFIG`` so that an
admin who points a command at a cluster from inside a pod gets the cluster they named.

The API classes are returned untyped (``Any``): the kubernetes client has no type hints, and
callers use ``_preload_content=False`` and read JSON themselves, because the client's models
reject fields newer than the client.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import yaml
from kubernetes import client as _client
from kubernetes import config as _config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

# An error status from the API server (``.status``, ``.reason``, ``.body``): re-exported so that
# callers catch it without importing ``kubernetes``.
ApiError = ApiException

IN_CLUSTER_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


class KubeConfigError(Exception):
    """No usable credentials: a missing or broken kubeconfig, an unknown context, no service account."""


@dataclass(frozen=True)
class Connection:
    """An API client and where it points."""

    api: Any  # kubernetes.client.ApiClient
    namespace: str  # the context's namespace (kubectl's default), or the pod's own namespace in-cluster
    context: str  # the kubeconfig context's name, or "in-cluster"


def _wants_in_cluster(kubeconfig: str | None, context: str | None) -> bool:
    return (kubeconfig is None and context is None and not os.environ.get("KUBECONFIG")
            and bool(os.environ.get("KUBERNETES_SERVICE_HOST")))


DEFAULT_KUBECONFIG = "~/.kube/config"
_NAME_ANOTHER = "pass --kubeconfig FILE (or set KUBECONFIG) to use another"


def _tried(kubeconfig: str | None) -> tuple[list[str], str]:
    """The kubeconfig file(s) a connection reads, and what named them (for error messages)."""
    if kubeconfig:
        return [kubeconfig], "--kubeconfig"
    env = os.environ.get("KUBECONFIG")
    if env:
        return [p for p in env.split(os.pathsep) if p] or [env], "$KUBECONFIG"
    return [os.path.expanduser(DEFAULT_KUBECONFIG)], f"the default, {DEFAULT_KUBECONFIG}"


def _load_error(kubeconfig: str | None, exc: BaseException) -> KubeConfigError:
    """``cannot load kubeconfig …`` naming the file(s) tried, where they came from and ``--kubeconfig``."""
    files, named_by = _tried(kubeconfig)
    where = f"{', '.join(files)} (from {named_by})"
    if not any(os.path.exists(f) for f in files):
        why = "no such file" if len(files) == 1 else "none of these files exists"
        return KubeConfigError(f"cannot load kubeconfig {where}: {why}; {_NAME_ANOTHER}")
    reason = " ".join(str(exc).split())  # the YAML parser's message spans lines: one line here
    return KubeConfigError(f"cannot load kubeconfig {where}: {reason}; fix it, or {_NAME_ANOTHER}")


def connect(kubeconfig: str | None = None, context: str | None = None) -> Connection:
    """A client by the order in this module's docstring, or ``KubeConfigError`` saying why not."""
    if _wants_in_cluster(kubeconfig, context):
        return _in_cluster()
    try:
        contexts, active = _config.list_kube_config_contexts(config_file=kubeconfig)
    except (ConfigException, OSError, ValueError, yaml.YAMLError) as exc:
        raise _load_error(kubeconfig, exc) from None
    chosen = active
    if context:
        chosen = next((c for c in contexts if c.get("name") == context), None)
        if chosen is None:
            names = ", ".join(c.get("name", "?") for c in contexts) or "none"
            files, _ = _tried(kubeconfig)
            raise KubeConfigError(f"context {context!r} not found in kubeconfig {', '.join(files)} "
                                  f"(contexts: {names})")
    try:
        api = _config.new_client_from_config(config_file=kubeconfig, context=context)
    except (ConfigException, OSError, ValueError, yaml.YAMLError) as exc:
        raise _load_error(kubeconfig, exc) from None
    namespace = ((chosen or {}).get("context") or {}).get("namespace") or "default"
    return Connection(api, namespace, (chosen or {}).get("name") or "current")


def _in_cluster() -> Connection:
    configuration = _client.Configuration()
    try:
        _config.load_incluster_config(client_configuration=configuration)
    except ConfigException as exc:
        raise KubeConfigError(f"no kubeconfig and no usable in-cluster service account: {exc}; "
                              f"{_NAME_ANOTHER}") from None
    try:
        with open(IN_CLUSTER_NAMESPACE_FILE, encoding="utf-8") as handle:
            namespace = handle.read().strip() or "default"
    except OSError:
        namespace = "default"
    return Connection(_client.ApiClient(configuration), namespace, "in-cluster")


def core_v1(api: Any) -> Any:
    """Namespaces, pods and core discovery."""
    return _client.CoreV1Api(api)


def apis(api: Any) -> Any:
    """``/apis`` discovery: the API groups and versions a cluster serves."""
    return _client.ApisApi(api)


def custom_objects(api: Any) -> Any:
    """Custom resources (Kubeflow, JobSet, Ray ...) and their discovery."""
    return _client.CustomObjectsApi(api)


def admissionregistration_v1(api: Any) -> Any:
    """Mutating and validating webhook configurations."""
    return _client.AdmissionregistrationV1Api(api)


def watcher() -> Any:
    """A ``kubernetes.watch.Watch``: streams list-then-watch events (the server's cached watches)."""
    from kubernetes import watch

    return watch.Watch()


# Requests made through ``request``, by HTTP verb (``watch`` for watches): the scan exports them as a
# metric and ``bench/scan.py`` reads them to measure its API load.
REQUESTS: dict[str, int] = {}


def request(api: Any, method: str, path: str, query: dict[str, Any] | None = None, body: Any = None,
            timeout: float | tuple[float, float] | None = None, stream: bool = False) -> Any:
    """A raw API call: ``path`` (``/apis/group/version/...``) with ``query``, ``body`` sent as JSON.

    Returns the urllib3 response: read whole (``.data``) and its connection back in the pool, or with
    ``stream`` unread (``.stream()``, for a watch; the caller releases it).  Callers parse JSON
    themselves; an error status raises ``ApiError`` with the body.
    """
    pairs = [(k, str(v).lower() if isinstance(v, bool) else v) for k, v in (query or {}).items() if v is not None]
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    verb = "watch" if (query or {}).get("watch") else method.lower()
    REQUESTS[verb] = REQUESTS.get(verb, 0) + 1
    method, url, headers, body, _ = api.param_serialize(method, path, query_params=pairs, header_params=headers,
                                                       body=body, auth_settings=["BearerToken"])
    response = api.call_api(method, url, header_params=headers, body=body, _request_timeout=timeout).response
    if response.status >= 400 or not stream:
        data = response.data  # read whole: a connection goes back to the pool only with nothing left unread
        response.release_conn()
        if response.status >= 400:
            raise ApiException(status=response.status, reason=response.reason,
                               body=data.decode("utf-8", "replace") if isinstance(data, bytes) else data)
    return response
