"""Kubernetes' protobuf bodies of Secrets and ConfigMaps, read into the JSON the API server
would have decoded from the same object.

client-go's typed clients send built-in kinds as protobuf (``application/vnd.kubernetes.
protobuf``): ``kubectl create secret|configmap`` does, and so does helm's release storage
(a Secret per release). The body is the magic ``k8s\\0`` and a ``runtime.Unknown``
envelope (``typeMeta``, ``raw``), whose ``raw`` is the object in the field numbers of
``k8s.io/api/core/v1/generated.proto`` and ``k8s.io/apimachinery/pkg/apis/meta/v1/
generated.proto``. Only those two kinds, and of their metadata what a client writes (name,
generateName, namespace, uid, resourceVersion, labels, annotations, owner references,
finalizers), are read; any other kind is :class:`Unreadable` (the emulator answers 415).
Pure: no IO.
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import Callable, Iterator
from typing import Any

MAGIC = b"k8s\x00"
"""The first bytes of every protobuf body of the Kubernetes API."""
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"

Body = dict[str, Any]
Field = tuple[int, int, Any]
"""(field number, wire type, value): an int for varints, bytes for length-delimited."""


class Unreadable(ValueError):
    """A body this module does not read: another kind, or not protobuf at all."""


def fields(data: bytes) -> Iterator[Field]:
    """The fields of one protobuf message, in order."""
    position = 0
    while position < len(data):
        key, position = _varint(data, position)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, position = _varint(data, position)
            yield number, wire, value
        elif wire == 2:
            length, position = _varint(data, position)
            if position + length > len(data):
                raise Unreadable("a field runs past the end of the body")
            yield number, wire, data[position : position + length]
            position += length
        elif wire == 1:
            yield number, wire, data[position : position + 8]
            position += 8
        elif wire == 5:
            yield number, wire, data[position : position + 4]
            position += 4
        else:
            raise Unreadable(f"wire type {wire} is not read")


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if position >= len(data):
            raise Unreadable("a varint runs past the end of the body")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7


def _text(value: Any) -> str:
    return bytes(value).decode("utf-8")


def _entry(value: bytes) -> tuple[str, bytes]:
    """A map entry: key 1, value 2."""
    key, found = "", b""
    for number, _, item in fields(value):
        if number == 1:
            key = _text(item)
        elif number == 2:
            found = bytes(item)
    return key, found


def _time(value: bytes) -> str | None:
    """A ``metav1.Time`` (seconds 1, nanos 2); None for the zero time a client leaves."""
    seconds = next((item for number, _, item in fields(value) if number == 1), 0)
    if not seconds:
        return None
    at = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _owner(value: bytes) -> Body:
    names = {1: "kind", 3: "name", 4: "uid", 5: "apiVersion"}
    flags = {6: "controller", 7: "blockOwnerDeletion"}
    owner: Body = {}
    for number, _, item in fields(value):
        if number in names:
            owner[names[number]] = _text(item)
        elif number in flags:
            owner[flags[number]] = bool(item)
    return owner


def object_meta(value: bytes) -> Body:
    """``ObjectMeta`` as JSON: the fields a client writes."""
    strings = {1: "name", 2: "generateName", 3: "namespace", 5: "uid", 6: "resourceVersion"}
    meta: Body = {}
    for number, _, item in fields(value):
        if number in strings:
            if item:
                meta[strings[number]] = _text(item)
        elif number == 8:
            if (at := _time(item)) is not None:
                meta["creationTimestamp"] = at
        elif number in (11, 12):
            key, found = _entry(item)
            meta.setdefault("labels" if number == 11 else "annotations", {})[key] = found.decode()
        elif number == 13:
            meta.setdefault("ownerReferences", []).append(_owner(item))
        elif number == 14:
            meta.setdefault("finalizers", []).append(_text(item))
    return meta


def _secret(raw: bytes) -> Body:
    body: Body = {"apiVersion": "v1", "kind": "Secret", "metadata": {}}
    for number, _, item in fields(raw):
        if number == 1:
            body["metadata"] = object_meta(item)
        elif number == 2:
            key, found = _entry(item)
            body.setdefault("data", {})[key] = base64.b64encode(found).decode()
        elif number == 3:
            body["type"] = _text(item)
        elif number == 4:
            key, found = _entry(item)
            body.setdefault("stringData", {})[key] = found.decode()
        elif number == 5:
            body["immutable"] = bool(item)
    return body


def _config_map(raw: bytes) -> Body:
    body: Body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}
    for number, _, item in fields(raw):
        if number == 1:
            body["metadata"] = object_meta(item)
        elif number == 2:
            key, found = _entry(item)
            body.setdefault("data", {})[key] = found.decode()
        elif number == 3:
            key, found = _entry(item)
            body.setdefault("binaryData", {})[key] = base64.b64encode(found).decode()
        elif number == 4:
            body["immutable"] = bool(item)
    return body


READERS: dict[tuple[str, str], Callable[[bytes], Body]] = {
    ("v1", "Secret"): _secret,
    ("v1", "ConfigMap"): _config_map,
}
"""The kinds read, by (apiVersion, kind) of the envelope's ``typeMeta``."""


def decode(body: bytes) -> Body:
    """The object a protobuf body holds, as JSON; :class:`Unreadable` if it is none of
    :data:`READERS`."""
    if not body.startswith(MAGIC):
        raise Unreadable("no k8s protobuf magic")
    api_version = kind = ""
    raw = b""
    for number, _, item in fields(body[len(MAGIC) :]):
        if number == 1:
            for inner, _, text in fields(item):
                if inner == 1:
                    api_version = _text(text)
                elif inner == 2:
                    kind = _text(text)
        elif number == 2:
            raw = bytes(item)
    reader = READERS.get((api_version, kind))
    if reader is None:
        raise Unreadable(f"{api_version} {kind} bodies are not read")
    return reader(raw)
