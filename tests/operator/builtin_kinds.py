"""The built-in kinds the operator writes, decoded and validated as kube-apiserver does.

Decoding (:meth:`BuiltinKind.prepare`) follows the kind's published OpenAPI shape, from
Kubernetes 1.35's as ``kubernetes-validate`` bundles it: fields the kind does not have
are dropped (a typed server has nowhere to keep them); a value of the wrong JSON type,
a Secret's ``data`` that is not base64 or a quantity that does not parse is refused
with ``400 BadRequest`` ("cannot be handled as a Pod: ..."), as Go's decoder refuses
it; a Secret's ``stringData`` is folded into ``data`` (base64), as its conversion does,
and is never stored. The OpenAPI document's ``required`` lists are not checked: the API
server decodes a missing field as its zero value and only its validation decides.

Validation (:meth:`BuiltinKind.validate`) mirrors ``pkg/apis/core/validation`` and its
siblings where the operator could get an object wrong, each error as a
:class:`fielderrors.FieldError`:

- Pod: at least one container; container and init container names DNS-1123 labels,
  unique across both; an image; ports (1-65535, IANA names at most 15 characters,
  unique in their container, TCP/UDP/SCTP); env names and their secret and ConfigMap
  references; volumes (DNS-1123 label names, unique, exactly one source, the Secret,
  ConfigMap or claim each names, modes); volume mounts (a volume of the Pod, a mount
  path, unique, a relative sub-path without ``..``); resources (requests at most their
  limits, none negative); probes (one handler, a valid port); enumerations
  (``restartPolicy``, ``imagePullPolicy``, ``terminationMessagePolicy``); the service
  account's name; on update, a spec unchanged but for images and the few fields Pods
  let change;
- Secret and ConfigMap: keys (configuration keys), 1 MiB of data at most, a Secret's
  type unchanged, an ``immutable`` one's data unchanged;
- PersistentVolumeClaim: access modes, a storage request above zero, the class's name;
  on update, a spec unchanged but for its requests;
- NetworkPolicy: selectors, policy types, peers (one kind each, CIDRs that parse, with
  exceptions inside them), ports (numbers or names, ``endPort`` only after a number);
- Event: the involved object's namespace is the Event's; Lease: durations above zero.

Times decode as Go's ``metav1.Time`` (RFC 3339) and ``MicroTime`` (exactly six digits
of a second's fraction) do: a Lease's ``renewTime`` without them is a 400.

Names are checked with the rest of the metadata (:mod:`tests.operator.names`), by the
rule of each resource (:func:`name_rule`). Pure: no IO but reading the bundled schemas
once, no state.
"""

from __future__ import annotations

import base64
import binascii
import copy
import dataclasses
import decimal
import functools
import importlib.resources
import ipaddress
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from tests.operator import apimachinery, fielderrors, limits, names
from tests.operator.fielderrors import FieldError, child, index, key

Body = dict[str, Any]
Validator = Callable[[Body, Body | None], list[FieldError]]

SCHEMAS = "v1.35.0-local"
"""The bundled OpenAPI shapes decoded against: the version the emulator reports."""


def name_rule(plural: str) -> names.NameRule:
    """How a resource's object names are checked: most as DNS-1123 subdomains;
    Namespaces as DNS-1123 labels; Services as DNS-1035 labels; RBAC's roles and
    bindings as path segments."""
    rules = {"namespaces": names.is_dns1123_label, "services": names.is_dns1035_label}
    rbac = ("roles", "rolebindings", "clusterroles", "clusterrolebindings")
    rules |= dict.fromkeys(rbac, names.is_path_segment_name)
    return rules.get(plural, names.is_dns1123_subdomain)


# --- Decoding ---------------------------------------------------------------------------


@functools.cache
def _definitions() -> Mapping[str, Any]:
    bundled = importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema"
    text = (bundled / SCHEMAS / "_definitions.json").read_text(encoding="utf-8")
    found: Mapping[str, Any] = json.loads(text)["$defs"]
    return found


def _resolved(node: Mapping[str, Any]) -> Mapping[str, Any]:
    while "$ref" in node:
        node = _definitions()[str(node["$ref"]).rsplit("/", 1)[-1]]
    return node


QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
QUANTITY_SUFFIXES = {
    "": 1,
    "n": decimal.Decimal("1e-9"),
    "u": decimal.Decimal("1e-6"),
    "m": decimal.Decimal("1e-3"),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


def quantity(value: Any) -> decimal.Decimal:
    """A resource quantity's value (``resource.ParseQuantity``); ``ValueError`` with the
    decoder's words if it does not parse."""
    text = str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value
    found = QUANTITY.match(text) if isinstance(text, str) else None
    words = f"quantities must match the regular expression '{QUANTITY.pattern}'"
    if found is None or found[1].count(".") > 1 or not any(c.isdigit() for c in found[1]):
        raise ValueError(words)
    number, suffix = decimal.Decimal(found[1]), found[2]
    if suffix in QUANTITY_SUFFIXES:
        return number * decimal.Decimal(QUANTITY_SUFFIXES[suffix])
    exponent = re.fullmatch(r"[eE]([-+]?[0-9]+)", suffix)
    if exponent is None:
        raise ValueError("unable to parse quantity's suffix")
    return number * decimal.Decimal(10) ** int(exponent[1])


class Undecodable(ValueError):
    """A value Go's decoder would refuse: the path and why."""


_JSON_TYPES: Mapping[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
}


TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
"""``metav1.Time``: Go's ``time.RFC3339`` (a fraction of a second allowed, a zone
required)."""
MICRO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|[+-]\d{2}:\d{2})$")
"""``metav1.MicroTime``: ``RFC3339Micro``, exactly six digits of a second's fraction (a
Lease's ``renewTime``, an ``events.k8s.io`` Event's ``eventTime``)."""


def decode(value: Any, node: Mapping[str, Any], path: str) -> Any:
    """``value`` as a typed server keeps it: unknown fields and nulls dropped;
    ``Undecodable`` for what Go's decoder refuses."""
    reference = str(node.get("$ref", "")).rsplit("/", 1)[-1]
    times = {
        "io.k8s.apimachinery.pkg.apis.meta.v1.Time": (TIME, "2006-01-02T15:04:05Z07:00"),
        "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime": (
            MICRO_TIME,
            "2006-01-02T15:04:05.000000Z07:00",
        ),
    }
    if reference in times and isinstance(value, str):
        pattern, layout = times[reference]
        if not pattern.match(value):
            raise Undecodable(f'{path}: parsing time "{value}" as "{layout}": cannot parse')
        return value
    node = _resolved(node)
    if "oneOf" in node:  # IntOrString, Quantity
        shapes = [_resolved(choice) for choice in node["oneOf"]]
        if not any(_fits(value, shape) for shape in shapes):
            raise Undecodable(
                f"{path}: cannot unmarshal {_json_name(value)} into a string or number"
            )
        if node is _definitions().get("io.k8s.apimachinery.pkg.api.resource.Quantity"):
            try:
                quantity(value)
            except ValueError as error:
                raise Undecodable(f"{path}: {error}") from error
        return value
    if not _fits(value, node):
        raise Undecodable(f"{path}: cannot unmarshal {_json_name(value)} into {_types(node)}")
    if isinstance(value, dict):
        properties = node.get("properties") or {}
        extra = node.get("additionalProperties")
        kept = {}
        for name, item in value.items():
            if item is None:
                continue
            if name in properties:
                kept[name] = decode(item, properties[name], child(path, name))
            elif isinstance(extra, Mapping):
                kept[name] = decode(item, extra, child(path, name))
            elif not properties:  # a free map (of nothing declared): kept as written
                kept[name] = item
        return kept
    if isinstance(value, list) and "items" in node:
        return [decode(item, node["items"], index(path, i)) for i, item in enumerate(value)]
    if node.get("format") == "byte" and isinstance(value, str):
        try:
            base64.b64decode(value, validate=True)
        except binascii.Error as error:
            raise Undecodable(f"{path}: illegal base64 data: {error}") from error
    return value


def _types(node: Mapping[str, Any]) -> list[str]:
    kinds = node.get("type")
    return [kinds] if isinstance(kinds, str) else list(kinds or [])


def _fits(value: Any, node: Mapping[str, Any]) -> bool:
    kinds = [kind for kind in _types(node) if kind != "null"]
    return not kinds or value is None or any(_JSON_TYPES[kind](value) for kind in kinds)


def _json_name(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


# --- The kinds --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class BuiltinKind:
    """A built-in kind: its OpenAPI definition and its validation."""

    kind: str
    api_version: str
    definition: str
    validator: Validator | None = None

    def prepare(self, body: Body) -> Body:
        """The body as the API server decodes it (400 for what it cannot)."""
        body = copy.deepcopy(body)
        plain = body.get("stringData")
        # Folded where it is a map of strings; anything else the decoder refuses below.
        strings = isinstance(plain, Mapping) and all(isinstance(v, str) for v in plain.values())
        if self.kind == "Secret" and strings:
            data = dict(body.get("data") or {})
            data |= {k: base64.b64encode(v.encode()).decode() for k, v in plain.items()}
            body["data"] = data
            del body["stringData"]
        meta = body.pop("metadata", {})
        try:
            decoded = decode(body, {"$ref": self.definition}, "")
            decoded["metadata"] = decode(
                meta, {"$ref": "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}, "metadata"
            )
        except Undecodable as error:
            raise apimachinery.ApiError(
                400,
                f'{self.kind} in version "{self.api_version.rsplit("/", 1)[-1]}" cannot be '
                f"handled as a {self.kind}: {error}",
            ) from error
        return decoded

    def validate(self, body: Body, old: Body | None) -> list[FieldError]:
        return self.validator(body, old) if self.validator is not None else []


# --- Pod ---------------------------------------------------------------------------------

VOLUME_SOURCES = (
    "emptyDir",
    "secret",
    "configMap",
    "persistentVolumeClaim",
    "projected",
    "downwardAPI",
    "hostPath",
    "ephemeral",
    "csi",
    "image",
    "nfs",
)
PROTOCOLS = ["SCTP", "TCP", "UDP"]


def _in(field: str, value: Any, allowed: list[str]) -> list[FieldError]:
    return (
        []
        if value is None or value in allowed
        else [fielderrors.not_supported(field, value, allowed)]
    )


def _named(field: str, value: Any, rule: names.NameRule) -> list[FieldError]:
    """A name required and valid by ``rule``."""
    if not value:
        return [fielderrors.required(field)]
    return [fielderrors.invalid(field, value, message) for message in rule(str(value))]


def _mode(field: str, value: Any) -> list[FieldError]:
    if value is None or 0 <= value <= 0o777:
        return []
    return [
        fielderrors.invalid(
            field, value, "must be a number between 0 and 0777 (octal), both inclusive"
        )
    ]


def _port(field: str, value: Any) -> list[FieldError]:
    """A port by number (1-65535) or by IANA name."""
    if isinstance(value, int):
        if 1 <= value <= 65535:
            return []
        return [fielderrors.invalid(field, value, "must be between 1 and 65535, inclusive")]
    return [fielderrors.invalid(field, value, m) for m in names.is_port_name(str(value))]


def _volumes(volumes: list[Body], path: str) -> tuple[list[FieldError], set[str]]:
    errors: list[FieldError] = []
    seen: set[str] = set()
    for i, volume in enumerate(volumes):
        where = index(path, i)
        name = volume.get("name", "")
        errors += _named(f"{where}.name", name, names.is_dns1123_label)
        if name in seen:
            errors.append(fielderrors.duplicate(f"{where}.name", name))
        seen.add(name)
        sources = [source for source in VOLUME_SOURCES if source in volume]
        if not sources:
            errors.append(fielderrors.required(where, "must specify a volume type"))
        for extra in sources[1:]:
            errors.append(
                fielderrors.forbidden(f"{where}.{extra}", "may not specify more than 1 volume type")
            )
        if "secret" in volume:
            secret = volume["secret"]
            errors += _named(
                f"{where}.secret.secretName", secret.get("secretName"), names.is_dns1123_subdomain
            )
            errors += _mode(f"{where}.secret.defaultMode", secret.get("defaultMode"))
        if "configMap" in volume:
            errors += _named(
                f"{where}.configMap.name",
                volume["configMap"].get("name"),
                names.is_dns1123_subdomain,
            )
            errors += _mode(
                f"{where}.configMap.defaultMode", volume["configMap"].get("defaultMode")
            )
        if "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"].get("claimName")
            errors += _named(
                f"{where}.persistentVolumeClaim.claimName", claim, names.is_dns1123_subdomain
            )
    return errors, seen


def _container(container: Body, where: str, volumes: set[str]) -> list[FieldError]:
    errors: list[FieldError] = []
    image = container.get("image")
    if not image:
        errors.append(fielderrors.required(f"{where}.image"))
    elif image != image.strip():
        errors.append(
            fielderrors.invalid(
                f"{where}.image", image, "must not have leading or trailing whitespace"
            )
        )
    port_names: set[str] = set()
    for i, port in enumerate(container.get("ports") or []):
        at = index(f"{where}.ports", i)
        if "containerPort" not in port:
            errors.append(fielderrors.required(f"{at}.containerPort"))
        else:
            errors += _port(f"{at}.containerPort", port["containerPort"])
        if port.get("name"):
            errors += [
                fielderrors.invalid(f"{at}.name", port["name"], m)
                for m in names.is_port_name(port["name"])
            ]
            if port["name"] in port_names:
                errors.append(fielderrors.duplicate(f"{at}.name", port["name"]))
            port_names.add(port["name"])
        errors += _in(f"{at}.protocol", port.get("protocol"), PROTOCOLS)
    for i, variable in enumerate(container.get("env") or []):
        at = index(f"{where}.env", i)
        errors += [
            fielderrors.invalid(f"{at}.name", variable.get("name", ""), m)
            for m in names.is_env_var_name(variable.get("name", ""))
        ]
        source = variable.get("valueFrom")
        if source is not None and variable.get("value"):
            errors.append(
                fielderrors.invalid(
                    f"{at}.valueFrom", "", "may not be specified when `value` is not empty"
                )
            )
        for selector in ("secretKeyRef", "configMapKeyRef"):
            if source is not None and selector in source:
                ref = source[selector]
                errors += _named(
                    f"{at}.valueFrom.{selector}.name", ref.get("name"), names.is_dns1123_subdomain
                )
                errors += _named(
                    f"{at}.valueFrom.{selector}.key", ref.get("key"), names.is_config_key
                )
    for i, source in enumerate(container.get("envFrom") or []):
        at = index(f"{where}.envFrom", i)
        refs = [ref for ref in ("configMapRef", "secretRef") if ref in source]
        if len(refs) != 1:
            errors.append(
                fielderrors.invalid(at, "", "must specify one of: `configMapRef` or `secretRef`")
            )
        for ref in refs:
            errors += _named(
                f"{at}.{ref}.name", source[ref].get("name"), names.is_dns1123_subdomain
            )
    mounts: set[str] = set()
    for i, mount in enumerate(container.get("volumeMounts") or []):
        at = index(f"{where}.volumeMounts", i)
        if mount.get("name") not in volumes:
            errors.append(fielderrors.not_found(f"{at}.name", mount.get("name", "")))
        path = mount.get("mountPath")
        if not path:
            errors.append(fielderrors.required(f"{at}.mountPath"))
        elif path in mounts:
            errors.append(fielderrors.invalid(f"{at}.mountPath", path, "must be unique"))
        mounts.add(path or "")
        sub = mount.get("subPath") or ""
        if sub.startswith("/"):
            errors.append(fielderrors.invalid(f"{at}.subPath", sub, "must be a relative path"))
        if ".." in sub.split("/"):
            errors.append(fielderrors.invalid(f"{at}.subPath", sub, "must not contain '..'"))
    errors += _resources(container.get("resources") or {}, f"{where}.resources")
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        if probe in container:
            errors += _probe(container[probe], f"{where}.{probe}")
    errors += _in(
        f"{where}.imagePullPolicy",
        container.get("imagePullPolicy"),
        ["Always", "IfNotPresent", "Never"],
    )
    errors += _in(
        f"{where}.terminationMessagePolicy",
        container.get("terminationMessagePolicy"),
        ["FallbackToLogsOnError", "File"],
    )
    return errors


def _resources(resources: Body, where: str) -> list[FieldError]:
    errors: list[FieldError] = []
    limits_, requests = resources.get("limits") or {}, resources.get("requests") or {}
    for part, values in (("limits", limits_), ("requests", requests)):
        for name, value in values.items():
            if quantity(value) < 0:
                errors.append(
                    fielderrors.invalid(
                        key(f"{where}.{part}", name), value, "must be greater than or equal to 0"
                    )
                )
    for name, value in requests.items():
        if name in limits_ and quantity(value) > quantity(limits_[name]):
            errors.append(
                fielderrors.invalid(
                    key(f"{where}.requests", name),
                    value,
                    f"must be less than or equal to {name} limit of {limits_[name]}",
                )
            )
    return errors


def _probe(probe: Body, where: str) -> list[FieldError]:
    handlers = [h for h in ("exec", "httpGet", "tcpSocket", "grpc") if h in probe]
    if not handlers:
        return [fielderrors.required(where, "must specify a handler type")]
    errors = [
        fielderrors.forbidden(f"{where}.{h}", "may not specify more than 1 handler type")
        for h in handlers[1:]
    ]
    for handler in ("httpGet", "tcpSocket"):
        if handler in probe:
            errors += _port(f"{where}.{handler}.port", probe[handler].get("port"))
    return errors


POD_MUTABLE_SPEC = (
    "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
    "`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)


def _pod(body: Body, old: Body | None) -> list[FieldError]:
    spec = body.get("spec") or {}
    if old is not None:
        return _pod_update(spec, old.get("spec") or {})
    errors, volumes = _volumes(spec.get("volumes") or [], "spec.volumes")
    if not spec.get("containers"):
        errors.append(fielderrors.required("spec.containers"))
    seen: set[str] = set()
    for part in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(part) or []):
            where = index(f"spec.{part}", i)
            name = container.get("name", "")
            errors += _named(f"{where}.name", name, names.is_dns1123_label)
            if name in seen:
                errors.append(fielderrors.duplicate(f"{where}.name", name))
            seen.add(name)
            errors += _container(container, where, volumes)
    errors += _in("spec.restartPolicy", spec.get("restartPolicy"), ["Always", "Never", "OnFailure"])
    if spec.get("serviceAccountName"):
        errors += _named(
            "spec.serviceAccountName", spec["serviceAccountName"], names.is_dns1123_subdomain
        )
    return errors


def _pod_update(spec: Body, before: Body) -> list[FieldError]:
    def mutable_blanked(value: Body) -> Body:
        blanked = copy.deepcopy(value)
        for part in ("containers", "initContainers"):
            for container in blanked.get(part) or []:
                container.pop("image", None)
        for field in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds"):
            blanked.pop(field, None)
        return blanked

    if mutable_blanked(spec) == mutable_blanked(before):
        return []
    return [
        fielderrors.forbidden(
            "spec", f"pod updates may not change fields other than {POD_MUTABLE_SPEC}"
        )
    ]


# --- Secret, ConfigMap ------------------------------------------------------------------


def _keys(data: Mapping[str, Any], path: str) -> list[FieldError]:
    return [
        fielderrors.invalid(key(path, name), name, message)
        for name in data
        for message in names.is_config_key(name)
    ]


def _secret(body: Body, old: Body | None) -> list[FieldError]:
    data = body.get("data") or {}
    errors = _keys(data, "data")
    size = sum(len(base64.b64decode(value)) for value in data.values())
    if size > limits.MAX_CONFIG_DATA_BYTES:
        errors.append(fielderrors.too_long("data", limits.MAX_CONFIG_DATA_BYTES))
    if old is not None:
        if body.get("type", "Opaque") != old.get("type", "Opaque"):
            errors.append(fielderrors.invalid("type", body.get("type"), "field is immutable"))
        if old.get("immutable") and data != (old.get("data") or {}):
            errors.append(
                fielderrors.forbidden("data", "field is immutable when `immutable` is set")
            )
    return errors


def _config_map(body: Body, old: Body | None) -> list[FieldError]:
    data, binary = body.get("data") or {}, body.get("binaryData") or {}
    errors = _keys(data, "data") + _keys(binary, "binaryData")
    for name in set(data) & set(binary):
        errors.append(
            fielderrors.invalid(key("data", name), name, "duplicate of key present in binaryData")
        )
    size = sum(len(str(v).encode()) for v in data.values())
    size += sum(len(base64.b64decode(v)) for v in binary.values())
    if size > limits.MAX_CONFIG_DATA_BYTES:
        errors.append(fielderrors.too_long("", limits.MAX_CONFIG_DATA_BYTES))
    if (
        old is not None
        and old.get("immutable")
        and (data, binary)
        != (
            old.get("data") or {},
            old.get("binaryData") or {},
        )
    ):
        errors.append(fielderrors.forbidden("data", "field is immutable when `immutable` is set"))
    return errors


# --- PersistentVolumeClaim --------------------------------------------------------------

ACCESS_MODES = ["ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"]


def _claim(body: Body, old: Body | None) -> list[FieldError]:
    spec = body.get("spec") or {}
    if old is not None:
        before = dict(old.get("spec") or {})
        now = dict(spec)
        for value in (before, now):
            value.pop("resources", None)
            value.pop("volumeAttributesClassName", None)
            value.pop("volumeName", None)
        if before != now:
            return [
                fielderrors.forbidden(
                    "spec",
                    "spec is immutable after creation except resources.requests and "
                    "volumeAttributesClassName for bound claims",
                )
            ]
        return []
    errors = []
    modes = spec.get("accessModes") or []
    if not modes:
        errors.append(
            fielderrors.required("spec.accessModes", "at least 1 access mode is required")
        )
    for mode in modes:
        errors += _in("spec.accessModes", mode, ACCESS_MODES)
    storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    if storage is None:
        errors.append(fielderrors.required(key("spec.resources", "storage")))
    elif quantity(storage) <= 0:
        errors.append(
            fielderrors.invalid(
                key("spec.resources", "storage"), storage, "must be greater than zero"
            )
        )
    if spec.get("storageClassName"):
        errors += _named(
            "spec.storageClassName", spec["storageClassName"], names.is_dns1123_subdomain
        )
    return errors


# --- NetworkPolicy ----------------------------------------------------------------------


def _cidr(value: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(str(value), strict=False)
    except ValueError:
        return None


def _strictly_inside(
    inner: ipaddress.IPv4Network | ipaddress.IPv6Network,
    outer: ipaddress.IPv4Network | ipaddress.IPv6Network,
) -> bool:
    if isinstance(inner, ipaddress.IPv4Network) and isinstance(outer, ipaddress.IPv4Network):
        return inner != outer and inner.subnet_of(outer)
    if isinstance(inner, ipaddress.IPv6Network) and isinstance(outer, ipaddress.IPv6Network):
        return inner != outer and inner.subnet_of(outer)
    return False


def _peer(peer: Body, where: str) -> list[FieldError]:
    errors: list[FieldError] = []
    selectors = [s for s in ("podSelector", "namespaceSelector") if s in peer]
    if "ipBlock" in peer and selectors:
        return [fielderrors.forbidden(where, "may not specify both ipBlock and another peer")]
    if "ipBlock" not in peer and not selectors:
        return [fielderrors.required(where, "must specify a peer")]
    for selector in selectors:
        errors += names.validate_label_selector(peer[selector], f"{where}.{selector}")
    if "ipBlock" in peer:
        block = peer["ipBlock"]
        cidr = _cidr(block.get("cidr"))
        if not block.get("cidr"):
            errors.append(fielderrors.required(f"{where}.ipBlock.cidr"))
        elif cidr is None:
            errors.append(
                fielderrors.invalid(
                    f"{where}.ipBlock.cidr",
                    block["cidr"],
                    "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
                )
            )
        for i, text in enumerate(block.get("except") or []):
            at = index(f"{where}.ipBlock.except", i)
            inner = _cidr(text)
            if inner is None:
                errors.append(
                    fielderrors.invalid(
                        at, text, "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"
                    )
                )
            elif cidr is not None and not _strictly_inside(inner, cidr):
                errors.append(fielderrors.invalid(at, text, "must be a strict subset of `cidr`"))
    return errors


def _policy_port(port: Body, where: str) -> list[FieldError]:
    errors = _in(f"{where}.protocol", port.get("protocol"), PROTOCOLS)
    if "port" in port:
        errors += _port(f"{where}.port", port["port"])
    if "endPort" in port:
        if not isinstance(port.get("port"), int):
            errors.append(
                fielderrors.required(f"{where}.port", "must be specified when endPort is specified")
                if "port" not in port
                else fielderrors.invalid(
                    f"{where}.endPort",
                    port["endPort"],
                    "may not be specified when `port` is non-numeric",
                )
            )
        elif port["endPort"] < port["port"]:
            errors.append(
                fielderrors.invalid(
                    f"{where}.endPort", port["endPort"], "must be greater than or equal to `port`"
                )
            )
    return errors


def _network_policy(body: Body, old: Body | None) -> list[FieldError]:
    spec = body.get("spec") or {}
    errors = names.validate_label_selector(spec.get("podSelector"), "spec.podSelector")
    types = spec.get("policyTypes") or []
    for kind in types:
        errors += _in("spec.policyTypes", kind, ["Egress", "Ingress"])
    if len(types) > 2:
        errors.append(
            fielderrors.invalid(
                "spec.policyTypes", types, "may not specify more than two policyTypes"
            )
        )
    for direction, peers in (("ingress", "from"), ("egress", "to")):
        for i, rule in enumerate(spec.get(direction) or []):
            where = index(f"spec.{direction}", i)
            for j, port in enumerate(rule.get("ports") or []):
                errors += _policy_port(port, index(f"{where}.ports", j))
            for j, peer in enumerate(rule.get(peers) or []):
                errors += _peer(peer, index(f"{where}.{peers}", j))
    return errors


# --- Event, Lease -----------------------------------------------------------------------


def _event(body: Body, old: Body | None) -> list[FieldError]:
    namespace = body["metadata"].get("namespace", "")
    involved = (body.get("involvedObject") or {}).get("namespace", "")
    if (involved and involved != namespace) or (not involved and namespace not in ("", "default")):
        return [
            fielderrors.invalid(
                "involvedObject.namespace", involved, "does not match event.namespace"
            )
        ]
    return []


def _lease(body: Body, old: Body | None) -> list[FieldError]:
    spec = body.get("spec") or {}
    errors = []
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and duration <= 0:
        errors.append(
            fielderrors.invalid("spec.leaseDurationSeconds", duration, "must be greater than 0")
        )
    transitions = spec.get("leaseTransitions")
    if transitions is not None and transitions < 0:
        errors.append(
            fielderrors.invalid(
                "spec.leaseTransitions", transitions, "must be greater than or equal to 0"
            )
        )
    return errors


KINDS: Mapping[str, BuiltinKind] = {
    "v1/pods": BuiltinKind("Pod", "v1", "io.k8s.api.core.v1.Pod", _pod),
    "v1/secrets": BuiltinKind("Secret", "v1", "io.k8s.api.core.v1.Secret", _secret),
    "v1/configmaps": BuiltinKind("ConfigMap", "v1", "io.k8s.api.core.v1.ConfigMap", _config_map),
    "v1/persistentvolumeclaims": BuiltinKind(
        "PersistentVolumeClaim", "v1", "io.k8s.api.core.v1.PersistentVolumeClaim", _claim
    ),
    "v1/services": BuiltinKind("Service", "v1", "io.k8s.api.core.v1.Service"),
    "v1/events": BuiltinKind("Event", "v1", "io.k8s.api.core.v1.Event", _event),
    "v1/namespaces": BuiltinKind("Namespace", "v1", "io.k8s.api.core.v1.Namespace"),
    "events.k8s.io/v1/events": BuiltinKind(
        "Event", "events.k8s.io/v1", "io.k8s.api.events.v1.Event"
    ),
    "coordination.k8s.io/v1/leases": BuiltinKind(
        "Lease", "coordination.k8s.io/v1", "io.k8s.api.coordination.v1.Lease", _lease
    ),
    "networking.k8s.io/v1/networkpolicies": BuiltinKind(
        "NetworkPolicy",
        "networking.k8s.io/v1",
        "io.k8s.api.networking.v1.NetworkPolicy",
        _network_policy,
    ),
    "discovery.k8s.io/v1/endpointslices": BuiltinKind(
        "EndpointSlice", "discovery.k8s.io/v1", "io.k8s.api.discovery.v1.EndpointSlice"
    ),
}
"""The served built-in kinds, by KMock's resource key (``group/version/plural``)."""
