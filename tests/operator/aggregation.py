"""The API aggregation layer of the emulator, as kube-apiserver's kube-aggregator does it.

An ``apiregistration.k8s.io/v1`` APIService with a ``service`` hands its group and version
to a server of its own. kube-apiserver authenticates the request and authorizes its path
with RBAC as any other (a refusal is its usual 403 ``Status``, and the server never hears
of it), then proxies it over HTTPS to the Service: the server's certificate is verified
against the APIService's ``caBundle`` for the name ``<service>.<namespace>.svc``, and
kube-apiserver presents its front-proxy client certificate (:class:`FrontProxy`) and names
the user in ``X-Remote-User`` / ``X-Remote-Group`` (and ``X-Remote-Extra-*``) headers.
The caller's ``Authorization``, its ``Impersonate-*`` and any ``X-Remote-*`` it sent
itself are removed first (kube-apiserver's request-header authenticator and its proxy
handler do so), so that no one can name another user through it. The answer streams
back as it comes. How servers check this is published in
``kube-system/extension-apiserver-authentication`` (:func:`authentication_config_map`).

Services route nowhere here: :attr:`Aggregation.endpoints` maps a Service
(``namespace``, ``name``) to a port on 127.0.0.1, as the kubelet stand-in maps Pods. A
Service with no port mapped is 503, as an APIService without endpoints is.

``authorization.k8s.io/v1`` SubjectAccessReviews are answered by :func:`review`, with
the emulator's RBAC (:mod:`tests.operator.rbac`), never stored.

Not emulated: the APIService's ``status`` (kube-apiserver's availability controller sets
``Available``; nothing here does), aggregated discovery documents (``/apis`` lists only the
emulator's own groups: an aggregated group's discovery is reached by its path, which is
proxied), ``insecureSkipTLSVerify``, and APIServices without a ``service`` (kube-apiserver's
own groups: the emulator serves those itself).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime
import json
import pathlib
import ssl
import tempfile
from collections.abc import Mapping
from typing import Any

import aiohttp
import aiohttp.web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.operator import apimachinery, fielderrors, rbac

Body = dict[str, Any]

FRONT_PROXY_NAME = "front-proxy-client"
"""The common name of kube-apiserver's front-proxy client certificate (kubeadm's)."""
NAMESPACE = "kube-system"
CONFIG_MAP = "extension-apiserver-authentication"
REMOTE_USER = "X-Remote-User"
REMOTE_GROUP = "X-Remote-Group"
REMOTE_EXTRA = "X-Remote-Extra-"
STRIPPED = ("authorization", "x-remote-", "impersonate-", "host", "content-length")
"""Request headers (or their prefixes) kube-apiserver does not pass on to an APIService."""
HOP_BY_HOP = ("connection", "keep-alive", "transfer-encoding", "content-length")
"""Answer headers not passed back (the stream's framing is the emulator's own)."""
VALIDITY = datetime.timedelta(days=1)
"""Far longer than a test: certificates made here never expire under one."""
REVIEW_GROUP = "authorization.k8s.io"


# --- Certificates ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Authority:
    """A certificate authority: its certificate (PEM) and key."""

    certificate: bytes
    key: ec.EllipticCurvePrivateKey

    @property
    def pem(self) -> str:
        return self.certificate.decode()


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def authority(common_name: str) -> Authority:
    """A new self-signed CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return Authority(certificate.public_bytes(serialization.Encoding.PEM), key)


def issue(
    ca: Authority, common_name: str, *, dns_names: tuple[str, ...] = (), client: bool = False
) -> tuple[bytes, bytes]:
    """A certificate ``ca`` signs (a client's, or a server's for ``dns_names``) and its
    key, both PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    issuer = x509.load_pem_x509_certificate(ca.certificate).subject
    usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if dns_names:
        names = [x509.DNSName(name) for name in dns_names]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    certificate = builder.sign(ca.key, hashes.SHA256())
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return certificate.public_bytes(serialization.Encoding.PEM), key_pem


@dataclasses.dataclass(frozen=True)
class FrontProxy:
    """kube-apiserver's front-proxy identity: the request-header CA and the client
    certificate and key it signed (PEM)."""

    ca: Authority
    certificate: bytes
    key: bytes

    @classmethod
    def make(cls) -> FrontProxy:
        ca = authority("front-proxy-ca")
        return cls(ca, *issue(ca, FRONT_PROXY_NAME, client=True))

    def present(self, context: ssl.SSLContext) -> None:
        """Make ``context`` present this client certificate (``ssl`` loads it from files
        only: they live for the call)."""
        with tempfile.TemporaryDirectory(prefix="kubeturn-front-proxy-") as directory:
            certificate, key = (
                pathlib.Path(directory, "tls.crt"),
                pathlib.Path(directory, "tls.key"),
            )
            certificate.write_bytes(self.certificate)
            key.write_bytes(self.key)
            context.load_cert_chain(certificate, key)


def authentication_config_map(front_proxy: FrontProxy) -> Body:
    """``kube-system/extension-apiserver-authentication`` as kube-apiserver publishes it
    (kubeadm's flags: one allowed name, the ``X-Remote-*`` headers)."""
    return {
        "metadata": {"name": CONFIG_MAP, "namespace": NAMESPACE},
        "data": {
            "requestheader-client-ca-file": front_proxy.ca.pem,
            "requestheader-allowed-names": json.dumps([FRONT_PROXY_NAME]),
            "requestheader-username-headers": json.dumps([REMOTE_USER]),
            "requestheader-group-headers": json.dumps([REMOTE_GROUP]),
            "requestheader-extra-headers-prefix": json.dumps([REMOTE_EXTRA]),
        },
    }


# --- The rules -------------------------------------------------------------------------


def served_by(apiservices: list[Body], group: str, version: str) -> Body | None:
    """The APIService that hands ``group``/``version`` to a Service, if one does."""
    for apiservice in apiservices:
        spec = apiservice.get("spec") or {}
        if (spec.get("group"), spec.get("version")) == (group, version) and spec.get("service"):
            return apiservice
    return None


def forwarded_headers(headers: Mapping[str, str], user: rbac.User) -> list[tuple[str, str]]:
    """The headers the APIService's server is sent: the caller's, without its credentials
    or its own ``X-Remote-*``, then the user kube-apiserver authenticated."""
    kept = [(k, v) for k, v in headers.items() if not k.lower().startswith(STRIPPED)]
    named = [(REMOTE_USER, user.name), *((REMOTE_GROUP, group) for group in user.groups)]
    return kept + named


def review(policy: rbac.Policy, body: Any) -> Body:
    """A SubjectAccessReview answered: ``body`` with its ``status`` (allowed, and the
    reason RBAC gave). A review kube-apiserver's validation refuses is 422 ``Invalid``
    with its field errors: no user and no group, neither or both of the attributes."""
    spec = (body or {}).get("spec") if isinstance(body, dict) else None
    spec = spec if isinstance(spec, dict) else {}
    resource, path = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    errors: list[fielderrors.FieldError] = []
    if resource is None and path is None:
        errors.append(
            fielderrors.required(
                "spec.resourceAttributes",
                "exactly one of nonResourceAttributes or resourceAttributes must be specified",
            )
        )
    elif resource is not None and path is not None:
        errors.append(
            fielderrors.invalid(
                "spec.nonResourceAttributes",
                path,
                "cannot be specified in combination with resourceAttributes",
            )
        )
    if not (spec.get("user") or spec.get("groups")):
        errors.append(
            fielderrors.invalid(
                "spec.user",
                spec.get("user") or "",
                "at least one of user or group must be specified",
            )
        )
    if errors:
        raise fielderrors.invalid_status(REVIEW_GROUP, "SubjectAccessReview", "", errors)
    user = rbac.User(str(spec.get("user") or ""), tuple(spec.get("groups") or ()))
    if isinstance(resource, dict):
        attributes = rbac.Attributes(
            user,
            str(resource.get("verb", "")),
            resource_request=True,
            api_group=str(resource.get("group", "")),
            api_version=str(resource.get("version", "")),
            resource=str(resource.get("resource", "")),
            subresource=str(resource.get("subresource", "")),
            namespace=str(resource.get("namespace", "")),
            name=str(resource.get("name", "")),
        )
    else:
        path = path if isinstance(path, dict) else {}
        attributes = rbac.Attributes(
            user, str(path.get("verb", "")), resource_request=False, path=str(path.get("path"))
        )
    decision = rbac.authorize(policy, attributes)
    status: Body = {"allowed": decision.allowed}
    if decision.reason:
        status["reason"] = decision.reason
    return {
        "apiVersion": f"{REVIEW_GROUP}/v1",
        "kind": "SubjectAccessReview",
        "metadata": {"creationTimestamp": None},
        "spec": spec,
        "status": status,
    }


# --- The proxy -------------------------------------------------------------------------


@dataclasses.dataclass
class Aggregation:
    """The emulator's front proxy and where each Service's server listens."""

    front_proxy: FrontProxy = dataclasses.field(default_factory=FrontProxy.make)
    endpoints: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)
    """``(namespace, name)`` of a Service → the port on 127.0.0.1 its server listens on."""
    forwarded: list[list[tuple[str, str]]] = dataclasses.field(default_factory=list)
    """The headers of every request proxied, in order (what the servers were told)."""

    def client_context(self, apiservice: Body) -> ssl.SSLContext:
        """TLS to an APIService's server: its certificate checked against the
        ``caBundle``, the front-proxy client certificate presented."""
        bundle = base64.b64decode((apiservice.get("spec") or {}).get("caBundle") or "")
        context = ssl.create_default_context(cadata=bundle.decode() or None)
        self.front_proxy.present(context)
        return context

    async def proxy(
        self, raw: aiohttp.web.BaseRequest, body: bytes, apiservice: Body, user: rbac.User
    ) -> aiohttp.web.StreamResponse:
        """Send the request to the APIService's server and stream its answer back."""
        service = (apiservice.get("spec") or {})["service"]
        where = (service.get("namespace", ""), service.get("name", ""))
        port = self.endpoints.get(where)
        if port is None:
            message = f'service "{where[1]}" has no endpoints: no endpoints available'
            return _status(503, message, "ServiceUnavailable")
        headers = forwarded_headers(dict(raw.headers), user)
        self.forwarded.append(headers)
        url = f"https://127.0.0.1:{port}{raw.rel_url}"
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
        async with aiohttp.ClientSession(timeout=timeout, auto_decompress=False) as session:
            try:
                upstream = await session.request(
                    raw.method,
                    url,
                    headers=headers,
                    data=body or None,
                    ssl=self.client_context(apiservice),
                    server_hostname=f"{where[1]}.{where[0]}.svc",
                )
            except (aiohttp.ClientError, ssl.SSLError, OSError) as error:
                message = f"error trying to reach service: {error}"
                return _status(503, message, "ServiceUnavailable")
            try:
                passed = {k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP}
                response = aiohttp.web.StreamResponse(status=upstream.status, headers=passed)
                await response.prepare(raw)
                with contextlib.suppress(ConnectionResetError, aiohttp.ClientPayloadError):
                    async for chunk in upstream.content.iter_any():
                        await response.write(chunk)
                await response.write_eof()
                return response
            finally:
                upstream.release()


def _status(code: int, message: str, reason: str) -> aiohttp.web.Response:
    error = apimachinery.ApiError(code, message, reason=reason)
    return aiohttp.web.json_response(error.status(), status=code)
