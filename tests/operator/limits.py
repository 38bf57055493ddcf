"""The sizes kube-apiserver and its etcd refuse, and how each refusal is answered.

- A request body over 3 MiB: ``413 RequestEntityTooLarge``, "Request entity too large:
  limit is 3145728". kube-apiserver's ``MaxRequestBodyBytes`` (k8s.io/apiserver
  ``pkg/server/config.go``: ``3 * 1024 * 1024``, twice etcd's limit, since a JSON body
  is converted to protobuf before it is stored).
- A stored object over 1.5 MiB: etcd refuses the write (its ``--max-request-bytes``,
  1572864 by default: etcd.io/docs "System limits"), and kube-apiserver answers it as
  ``500 InternalError``, "etcdserver: request is too large" — it does not translate
  this error (kubernetes/kubernetes#112152, open). The size is the object's compact
  JSON, which is what etcd holds for a custom resource; built-ins are stored as
  protobuf, smaller, so for them the emulator refuses a little early.
- Annotations over 256 KiB in all (keys and values): 422 at ``metadata.annotations``
  (``TotalAnnotationSizeLimitB``), checked with the rest of the metadata in
  :mod:`tests.operator.names`.
- A Secret's or ConfigMap's data over 1 MiB: 422 (``MaxSecretSize``,
  ``RuntimeObjectsSizeLimit``), checked with those kinds in
  :mod:`tests.operator.builtin_kinds`.

Pure: no IO, no state.
"""

from __future__ import annotations

import json
from typing import Any

from tests.operator import apimachinery

MAX_REQUEST_BODY_BYTES = 3 * 1024 * 1024
MAX_OBJECT_BYTES = 1536 * 1024
TOTAL_ANNOTATION_BYTES = 256 * 1024
MAX_CONFIG_DATA_BYTES = 1024 * 1024


def check_body(body: bytes) -> None:
    """Refuse a request body kube-apiserver would not read (413)."""
    if len(body) > MAX_REQUEST_BODY_BYTES:
        raise apimachinery.ApiError(
            413, f"Request entity too large: limit is {MAX_REQUEST_BODY_BYTES}"
        )


def encoded_size(body: Any) -> int:
    """The bytes of ``body`` as compact JSON."""
    return len(json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode())


def check_stored(body: Any) -> None:
    """Refuse an object etcd would not store (500, as kube-apiserver relays it)."""
    if encoded_size(body) > MAX_OBJECT_BYTES:
        raise apimachinery.ApiError(500, "etcdserver: request is too large")
