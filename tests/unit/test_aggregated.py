"""The aggregated console's rules (``kubeturn.k8s.aggregated``) and its answer cache
(``console_server.Reviews``).

Cases:
- the request-header ConfigMap: its CA and lists (JSON arrays), defaults where a list is
  absent or empty; no CA, or a list that is not JSON, is ``ConsoleUnavailable``;
- who a request is: nobody without a verified client certificate, or with one whose
  common name is not allowed, or without a user header (whatever the headers say); the
  user, every group header's value, and extras by their unescaped, lower-cased key, from
  the headers the ConfigMap names (case-insensitive);
- what a console path needs: ``list`` Runs everywhere (``/runs``) or in a namespace,
  ``get`` the Run for anything under it, nothing for assets, ``get`` every Run for a
  path the console does not know;
- the SubjectAccessReview asked, and the refusal's words, as kube-apiserver words them;
- discovery: the APIResourceList and APIGroup;
- answers are kept ``REVIEW_TTL_S`` per user and question (one review for many asks),
  asked again after, refusals kept too, and the cache bounded.
"""

from __future__ import annotations

from typing import Any

import pytest

from kubeturn.errors import ConsoleUnavailable
from kubeturn.k8s import aggregated, console_server

CA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
SETTINGS = aggregated.RequestHeader(client_ca=CA, allowed_names=("front-proxy-client",))


class TestRequestHeader:
    def test_lists_are_json_arrays(self) -> None:
        read = aggregated.request_header(
            {
                "requestheader-client-ca-file": CA,
                "requestheader-allowed-names": '["front-proxy-client"]',
                "requestheader-username-headers": '["X-Remote-User"]',
                "requestheader-group-headers": '["X-Remote-Group"]',
                "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]',
            }
        )
        assert read == aggregated.RequestHeader(
            client_ca=CA.strip(), allowed_names=("front-proxy-client",)
        )

    def test_absent_or_empty_lists_take_the_defaults(self) -> None:
        read = aggregated.request_header(
            {"requestheader-client-ca-file": CA, "requestheader-group-headers": "null"}
        )
        assert read.allowed_names == ()
        assert read.username_headers == ("X-Remote-User",)
        assert read.group_headers == ("X-Remote-Group",)

    def test_no_ca_is_unavailable(self) -> None:
        with pytest.raises(ConsoleUnavailable, match="requestheader-client-ca-file"):
            aggregated.request_header({"client-ca-file": CA})

    def test_a_list_that_is_not_json_is_unavailable(self) -> None:
        data = {"requestheader-client-ca-file": CA, "requestheader-allowed-names": "[a"}
        with pytest.raises(ConsoleUnavailable, match="requestheader-allowed-names"):
            aggregated.request_header(data)


class TestUserOf:
    HEADERS = (
        ("x-remote-user", "alice"),
        ("X-Remote-Group", "devs"),
        ("X-Remote-Group", "system:authenticated"),
        ("X-Remote-Extra-Scopes", "a"),
        ("X-Remote-Extra-Scopes", "b"),
        ("X-Remote-Extra-Acme.com%2Fteam", "blue"),
        ("Authorization", "Bearer ignored"),
    )

    def test_the_headers_name_the_user(self) -> None:
        assert aggregated.user_of(SETTINGS, "front-proxy-client", self.HEADERS) == (
            aggregated.User(
                "alice",
                ("devs", "system:authenticated"),
                (("acme.com/team", ("blue",)), ("scopes", ("a", "b"))),
            )
        )

    @pytest.mark.parametrize("common_name", [None, "someone-else"])
    def test_no_allowed_certificate_is_nobody(self, common_name: str | None) -> None:
        assert aggregated.user_of(SETTINGS, common_name, self.HEADERS) is None

    def test_any_name_the_ca_signed_when_none_is_listed(self) -> None:
        anyone = aggregated.RequestHeader(client_ca=CA)
        assert aggregated.user_of(anyone, "aggregator", self.HEADERS) is not None

    def test_no_user_header_is_nobody(self) -> None:
        headers = [("X-Remote-Group", "system:masters")]
        assert aggregated.user_of(SETTINGS, "front-proxy-client", headers) is None

    def test_the_configmaps_header_names_are_read(self) -> None:
        custom = aggregated.RequestHeader(
            client_ca=CA, username_headers=("X-User",), group_headers=("X-Groups",)
        )
        headers = [("X-Remote-User", "mallory"), ("x-user", "bob"), ("X-Groups", "ops")]
        assert aggregated.user_of(custom, "proxy", headers) == aggregated.User("bob", ("ops",))


@pytest.mark.parametrize(
    ("path", "review"),
    [
        ("/runs", aggregated.Review("list")),
        ("/runs/fragment", aggregated.Review("list")),
        ("/namespaces/team/runs", aggregated.Review("list", "team")),
        ("/namespaces/team/runs/fragment", aggregated.Review("list", "team")),
        ("/namespaces/team/runs/r1", aggregated.Review("get", "team", "r1")),
        ("/namespaces/team/runs/r1/transcript", aggregated.Review("get", "team", "r1")),
        ("/namespaces/team/runs/r1/turns/t2/fragment", aggregated.Review("get", "team", "r1")),
        ("/namespaces/te%61m/runs/r%31", aggregated.Review("get", "team", "r1")),
        ("/assets/console.css", None),
        ("/", aggregated.Review("get")),
        ("/namespaces/team/secrets/x", aggregated.Review("get")),
    ],
)
def test_what_a_console_path_needs(path: str, review: aggregated.Review | None) -> None:
    assert aggregated.review_of(path) == review


def test_the_access_review_and_its_refusal() -> None:
    user = aggregated.User("alice", ("devs",), (("scopes", ("a",)),))
    review = aggregated.Review("get", "team", "r1")
    assert aggregated.subject_access_review(user, review) == {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": "alice",
            "groups": ["devs"],
            "extra": {"scopes": ["a"]},
            "resourceAttributes": {
                "group": "kubeturn.dev",
                "resource": "runs",
                "verb": "get",
                "namespace": "team",
                "name": "r1",
            },
        },
    }
    assert aggregated.described(user, review) == (
        'runs.kubeturn.dev "r1" is forbidden: User "alice" cannot get resource "runs" in API '
        'group "kubeturn.dev" in the namespace "team"'
    )
    assert aggregated.described(user, aggregated.Review("list")) == (
        'runs.kubeturn.dev is forbidden: User "alice" cannot list resource "runs" in API group '
        '"kubeturn.dev" at the cluster scope'
    )


def test_discovery_documents() -> None:
    resources = aggregated.resource_list()
    assert resources["groupVersion"] == "console.kubeturn.dev/v1alpha1"
    verbs = {r["name"]: r["verbs"] for r in resources["resources"]}
    assert verbs == {
        "runs": ["get", "list"],
        "runs/turns": ["get"],
        "runs/transcript": ["get"],
        "assets": ["get"],
    }
    group = aggregated.api_group()
    assert group["preferredVersion"] == {
        "groupVersion": "console.kubeturn.dev/v1alpha1",
        "version": "v1alpha1",
    }
    assert aggregated.api_group_list()["groups"][0]["name"] == "console.kubeturn.dev"


class Asked:
    """A stand-in of ``Kube.review``: answers ``allowed`` and counts the questions."""

    def __init__(self, allowed: bool) -> None:
        self.allowed = allowed
        self.asked: list[dict[str, Any]] = []

    async def review(self, body: dict[str, Any]) -> dict[str, Any]:
        self.asked.append(body)
        return {**body, "status": {"allowed": self.allowed}}


class TestReviews:
    USER = aggregated.User("alice")
    RUN = aggregated.Review("get", "team", "r1")

    async def test_an_answer_is_kept_for_a_while(self) -> None:
        now = [0.0]
        kube = Asked(True)
        reviews = console_server.Reviews(kube, clock=lambda: now[0])  # type: ignore[arg-type]
        assert [await reviews.allowed(self.USER, self.RUN) for _ in range(3)] == [True] * 3
        assert len(kube.asked) == 1
        now[0] = console_server.REVIEW_TTL_S + 0.1
        kube.allowed = False
        assert await reviews.allowed(self.USER, self.RUN) is False
        assert await reviews.allowed(self.USER, self.RUN) is False
        assert len(kube.asked) == 2

    async def test_answers_are_per_user_and_question(self) -> None:
        kube = Asked(True)
        reviews = console_server.Reviews(kube, clock=lambda: 0.0)  # type: ignore[arg-type]
        await reviews.allowed(self.USER, self.RUN)
        await reviews.allowed(aggregated.User("bob"), self.RUN)
        await reviews.allowed(self.USER, aggregated.Review("get", "team", "r2"))
        assert len(kube.asked) == 3

    async def test_the_cache_is_bounded(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(console_server, "REVIEW_CACHE_SIZE", 2)
        kube = Asked(True)
        reviews = console_server.Reviews(kube, clock=lambda: 0.0)  # type: ignore[arg-type]
        for name in ("r1", "r2", "r3"):
            await reviews.allowed(self.USER, aggregated.Review("get", "team", name))
        await reviews.allowed(self.USER, aggregated.Review("get", "team", "r3"))
        assert len(kube.asked) == 3
        await reviews.allowed(self.USER, aggregated.Review("get", "team", "r1"))
        assert len(kube.asked) == 4
