"""The emulator's aggregation layer (:mod:`tests.operator.aggregation`) does what
kube-apiserver's does for an APIService's server, rule by rule.

Cases:
- an APIService is stored and served as a cluster-scoped object;
- ``kube-system/extension-apiserver-authentication`` names the request-header CA, which
  verifies the front-proxy client certificate the server is shown, its allowed name and
  its headers;
- a request under the APIService's group and version is proxied over HTTPS to the
  Service's endpoint, with the user and groups kube-apiserver authenticated in
  ``X-Remote-User`` / ``X-Remote-Group``; the caller's ``Authorization`` and the
  ``X-Remote-*`` it forged are not passed on;
- RBAC decides first, on the path's resource, subresource, namespace and name: a refusal
  is the API server's 403 ``Status``, and the server never hears of the request;
- the answer streams back as it comes (the first line before the server wrote the last);
- a Service with no endpoint, or a server whose certificate the ``caBundle`` does not
  sign, is 503;
- ``/apis/<group>`` of an aggregated group is its APIGroup;
- a SubjectAccessReview is answered by RBAC (allowed, refused with RBAC's reason); asking
  one needs ``create`` on ``subjectaccessreviews``; one naming no user is 400.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import aiohttp.web
import pytest
from cryptography import x509

from tests.operator import aggregation, emulator

Body = dict[str, Any]
GROUP = "example.dev"
SERVICE = ("kubeturn-system", "example")
PREFIX = f"/apis/{GROUP}/v1"


class Backend:
    """An APIService's server: it answers what it was told, and the client certificate's
    common name (as the request-header CA verified it)."""

    def __init__(self) -> None:
        self.heard: list[Body] = []
        self.release = asyncio.Event()

    async def echo(self, request: aiohttp.web.Request) -> aiohttp.web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        subject = dict(item for rdn in (peer or {}).get("subject", ()) for item in rdn)
        heard = {
            "path": request.path,
            "user": request.headers.getall("X-Remote-User", []),
            "groups": request.headers.getall("X-Remote-Group", []),
            "authorization": request.headers.get("Authorization"),
            "commonName": subject.get("commonName"),
        }
        self.heard.append(heard)
        return aiohttp.web.json_response(heard)

    async def lines(self, request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        await response.write(b'{"n": 1}\n')
        await self.release.wait()
        await response.write(b'{"n": 2}\n')
        await response.write_eof()
        return response


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.fixture
async def backend(
    k8s: emulator.KubernetesApi, tmp_path: Path
) -> AsyncIterator[tuple[Backend, aggregation.Authority]]:
    """A Backend on 127.0.0.1 over TLS, its certificate for the Service's DNS name signed by
    a serving CA; the APIService handing ``example.dev/v1`` to it, with that CA's bundle."""
    serving = aggregation.authority("serving-ca")
    certificate, key = issue_for_service(serving)
    config_map = k8s.read_object("v1/configmaps", "kube-system", aggregation.CONFIG_MAP)
    assert config_map is not None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(
        write(tmp_path / "tls.crt", certificate), write(tmp_path / "tls.key", key)
    )
    context.load_verify_locations(cadata=config_map["data"]["requestheader-client-ca-file"])
    context.verify_mode = ssl.CERT_OPTIONAL
    served = Backend()
    app = aiohttp.web.Application()
    app.router.add_get(f"{PREFIX}/namespaces/default/lines", served.lines)
    app.router.add_route("*", "/{tail:.*}", served.echo)
    runner = aiohttp.web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    await aiohttp.web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context).start()
    k8s.aggregator.endpoints[SERVICE] = runner.addresses[0][1]
    k8s.create_object("apiregistration.k8s.io/v1/apiservices", apiservice(serving.certificate))
    try:
        yield served, serving
    finally:
        served.release.set()
        await runner.cleanup()


def issue_for_service(ca: aggregation.Authority) -> tuple[bytes, bytes]:
    namespace, name = SERVICE
    return aggregation.issue(ca, name, dns_names=(f"{name}.{namespace}.svc",))


def apiservice(ca_bundle: bytes) -> Body:
    namespace, name = SERVICE
    return {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": f"v1.{GROUP}"},
        "spec": {
            "group": GROUP,
            "version": "v1",
            "service": {"namespace": namespace, "name": name, "port": 443},
            "caBundle": base64.b64encode(ca_bundle).decode(),
            "groupPriorityMinimum": 100,
            "versionPriority": 100,
        },
    }


def user(k8s: emulator.KubernetesApi, name: str, *rules: Body, namespace: str = "default") -> str:
    """A ServiceAccount's token, allowed ``rules`` in ``namespace`` (none: nothing)."""
    account = {"metadata": {"name": name, "namespace": namespace}}
    k8s.create_object("v1/serviceaccounts", account)
    if rules:
        rbac_group = "rbac.authorization.k8s.io"
        meta = {"name": name, "namespace": namespace}
        k8s.create_object(f"{rbac_group}/v1/roles", {"metadata": meta, "rules": list(rules)})
        binding = {
            "metadata": meta,
            "roleRef": {"apiGroup": rbac_group, "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        }
        k8s.create_object(f"{rbac_group}/v1/rolebindings", binding)
    return k8s.issue_token(namespace, name)


async def call(
    k8s: emulator.KubernetesApi, path: str, token: str, *, method: str = "GET", **extra: Any
) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}", **extra.pop("headers", {})}
    async with (
        aiohttp.ClientSession(str(k8s.url)) as session,
        session.request(method, path, headers=headers, **extra) as response,
    ):
        return response.status, await response.json(content_type=None)


RUNS_GET = {"apiGroups": [GROUP], "resources": ["things", "things/log"], "verbs": ["get"]}


async def test_an_apiservice_is_stored_and_served(
    k8s: emulator.KubernetesApi, backend: tuple[Backend, aggregation.Authority]
) -> None:
    status, body = await call(
        k8s, f"/apis/apiregistration.k8s.io/v1/apiservices/v1.{GROUP}", k8s.admin_token
    )
    assert status == 200
    assert (body["kind"], body["spec"]["service"]["name"]) == ("APIService", "example")
    assert "namespace" not in body["metadata"]


async def test_the_request_header_config_map_verifies_the_front_proxy(
    k8s: emulator.KubernetesApi,
) -> None:
    config_map = k8s.read_object("v1/configmaps", "kube-system", aggregation.CONFIG_MAP)
    assert config_map is not None
    data = config_map["data"]
    ca = x509.load_pem_x509_certificate(data["requestheader-client-ca-file"].encode())
    client = x509.load_pem_x509_certificate(k8s.aggregator.front_proxy.certificate)
    client.verify_directly_issued_by(ca)
    assert client.subject.rfc4514_string() == "CN=front-proxy-client"
    assert json.loads(data["requestheader-allowed-names"]) == ["front-proxy-client"]
    assert json.loads(data["requestheader-username-headers"]) == ["X-Remote-User"]
    assert json.loads(data["requestheader-group-headers"]) == ["X-Remote-Group"]
    assert json.loads(data["requestheader-extra-headers-prefix"]) == ["X-Remote-Extra-"]


async def test_a_request_is_proxied_with_the_authenticated_user_only(
    k8s: emulator.KubernetesApi, backend: tuple[Backend, aggregation.Authority]
) -> None:
    token = user(k8s, "reader", RUNS_GET)
    forged = {"X-Remote-User": "system:admin", "X-Remote-Group": "system:masters"}
    path = f"{PREFIX}/namespaces/default/things/one/log"
    status, heard = await call(k8s, path, token, headers=forged)
    assert status == 200
    assert heard == {
        "path": path,
        "user": ["system:serviceaccount:default:reader"],
        "groups": [
            "system:serviceaccounts",
            "system:serviceaccounts:default",
            "system:authenticated",
        ],
        "authorization": None,
        "commonName": "front-proxy-client",
    }


@pytest.mark.parametrize(
    "path",
    [
        f"{PREFIX}/namespaces/other/things/one",  # another namespace
        f"{PREFIX}/namespaces/default/things",  # a list, not a get
        f"{PREFIX}/namespaces/default/things/one/secrets",  # another subresource
        f"{PREFIX}/things",  # cluster-wide
    ],
)
async def test_rbac_refuses_before_the_server_hears(
    k8s: emulator.KubernetesApi, backend: tuple[Backend, aggregation.Authority], path: str
) -> None:
    served, _ = backend
    token = user(k8s, "reader", RUNS_GET)
    status, body = await call(k8s, path, token)
    assert (status, body["kind"], body["reason"]) == (403, "Status", "Forbidden")
    assert 'User "system:serviceaccount:default:reader" cannot' in body["message"]
    assert served.heard == []


async def test_the_answer_streams_back(
    k8s: emulator.KubernetesApi, backend: tuple[Backend, aggregation.Authority]
) -> None:
    served, _ = backend
    token = user(k8s, "reader", {"apiGroups": [GROUP], "resources": ["lines"], "verbs": ["list"]})
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        aiohttp.ClientSession(str(k8s.url)) as session,
        session.get(f"{PREFIX}/namespaces/default/lines", headers=headers) as response,
    ):
        assert (response.status, response.headers["Content-Type"]) == (200, "application/x-ndjson")
        assert json.loads(await response.content.readline()) == {"n": 1}
        served.release.set()
        assert json.loads(await response.content.readline()) == {"n": 2}
        assert await response.content.read() == b""


async def test_no_endpoint_is_503(
    k8s: emulator.KubernetesApi, backend: tuple[Backend, aggregation.Authority]
) -> None:
    del k8s.aggregator.endpoints[SERVICE]
    status, body = await call(k8s, f"{PREFIX}/namespaces/default/things/one", k8s.admin_token)
    assert (status, body["reason"]) == (503, "ServiceUnavailable")
    assert "no endpoints available" in body["message"]


async def test_a_server_the_ca_bundle_does_not_sign_is_503(
    k8s: emulator.KubernetesApi, backend: tuple[Backend, aggregation.Authority]
) -> None:
    served, _ = backend
    other = aggregation.authority("another-ca")
    k8s.delete_object("apiregistration.k8s.io/v1/apiservices", None, f"v1.{GROUP}")
    k8s.create_object("apiregistration.k8s.io/v1/apiservices", apiservice(other.certificate))
    status, body = await call(k8s, f"{PREFIX}/namespaces/default/things/one", k8s.admin_token)
    assert (status, body["reason"]) == (503, "ServiceUnavailable")
    assert "certificate verify failed" in body["message"]
    assert served.heard == []


async def test_the_group_of_an_apiservice_is_discoverable(
    k8s: emulator.KubernetesApi, backend: tuple[Backend, aggregation.Authority]
) -> None:
    token = user(k8s, "anyone")
    status, body = await call(k8s, f"/apis/{GROUP}", token)
    assert status == 200
    assert body["preferredVersion"] == {"groupVersion": f"{GROUP}/v1", "version": "v1"}


def access_review(user: str, verb: str, namespace: str, name: str = "") -> Body:
    attributes = {"group": GROUP, "resource": "things", "verb": verb, "namespace": namespace}
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user,
            "groups": ["system:authenticated"],
            "resourceAttributes": attributes | ({"name": name} if name else {}),
        },
    }


REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


async def test_a_subject_access_review_is_answered_by_rbac(k8s: emulator.KubernetesApi) -> None:
    user(k8s, "reader", RUNS_GET)
    reader = "system:serviceaccount:default:reader"
    allowed = access_review(reader, "get", "default", "one")
    status, body = await call(k8s, REVIEWS, k8s.admin_token, method="POST", json=allowed)
    assert (status, body["status"]) == (201, {"allowed": True})
    refused = access_review(reader, "get", "other", "one")
    status, body = await call(k8s, REVIEWS, k8s.admin_token, method="POST", json=refused)
    assert (status, body["status"]["allowed"]) == (201, False)
    listed = access_review(reader, "list", "default")
    status, body = await call(k8s, REVIEWS, k8s.admin_token, method="POST", json=listed)
    assert (status, body["status"]["allowed"]) == (201, False)


async def test_asking_a_review_needs_create_on_subjectaccessreviews(
    k8s: emulator.KubernetesApi,
) -> None:
    token = user(k8s, "curious")
    asked = access_review("system:serviceaccount:default:curious", "get", "default", "one")
    status, body = await call(k8s, REVIEWS, token, method="POST", json=asked)
    assert (status, body["reason"]) == (403, "Forbidden")
    binding = {
        "metadata": {"name": "curious-delegator"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "system:auth-delegator",
        },
        "subjects": [{"kind": "ServiceAccount", "name": "curious", "namespace": "default"}],
    }
    k8s.create_object("rbac.authorization.k8s.io/v1/clusterrolebindings", binding)
    status, body = await call(k8s, REVIEWS, token, method="POST", json=asked)
    assert (status, body["status"]["allowed"]) == (201, False)


async def test_a_review_naming_no_user_is_invalid(k8s: emulator.KubernetesApi) -> None:
    asked = access_review("", "get", "default", "one")
    del asked["spec"]["groups"]
    status, body = await call(k8s, REVIEWS, k8s.admin_token, method="POST", json=asked)
    assert (status, body["reason"]) == (422, "Invalid")
    assert body["message"] == (
        'SubjectAccessReview.authorization.k8s.io "" is invalid: spec.user: Invalid value: '
        '"": at least one of user or group must be specified'
    )


async def test_a_review_of_both_or_neither_attributes_is_invalid(
    k8s: emulator.KubernetesApi,
) -> None:
    both = access_review("someone", "get", "default", "one")
    both["spec"]["nonResourceAttributes"] = {"path": "/healthz", "verb": "get"}
    status, body = await call(k8s, REVIEWS, k8s.admin_token, method="POST", json=both)
    assert (status, body["details"]["causes"][0]["field"]) == (422, "spec.nonResourceAttributes")
    neither = access_review("someone", "get", "default", "one")
    del neither["spec"]["resourceAttributes"]
    status, body = await call(k8s, REVIEWS, k8s.admin_token, method="POST", json=neither)
    assert (status, body["details"]["causes"][0]["field"]) == (422, "spec.resourceAttributes")
