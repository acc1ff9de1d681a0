"""Main containers of the GPU serving operators, read where those operators really keep them.

NVIDIA Dynamo, the vLLM production-stack and the NIM Operator don't write their serving pods as
PodSpecs.  Dynamo and the production-stack ask for resources in a shorthand (``cpu``, ``memory``,
``gpu`` as a bare count, ``gpuType`` naming the extended resource, default ``nvidia.com/gpu``)
that the operator turns into the container's ``resources``; a NIMService is the pod and its one
container at once (``resources``, ``env``, ``image.repository``/``tag`` beside ``tolerations``).
The adapters here show policies the container the operator will create, count its accelerators
from the shorthand, and write defaults back into the fields the operator reads, so a NIMService
asking for 9 GPUs is judged at ``kubectl apply`` instead of failing later as operator status.
"""

from __future__ import annotations

from typing import Any, ClassVar

from gpuguard.workloads import quantity
from gpuguard.workloads.accelerators import Accelerators
from gpuguard.workloads.containers import Container, container_gpus
from gpuguard.workloads.kinds.kubeai import KUBEAI_CHART_PROFILES, resource_profile
from gpuguard.workloads.paths import Path, child_dict, get_path

# The extended resource a shorthand ``gpu`` count means when no ``gpuType`` says otherwise.
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
SHM_PATH = "/dev/shm"
_SHORTHAND_NATIVE = ("cpu", "memory")


def shorthand_resources(item: Any) -> dict[str, Any]:
    """A Dynamo / production-stack resource item (``cpu``, ``memory``, ``gpu``, ``gpuType``, ``custom``)
    as the Kubernetes resource list the operator writes from it."""
    if not isinstance(item, dict):
        return {}
    out: dict[str, Any] = {name: item[name] for name in _SHORTHAND_NATIVE if item.get(name) not in (None, "")}
    gpu = item.get("gpu")
    if gpu not in (None, ""):
        gpu_type = item.get("gpuType")
        out[gpu_type if isinstance(gpu_type, str) and gpu_type else DEFAULT_GPU_RESOURCE] = gpu
    custom = item.get("custom")
    if isinstance(custom, dict):
        out.update({k: v for k, v in custom.items() if isinstance(k, str)})
    return out


class ShorthandContainer(Container):
    """A main container whose resources come from an operator's shorthand items.

    ``items`` maps ``requests``/``limits`` to the path (from the object root) of the resource item the
    operator reads for that section; ``own`` is the container's own Kubernetes ``resources`` (Dynamo's
    ``extraPodSpec.mainContainer``), which the shorthand overrides.  Defaults are written into the
    shorthand (``cpu``/``memory`` only: it has no ephemeral-storage field).  ``operator_shm``: the
    operator mounts a memory-backed ``/dev/shm`` itself.
    """

    settable = frozenset(_SHORTHAND_NATIVE)

    def __init__(self, name: str, body: dict, spec_path: Path, root: dict, items: dict[str, Path],
                 accelerators: Accelerators, operator_shm: bool = False, key: str = "mainContainer"):
        super().__init__(None, key, body, spec_path)
        self.display = name
        self.root = root
        self.items = items
        self.operator_shm = operator_shm
        self.gpus, self.profiles = container_gpus({"resources": self.resources()}, accelerators)

    @property
    def name(self) -> str:
        own = self.body.get("name")
        return own if isinstance(own, str) and own else self.display

    @property
    def memory_setting(self) -> str:  # type: ignore[override]
        return f"{'.'.join(str(p) for p in self.items['limits'])}.memory"

    def _item(self, section: str) -> dict[str, Any]:
        path = self.items.get(section)
        return shorthand_resources(get_path(self.root, path)) if path else {}

    def resources(self, create: bool = False) -> dict | None:
        if create:
            return None  # written through set_resource
        own = self.body.get("resources")
        own = own if isinstance(own, dict) else {}
        out: dict[str, dict] = {}
        for section in ("requests", "limits"):
            base = own.get(section)
            out[section] = {**(base if isinstance(base, dict) else {}), **self._item(section)}
        return out

    def declared(self, section: str, name: str) -> Any:
        return self.resource_value(section, name)

    def can_set_resources(self) -> bool:
        for path in self.items.values():
            parent = get_path(self.root, path[:-1])
            if not isinstance(parent, dict) or not isinstance(parent.get(path[-1]), dict | None):
                return False
        return True

    def set_resource(self, section: str, name: str, value: str) -> bool:
        """Write ``name`` into the shorthand item the operator reads for ``section`` (cpu and memory)."""
        path = self.items.get(section)
        if name not in _SHORTHAND_NATIVE or path is None or self.declared(section, name) is not None:
            return False
        parent: Any = self.root
        for key in path:
            parent = child_dict(parent, key) if isinstance(key, str) else None
            if parent is None:
                return False
        if parent.get(name) == value:
            return False
        parent[name] = value
        return True

    def mounts(self) -> list[dict]:
        own = super().mounts()
        if self.operator_shm and not any(str(m.get("mountPath", "")).rstrip("/") == SHM_PATH for m in own):
            return [*own, {"name": "shared-memory", "mountPath": SHM_PATH}]
        return own

    def pod_body(self) -> dict:
        return {**self.body, "name": self.name, "resources": self.resources()}


class InlineContainer(Container):
    """The one container of a kind whose spec is the pod and its container at once (NIMService): its
    ``resources``, ``env``, ``command``, ``args`` are Kubernetes fields of the spec itself, its image an
    ``image: {repository, tag}`` record.  The operator mounts a memory-backed ``/dev/shm`` itself."""

    def __init__(self, name: str, body: dict, spec_path: Path, accelerators: Accelerators):
        super().__init__(None, "container", body, spec_path)
        self.display = name
        self.gpus, self.profiles = container_gpus(body, accelerators)

    @property
    def name(self) -> str:
        return self.display

    @property
    def path(self) -> Path:
        return self.spec_path

    def mounts(self) -> list[dict]:
        own = super().mounts()
        if any(str(m.get("mountPath", "")).rstrip("/") == SHM_PATH for m in own):
            return own
        return [*own, {"name": "dshm", "mountPath": SHM_PATH}]

    def image(self) -> Any:
        image = self.body.get("image")
        if isinstance(image, dict):
            repository, tag = image.get("repository"), image.get("tag")
            if isinstance(repository, str):
                return f"{repository}:{tag}" if isinstance(tag, str | int) and tag != "" else repository
            return None
        return image

    def pod_body(self) -> dict:
        body = {key: self.body[key] for key in ("command", "args", "env", "envFrom", "volumeMounts")
                if key in self.body}
        return {"name": self.name, "image": self.image(), **body, "resources": self.body.get("resources") or {}}


def inline_container(obj: dict, spec_path: Path, spec: dict, accelerators: Accelerators) -> Container:
    """A NIMService's one container: the spec is the pod and its container at once."""
    name = get_path(obj, ("metadata", "name"))
    return InlineContainer(f"{name}-ctr" if isinstance(name, str) else "nim", spec, spec_path, accelerators)


def dynamo_container(obj: dict, spec_path: Path, spec: dict, accelerators: Accelerators) -> Container:
    """A Dynamo service's main container: ``spec_path`` is <service>.extraPodSpec; the service holds the
    resource shorthand and ``sharedMemory``."""
    service = spec_path[:-1]
    main = spec.get("mainContainer")
    shm = get_path(obj, service + ("sharedMemory", "disabled"))
    return ShorthandContainer("main", main if isinstance(main, dict) else {}, spec_path, obj,
                              {"requests": service + ("resources", "requests"),
                               "limits": service + ("resources", "limits")},
                              accelerators, operator_shm=shm is not True)


def vllm_container(obj: dict, spec_path: Path, spec: dict, accelerators: Accelerators) -> Container:
    """A production-stack VLLMRuntime's server: ``spec_path`` is spec.deploymentConfig; one item serves as
    requests and limits.  The runtime has no volume fields, so /dev/shm can't be added there (operator_shm keeps
    shm-volume from writing any)."""
    image = spec.get("image")
    body: dict[str, Any] = {}
    if isinstance(image, dict) and isinstance(image.get("name"), str):
        registry = image.get("registry")
        body["image"] = f"{registry}/{image['name']}" if isinstance(registry, str) and registry else image["name"]
    env = get_path(obj, spec_path[:-1] + ("vllmConfig", "env"))
    if isinstance(env, list):
        body["env"] = env
    item = spec_path + ("resources",)
    return ShorthandContainer("vllm", body, spec_path, obj, {"requests": item, "limits": item}, accelerators,
                              operator_shm=True, key="vllm")


# Pod fields a KubeAI resource profile gives its pods.
KUBEAI_POD_FIELDS = ("nodeSelector", "affinity", "tolerations", "runtimeClassName", "schedulerName")


def kubeai_profile(spec: dict, accelerators: Accelerators) -> tuple[str, int, dict | None] | None:
    """(profile name, count, the profile or ``None`` when gpuguard doesn't know it) of a KubeAI Model spec;
    ``None`` when the Model names no (readable) profile."""
    named = resource_profile(spec)
    if named is None:
        return None
    profiles = accelerators.kubeai_profiles if accelerators.kubeai_profiles is not None else KUBEAI_CHART_PROFILES
    profile = profiles.get(named[0])
    return named[0], named[1], profile if isinstance(profile, dict) else None


def _times(value: Any, factor: int) -> Any:
    amount = quantity.parse(value)
    return value if amount is None or factor == 1 else f"{(amount * factor).normalize():f}"


class KubeAIContainer(Container):
    """A KubeAI model server: the resources of its Model's profile times the profile count.  Nothing can be
    written for it (a Model has no resources field): its sizes are the KubeAI config's."""

    settable: ClassVar[frozenset[str] | None] = frozenset()

    def __init__(self, body: dict, spec_path: Path, resources: dict, profile: str, accelerators: Accelerators):
        super().__init__(None, "server", body, spec_path)
        self.profile = profile
        self._resources = resources
        self.gpus, self.profiles = container_gpus({"resources": resources}, accelerators)

    @property
    def name(self) -> str:
        return "server"

    @property
    def path(self) -> Path:
        return self.spec_path + ("resourceProfile",)

    @property
    def memory_setting(self) -> str:  # type: ignore[override]
        return f"limits.memory of the KubeAI resource profile {self.profile} (the KubeAI config's resourceProfiles)"

    def resources(self, create: bool = False) -> dict | None:
        return None if create else self._resources

    def declared(self, section: str, name: str) -> Any:
        return self.resource_value(section, name)

    def can_set_resources(self) -> bool:
        return False

    def set_resource(self, section: str, name: str, value: str) -> bool:
        return False

    def env(self) -> dict[str, Any]:
        values = self.body.get("env")
        return {k: v if isinstance(v, str) else None for k, v in values.items()} if isinstance(values, dict) else {}

    def mounts(self) -> list[dict]:
        return [{"name": "dshm", "mountPath": SHM_PATH}]  # no field to add one; KubeAI's servers mount their own

    def pod_body(self) -> dict:
        env = [{"name": k, "value": v} for k, v in self.env().items()]
        return {"name": self.name, "image": self.body.get("image"), "env": env, "resources": self._resources}


def kubeai_container(spec: dict, spec_path: Path, accelerators: Accelerators) -> Container:
    """A KubeAI Model's server, sized by the resource profile it names."""
    resolved = kubeai_profile(spec, accelerators)
    resources: dict[str, dict] = {"requests": {}, "limits": {}}
    name = resolved[0] if resolved else ""
    if resolved is not None and resolved[2] is not None:
        for section in ("requests", "limits"):
            values = resolved[2].get(section)
            if isinstance(values, dict):
                resources[section] = {k: _times(v, resolved[1]) for k, v in values.items()}
    body = {"image": spec.get("image"), "env": spec.get("env")} if isinstance(spec.get("image"), str) else \
        {"env": spec.get("env")}
    return KubeAIContainer(body, spec_path, resources, name, accelerators)


def kubeai_pod_fields(spec: dict, accelerators: Accelerators) -> dict[str, Any]:
    """Pod fields a KubeAI Model takes from its resource profile: shown to policies in the template, and put
    back by ``WorkloadView.settle`` where no policy changed them."""
    resolved = kubeai_profile(spec, accelerators)
    profile = resolved[2] if resolved is not None else None
    return {k: profile[k] for k in KUBEAI_POD_FIELDS if profile and profile.get(k)}


def kubeai_unread(spec: dict, spec_path: Path, accelerators: Accelerators) -> list[tuple[Path, str]]:
    """A KubeAI Model whose profile gpuguard can't read: its pods' resources can't be known."""
    resolved = kubeai_profile(spec, accelerators)
    if resolved is not None and resolved[2] is None:
        return [(spec_path + ("resourceProfile",), f"the KubeAI resource profile {resolved[0]!r} is not in "
                 "gpuguard's kubeai.resourceProfiles, so the pods' resources can't be known; add it there as in "
                 "the KubeAI config")]
    if resolved is None and spec.get("resourceProfile") not in (None, ""):
        return [(spec_path + ("resourceProfile",), "resourceProfile is not <profile>:<count>, so the pods' "
                 "resources can't be known")]
    return []


def nim_unread(spec: dict, spec_path: Path) -> list[tuple[Path, str]]:
    """A NIMService's ``draResources`` (claims the operator creates or names from them): devices gpuguard can't
    count.  The engine refuses such a template (what can't be judged is refused) unless the admin chose
    ``failureMode: open``."""
    if spec.get("draResources"):
        return [(spec_path + ("draResources",), "the devices of draResources (DRA claims the NIM Operator creates "
                 "or names) can't be counted from the NIMService; ask for GPUs in resources.limits instead, or an "
                 "admin may set failureMode: open")]
    return []
