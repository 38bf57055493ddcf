"""The console's vendored scripts are the npm releases ADR 0108 names, byte for byte.

``.ci/vendor-console-assets.sh`` fetches them again and prints the sums below; a file
changed by hand, or refetched without updating the record, fails here.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STATIC = REPO / "operator" / "kubeturn" / "console" / "static"
DECISIONS = REPO / "docs" / "decisions"
RECORD = DECISIONS / "0108-the-console-is-server-rendered-with-htmx-and-mermaid.md"
VENDORED = {
    "htmx.min.js": ("htmx.org", "2.0.11", "0BSD"),
    "mermaid.min.js": ("mermaid", "11.17.2", "MIT"),
}


def test_each_vendored_script_is_the_release_its_record_names() -> None:
    record = RECORD.read_text()
    script = (REPO / ".ci" / "vendor-console-assets.sh").read_text()
    for name, (package, version, licence) in VENDORED.items():
        digest = hashlib.sha256((STATIC / name).read_bytes()).hexdigest()
        row = f"| `{name}` | {package} {version} | {licence} | `{digest}` |"
        assert row in record, f"{name}: its sha256 is {digest}; the record says otherwise"
        assert f"={version}\n" in script, f"{name}: the fetch script names another version"
        licence_file = STATIC / f"{name.split('.')[0]}.LICENSE"
        assert licence_file.read_text().strip(), f"{licence_file.name} ships beside it"
