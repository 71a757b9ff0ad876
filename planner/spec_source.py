"""Finding and reading a config.json: a file or checkpoint folder (_path_kind, read_config_file), telling a
Hub repo id from a path (_looks_like_repo_id, _looks_like_path), the local Hugging Face cache (hf_hub_cache,
find_in_hf_cache) and the Hub itself (hf_endpoint, download_config: only when asked).

Which of these a name goes to is decided by load_spec in planner/spec.py (which re-exports these names); what
the config's fields mean is read by planner/spec_fields.py, planner/spec_families.py and
planner/spec_quant.py; the dataclasses are in planner/spec_types.py.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import stat
from typing import Any

from planner import limits
from planner.errors import PlannerError


def _path_kind(path: pathlib.Path) -> str | None:
    """"dir", "file" (anything else that exists: read_config_file refuses FIFOs and devices) or None; a
    name the OS cannot even look up (ENAMETOOLONG, ...) is None: it is then tried as a catalog name."""
    try:
        st = path.stat()
    except (OSError, ValueError):
        return None
    return "dir" if stat.S_ISDIR(st.st_mode) else "file"


def read_config_file(path: pathlib.Path) -> dict[str, Any]:
    """Parse a config.json (a regular file within MAX_CONFIG_BYTES, JSON within the limits); malformed JSON
    is reported with file, line and column."""
    raw = limits.read_regular(path, "MAX_CONFIG_BYTES", PlannerError, "config.json")
    try:
        data = limits.loads_json(raw, finite_only=False)
    except limits.JSONLimitError as exc:
        raise PlannerError(f"{path}: {exc}") from None
    if not isinstance(data, dict):
        raise PlannerError(f"{path}: a config.json must hold a JSON object, found {type(data).__name__}")
    return data


_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def _looks_like_repo_id(text: str) -> bool:
    return bool(_REPO_ID.match(text)) and not _looks_like_path(text)


_FILE_SUFFIXES = (".json", ".safetensors", ".gguf", ".bin", ".pt", ".pth")


def _looks_like_path(text: str) -> bool:
    """A name the user meant as a file or folder: absolute, relative (./ ../ ~), deeper than org/name, or a
    file name (tiny/config.json)."""
    t = text.strip()
    return (
        t.startswith(("/", "./", "../", "~", ".\\"))
        or t.count("/") > 1
        or "\\" in t
        or t.lower().endswith(_FILE_SUFFIXES)
    )


def hf_hub_cache() -> pathlib.Path:
    """The hub cache folder, resolved as huggingface_hub does: HF_HUB_CACHE, else HF_HOME/hub, else
    XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return pathlib.Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return pathlib.Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = pathlib.Path(xdg).expanduser() if xdg else pathlib.Path.home() / ".cache"
    return base / "huggingface" / "hub"


def find_in_hf_cache(repo_id: str, revision: str = "main") -> pathlib.Path | None:
    """config.json of a repo in the local HF cache (models--org--name/snapshots/<rev>/config.json), or None.

    The revision named by refs/<revision> wins; otherwise the most recently modified snapshot that has one.
    """
    repo_dir = hf_hub_cache() / ("models--" + repo_id.replace("/", "--"))
    snapshots = repo_dir / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = repo_dir / "refs" / revision
    if ref.is_file():
        commit = ref.read_text(encoding="utf-8").strip()
        candidate = snapshots / commit / "config.json"
        if candidate.is_file():
            return candidate
    found = [p / "config.json" for p in snapshots.iterdir() if (p / "config.json").is_file()]
    if not found:
        return None
    return max(found, key=lambda p: p.stat().st_mtime)


MAX_CONFIG_BYTES = 4 * 2**20  # a config.json is a few KiB; anything this big is not one


def hf_endpoint() -> str:
    """The Hub to download from: $HF_ENDPOINT (as huggingface_hub reads it), else https://huggingface.co."""
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def download_config(repo_id: str) -> dict[str, Any]:
    """Fetch only config.json of `repo_id` from the Hub (only when asked: allow_download=True, the CLI's
    --download). Every failure is one line that says what to do: no network, no such repo, gated repo."""
    if os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0"):
        raise PlannerError(f"{repo_id!r}: not in the local HF cache, and HF_HUB_OFFLINE is set (no download)")
    import socket
    import urllib.error
    import urllib.request

    endpoint = hf_endpoint()
    url = f"{endpoint}/{repo_id}/resolve/main/config.json"
    headers = {"User-Agent": "memsight"}
    token = os.environ.get("HF_TOKEN")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as reply:
            raw = reply.read(MAX_CONFIG_BYTES + 1)
    except urllib.error.HTTPError as exc:
        why = {
            401: "the repo is gated or private: accept its license on the Hub and set HF_TOKEN",
            403: "the repo is gated or private: accept its license on the Hub and set HF_TOKEN",
            404: "no such repo, or it has no config.json",
        }.get(exc.code, f"the Hub answered HTTP {exc.code} {exc.reason}")
        raise PlannerError(f"{repo_id!r}: cannot download {url}: {why}") from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, socket.gaierror | ConnectionError | TimeoutError | socket.timeout):
            raise PlannerError(
                f"{repo_id!r}: no network to {endpoint} ({reason}); download config.json on a machine that "
                "has one and give its path"
            ) from exc
        raise PlannerError(f"{repo_id!r}: cannot download {url}: {reason}") from exc
    if len(raw) > MAX_CONFIG_BYTES:
        raise PlannerError(f"{url}: over {MAX_CONFIG_BYTES // 2**20} MiB, not a config.json")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise PlannerError(f"{url}: not UTF-8 text, so not a config.json") from exc
    except json.JSONDecodeError as exc:
        raise PlannerError(f"{url}: malformed JSON at line {exc.lineno}, column {exc.colno}") from exc
    if not isinstance(data, dict):
        raise PlannerError(f"{url}: not a JSON object")
    return data
