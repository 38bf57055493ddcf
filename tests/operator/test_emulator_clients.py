"""What the API emulator serves for clients beyond the operator: ``helm install`` and
``kubectl`` as a user runs them (README's cluster walkthrough).

Cases:
- a protobuf Secret (the ``k8s\\0`` envelope, as client-go's typed client sends it) is
  stored as the JSON one would be: name, labels, ``data`` (base64), ``type``, ``stringData``
  folded into ``data``; a protobuf body of another kind is 415;
- a CustomResourceDefinition created is ``Established`` (and its names accepted) at once;
- ``/openapi/v3`` lists a document per served group-version; a document holds each kind's
  schema (``x-kubernetes-group-version-kind``, with no JSON Schema type lists left) and
  a PATCH per resource taking ``fieldValidation``; an unknown one is 404;
- core v1 Events are selected by ``involvedObject.*`` fields (as ``kubectl describe``
  lists them); other resources refuse those fields (400);
- a watch that accepts ``as=Table`` gets each object as a one-row Table.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from tests.operator import emulator, protobuf

Body = dict[str, Any]


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def field(number: int, value: bytes | str) -> bytes:
    data = value.encode() if isinstance(value, str) else value
    return varint(number << 3 | 2) + varint(len(data)) + data


def entry(key: str, value: bytes | str) -> bytes:
    return field(1, key) + field(2, value)


def secret_protobuf() -> bytes:
    """A Secret as client-go's protobuf serializer writes it."""
    meta = field(1, "api-key") + field(11, entry("app", "demo")) + field(8, b"")
    raw = field(1, meta) + field(2, entry("key", b"s3cret")) + field(3, "Opaque")
    raw += field(4, entry("plain", "text"))
    envelope = field(1, field(1, "v1") + field(2, "Secret")) + field(2, raw)
    return protobuf.MAGIC + envelope


async def request(
    api: emulator.KubernetesApi,
    method: str,
    path: str,
    *,
    data: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    async with aiohttp.ClientSession(
        headers=api.admin_headers, connector=aiohttp.TCPConnector(force_close=True)
    ) as session:
        url = str(api.url).rstrip("/") + path
        async with session.request(method, url, data=data, headers=headers) as answer:
            text = await answer.text()
            return answer.status, json.loads(text) if text.strip() else None


async def test_a_protobuf_secret_is_stored_as_json(k8s: emulator.KubernetesApi) -> None:
    headers = {"Content-Type": protobuf.CONTENT_TYPE, "Accept": "application/json"}
    path = "/api/v1/namespaces/default/secrets"
    status, body = await request(k8s, "POST", path, data=secret_protobuf(), headers=headers)
    assert status == 201, body
    stored = k8s.read_object("v1/secrets", "default", "api-key")
    assert stored is not None
    assert stored["metadata"]["labels"] == {"app": "demo"}
    assert stored["type"] == "Opaque"
    assert stored["data"] == {"key": "czNjcmV0", "plain": "dGV4dA=="}
    other = protobuf.MAGIC + field(1, field(1, "v1") + field(2, "Pod")) + field(2, b"")
    status, body = await request(
        k8s, "POST", "/api/v1/namespaces/default/pods", data=other, headers=headers
    )
    assert status == 415, body


async def test_a_crd_is_established_at_once(k8s: emulator.KubernetesApi) -> None:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.dev"},
        "spec": {
            "group": "example.dev",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": "v1", "served": True, "storage": True}],
        },
    }
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    status, body = await request(
        k8s,
        "POST",
        path,
        data=json.dumps(crd).encode(),
        headers={"Content-Type": "application/json"},
    )
    assert status == 201, body
    stored = k8s.read_object(
        "apiextensions.k8s.io/v1/customresourcedefinitions", None, "widgets.example.dev"
    )
    assert stored is not None
    conditions = {c["type"]: c["status"] for c in stored["status"]["conditions"]}
    assert conditions == {"NamesAccepted": "True", "Established": "True"}
    assert stored["status"]["storedVersions"] == ["v1"]


async def test_openapi_v3_leaves_validation_to_the_server(k8s: emulator.KubernetesApi) -> None:
    status, index = await request(k8s, "GET", "/openapi/v3")
    assert status == 200
    assert {"api/v1", "apis/apps/v1", "apis/kubeturn.dev/v1alpha1"} <= set(index["paths"])
    url = index["paths"]["apis/kubeturn.dev/v1alpha1"]["serverRelativeURL"]
    assert url.startswith("/openapi/v3/apis/kubeturn.dev/v1alpha1?hash=")
    status, document = await request(k8s, "GET", url)
    assert status == 200
    run = document["components"]["schemas"]["dev.kubeturn.v1alpha1.Run"]
    assert run["x-kubernetes-group-version-kind"] == [
        {"group": "kubeturn.dev", "version": "v1alpha1", "kind": "Run"}
    ]
    patch = document["paths"]["/apis/kubeturn.dev/v1alpha1/namespaces/{namespace}/runs/{name}"]
    assert "fieldValidation" in {p["name"] for p in patch["patch"]["parameters"]}
    _, core = await request(k8s, "GET", "/openapi/v3/api/v1")
    text = json.dumps(core)
    assert '"type": [' not in text  # OpenAPI's dialect: one type, and nullable
    assert "io.k8s.api.core.v1.Secret" in core["components"]["schemas"]
    status, _ = await request(k8s, "GET", "/openapi/v3/apis/nowhere.dev/v1")
    assert status == 404


async def test_events_are_selected_by_their_involved_object(k8s: emulator.KubernetesApi) -> None:
    for name, about in (("e1", "run-a"), ("e2", "run-b")):
        k8s.create_object(
            "v1/events",
            {
                "metadata": {"name": name, "namespace": "default"},
                "involvedObject": {"kind": "Run", "name": about, "namespace": "default"},
                "reason": "TurnRecorded",
                "message": "m",
            },
        )
    selector = "involvedObject.name=run-a,involvedObject.kind=Run"
    status, body = await request(
        k8s, "GET", f"/api/v1/namespaces/default/events?fieldSelector={selector}"
    )
    assert status == 200
    assert [e["metadata"]["name"] for e in body["items"]] == ["e1"]
    status, _ = await request(
        k8s, "GET", "/api/v1/namespaces/default/secrets?fieldSelector=involvedObject.name=x"
    )
    assert status == 400


async def test_a_watch_asking_for_tables_gets_tables(k8s: emulator.KubernetesApi) -> None:
    k8s.create_object("v1/configmaps", {"metadata": {"name": "one", "namespace": "default"}})
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    async with aiohttp.ClientSession(
        headers={**k8s.admin_headers, "Accept": accept},
        connector=aiohttp.TCPConnector(force_close=True),
    ) as session:
        url = str(k8s.url).rstrip("/") + "/api/v1/namespaces/default/configmaps?watch=true"
        async with session.get(url) as answer:
            line = await answer.content.readline()
    event = json.loads(line)
    assert event["type"] == "ADDED"
    assert event["object"]["kind"] == "Table"
    assert [row["cells"][0] for row in event["object"]["rows"]] == ["one"]
