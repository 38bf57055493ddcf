"""Names derived from the names users give (``kubeturn.k8s.names``), and the names the
models refuse (``kubeturn.api``), for every name the CRDs admit.

Cases:
- ``object_name``: valid object names (DNS-1123 subdomains, at most 253 characters)
  for every Run or Workspace name and every suffix the operator adds; a name that fits
  is kept as ``<name><suffix>``; two names give two results; a sandbox Pod's name is
  at most ``POD_NAME_MAX``, so its kubelet log directory fits in a file name;
- ``label_value``: valid label values for every object and slot name; a valid one is
  kept; two names give two results;
- ``dns_label``: valid container and volume names for every slot name (``clone-a-`` is
  not one); as ``clones.name`` always named valid slots; two slots give two names;
- ``branch``: a branch the Harness's ``WorktreesRequest`` accepts and git takes as a ref
  (never ending ``.lock``), for every Run name; ``kubeturn/<run>`` when it fits;
- the objects built for the longest names: every name, label value, container and
  volume name of a Workspace's objects and of an AgentTurn valid;
- the models refuse, each at its path, a ``metadata.name``, ``metadata.namespace``,
  ``spec.workspace.name``, ``secretRef.name``, ``serviceAccount`` and ``storage.class``
  that no object could have, and an ``env`` variable's name (or the Secret or ConfigMap
  it, or ``envFrom``, reads) that the API server would refuse.
"""

from __future__ import annotations

import re
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubeturn.api.validation import validate_run, validate_workspace
from kubeturn.api.workspace import WorkspaceSpec
from kubeturn.errors import DefinitionErrors
from kubeturn.k8s import clones, names, objects
from kubeturn_harness.wire import WorktreesRequest

SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")

segment = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
object_names = st.lists(segment, min_size=1, max_size=8).map(".".join).filter(
    lambda name: len(name) <= 253
) | st.sampled_from([".".join(["a" * 63] * 3) + "." + "b" * 61, "a" * 253, "x.lock"])
slot_names = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,62}\Z") | st.sampled_from(
    ["a-", "a.", "a_", "A", "x" * 63, "a--b"]
)
SUFFIXES = ["-workspace", "-kubeturn-tokens", "-kubeturn-sandbox", "-t123456", ".0123456789abcdef"]


def valid_object_name(name: str) -> bool:
    return len(name) <= 253 and SUBDOMAIN.fullmatch(name) is not None


def valid_label_value(value: str) -> bool:
    return len(value) <= 63 and LABEL_VALUE.fullmatch(value) is not None


def valid_dns_label(value: str) -> bool:
    return len(value) <= 63 and LABEL.fullmatch(value) is not None


class TestObjectName:
    @given(object_names, st.sampled_from(SUFFIXES))
    def test_is_always_valid(self, name: str, suffix: str) -> None:
        assert valid_object_name(names.object_name(name, suffix))

    def test_keeps_what_fits(self) -> None:
        assert names.object_name("a.b", "-workspace") == "a.b-workspace"
        assert names.object_name("a" * 243, "-workspace") == "a" * 243 + "-workspace"

    def test_shortens_what_does_not(self) -> None:
        long = "a" * 244
        shortened = names.object_name(long, "-workspace")
        assert len(shortened) == 253
        assert shortened == f"{'a' * 234}-{names.digest(long)}-workspace"

    @given(object_names, object_names)
    def test_two_names_give_two(self, one: str, other: str) -> None:
        if one != other:
            assert names.object_name(one, "-kubeturn-sandbox") != names.object_name(
                other, "-kubeturn-sandbox"
            )

    @given(object_names)
    def test_a_sandbox_pod_name_fits_a_kubelets_log_directory(self, workspace: str) -> None:
        pod = objects.sandbox_name(workspace)
        assert valid_object_name(pod)
        assert len(pod) <= names.POD_NAME_MAX
        assert len(f"{'n' * 63}_{pod}_{uuid.uuid4()}".encode()) <= 255
        if len(workspace) + len("-kubeturn-sandbox") <= names.POD_NAME_MAX:
            assert pod == f"{workspace}-kubeturn-sandbox"


class TestLabelValue:
    @given(object_names | slot_names)
    def test_is_always_valid(self, text: str) -> None:
        assert valid_label_value(names.label_value(text))

    @pytest.mark.parametrize("text", ["run", "Coder_1", "a.b", "x" * 63])
    def test_keeps_a_valid_value(self, text: str) -> None:
        assert names.label_value(text) == text

    @pytest.mark.parametrize(
        ("text", "readable"), [("coder_", "coder"), ("a" * 64, "a" * 54), ("a.", "a")]
    )
    def test_marks_what_it_changes(self, text: str, readable: str) -> None:
        assert names.label_value(text) == f"{readable}-{names.digest(text)}"

    @given(object_names | slot_names, object_names | slot_names)
    def test_two_names_give_two(self, one: str, other: str) -> None:
        if one != other:
            assert names.label_value(one) != names.label_value(other)


class TestDnsLabel:
    @given(slot_names)
    def test_is_always_valid(self, slot: str) -> None:
        assert valid_dns_label(names.dns_label("clone-", slot))

    def test_a_trailing_hyphen_is_not_kept(self) -> None:
        assert clones.name("a-") == f"clone-a-{names.digest('a-')}"

    @given(slot_names)
    def test_names_valid_slots_as_clones_always_did(self, slot: str) -> None:
        plain = f"clone-{slot}"
        if valid_dns_label(plain):
            assert clones.name(slot) == plain

    @given(slot_names, slot_names)
    def test_two_slots_give_two(self, one: str, other: str) -> None:
        if one != other:
            assert clones.name(one) != clones.name(other)


class TestBranch:
    @given(object_names)
    def test_the_harness_and_git_take_it(self, run: str) -> None:
        branch = names.branch(run)
        WorktreesRequest(run=run, branch=branch, slots=["a"])
        assert not branch.endswith(".lock")
        assert ".." not in branch

    def test_keeps_what_fits(self) -> None:
        assert names.branch("fix-it.v2") == "kubeturn/fix-it.v2"

    def test_a_lock_suffix_is_not_kept(self) -> None:
        assert names.branch("x.lock") == f"kubeturn/x.lock-{names.digest('x.lock')}"


LONGEST = ".".join(["w" * 63] * 3) + "." + "w" * 61
SLOTS = {slot: {"url": "https://git.example/app.git"} for slot in ("Repo_", "repo.", "r" * 63)}


def all_names_and_labels(body: dict[str, object]) -> list[tuple[str, str]]:
    """(what, value) of an object's name, labels, and containers' and volumes' names."""
    meta = body["metadata"]
    assert isinstance(meta, dict)
    found = [("name", str(meta["name"]))]
    found += [("label", str(v)) for v in (meta.get("labels") or {}).values()]
    spec = body.get("spec")
    if isinstance(spec, dict):
        for part in ("containers", "initContainers", "volumes"):
            found += [("dns", str(item["name"])) for item in spec.get(part) or []]
    return found


def test_the_objects_of_the_longest_names_are_valid() -> None:
    workspace = {
        "apiVersion": "kubeturn.dev/v1alpha1",
        "kind": "Workspace",
        "metadata": {"name": LONGEST, "namespace": "n" * 63, "uid": "u"},
    }
    repos = {slot: repo | {"secretRef": {"name": "s"}} for slot, repo in SLOTS.items()}
    spec = WorkspaceSpec.model_validate({"repos": repos})
    built = [
        objects.token_secret(workspace, "h", "o"),
        objects.providers_config_map(workspace, "{}"),
        objects.volume_claim(workspace, spec),
        objects.harness_claim(workspace, spec),
        objects.sandbox_pod(
            workspace,
            spec,
            image="i",
            orchestrator_url="http://o",
            providers_yaml="{}",
            harness_token_sha256="t",
        ),
    ]
    checks = {"name": valid_object_name, "label": valid_label_value, "dns": valid_dns_label}
    for body in built:
        for what, value in all_names_and_labels(body):
            assert checks[what](value), (body["kind"], what, value)
    pod = built[-1]
    assert pod["spec"]["volumes"][-1]["secret"]["secretName"] == "s"
    assert objects.turn_name(LONGEST, "t12") != objects.turn_name(LONGEST[:-1] + "x", "t12")


def run_document(**changes: object) -> dict[str, object]:
    spec: dict[str, object] = {
        "agents": {},
        "machine": {"initial": "done", "states": {"done": {"type": "final"}}},
    }
    return {
        "apiVersion": "kubeturn.dev/v1alpha1",
        "kind": "Run",
        "metadata": {"name": "r", "namespace": "default"},
        "spec": spec,
    } | changes


REFUSED = {
    "metadata.name": run_document(metadata={"name": "My_Run"}),
    "metadata.namespace": run_document(metadata={"name": "r", "namespace": "a.b"}),
    "spec.workspace.name": run_document(
        spec={
            "workspace": {"name": "Shared Space"},
            "agents": {},
            "machine": {"initial": "done", "states": {"done": {"type": "final"}}},
        }
    ),
}


@pytest.mark.parametrize(("path", "document"), REFUSED.items(), ids=REFUSED.keys())
def test_a_run_whose_names_no_object_could_have_is_refused_at_the_path(
    path: str, document: dict[str, object]
) -> None:
    with pytest.raises(DefinitionErrors) as refused:
        validate_run(document)
    assert [error.path for error in refused.value.errors] == [path]
    assert "an object's name" in str(refused.value) or "a namespace's name" in str(refused.value)


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        (
            {"repos": {"a": {"url": "u", "secretRef": {"name": "Token"}}}},
            "spec.repos.a.secretRef.name",
        ),
        ({"repos": {"a": {"url": "u"}}, "serviceAccount": "sa_1"}, "spec.serviceAccount"),
        ({"repos": {"a": {"url": "u"}}, "storage": {"class": "fast."}}, "spec.storage.class"),
        ({"repos": {"a": {"url": "u"}}, "env": [{"name": "A=B", "value": "x"}]}, "spec.env"),
        (
            {
                "repos": {"a": {"url": "u"}},
                "env": [{"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "Keys"}}}],
            },
            "spec.env",
        ),
        (
            {"repos": {"a": {"url": "u"}}, "envFrom": [{"configMapRef": {"name": "a_b"}}]},
            "spec.envFrom",
        ),
    ],
)
def test_a_workspace_naming_what_could_not_exist_is_refused_at_the_path(
    spec: dict[str, object], path: str
) -> None:
    document = {
        "apiVersion": "kubeturn.dev/v1alpha1",
        "kind": "Workspace",
        "metadata": {"name": "w"},
        "spec": spec,
    }
    with pytest.raises(DefinitionErrors) as refused:
        validate_workspace(document)
    assert [error.path for error in refused.value.errors] == [path]
