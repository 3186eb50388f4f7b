"""One config per search: ``OUT_DIR/config.yaml`` and the versions of each node (``manifest/``).

The first node to start creates ``config.yaml`` exclusively (a complete file linked into
place, so of several nodes starting at once exactly one creates it). Every node and every
worker then runs ``config.yaml`` plus only this node's ``NODE_LOCAL_KEYS``. A node (or a
resume) whose other keys differ is refused in one line naming them: a doubled PPO budget
or another search size would silently mix into one population.
Once the search has begun, a missing ``config.yaml`` is an error, never recreated; workers load
their node's config from a node-private file (``private_folder.node_config_file``), never
``config.yaml``, so an edit of it mid-run reaches no worker.

``manifest/<node>.json`` records each node's versions. One file per node, written only by
that node and renamed into place, so no update is lost and no lock is needed (locks are
unreliable on NFS); a node whose versions differ from another's warns in one line.

A run whose ``manifest/`` is empty was written by a derl from before this rule (node 0 rewrote
``config.yaml`` at every start, without ``HEADER``): node 0 adopts its current config once and
says so; other nodes wait for that, as they wait for the initial population. Provenance comes
from the manifest, not from the header comment: a ``config.yaml`` whose header was deleted in
a run that a current derl recorded is held to the rule like any other.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from derl.checked_config import DERIVED_KEYS, NODE_LOCAL_KEYS, Config, load_run_config
from derl.config import ConfigError, dump_config, flatten
from derl.evolution.folder.run_dir import RunDir
from derl.fileio.reads import NotRegularFile
from derl.paths import REPO_ROOT

HEADER = ("# The config of this search (derl): created once by the first node. Every node and worker runs it\n"
          f"# plus its own node-local keys: {', '.join(NODE_LOCAL_KEYS)}.\n")
VERSIONED = ("derl", "commit", "python", "torch", "mujoco", "numpy", "gymnasium")
POLL_SECONDS = 1.0


def differences(mine: Config, stored: Config) -> list[str]:
    """``KEY mine != stored`` for every search-defining key where the two configs differ."""
    theirs = dict(flatten(stored.to_dict()))
    return [f"{key} {_show(value)} != {_show(theirs.get(key))}" for key, value in flatten(mine.to_dict())
            if key not in NODE_LOCAL_KEYS + DERIVED_KEYS and value != theirs.get(key)]


def join_search(cfg: Config, run: RunDir, log) -> Config:
    """This node's config: ``config.yaml`` (created from ``cfg`` if missing) plus ``cfg``'s node-local keys.

    That is ``cfg`` itself once every other key matches, so ``config.yaml`` is read only to compare
    (and not at all by the node that just created it): a node loads its config once.

    ``config.yaml`` is created only in a search that has not begun: once a node has joined (its
    ``manifest/``) or anything exists that a config made (the initial population, a claim, a
    publication), the results already in ``OUT_DIR`` were made under the lost file, and a new one
    from this node's command line could silently mix another budget into the population.

    Raises:
        ConfigError: a search-defining key differs from ``config.yaml`` (one line naming them all),
            ``config.yaml`` does not load, or it is missing from a search that has begun.
    """
    path = run.config_path()
    # Asked again after _begun: another node may have created it and joined in between.
    if not os.path.lexists(path) and (begun := _begun(run)) and not os.path.lexists(path):
        raise ConfigError(f"{path} is missing but this search has begun ({begun}); restore that file (the "
                          "config the search started with) or start a new OUT_DIR")
    if run.create_config(HEADER + dump_config(cfg)):
        log(f"node {cfg.NODE_ID}: created {path}")
    else:
        if not run.manifest() and not _config_text(run).startswith(HEADER):
            _adopt_old_config(cfg, run, log)
        _require_same_search(cfg, path)
    _record_versions(cfg.NODE_ID, run)
    return cfg


def _begun(run: RunDir) -> str:
    """What shows that ``run``'s search has begun, in words; empty if nothing does."""
    if nodes := run.manifest():
        return f"node(s) {', '.join(map(str, nodes))} joined it"
    if published := run.publications.published_ids():
        return f"{len(published)} morphologies are published"
    if claimed := run.slots.num_claimed():
        return f"{claimed} slots are claimed"
    if run.init_population_ids() is not None:
        return "its initial population exists"
    return ""


def _require_same_search(cfg: Config, path: Path) -> None:
    """Raises ``ConfigError`` if ``path`` does not load or a search-defining key differs from ``cfg``.

    ``config.yaml`` is read back as status and the report read it (``load_run_config``: never through a
    link, bounded, no YAML aliases), so a link to a file outside ``OUT_DIR`` or an alias bomb is one line.
    """
    try:
        stored = load_run_config(path)
    except ConfigError as err:
        raise ConfigError(str(err) if str(path) in str(err) else f"{path} does not load: {err}") from None
    found = differences(cfg, stored)
    if found:
        raise ConfigError(f"config differs from {path}: {', '.join(found)}; "
                          "start with the same config or a new OUT_DIR")


def _adopt_old_config(cfg: Config, run: RunDir, log) -> None:
    """A run from before the one-config rule: node 0 adopts ``cfg`` once; other nodes wait for it."""
    path = run.config_path()
    if cfg.NODE_ID == 0:
        run.write_config(HEADER + dump_config(cfg))
        log(f"{path} was written by an older derl (no one-config rule): adopted this node's config once; "
            "from now on every node must match it")
        return
    log(f"node {cfg.NODE_ID}: {path} was written by an older derl; waiting for node 0 to adopt its config "
        f"(timeout EVO.INIT_WAIT_TIMEOUT={cfg.EVO.INIT_WAIT_TIMEOUT} s)")
    deadline = time.monotonic() + cfg.EVO.INIT_WAIT_TIMEOUT
    while not _config_text(run).startswith(HEADER):
        if time.monotonic() > deadline:
            raise TimeoutError(f"node 0 did not adopt {path} in {cfg.EVO.INIT_WAIT_TIMEOUT} s; start node 0")
        time.sleep(POLL_SECONDS)


def _config_text(run: RunDir) -> str:
    """``config.yaml``'s text; one that is not a regular file is a ``ConfigError`` naming it."""
    try:
        return run.read_config_text() or ""
    except NotRegularFile as err:
        raise ConfigError(str(err)) from None


def versions() -> dict[str, Any]:
    """derl's version and git commit (None outside a checkout), Python, torch, mujoco, numpy, gymnasium."""
    found: dict[str, Any] = {"python": platform.python_version(), "commit": _git_commit()}
    for package in ("derl", "torch", "mujoco", "numpy", "gymnasium"):
        try:
            found[package] = importlib.metadata.version(package)  # no import: torch takes seconds
        except importlib.metadata.PackageNotFoundError:
            found[package] = None
    return found


def _git_commit() -> str | None:
    checkout = REPO_ROOT
    if not (checkout / ".git").exists():
        return None
    try:
        done = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def _record_versions(node: int, run: RunDir) -> None:
    """Warns in one line if another node (or this node's last run) used other versions; writes ours."""
    mine = versions()
    differing = []
    for other, entry in run.manifest().items():
        changed = [f"{key} {entry.get(key)}" for key in VERSIONED if entry.get(key) != mine[key]]
        if changed:
            who = f"node {other}" if other != node else f"node {other} (its last run)"
            differing.append(f"{who} ran {', '.join(changed)}")
    if differing:
        here = ", ".join(f"{key} {mine[key]}" for key in VERSIONED)
        print(f"warning: versions differ within this search: {'; '.join(differing)} (this node: {here})",
              file=sys.stderr, flush=True)
    run.write_manifest(node, {"node": node, "host": socket.gethostname(), **mine, "updated": time.time()})


def _show(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else value
