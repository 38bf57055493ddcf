"""Every error kubeturn and its Harness raise on purpose is in one tree per package, drawn
in the root's module docstring (ADR 0099).

Cases, for each package (``kubeturn`` under ``KubeturnError``, ``kubeturn_harness`` under
``HarnessError``), with every one of its modules imported:
- every exception class a module defines is under the package's root, but for the few
  ADR 0099 keeps outside it, named in ``OUTSIDE``: exactly those (one that is no longer
  there must leave the list too);
- each is defined in the root's module, or in an ``errors`` module of a subpackage;
- the root's module draws each in its docstring's tree, under a class it subclasses,
  and draws no class that is not there;
- ``k8s.control``'s ``_Conflict`` stays in its module: a refusal of a write other than
  ``send``'s patch (which reads the Run again on it) is a one-line ``CommandError``.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from types import SimpleNamespace

import pytest
from kubernetes.client.exceptions import ApiException

from kubeturn.errors import CommandError, KubeturnError
from kubeturn.k8s import control
from kubeturn_harness.errors import HarnessError

ROOTS: dict[str, type[Exception]] = {"kubeturn": KubeturnError, "kubeturn_harness": HarnessError}
OUTSIDE = {
    "kubeturn": {
        "kubeturn.k8s.control._Conflict",  # caught by ``Cluster.send``, which reads again
        "kubeturn.k8s.push_program.Refused",  # a program that imports nothing of kubeturn
        "kubeturn.machine.macrostep.Failed",  # caught by ``interpreter.start`` and ``step``
    },
    "kubeturn_harness": {
        "kubeturn_harness.tool_loop._Cut",  # caught where the tool calls run
    },
}
"""The exception classes ADR 0099 keeps outside the tree, each with who catches it."""

BRANCH = re.compile(r"^(?P<lead>[ │]*)[├└]── (?P<name>\w+)")


def defined(package: str) -> dict[str, type[BaseException]]:
    """Every exception class a module of ``package`` defines, by its dotted name."""
    names = [package]
    names += [
        m.name
        for m in pkgutil.walk_packages(importlib.import_module(package).__path__, f"{package}.")
    ]
    found: dict[str, type[BaseException]] = {}
    for name in names:
        module = importlib.import_module(name)
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == name
            ):
                found[f"{name}.{value.__qualname__}"] = value
    return found


def drawn(docstring: str) -> dict[str, str | None]:
    """The tree a docstring draws in its literal block: each class → the one it is drawn
    under (None for the root)."""
    block = docstring.split("::\n", 1)[1].lstrip("\n").splitlines()
    root = block[0].strip()
    indent = len(block[0]) - len(block[0].lstrip())
    tree: dict[str, str | None] = {root: None}
    path = [root]
    for line in block[1:]:
        if not line.startswith(" "):
            break
        branch = BRANCH.match(line)
        if branch is None:
            continue  # a description's next line
        depth = (len(branch["lead"]) - indent) // 4 + 1
        path[depth:] = [branch["name"]]
        tree[branch["name"]] = path[depth - 1]
    return tree


@pytest.mark.parametrize("package", sorted(ROOTS))
class TestTree:
    def test_every_error_is_under_the_root_but_those_kept_outside(self, package: str) -> None:
        outside = {
            n for n, error in defined(package).items() if not issubclass(error, ROOTS[package])
        }
        assert outside == OUTSIDE[package]

    def test_every_error_is_defined_in_an_errors_module(self, package: str) -> None:
        root = ROOTS[package]
        elsewhere = {
            name
            for name, error in defined(package).items()
            if issubclass(error, root)
            and error.__module__ != root.__module__
            and error.__module__.rpartition(".")[2] != "errors"
        }
        assert elsewhere == set()

    def test_the_root_s_module_draws_every_error_under_its_base(self, package: str) -> None:
        root = ROOTS[package]
        errors = [e for e in defined(package).values() if issubclass(e, root)]
        by_name = {error.__name__: error for error in errors}
        assert len(by_name) == len(errors), "two errors of one name"
        tree = drawn(inspect.getdoc(importlib.import_module(root.__module__)) or "")
        assert set(tree) == set(by_name)
        misdrawn = {
            name: parent
            for name, parent in tree.items()
            if name != root.__name__
            and parent not in {base.__name__ for base in by_name[name].__bases__}
        }
        assert misdrawn == {}


async def test_a_refused_write_other_than_send_s_patch_is_one_line() -> None:
    async def refused() -> None:
        raise ApiException(status=422, reason="Unprocessable Entity")

    cluster = SimpleNamespace(where="Run 'r' in namespace 'n'")
    with pytest.raises(CommandError, match=r"^the cluster answered HTTP 422 for the Run 'r'"):
        await control._translated(cluster, refused)  # type: ignore[arg-type]
    with pytest.raises(control._Conflict, match="Unprocessable Entity"):
        await control._translated(cluster, refused, raced=True)  # type: ignore[arg-type]
