"""Working files bound to a session: ``nb.Workspace`` and the built-in file tools.

Everruns: "bind an ``Environment`` before execution. A session can never switch heads";
AgentScope: "durable recovery needs the same tools, credentials and working files".

``Workspace(root, per_session=True)`` given to ``Agent(workspace=...)`` or
``Runtime(workspace=...)`` gives each session a directory of its own under ``root``
(``per_session=False``: every session shares ``root``). Guarantees:

- **Bound once.** A session's first run commits ``workspace/bound {root, path,
  fingerprint}`` with its first commit (or not at all). Every later run checks the runtime's
  workspace against it: a different one is ``WorkspaceChanged`` (the command is refused,
  nothing runs) unless the runtime was made with ``accept_workspace_change=True``, which
  records the new binding.
- **Reached as ``ctx.workspace``** (a ``pathlib.Path``) by every tool of the session;
  ``workspace_tools()`` (``read_file``, ``write_file``, ``list_files``, ``search_files``) are
  confined to it: absolute paths, ``..`` and symlinks leading out are refused with
  ``WorkspaceEscape``, which the model sees as the call's error.
- **A manifest at each run's end** (``workspace/checkpoint``: each file's SHA-256, never
  its contents), so ``inspect().workspace`` says whether the files still match the last
  run's end. A crashed run leaves the manifest of the last run that ended.
- ``fork()`` copies the directory as it stands; ``delete()`` removes it. Backups and
  migrations carry the binding (it is an event of the log); the files need their own
  backup, as the seeds say.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentnb.errors import InvalidInput, WorkspaceChanged, WorkspaceEscape
from agentnb.ids import SessionKey
from agentnb.records import WorkspaceStatus
from agentnb.tools import Tool, ToolContext, tool

__all__ = [
    "MANIFEST_FILES",
    "Workspace",
    "bound_path",
    "check_workspace",
    "confine",
    "copy_workspace",
    "manifest",
    "remove_workspace",
    "workspace_status",
    "workspace_tools",
]

MANIFEST_FILES = 10_000
"""Files a manifest lists one by one; past it only the digest and the counts are kept."""
READ_LIMIT = 256 * 1024
"""Bytes ``read_file`` returns at most (the rest is cut, saying so)."""
SEARCH_HITS = 200
"""Lines ``search_files`` returns at most."""

_SAFE = re.compile(r"^[A-Za-z0-9._-]{1,100}$")


def _segment(part: str) -> str:
    """One path segment for an id: the id itself when it is plain, else a digest of it."""
    if _SAFE.match(part) and part not in {".", ".."}:
        return part
    return "x-" + hashlib.sha256(part.encode()).hexdigest()[:24]


@dataclass(frozen=True)
class Workspace:
    """Where a session's working files live (see the module docstring)."""

    root: Path
    per_session: bool = True

    def __init__(self, root: str | os.PathLike[str], *, per_session: bool = True) -> None:
        if not isinstance(root, str | os.PathLike) or not str(root):
            raise InvalidInput(f"Workspace root must be a directory path, got {root!r}")
        if not isinstance(per_session, bool):
            raise InvalidInput(f"per_session must be True or False, got {per_session!r}")
        path = Path(root).expanduser().resolve()
        if path.exists() and not path.is_dir():
            raise InvalidInput(f"Workspace root {path} is a file; give a directory")
        object.__setattr__(self, "root", path)
        object.__setattr__(self, "per_session", per_session)

    def path_for(self, key: SessionKey) -> Path:
        """The directory of session ``key`` (not created here)."""
        if not self.per_session:
            return self.root
        parts = (key.namespace, key.user_id, key.agent_id, key.session_id)
        return self.root.joinpath(*(_segment(p) for p in parts))

    def binding(self, key: SessionKey) -> dict[str, str]:
        """The ``workspace/bound`` payload of session ``key``."""
        path = str(self.path_for(key))
        text = json.dumps([str(self.root), self.per_session, path])
        return {
            "root": str(self.root),
            "path": path,
            "fingerprint": hashlib.sha256(text.encode()).hexdigest()[:32],
        }


def check_workspace(
    bound: Mapping[str, Any] | None,
    workspace: Workspace | None,
    key: SessionKey,
    *,
    accept: bool = False,
) -> dict[str, Any] | None:
    """The ``workspace/bound`` payload to record before new work of ``key``, or None.

    None when the runtime has no workspace, or the session is bound to this one. A session
    not bound yet gets this workspace's binding. A session bound to another workspace is
    ``WorkspaceChanged`` unless ``accept``, which gives the new binding with ``previous``.
    """
    if workspace is None:
        return None
    binding: dict[str, Any] = workspace.binding(key)
    if bound is None:
        return binding
    if bound.get("fingerprint") == binding["fingerprint"]:
        return None
    if not accept:
        raise WorkspaceChanged(
            f"session {key} is bound to the workspace at {bound.get('path')} and this "
            f"runtime's is at {binding['path']}; a session never switches workspaces. Use "
            "the same nb.Workspace(root, per_session=...) as before, or make the runtime with "
            "accept_workspace_change=True to bind it to this one (its files are not moved)",
            bound=dict(bound),
            current=binding,
        )
    return {**binding, "previous": bound.get("path")}


def bound_path(binding: Mapping[str, Any] | None) -> Path | None:
    """The directory a ``workspace/bound`` payload names (``ctx.workspace``), or None."""
    return None if binding is None else Path(str(binding["path"]))


def confine(base: Path, relative: object) -> Path:
    """``relative`` inside ``base``, or ``WorkspaceEscape``: absolute paths, ``..`` and
    symlinks that lead out are refused. The path need not exist."""
    if not isinstance(relative, str) or not relative or "\x00" in relative:
        raise WorkspaceEscape(f"a workspace path must be a non-empty string, got {relative!r}")
    given = Path(relative)
    if given.is_absolute() or relative.startswith(("/", "\\")) or given.drive:
        raise WorkspaceEscape(
            f"{relative!r} is an absolute path; give a path relative to the workspace"
        )
    if ".." in given.parts:
        raise WorkspaceEscape(f"{relative!r} climbs out with '..'; stay inside the workspace")
    root = base.resolve()
    target = (root / given).resolve()
    if target != root and root not in target.parents:
        raise WorkspaceEscape(
            f"{relative!r} leads out of the workspace through a symlink; it is refused"
        )
    return target


def _entries(base: Path) -> list[tuple[str, Path]]:
    """(relative posix path, path) of every file and symlink under ``base``, sorted."""
    found: list[tuple[str, Path]] = []
    for folder, dirs, files in os.walk(base, followlinks=False):
        here = Path(folder)
        for name in dirs:
            if (here / name).is_symlink():
                files.append(name)  # a symlinked folder is listed, never entered
        for name in files:
            path = here / name
            found.append((path.relative_to(base).as_posix(), path))
    found.sort()
    return found


def manifest(base: Path) -> dict[str, Any]:
    """The ``workspace/checkpoint`` fields of ``base`` now: ``files`` (relative path ->
    ``sha256:<hex>``, or ``symlink:<target>``), ``count``, ``bytes`` and ``digest`` (over
    them all); ``truncated`` past ``MANIFEST_FILES`` files (``files`` then holds none)."""
    files: dict[str, str] = {}
    total = 0
    if base.is_dir():
        for name, path in _entries(base):
            if path.is_symlink():
                files[name] = "symlink:" + os.readlink(path)
                continue
            digest = hashlib.sha256()
            with path.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
                    total += len(block)
            files[name] = "sha256:" + digest.hexdigest()
    whole = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()
    truncated = len(files) > MANIFEST_FILES
    return {
        "path": str(base),
        "files": {} if truncated else files,
        "count": len(files),
        "bytes": total,
        "digest": whole,
        "truncated": truncated,
    }


def workspace_status(
    bound: Mapping[str, Any] | None, checkpoint: Mapping[str, Any] | None
) -> WorkspaceStatus | None:
    """How the bound workspace stands against its last ``workspace/checkpoint``."""
    if bound is None:
        return None
    matches: bool | None = None
    changed: tuple[str, ...] = ()
    if checkpoint is not None:
        now = manifest(Path(bound["path"]))
        matches = now["digest"] == checkpoint.get("digest")
        before: Mapping[str, str] = checkpoint.get("files") or {}
        after: Mapping[str, str] = now["files"]
        changed = tuple(
            sorted(n for n in set(before) | set(after) if before.get(n) != after.get(n))
        )
    return WorkspaceStatus(
        str(bound.get("root", "")),
        str(bound["path"]),
        str(bound.get("fingerprint", "")),
        None if checkpoint is None else checkpoint.get("seq"),
        matches,
        changed,
    )


def copy_workspace(source: Path, target: Path) -> None:
    """Copy ``source`` as it stands into ``target`` (``fork``); symlinks stay symlinks."""
    if not source.is_dir():
        return
    shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)


def remove_workspace(path: Path, root: Path | None) -> bool:
    """Remove a session's directory (``delete``); never ``root`` itself (a shared one)."""
    if root is not None and path.resolve() == root.resolve():
        return False
    if not path.is_dir():
        return False
    shutil.rmtree(path)
    return True


# -- the built-in file tools -----------------------------------------------------------------


def _base(ctx: ToolContext) -> Path:
    if ctx.workspace is None:
        raise WorkspaceEscape(
            "this session has no workspace: give the agent or the runtime "
            "workspace=nb.Workspace(root)"
        )
    return ctx.workspace


def read_file(path: str, ctx: ToolContext) -> str:
    """Read a text file of the workspace.

    Args:
        path: the file, relative to the workspace
    """
    target = confine(_base(ctx), path)
    if not target.is_file():
        raise WorkspaceEscape(f"no file {path!r} in the workspace; list_files shows what is there")
    data = target.read_bytes()
    text = data[:READ_LIMIT].decode("utf-8", errors="replace")
    if len(data) > READ_LIMIT:
        text += f"\n[... cut: the file has {len(data)} bytes, {READ_LIMIT} shown]"
    return text


def write_file(path: str, content: str, ctx: ToolContext) -> str:
    """Write a text file of the workspace (folders are made; an existing file is replaced).

    Args:
        path: the file, relative to the workspace
        content: the whole text to write
    """
    target = confine(_base(ctx), path)
    if target.is_dir():
        raise WorkspaceEscape(f"{path!r} is a folder; give a file path")
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.agentnb-tmp")
    temporary.write_text(content, encoding="utf-8")
    os.replace(temporary, target)  # a reader never sees half a file
    return f"wrote {len(content.encode())} bytes to {path}"


def list_files(ctx: ToolContext, path: str = ".") -> str:
    """List the files under a folder of the workspace, one relative path a line.

    Args:
        path: the folder, relative to the workspace (default: all of it)
    """
    base = _base(ctx)
    folder = base.resolve() if path == "." else confine(base, path)
    if not folder.is_dir():
        raise WorkspaceEscape(f"no folder {path!r} in the workspace")
    names = [(folder / n).relative_to(base.resolve()).as_posix() for n, _ in _entries(folder)]
    return "\n".join(names) if names else "(no files)"


def search_files(pattern: str, ctx: ToolContext, glob: str = "*") -> str:
    """Search the workspace's text files for a regular expression; ``file:line: text``.

    Args:
        pattern: a regular expression (Python syntax)
        glob: which files to search, by name (e.g. ``*.md``)
    """
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise InvalidInput(f"pattern is not a valid regular expression: {exc}") from None
    base = _base(ctx).resolve()
    hits: list[str] = []
    for name, file in _entries(base):
        if file.is_symlink() or not fnmatch.fnmatch(Path(name).name, glob):
            continue
        with file.open("r", encoding="utf-8", errors="replace") as handle:
            for number, line in enumerate(handle, 1):
                if regex.search(line):
                    hits.append(f"{name}:{number}: {line.rstrip()[:300]}")
                    if len(hits) >= SEARCH_HITS:
                        return "\n".join([*hits, f"[... stopped at {SEARCH_HITS} hits]"])
    return "\n".join(hits) if hits else "(no match)"


def workspace_tools() -> list[Tool]:
    """The built-in file tools, confined to the session's workspace: ``read_file``,
    ``write_file``, ``list_files``, ``search_files``."""
    return [
        tool(read_file, idempotent=True),
        tool(write_file, idempotent=True),
        tool(list_files, idempotent=True),
        tool(search_files, idempotent=True),
    ]
